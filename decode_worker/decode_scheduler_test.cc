#include "decode_worker/decode_scheduler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::decode {
namespace {

TEST(CheckStopTest, StopTokensEosAndLength) {
  StopRules r;
  r.max_new_tokens = 3;
  r.stop_token_ids = {7};
  r.eos_token_ids = {2};
  EXPECT_FALSE(CheckStop(r, 5, 1).has_value());
  auto f = CheckStop(r, 7, 1);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, FinishReason::kStop);
  EXPECT_EQ(f->matched_token, 7);
  f = CheckStop(r, 2, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, FinishReason::kStop);
  EXPECT_EQ(f->matched_token, 2);
  r.ignore_eos = true;
  EXPECT_FALSE(CheckStop(r, 2, 2).has_value());
  f = CheckStop(r, 5, 3);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, FinishReason::kLength);
  EXPECT_FALSE(f->matched_token.has_value());
  f = CheckStop(r, 7, 3);  // a stop token on the last allowed step is still STOP
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, FinishReason::kStop);
}

std::shared_ptr<DecodeSequence> Seq(const std::string& id, int prompt, int computed,
                                    int generated) {
  auto s = std::make_shared<DecodeSequence>();
  s->id = id;
  s->prompt_len = prompt;
  s->prefill_len = prompt;
  s->tokens.assign(prompt + generated, 1);
  s->num_computed = computed;
  return s;
}

TEST(DecodeSchedulerTest, DecodeTokensFirstThenPrefillChunksUnderBudget) {
  DecodeScheduler s({.max_running = 4, .max_batch_tokens = 50, .chunk_size = 32});
  s.Add(Seq("p", 100, 0, 0));    // local prefill, nothing computed yet
  s.Add(Seq("d1", 10, 10, 1));   // decoding: feeds its token at position 10
  s.Add(Seq("d2", 20, 22, 3));
  EXPECT_TRUE(s.has_room());
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].seq->id, "d1");
  EXPECT_EQ(b[0].start, 10);
  EXPECT_EQ(b[0].len, 1);
  EXPECT_TRUE(b[0].want_logits);
  EXPECT_EQ(b[1].seq->id, "d2");
  EXPECT_EQ(b[1].start, 22);
  EXPECT_EQ(b[2].seq->id, "p");
  EXPECT_EQ(b[2].len, 32);  // chunk size (budget left: 48)
  EXPECT_FALSE(b[2].want_logits);
  s.Add(Seq("x", 5, 5, 1));
  EXPECT_FALSE(s.has_room());
  EXPECT_NE(s.Remove("p"), nullptr);
  EXPECT_EQ(s.Remove("p"), nullptr);
  EXPECT_EQ(s.num_running(), 3);
}

TEST(DecodeSchedulerTest, LastPrefillChunkWantsLogits) {
  DecodeScheduler s({.max_running = 4, .max_batch_tokens = 8, .chunk_size = 64});
  s.Add(Seq("p", 20, 14, 0));
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].start, 14);
  EXPECT_EQ(b[0].len, 6);
  EXPECT_TRUE(b[0].want_logits);
}

// The fresh prompts come last (the engine then attends them in MHA form), the budget still
// given in running order.
TEST(DecodeSchedulerTest, FreshPromptsAfterLaterChunks) {
  DecodeScheduler s({.max_running = 8, .max_batch_tokens = 64, .chunk_size = 16});
  s.Add(Seq("fresh1", 40, 0, 0));  // its first chunk: 16 tokens
  s.Add(Seq("later", 40, 16, 0));  // its second chunk: 16 tokens from 16
  s.Add(Seq("d", 10, 10, 1));      // a decode token
  s.Add(Seq("one", 1, 0, 0));      // a one-token prompt: attends like a decode row
  s.Add(Seq("fresh2", 40, 0, 0));  // 16 tokens
  s.Add(Seq("fresh3", 40, 0, 0));  // what is left of the budget: 64 - 1 - 16 - 16 - 1 - 16 = 14
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 6u);
  const std::vector<std::string> order = {"d", "later", "one", "fresh1", "fresh2", "fresh3"};
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(b[i].seq->id, order[i]) << i;
  EXPECT_EQ(b[1].start, 16);
  EXPECT_EQ(b[3].len, 16);
  EXPECT_EQ(b[5].len, 14);
}

// Data-parallel attention: each rank has its own token budget and request limit.
TEST(DecodeSchedulerTest, EachRankHasItsOwnBudgetAndLimit) {
  DecodeScheduler s({.max_running = 2, .max_batch_tokens = 8, .chunk_size = 64, .ranks = 2});
  auto on = [](std::shared_ptr<DecodeSequence> q, int rank) {
    q->rank = rank;
    return q;
  };
  s.Add(on(Seq("a", 20, 0, 0), 0));  // rank 0: a prefill of 20 tokens, budget 8
  s.Add(on(Seq("b", 10, 10, 1), 1));  // rank 1: a decode token and a prefill
  s.Add(on(Seq("c", 30, 0, 0), 1));
  EXPECT_EQ(s.num_running(0), 1);
  EXPECT_EQ(s.num_running(1), 2);
  EXPECT_TRUE(s.has_room(0));
  EXPECT_FALSE(s.has_room(1));
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].seq->id, "b");
  EXPECT_EQ(b[0].len, 1);
  EXPECT_EQ(b[1].seq->id, "a");
  EXPECT_EQ(b[1].len, 8);  // rank 0's whole budget
  EXPECT_EQ(b[2].seq->id, "c");
  EXPECT_EQ(b[2].len, 7);  // rank 1's budget less b's token
}

}  // namespace
}  // namespace mlaserve::decode
