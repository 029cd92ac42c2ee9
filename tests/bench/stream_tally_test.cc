// StreamTally: TTFT / ITL bookkeeping per chunk shape and the outcome rules.
#include "bench/serving/stream_tally.h"

#include <gtest/gtest.h>

namespace mlaserve::bench {
namespace {

v1::GenerateResponse Chunk(std::vector<int32_t> ids) {
  v1::GenerateResponse m;
  for (int32_t id : ids) m.mutable_chunk()->add_token_ids(id);
  return m;
}

v1::GenerateResponse Complete(int prompt_tokens, int completion_tokens,
                              v1::FinishReason reason = v1::FINISH_REASON_LENGTH) {
  v1::GenerateResponse m;
  m.mutable_complete()->set_prompt_tokens(prompt_tokens);
  m.mutable_complete()->set_completion_tokens(completion_tokens);
  m.mutable_complete()->set_finish_reason(reason);
  return m;
}

RequestSpec IdSpec(int input_len, int output_len) {
  RequestSpec spec;
  spec.index = 7;
  spec.input_len = input_len;
  spec.prompt_token_ids.assign(input_len, 5);
  spec.output_len = output_len;
  return spec;
}

TEST(StreamTallyTest, OneTokenPerChunkGivesGapsBetweenChunks) {
  StreamTally tally(IdSpec(3, 4), "r-7", 0.5);
  tally.OnMessage(Chunk({10}), 0.100);
  tally.OnMessage(Chunk({11}), 0.130);
  tally.OnMessage(Chunk({12}), 0.150);
  tally.OnMessage(Chunk({13}), 0.190);
  tally.OnMessage(Complete(3, 4), 0.191);
  RequestRecord r = tally.Finish(0, "", 0.2, false);
  EXPECT_EQ(r.outcome, Outcome::kSuccess);
  EXPECT_EQ(r.index, 7);
  EXPECT_EQ(r.request_id, "r-7");
  EXPECT_DOUBLE_EQ(r.start_offset_s, 0.5);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.100);
  ASSERT_EQ(r.itl_s.size(), 3u);
  EXPECT_NEAR(r.itl_s[0], 0.030, 1e-12);
  EXPECT_NEAR(r.itl_s[1], 0.020, 1e-12);
  EXPECT_NEAR(r.itl_s[2], 0.040, 1e-12);
  EXPECT_EQ(r.output_len, 4);
  EXPECT_EQ(r.input_len, 3);
  EXPECT_DOUBLE_EQ(r.e2e_s, 0.2);
}

// A conversation's turn keeps its answer's ids in order (the next turn repeats them); other
// requests keep none, and the record names the conversation and turn.
TEST(StreamTallyTest, OutputIdsAreKeptOnlyWhenTheSpecAsks) {
  RequestSpec turn = IdSpec(3, 5);
  turn.conversation = 2;
  turn.turn = 1;
  turn.keep_output_ids = true;
  StreamTally kept(turn, "r", 0);
  kept.OnMessage(Chunk({10, 11}), 0.1);
  kept.OnMessage(Chunk({}), 0.15);
  kept.OnMessage(Chunk({12, 13, 14}), 0.2);
  kept.OnMessage(Complete(3, 5), 0.2);
  const RequestRecord r = kept.Finish(0, "", 0.2, false);
  EXPECT_EQ(r.output_token_ids, (std::vector<int32_t>{10, 11, 12, 13, 14}));
  EXPECT_EQ(r.conversation, 2);
  EXPECT_EQ(r.turn, 1);

  StreamTally plain(IdSpec(3, 2), "r", 0);
  plain.OnMessage(Chunk({10, 11}), 0.1);
  plain.OnMessage(Complete(3, 2), 0.1);
  const RequestRecord p = plain.Finish(0, "", 0.1, false);
  EXPECT_TRUE(p.output_token_ids.empty());
  EXPECT_EQ(p.conversation, -1);
}

TEST(StreamTallyTest, MultiTokenChunksSpreadTheGapAndKeepTokensMinusOneEntries) {
  StreamTally tally(IdSpec(2, 6), "r", 0);
  tally.OnMessage(Chunk({1, 2}), 0.05);  // first chunk carries 2 tokens
  v1::GenerateResponse text_only;        // a text-only chunk changes nothing
  text_only.mutable_chunk()->set_text("held");
  tally.OnMessage(text_only, 0.06);
  tally.OnMessage(Chunk({3, 4, 5, 6}), 0.13);
  tally.OnMessage(Complete(2, 6), 0.14);
  RequestRecord r = tally.Finish(0, "", 0.15, false);
  EXPECT_EQ(r.outcome, Outcome::kSuccess);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.05);
  ASSERT_EQ(r.itl_s.size(), 5u);
  EXPECT_EQ(r.itl_s[0], 0.0);
  for (int i = 1; i < 5; ++i) EXPECT_NEAR(r.itl_s[i], 0.02, 1e-12) << i;
}

