// PrefillRunner with a FakeEngine on each side: the prefill engine computes KV, the fake
// transport ships it into a KvReceiver over the decode engine's pool, and the decode engine
// then decodes from the received pages (which fails loudly if any entry is wrong).
#include "prefill_worker/prefill_runner.h"

#include <optional>

#include "absl/synchronization/notification.h"
#include "worker/testing/fake_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "kvtransfer/fake_transport.h"
#include "kvtransfer/receiver.h"
#include "kvtransfer/testing/probes.h"
#include "prefill_worker/testing/decode_continues.h"
#include "prefill_worker/testing/prefill_jobs.h"
#include "prefill_worker/testing/prefill_runner_harness.h"
#include "profiles/testing/test_profiles.h"

namespace mlaserve::prefill {
namespace {

using ::mlaserve::testing::FakeEngine;
using ::testing::HasSubstr;

using Received = kvtransfer::testing::DoneProbe;
using testing::Job;
using testing::Outcome;
using testing::Prompt;

class PrefillRunnerTest : public testing::PrefillRunnerHarness {
 protected:
  void SetUp() override { Build({.num_pages = 32}, {.num_pages = 32}); }

  // Reserves pages on the decode side (prompt pages + `extra`) and returns the session ref.
  kvtransfer::KvSessionRef Reserve(const std::string& id, int prompt_len, Received* rx,
                                   int extra = 1) {
    const int pages = kernels::PagesFor(prompt_len);
    EXPECT_TRUE(receiver_
                    ->CreateSession(id, *decode_->kv_pool().Allocate(pages + extra), pages,
                                    absl::Now() + absl::Seconds(30), rx->fn())
                    .ok());
    return {id, kDecodeEndpoint, "fake", pages, layout_.CompatHash()};
  }
};

TEST_F(PrefillRunnerTest, ChunkedPrefillShipsKvTheDecodeSideCanContinueFrom) {
  const auto a = Prompt(70, 1), b = Prompt(150, 2);
  Received ra, rb;
  Outcome oa, ob;
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 70, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 150, &rb)), ob.fn()).ok());
  EXPECT_EQ(runner_->load().pending_prefill_tokens, 220);
  RunUntilIdle();

  // Chunks of <= 64 tokens, <= 128 per forward: [64, 64], [6, 64], [22].
  EXPECT_EQ(prefill_->batch_shapes(), (std::vector<std::vector<int>>{{64, 64}, {6, 64}, {22}}));
  ASSERT_TRUE(oa.result && oa.result->ok()) << (oa.result ? oa.result->status().ToString() : "");
  ASSERT_TRUE(ob.result && ob.result->ok());
  EXPECT_EQ((*oa.result)->first_token, FakeEngine::NextToken(a, 64));
  EXPECT_EQ((*ob.result)->first_token, FakeEngine::NextToken(b, 64));
  EXPECT_EQ((*ob.result)->prompt_tokens, 150);
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);  // prefill pages back in the pool
  EXPECT_EQ(runner_->load().running_requests, 0);

  // The decode side continues from the received KV and predicts what a local run would.
  for (auto [rx, prompt, outcome] : {std::tuple{&ra, a, &oa}, std::tuple{&rb, b, &ob}}) {
    ASSERT_TRUE(rx->result && rx->result->ok());
    EXPECT_EQ((**rx->result).first_token, (*outcome->result)->first_token);
    EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx->result, prompt));
  }
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
}