TEST(StreamTallyTest, NonOkStatusIsClassifiedByItsCode) {
  StreamTally tally(IdSpec(2, 4), "r", 0);
  tally.OnMessage(Chunk({1}), 0.01);
  RequestRecord r = tally.Finish(14, "decode worker d1 died", 0.05, false);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.error_class, "UNAVAILABLE");
  EXPECT_EQ(r.status_code, 14);
  EXPECT_EQ(r.error, "decode worker d1 died");
  EXPECT_EQ(r.output_len, 1);
}

TEST(StreamTallyTest, ErrorMessageWithOkStatusStillFails) {
  StreamTally tally(IdSpec(2, 4), "r", 0);
  v1::GenerateResponse error;
  error.mutable_error()->set_code(8);
  error.mutable_error()->set_message("no KV room");
  tally.OnMessage(error, 0.01);
  RequestRecord r = tally.Finish(0, "", 0.02, false);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.error_class, "RESOURCE_EXHAUSTED");
  EXPECT_NE(r.error.find("no KV room"), std::string::npos);
}

TEST(StreamTallyTest, CompletionCountMismatchIsAnError) {
  StreamTally tally(IdSpec(2, 3), "r", 0);
  tally.OnMessage(Chunk({1}), 0.01);
  tally.OnMessage(Chunk({2}), 0.02);
  tally.OnMessage(Complete(2, 3), 0.03);
  RequestRecord r = tally.Finish(0, "", 0.03, false);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.error_class, "TOKEN_COUNT_MISMATCH");
  EXPECT_NE(r.error.find("streamed 2 token ids"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("completion_tokens=3"), std::string::npos) << r.error;
}

TEST(StreamTallyTest, PromptCountMismatchIsAnErrorForTokenIdPrompts) {
  StreamTally tally(IdSpec(5, 1), "r", 0);
  tally.OnMessage(Chunk({1}), 0.01);
  tally.OnMessage(Complete(6, 1), 0.02);
  RequestRecord r = tally.Finish(0, "", 0.02, false);
  EXPECT_EQ(r.error_class, "TOKEN_COUNT_MISMATCH");
  EXPECT_NE(r.error.find("prompt_tokens=6"), std::string::npos) << r.error;
}

TEST(StreamTallyTest, TextPromptTakesItsLengthFromComplete) {
  RequestSpec spec;
  spec.use_text = true;
  spec.prompt_text = "hello";
  spec.output_len = 1;
  StreamTally tally(spec, "r", 0);
  tally.OnMessage(Chunk({1}), 0.01);
  tally.OnMessage(Complete(9, 1), 0.02);
  RequestRecord r = tally.Finish(0, "", 0.02, false);
  EXPECT_EQ(r.outcome, Outcome::kSuccess);
  EXPECT_EQ(r.input_len, 9);
}