// The prefix cache: a prompt that starts with an earlier prompt's whole pages computes only the
// rest, ships every page (the cached ones with its first chunk), and the decode side continues
// from what arrived exactly as from a prompt prefilled whole.
TEST_F(PrefillRunnerTest, APromptStartingLikeAnEarlierOneComputesOnlyTheRest) {
  const auto a = Prompt(150, 1);
  auto b = std::vector<int32_t>(a.begin(), a.begin() + 128);
  for (int i = 0; i < 40; ++i) b.push_back((i * 5 + 3) % 64);
  const auto c = std::vector<int32_t>(a.begin(), a.begin() + 128);  // a's first two pages
  auto d = a;
  d[100] = (d[100] + 1) % 64;  // differs in page 1
  Received ra, rb, rc, rd;
  Outcome oa, ob, oc, od;
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 150, &ra)), oa.fn()).ok());
  RunUntilIdle();
  EXPECT_EQ(prefill_->kv_pool().cached_pages(), 2);  // a's whole pages; its third is partial
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 168, &rb)), ob.fn()).ok());
  RunUntilIdle();
  // c is two whole pages of a: the last token is computed, so one page comes from the cache.
  ASSERT_TRUE(runner_->Submit(Job("c", c, Reserve("c", 128, &rc)), oc.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("d", d, Reserve("d", 150, &rd)), od.fn()).ok());
  EXPECT_EQ(runner_->load().pending_prefill_tokens, 128 + 150);
  ASSERT_TRUE(runner_->Step());
  // c is done; of d, the 22 tokens after the 64 taken from the cache and the 64 computed.
  EXPECT_EQ(runner_->load().pending_prefill_tokens, 22);
  RunUntilIdle();
  EXPECT_EQ(runner_->load().pending_prefill_tokens, 0);
  // a: [64], [64], [22] (one chunk of a prompt per forward); b: [40] after 128 cached tokens;
  // c: [64] after 64 and d: [64] after 64 in one forward, then d's last [22].
  EXPECT_EQ(prefill_->batch_shapes(),
            (std::vector<std::vector<int>>{{64}, {64}, {22}, {40}, {64, 64}, {22}}));
  for (Outcome* o : {&oa, &ob, &oc, &od}) {
    ASSERT_TRUE(o->result && o->result->ok()) << (o->result ? o->result->status().ToString() : "");
  }
  EXPECT_EQ((*oa.result)->cached_tokens, 0);
  EXPECT_EQ((*ob.result)->cached_tokens, 128);
  EXPECT_EQ((*ob.result)->prompt_tokens, 168);
  EXPECT_EQ((*oc.result)->cached_tokens, 64);
  EXPECT_EQ((*od.result)->cached_tokens, 64);
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);  // cached pages are free pages

  for (auto [rx, prompt, outcome] : {std::tuple{&rb, b, &ob}, std::tuple{&rc, c, &oc},
                                     std::tuple{&rd, d, &od}}) {
    EXPECT_EQ((*outcome->result)->first_token, FakeEngine::NextToken(prompt, 64));
    ASSERT_TRUE(rx->result && rx->result->ok());
    EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx->result, prompt));
  }
}

// The job's cache_salt reaches the pool: the same prompt under another salt is computed whole,
// under the same salt it takes the cached pages.
TEST_F(PrefillRunnerTest, PromptsShareCachedPagesOnlyUnderTheSameCacheSalt) {
  const auto a = Prompt(150, 1);
  auto salted = [&](const std::string& id, const std::string& salt, Received* rx) {
    PrefillJob j = Job(id, a, Reserve(id, 150, rx));
    j.cache_salt = salt;
    return j;
  };
  Received r1, r2, r3, r4;
  Outcome o1, o2, o3, o4;
  ASSERT_TRUE(runner_->Submit(salted("t1", "tenant-a", &r1), o1.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(runner_->Submit(salted("t2", "tenant-b", &r2), o2.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(runner_->Submit(salted("t3", "", &r3), o3.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(runner_->Submit(salted("t4", "tenant-a", &r4), o4.fn()).ok());
  RunUntilIdle();
  for (Outcome* o : {&o1, &o2, &o3, &o4}) {
    ASSERT_TRUE(o->result && o->result->ok()) << (o->result ? o->result->status().ToString() : "");
    EXPECT_EQ((*o->result)->first_token, FakeEngine::NextToken(a, 64));
  }
  EXPECT_EQ((*o1.result)->cached_tokens, 0);
  EXPECT_EQ((*o2.result)->cached_tokens, 0);
  EXPECT_EQ((*o3.result)->cached_tokens, 0);
  EXPECT_EQ((*o4.result)->cached_tokens, 128);
  EXPECT_EQ(prefill_->kv_pool().cached_pages(), 6);  // 2 whole pages under each of 3 salts
  for (Received* rx : {&r1, &r2, &r3, &r4}) {
    ASSERT_TRUE(rx->result && rx->result->ok());
    decode_->kv_pool().Free((*rx->result)->pages);
  }
}

// A long prompt publishes its pages chunk by chunk: a prompt with the same start that arrives
// while the first is still being prefilled takes the pages computed so far.
TEST_F(PrefillRunnerTest, APromptTakesThePagesAChunkedPromptHasComputedSoFar) {
  const auto a = Prompt(300, 6);  // chunks of 64: five forwards
  auto b = std::vector<int32_t>(a.begin(), a.begin() + 256);
  for (int i = 0; i < 20; ++i) b.push_back((i * 11 + 2) % 64);
  Received ra, rb;
  Outcome oa, ob;
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 300, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Step());
  ASSERT_TRUE(runner_->Step());  // a's pages 0 and 1 computed
  EXPECT_EQ(prefill_->kv_pool().cached_pages(), 2);
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 276, &rb)), ob.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(oa.result && oa.result->ok());
  ASSERT_TRUE(ob.result && ob.result->ok()) << (ob.result ? ob.result->status().ToString() : "");
  EXPECT_EQ((*ob.result)->cached_tokens, 128);
  EXPECT_EQ((*ob.result)->first_token, FakeEngine::NextToken(b, 64));
  EXPECT_EQ((*oa.result)->first_token, FakeEngine::NextToken(a, 64));
  ASSERT_TRUE(rb.result && rb.result->ok());
  EXPECT_TRUE(testing::DecodeContinues(*decode_, **rb.result, b));
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
}

// The first token is drawn with the request's logit_bias (FakeEngine's logits: 30 for its next
// token, 0 elsewhere); the penalties have no generated tokens to count yet.
TEST_F(PrefillRunnerTest, TheFirstTokenHonoursLogitBias) {
  const auto a = Prompt(20, 3), b = Prompt(20, 4);
  const int32_t greedy_b = FakeEngine::NextToken(b, 64);
  const int32_t forced = (FakeEngine::NextToken(a, 64) + 5) % 64;
  Received ra, rb;
  PrefillJob ja = Job("a", a, Reserve("a", 20, &ra));
  ja.sampling.logit_bias = {{forced, 31.0f}};
  ja.sampling.presence_penalty = 2.0f;
  PrefillJob jb = Job("b", b, Reserve("b", 20, &rb));
  jb.sampling.logit_bias = {{greedy_b, -100.0f}};
  Outcome oa, ob;
  ASSERT_TRUE(runner_->Submit(std::move(ja), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(std::move(jb), ob.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(oa.result && oa.result->ok()) << (oa.result ? oa.result->status().ToString() : "");
  ASSERT_TRUE(ob.result && ob.result->ok());
  EXPECT_EQ((*oa.result)->first_token, forced);
  // Banned: every other logit is 0, and ties go to the lowest id.
  EXPECT_EQ((*ob.result)->first_token, greedy_b == 0 ? 1 : 0);
}

TEST_F(PrefillRunnerTest, AbortMidPrefillFreesPagesOnBothSides) {
  Received rx;
  Outcome out;
  ASSERT_TRUE(runner_->Submit(Job("long", Prompt(300, 3), Reserve("long", 300, &rx)), out.fn()).ok());
  ASSERT_TRUE(runner_->Step());  // the first 64 tokens
  EXPECT_LT(prefill_->kv_pool().free_pages(), 32);
  ASSERT_TRUE(runner_->Abort("long").ok());
  RunUntilIdle();
  ASSERT_TRUE(out.result);
  EXPECT_EQ(out.result->status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(rx.result);
  EXPECT_FALSE(rx.result->ok());
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
  EXPECT_EQ(runner_->load().pending_prefill_tokens, 0);  // (its computed 64 once stayed counted)
  EXPECT_EQ(runner_->Abort("long").code(), absl::StatusCode::kNotFound);
}

TEST_F(PrefillRunnerTest, BrokenTransferFailsTheRequestAndFreesPages) {
  Received rx;
  Outcome out;
  transport_.set_faults({.break_after_pages = 2});
  ASSERT_TRUE(runner_->Submit(Job("x", Prompt(200, 4), Reserve("x", 200, &rx)), out.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(out.result);
  // The decode peer failed, not this worker: ABORTED naming the KV transfer (see KvPeerFailure).
  EXPECT_EQ(out.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(out.result->status().message(),
              ::testing::HasSubstr("KV transfer to the decode worker failed"));
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
}

// What Submit checks of a (valid) job: this worker's pool, the peer's layout and the live ids.
// The job's own values are checked at the RPC edge (prefill_service_test.cc, ToPrefillJob).
TEST_F(PrefillRunnerTest, BadRequestsGetTheRightCodes) {
  Outcome out;
  Received rx;
  auto ref = Reserve("r", 10, &rx);
  auto code = [&](PrefillJob j) { return runner_->Submit(std::move(j), out.fn()); };
  EXPECT_EQ(runner_->bounds().vocab_size, 64);
  auto big = ref;
  big.num_pages = 33;
  EXPECT_EQ(code(Job("r", Prompt(33 * 64, 0), big)).code(), absl::StatusCode::kResourceExhausted);
  auto other = ref;
  other.compat_hash = "ffffffffffffffff";
  EXPECT_EQ(code(Job("r", Prompt(10, 0), other)).code(), absl::StatusCode::kFailedPrecondition);
  // A refused session gives the id back: nothing counted, and the id may be submitted again.
  EXPECT_EQ(runner_->load().running_requests, 0);
  EXPECT_EQ(runner_->load().pending_prefill_tokens, 0);
  ASSERT_TRUE(code(Job("r", Prompt(10, 0), ref)).ok());
  EXPECT_EQ(code(Job("r", Prompt(10, 0), ref)).code(), absl::StatusCode::kAlreadyExists);
  RunUntilIdle();
  ASSERT_TRUE(out.result && out.result->ok());
}

TEST_F(PrefillRunnerTest, LoopThreadAnswersAndStopFailsTheRest) {
  runner_->Start();
  Received rx;
  absl::Notification done;
  absl::StatusOr<PrefillOutcome> got = absl::UnknownError("unset");
  ASSERT_TRUE(runner_
                  ->Submit(Job("t", Prompt(65, 5), Reserve("t", 65, &rx)),
                           [&](absl::StatusOr<PrefillOutcome> o) {
                             got = std::move(o);
                             done.Notify();
                           })
                  .ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->first_token, FakeEngine::NextToken(Prompt(65, 5), 64));
  decode_->kv_pool().Free((*rx.result)->pages);
  runner_->Stop();
  Outcome late;
  Received rx2;
  EXPECT_EQ(runner_->Submit(Job("u", Prompt(5, 0), Reserve("u", 5, &rx2)), late.fn()).code(),
            absl::StatusCode::kUnavailable);
}

// The attention-path policy sees the scheduler's order: a prompt's later chunk before fresh
// prompts. With a profile that says MHA only for two sequences with less than 256 tokens of
// prefix (SmallProfile's first prefix bucket) and MLA elsewhere, the step of a later chunk and
// two fresh prompts is a split (the lead alone MLA, the two prompts MHA; counted as such), and
// every prompt's KV still arrives whole.
class PrefillRunnerPolicyTest : public testing::PrefillRunnerHarness {
 protected:
  // The runner reads the policy and the registry until it is gone: before they are.
  void TearDown() override { runner_.reset(); }
  std::unique_ptr<profiles::AttentionPathPolicy> policy_;
  common::MetricsRegistry metrics_;
};

TEST_F(PrefillRunnerPolicyTest, LaterChunkThenFreshPromptsIsCountedSplit) {
  profiles::GpuProfile p = profiles::testing::SmallProfile();
  for (profiles::MhaMlaCell& c : p.mha_mla.cells) {
    c.se_threshold = c.batch == 2 && c.prefix == 0 ? 0 : profiles::kNeverMha;
  }
  auto policy = profiles::AttentionPathPolicy::Create(p, "test", {});
  ASSERT_TRUE(policy.ok()) << policy.status();
  policy_ = *std::move(policy);
  Build({.num_pages = 32}, {.num_pages = 32}, policy_.get(), &metrics_);
  auto reserve = [&](const std::string& id, int len, Received* rx) {
    const int pages = kernels::PagesFor(len);
    EXPECT_TRUE(receiver_
                    ->CreateSession(id, *decode_->kv_pool().Allocate(pages + 1), pages,
                                    absl::Now() + absl::Seconds(30), rx->fn())
                    .ok());
    return kvtransfer::KvSessionRef{id, kDecodeEndpoint, "fake", pages,
                                    layout_.CompatHash()};
  };
  const auto a = Prompt(150, 1), b = Prompt(40, 2), c = Prompt(30, 3);
  Received ra, rb, rc;
  Outcome oa, ob, oc;
  ASSERT_TRUE(runner_->Submit(Job("a", a, reserve("a", 150, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Step());  // a[0, 64): one fresh prompt alone, MLA
  ASSERT_TRUE(runner_->Submit(Job("b", b, reserve("b", 40, &rb)), ob.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("c", c, reserve("c", 30, &rc)), oc.fn()).ok());
  RunUntilIdle();  // a[64, 128) b[0, 40) c[0, 24): split; then a[128, 150) c[24, 30): MHA
  EXPECT_EQ(prefill_->batch_shapes(),
            (std::vector<std::vector<int>>{{64}, {64, 40, 24}, {22, 6}}));
  EXPECT_EQ(policy_->count(profiles::PrefillPath::kSplit), 1u);
  EXPECT_EQ(policy_->count(profiles::PrefillPath::kMla), 1u);
  EXPECT_EQ(policy_->count(profiles::PrefillPath::kMha), 1u);
  EXPECT_THAT(metrics_.RenderText(),
              HasSubstr("mlaserve_prefill_attention_path_total{path=\"split\"} 1\n"));
  for (Outcome* o : {&oa, &ob, &oc}) {
    ASSERT_TRUE(o->result && o->result->ok()) << (o->result ? o->result->status().ToString() : "");
  }
  EXPECT_EQ((*ob.result)->first_token, FakeEngine::NextToken(b, 64));
  for (Received* rx : {&ra, &rb, &rc}) EXPECT_TRUE(rx->result && rx->result->ok());
}

}  // namespace
}  // namespace mlaserve::prefill