TEST(StreamTallyTest, CachedPromptTokensComeFromCompleteAndDefaultToZero) {
  {
    StreamTally tally(IdSpec(200, 1), "r", 0);
    tally.OnMessage(Chunk({1}), 0.01);
    v1::GenerateResponse complete = Complete(200, 1);
    complete.mutable_complete()->set_cached_prompt_tokens(128);
    tally.OnMessage(complete, 0.02);
    RequestRecord r = tally.Finish(0, "", 0.02, false);
    EXPECT_EQ(r.outcome, Outcome::kSuccess);
    EXPECT_EQ(r.cached_prompt_tokens, 128);
  }
  {  // a server that does not report it
    StreamTally tally(IdSpec(200, 1), "r", 0);
    tally.OnMessage(Chunk({1}), 0.01);
    tally.OnMessage(Complete(200, 1), 0.02);
    EXPECT_EQ(tally.Finish(0, "", 0.02, false).cached_prompt_tokens, 0);
  }
  {  // no complete: nothing known
    StreamTally tally(IdSpec(200, 2), "r", 0);
    tally.OnMessage(Chunk({1}), 0.01);
    EXPECT_EQ(tally.Finish(14, "gone", 0.02, false).cached_prompt_tokens, 0);
  }
}

TEST(StreamTallyTest, MoreCachedThanPromptTokensIsAMismatch) {
  StreamTally tally(IdSpec(64, 1), "r", 0);
  tally.OnMessage(Chunk({1}), 0.01);
  v1::GenerateResponse complete = Complete(64, 1);
  complete.mutable_complete()->set_cached_prompt_tokens(128);
  tally.OnMessage(complete, 0.02);
  RequestRecord r = tally.Finish(0, "", 0.02, false);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.error_class, "TOKEN_COUNT_MISMATCH");
  EXPECT_NE(r.error.find("cached_prompt_tokens=128 of prompt_tokens=64"), std::string::npos)
      << r.error;
}

TEST(StreamTallyTest, MissingCompleteAndAbortAreFailures) {
  {
    StreamTally tally(IdSpec(1, 1), "r", 0);
    tally.OnMessage(Chunk({1}), 0.01);
    EXPECT_EQ(tally.Finish(0, "", 0.02, false).error_class, "MISSING_COMPLETE");
  }
  {
    StreamTally tally(IdSpec(1, 2), "r", 0);
    tally.OnMessage(Chunk({1}), 0.01);
    tally.OnMessage(Complete(1, 1, v1::FINISH_REASON_ABORT), 0.02);
    EXPECT_EQ(tally.Finish(0, "", 0.02, false).error_class, "ABORTED");
  }
}

TEST(StreamTallyTest, CancelledAtBoundIsNotAFailureUnlessItCompleted) {
  {
    StreamTally tally(IdSpec(1, 5), "r", 0);
    tally.OnMessage(Chunk({1}), 0.01);
    RequestRecord r = tally.Finish(1, "Cancelled", 0.5, true);
    EXPECT_EQ(r.outcome, Outcome::kCancelledAtBound);
    EXPECT_EQ(r.error_class, "CANCELLED_AT_BOUND");
  }
  {  // the cancel raced with a normal end: the completed request counts as such
    StreamTally tally(IdSpec(1, 1), "r", 0);
    tally.OnMessage(Chunk({1}), 0.01);
    tally.OnMessage(Complete(1, 1), 0.02);
    EXPECT_EQ(tally.Finish(0, "", 0.02, true).outcome, Outcome::kSuccess);
  }
}

TEST(StreamTallyTest, StatusCodeNames) {
  EXPECT_EQ(StatusCodeName(0), "OK");
  EXPECT_EQ(StatusCodeName(3), "INVALID_ARGUMENT");
  EXPECT_EQ(StatusCodeName(4), "DEADLINE_EXCEEDED");
  EXPECT_EQ(StatusCodeName(14), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(42), "CODE_42");
}

}  // namespace
}  // namespace mlaserve::bench
