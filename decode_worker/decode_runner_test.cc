// DecodeRunner with a FakeEngine, driven step by step (or by its loop thread), a recording sink,
// and KV shipped through the fake transport from a second FakeEngine acting as prefill.
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include "decode_worker/decode_runner.h"

#include "absl/strings/str_cat.h"

#include "decode_worker/testing/decode_runner_harness.h"
#include "decode_worker/testing/recording_sink.h"
#include "decode_worker/testing/small_decode_runner.h"
#include "worker/testing/fake_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/fake_transport.h"
#include "profiles/testing/test_profiles.h"

namespace mlaserve::decode {
namespace {

using ::mlaserve::testing::FakeEngine;
using ::mlaserve::testing::RecordingSink;
using ::testing::HasSubstr;
using testing::kPages;
using testing::kVocab;
using testing::Prompt;
using testing::SmallRunnerOptions;

class DecodeRunnerTest : public testing::SmallDecodeRunnerHarness {
 protected:
  void SetUp() override { Build(); }
};

TEST_F(DecodeRunnerTest, RemotePrefillStreamsTheGreedyContinuationAndFreesEveryPage) {
  const auto prompt = Prompt(100, 1);
  auto r = runner_->Reserve(Spec("a", prompt, 40, false));
  ASSERT_TRUE(r.ok()) << r.status();
  // The prompt and the first new token now (ceil(101 / 64)); the rest grows as it decodes.
  EXPECT_EQ(r->reserved_pages, 2);
  EXPECT_EQ(r->session.num_pages, 2);
  EXPECT_EQ(r->session.endpoint, "decode-0");
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages - 2);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  EXPECT_FALSE(runner_->Step());  // KV not there yet: nothing to run
  PrefillAndShip(*r, prompt);
  RunUntilIdle();
  ASSERT_TRUE(sink->ended());
  EXPECT_EQ(sink->tokens(), FakeEngine::ExpectedTokens(prompt, 40, kVocab));
  ASSERT_TRUE(sink->finish());
  EXPECT_EQ(sink->finish()->reason, FinishReason::kLength);
  EXPECT_EQ(sink->finish()->completion_tokens, 40);
  EXPECT_EQ(sink->finish()->prompt_tokens, 100);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  EXPECT_EQ(runner_->load().running + runner_->load().pending, 0);
}

TEST_F(DecodeRunnerTest, LocalPrefillInChunksMatchesAndStopTokenEndsIt) {
  const auto prompt = Prompt(70, 2);
  const auto expected = FakeEngine::ExpectedTokens(prompt, 10, kVocab);
  auto spec = Spec("b", prompt, 10, true);
  spec.stop_token_ids = {expected[4]};
  auto r = runner_->Reserve(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->session.num_pages, 0);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  RunUntilIdle();
  // Stops at the first occurrence of the stop token (which may come before index 4).
  const auto stop_at = std::find(expected.begin(), expected.end(), expected[4]) - expected.begin();
  EXPECT_EQ(sink->tokens(),
            std::vector<int32_t>(expected.begin(), expected.begin() + stop_at + 1));
  ASSERT_TRUE(sink->finish());
  EXPECT_EQ(sink->finish()->reason, FinishReason::kStop);
  EXPECT_EQ(sink->finish()->matched_token, expected[4]);
  EXPECT_TRUE(sink->finish()->local_prefill);
  // Prompt chunks of 32 (+ 32 + 6) went in before decoding began.
  EXPECT_EQ(decode_->batch_shapes()[0], std::vector<int>{32});
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  // Three steps carried the prompt's 70 positions (the last one drew the first token); each
  // later token took a decode-only step.
  const std::string text = metrics_.RenderText();
  EXPECT_THAT(text, HasSubstr("mlaserve_decode_prefill_tokens_total 70\n"));
  EXPECT_THAT(text, HasSubstr("mlaserve_decode_step_seconds_count{kind=\"mixed\"} 3\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("mlaserve_decode_step_seconds_count{kind=\"decode\"} ", stop_at, "\n")));
}

TEST_F(DecodeRunnerTest, BatchesRunningRequestsTogether) {
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    auto r = runner_->Reserve(Spec("r" + std::to_string(i), Prompt(5 + i, i), 6, true));
    ASSERT_TRUE(r.ok());
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(runner_->OpenStream(r->session_id, sinks.back()).ok());
  }
  RunUntilIdle();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sinks[i]->tokens(), FakeEngine::ExpectedTokens(Prompt(5 + i, i), 6, kVocab));
  }
  // One prefill step for all three, then five decode steps of three tokens each.
  const auto shapes = decode_->batch_shapes();
  ASSERT_EQ(shapes.size(), 6u);
  EXPECT_EQ(shapes[0], (std::vector<int>{5, 6, 7}));
  EXPECT_EQ(shapes[1], (std::vector<int>{1, 1, 1}));
}

// A step that carries a prompt asks the GPU profile's policy its path, part by part: here the
// profile says MHA for a fresh prompt from se = extend^2 >= 2000 (45 tokens) and MLA for every
// batch with a prefix, so a running request's decode row plus a 70-token prompt is a split, and
// plus a 30-token prompt one latent pass; decode-only steps stay on kAuto.
class DecodeRunnerPolicyTest : public testing::DecodeRunnerHarness {
 protected:
  // The runner reads the policy until it is gone: before it is.
  void TearDown() override { runner_.reset(); }
  std::unique_ptr<profiles::AttentionPathPolicy> policy_;
};

TEST_F(DecodeRunnerPolicyTest, StepsWithPromptsTakeThePolicysPath) {
  profiles::GpuProfile p = profiles::testing::SmallProfile();
  for (profiles::MhaMlaCell& c : p.mha_mla.cells) {
    c.se_threshold = c.prefix == 0 && c.batch == 1 ? 2000 : profiles::kNeverMha;
  }
  auto policy = profiles::AttentionPathPolicy::Create(p, "test", {});
  ASSERT_TRUE(policy.ok()) << policy.status();
  policy_ = *std::move(policy);
  DecodeRunnerOptions o;
  o.scheduler = {.max_running = 4, .max_batch_tokens = 128, .chunk_size = 128};
  o.attention_policy = policy_.get();
  Build({.num_pages = kPages}, o, kPages);
  using model::AttentionPath;
  auto start = [&](const std::string& id, const std::vector<int32_t>& prompt, int max_new) {
    auto r = runner_->Reserve(Spec(id, prompt, max_new, true));
    EXPECT_TRUE(r.ok()) << r.status();
    auto sink = std::make_shared<RecordingSink>();
    EXPECT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
    return sink;
  };
  const auto a = Prompt(10, 1), b = Prompt(70, 2), c = Prompt(30, 3);
  auto sa = start("a", a, 8);
  ASSERT_TRUE(runner_->Step());  // a's prompt alone: se 100 < 2000, latent
  ASSERT_TRUE(runner_->Step());  // a decodes
  auto sb = start("b", b, 2);
  ASSERT_TRUE(runner_->Step());  // a's row, then b's prompt: the split
  ASSERT_TRUE(runner_->Step());  // a and b decode
  auto sc = start("c", c, 2);
  ASSERT_TRUE(runner_->Step());  // a's and b's rows, then c's prompt: both parts latent
  RunUntilIdle(1000);
  EXPECT_EQ(sa->tokens(), FakeEngine::ExpectedTokens(a, 8, kVocab));
  EXPECT_EQ(sb->tokens(), FakeEngine::ExpectedTokens(b, 2, kVocab));
  EXPECT_EQ(sc->tokens(), FakeEngine::ExpectedTokens(c, 2, kVocab));
  const std::vector<AttentionPath> paths = decode_->asked_paths();
  ASSERT_GE(paths.size(), 5u);
  EXPECT_EQ(paths[0], AttentionPath::kMla);
  EXPECT_EQ(paths[1], AttentionPath::kAuto);
  EXPECT_EQ(paths[2], AttentionPath::kSplit);
  EXPECT_EQ(paths[3], AttentionPath::kAuto);
  EXPECT_EQ(paths[4], AttentionPath::kMla);
  for (size_t i = 5; i < paths.size(); ++i) EXPECT_EQ(paths[i], AttentionPath::kAuto) << i;
  EXPECT_EQ(decode_->batch_shapes()[2], (std::vector<int>{1, 70}));
  const std::string text = metrics_.RenderText();
  EXPECT_THAT(text, HasSubstr("mlaserve_decode_attention_path_total{path=\"split\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mlaserve_decode_attention_path_total{path=\"mla\"} 2\n"));
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST_F(DecodeRunnerTest, AbortMidStreamFreesPages) {
  auto r = runner_->Reserve(Spec("c", Prompt(10, 3), 500, true));
  ASSERT_TRUE(r.ok());
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(runner_->Step());
  EXPECT_EQ(sink->tokens().size(), 5u);
  ASSERT_TRUE(runner_->Abort("c").ok());
  RunUntilIdle();
  ASSERT_TRUE(sink->finish());
  EXPECT_EQ(sink->finish()->reason, FinishReason::kAbort);
  EXPECT_EQ(sink->finish()->completion_tokens, 5);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  EXPECT_EQ(runner_->Abort("c").code(), absl::StatusCode::kNotFound);
}

TEST_F(DecodeRunnerTest, AbortBeforeTransferAndStreamCancelFreePages) {
  auto r = runner_->Reserve(Spec("d", Prompt(200, 4), 10, false));
  ASSERT_TRUE(r.ok());
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  ASSERT_TRUE(runner_->Abort("d").ok());
  RunUntilIdle();
  ASSERT_TRUE(sink->finish());
  EXPECT_EQ(sink->finish()->reason, FinishReason::kAbort);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);

  auto r2 = runner_->Reserve(Spec("e", Prompt(20, 4), 300, true));
  ASSERT_TRUE(r2.ok());
  auto sink2 = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r2->session_id, sink2).ok());
  ASSERT_TRUE(runner_->Step());
  runner_->CancelStream(r2->session_id);
  RunUntilIdle();
  EXPECT_FALSE(sink2->ended());  // the client left: nothing more is sent
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST_F(DecodeRunnerTest, TransferFailureReachesTheStream) {
  auto r = runner_->Reserve(Spec("f", Prompt(100, 5), 10, false));
  ASSERT_TRUE(r.ok());
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  kvtransfer::KvLayout wrong = layout_;
  wrong.latent_dim = layout_.latent_dim + 8;
  auto ref = r->session;
  ref.compat_hash.clear();
  auto sender = transport_.Open(ref, wrong, {});  // refused by the receiver
  ASSERT_TRUE(sender.ok());
  RunUntilIdle();
  ASSERT_TRUE(sink->ended());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sink->error().message(),
              HasSubstr(absl::StrCat("latent_dim is ", wrong.latent_dim, " on the peer but ",
                                     layout_.latent_dim, " here")));
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST_F(DecodeRunnerTest, LeaseExpiryWithoutStreamFreesPages) {
  runner_->Start();
  auto spec = Spec("g", Prompt(100, 6), 10, true);
  spec.lease = absl::Milliseconds(50);
  auto r = runner_->Reserve(spec);
  ASSERT_TRUE(r.ok());
  auto remote = Spec("h", Prompt(100, 6), 10, false);
  remote.lease = absl::Milliseconds(50);
  const absl::Time before_remote = absl::Now();
  ASSERT_TRUE(runner_->Reserve(remote).ok());
  // Pages are held while a lease runs. Its end is read from absl::Now() too, no earlier than
  // before_remote + 50 ms; a loaded machine may already be past it here, so only a read taken
  // before then is held to it.
  const int free_during_lease = decode_->kv_pool().free_pages();
  if (absl::Now() < before_remote + remote.lease) EXPECT_LT(free_during_lease, kPages);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (decode_->kv_pool().free_pages() < kPages && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  while (runner_->load().pending > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_EQ(runner_->load().pending, 0);
  EXPECT_EQ(runner_->OpenStream(r->session_id, std::make_shared<RecordingSink>()).code(),
            absl::StatusCode::kNotFound);
  runner_->Stop();
}

// The decode worker's prefix cache: a request's pages keep its prompt's and its answer's KV
// once it ended, and a later local prefill that starts with them (a conversation's next turn)
// takes their whole pages and computes the rest; another cache_salt takes nothing.
TEST_F(DecodeRunnerTest, ALocalPrefillTakesTheWholePagesAnEarlierRequestLeft) {
  const auto first = Prompt(100, 3);
  auto ra = runner_->Reserve(Spec("turn1", first, 40, true));
  ASSERT_TRUE(ra.ok()) << ra.status();
  auto sa = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(ra->session_id, sa).ok());
  RunUntilIdle();
  ASSERT_TRUE(sa->finish()) << sa->error();
  EXPECT_EQ(sa->cached(), 0);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  // 139 positions computed (the last answer token's KV is never written): 2 whole pages.
  EXPECT_EQ(decode_->kv_pool().cached_pages(), 2);

  // The next turn: the first prompt, the answer, a new message.
  std::vector<int32_t> second = first;
  const std::vector<int32_t> answer = sa->tokens();
  second.insert(second.end(), answer.begin(), answer.end());
  for (int32_t t : Prompt(30, 11)) second.push_back(t);
  for (const char* salt : {"", "other"}) {
    auto spec = Spec(absl::StrCat("turn2", salt), second, 12, true);
    spec.cache_salt = salt;
    auto rb = runner_->Reserve(spec);
    ASSERT_TRUE(rb.ok()) << rb.status();
    auto sb = std::make_shared<RecordingSink>();
    ASSERT_TRUE(runner_->OpenStream(rb->session_id, sb).ok());
    RunUntilIdle();
    ASSERT_TRUE(sb->finish()) << sb->error();
    EXPECT_EQ(sb->tokens(), FakeEngine::ExpectedTokens(second, 12, kVocab)) << salt;
    EXPECT_EQ(sb->cached(), *salt == '\0' ? 128 : 0) << salt;
    if (*salt == '\0') EXPECT_TRUE(sb->cached_before_tokens());
  }
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// Room for a local prefill counts the cached pages of its prompt's start that another running
// request holds (taking them costs no free page): with 16 pages, two requests sharing a
// 10-page start both fit where the start counted twice would not.
TEST_F(DecodeRunnerTest, CachedPagesAnotherRequestHoldsCountAsRoom) {
  auto engine = FakeEngine::Create({.num_pages = 16});
  auto layout = *kvtransfer::MakeKvLayout(engine->config(), engine->kv_pool().options());
  kvtransfer::KvReceiver receiver(&engine->kv_pool(), layout,
                                  kvtransfer::KvReceiverOptions{absl::Seconds(30)});
  DecodeRunnerOptions o;
  o.scheduler = {.max_running = 4, .max_batch_tokens = 256, .chunk_size = 128};
  o.kv_endpoint = "decode-small";
  o.kv_transport = "fake";
  DecodeRunner runner(engine.get(), &receiver, o);
  const auto start = Prompt(640, 13);  // 10 whole pages
  auto first = runner.Reserve(Spec("first", start, 2, true));
  ASSERT_TRUE(first.ok()) << first.status();
  auto s0 = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner.OpenStream(first->session_id, s0).ok());
  for (int i = 0; i < 100 && runner.Step(); ++i) {
  }
  ASSERT_TRUE(s0->finish()) << s0->error();
  EXPECT_EQ(engine->kv_pool().cached_pages(), 10);
  // Two more turns on that start, each 11 pages with its first new token: the first takes the
  // 10 cached pages and one more (5 free left), the second needs one page more than it shares.
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 2; ++i) {
    prompts.push_back(start);
    for (int32_t t : Prompt(20, 30 + i)) prompts.back().push_back(t);
    auto r = runner.Reserve(Spec(absl::StrCat("turn", i), prompts.back(), 4, true));
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(runner.OpenStream(r->session_id, sinks.back()).ok());
  }
  for (int i = 0; i < 200 && runner.Step(); ++i) {
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(sinks[i]->finish()) << i << ": " << sinks[i]->error();
    EXPECT_EQ(sinks[i]->cached(), 640) << i;
    EXPECT_EQ(sinks[i]->tokens(), FakeEngine::ExpectedTokens(prompts[i], 4, kVocab)) << i;
  }
  EXPECT_EQ(engine->kv_pool().free_pages(), 16);
}

TEST_F(DecodeRunnerTest, RequestsGrowPageByPageAndPreemptedOnesRecomputeTheSameTokens) {
  // 8 pages, three requests of 100 prompt + 150 new tokens (4 pages each at the end): they
  // cannot all hold their pages at once, so the latest reserved gives its pages back, is
  // recomputed from its tokens later, and every stream is still the greedy continuation (the
  // fake engine derives each token from what it reads back from the cache).
  auto engine = FakeEngine::Create({.num_pages = 8});
  auto layout = *kvtransfer::MakeKvLayout(engine->config(), engine->kv_pool().options());
  kvtransfer::KvReceiver receiver(&engine->kv_pool(), layout,
                                  kvtransfer::KvReceiverOptions{absl::Seconds(30)});
  DecodeRunnerOptions o = SmallRunnerOptions();
  o.kv_endpoint = "decode-small";
  o.kv_transport = "fake";
  transport_.Register("decode-small", &receiver);
  common::MetricsRegistry metrics;
  DecodeRunner runner(engine.get(), &receiver, o, &metrics);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    // The last (the first to be preempted) was prefilled remotely: its first token came with
    // the KV and must not be streamed twice.
    const bool local = i < 2;
    prompts.push_back(Prompt(100, 7 + i));
    auto r = runner.Reserve(Spec(absl::StrCat("g", i), prompts.back(), 150, local));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reserved_pages, 2);
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(runner.OpenStream(r->session_id, sinks.back()).ok());
    if (!local) PrefillAndShip(*r, prompts.back());
  }
  for (int i = 0; i < 5000 && runner.Step(); ++i) {
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sinks[i]->ended()) << i;
    ASSERT_TRUE(sinks[i]->finish()) << i << ": " << sinks[i]->error();
    EXPECT_EQ(sinks[i]->finish()->reason, FinishReason::kLength);
    EXPECT_EQ(sinks[i]->tokens(), FakeEngine::ExpectedTokens(prompts[i], 150, kVocab)) << i;
  }
  EXPECT_THAT(metrics.RenderText(), HasSubstr("mlaserve_decode_preemptions_total"));
  EXPECT_THAT(metrics.RenderText(), ::testing::Not(HasSubstr("mlaserve_decode_preemptions_total 0\n")));
  EXPECT_EQ(engine->kv_pool().free_pages(), 8);
  EXPECT_EQ(runner.load().running + runner.load().pending, 0);
}

// What the fake engine's prompt logprobs must be for `prompt` (its one-hot rows, scored as
// defined in model/sampler.h, computed here directly).
void ExpectFakePromptLogprobs(const std::vector<model::PromptTokenLogprobs>& got,
                              const std::vector<int32_t>& prompt, int top_n, const std::string& what) {
  ASSERT_EQ(got.size(), prompt.size() - 1) << what;
  const double lse = std::log(std::exp(static_cast<double>(FakeEngine::kPredictedLogit)) + (kVocab - 1));
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    const int32_t predicted =
        FakeEngine::NextToken(std::span<const int32_t>(prompt).first(p + 1), kVocab);
    const bool hit = prompt[p + 1] == predicted;
    EXPECT_EQ(got[p].token_id, prompt[p + 1]) << what << " position " << p;
    EXPECT_NEAR(got[p].logprob, (hit ? FakeEngine::kPredictedLogit : 0.0) - lse, 1e-5)
        << what << " position " << p;
    // Rank: the tokens whose logit is >= its own: itself alone when predicted, else all of
    // them (every other 0, the predicted one 30).
    EXPECT_EQ(got[p].rank, hit ? 1 : kVocab) << what << " position " << p;
    ASSERT_EQ(got[p].top.size(), static_cast<size_t>(top_n)) << what;
    if (top_n > 0) EXPECT_EQ(got[p].top[0].token_id, predicted) << what << " position " << p;
  }
}

// A local prefill with prompt logprobs: every prompt token after the first once, in order,
// all before the first token, over chunks of 32; the prefix cache, which holds the prompt's
// first pages from an earlier request, is not used (its pages have no logits), and the
// tokens are the greedy continuation.
TEST_F(DecodeRunnerTest, PromptLogprobsComeBeforeTheFirstTokenAndSkipThePrefixCache) {
  const auto prompt = Prompt(100, 3);
  auto first = runner_->Reserve(Spec("first", prompt, 4, true));
  ASSERT_TRUE(first.ok()) << first.status();
  auto s0 = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(first->session_id, s0).ok());
  RunUntilIdle();
  ASSERT_TRUE(s0->finish()) << s0->error();
  EXPECT_TRUE(s0->prompt_logprobs().empty());
  ASSERT_GT(decode_->kv_pool().cached_pages(), 0);

  auto spec = Spec("scored", prompt, 6, true);
  spec.sampling.prompt_logprobs = 2;
  auto r = runner_->Reserve(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  RunUntilIdle();
  ASSERT_TRUE(sink->finish()) << sink->error();
  EXPECT_EQ(sink->cached(), 0);
  EXPECT_EQ(sink->tokens(), FakeEngine::ExpectedTokens(prompt, 6, kVocab));
  EXPECT_FALSE(sink->prompt_logprobs_after_tokens());
  EXPECT_EQ(sink->prompt_logprobs_calls(), (std::vector<int>{32, 32, 32, 3}));
  ExpectFakePromptLogprobs(sink->prompt_logprobs(), prompt, 2, "scored");
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// Preempted requests (the growth scenario below, every request with prompt logprobs): a
// recompute scores no row twice and skips none.
TEST_F(DecodeRunnerTest, PreemptedRequestsScoreEachPromptRowOnce) {
  auto engine = FakeEngine::Create({.num_pages = 8});
  auto layout = *kvtransfer::MakeKvLayout(engine->config(), engine->kv_pool().options());
  kvtransfer::KvReceiver receiver(&engine->kv_pool(), layout,
                                  kvtransfer::KvReceiverOptions{absl::Seconds(30)});
  DecodeRunnerOptions o = SmallRunnerOptions();
  o.kv_endpoint = "decode-small";
  o.kv_transport = "fake";
  common::MetricsRegistry metrics;
  DecodeRunner runner(engine.get(), &receiver, o, &metrics);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(Prompt(100, 7 + i));
    auto spec = Spec(absl::StrCat("g", i), prompts.back(), 150, true);
    spec.sampling.prompt_logprobs = 1;
    auto r = runner.Reserve(spec);
    ASSERT_TRUE(r.ok()) << r.status();
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(runner.OpenStream(r->session_id, sinks.back()).ok());
  }
  for (int i = 0; i < 5000 && runner.Step(); ++i) {
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sinks[i]->finish()) << i << ": " << sinks[i]->error();
    EXPECT_EQ(sinks[i]->tokens(), FakeEngine::ExpectedTokens(prompts[i], 150, kVocab)) << i;
    ExpectFakePromptLogprobs(sinks[i]->prompt_logprobs(), prompts[i], 1, absl::StrCat("g", i));
    EXPECT_FALSE(sinks[i]->prompt_logprobs_after_tokens()) << i;
  }
  EXPECT_THAT(metrics.RenderText(), ::testing::Not(HasSubstr("mlaserve_decode_preemptions_total 0\n")));
  EXPECT_EQ(engine->kv_pool().free_pages(), 8);
}

// An engine that cannot score prompt rows (data-parallel attention) refuses the reservation
// with its reason, before taking pages.
TEST_F(DecodeRunnerTest, AnEngineWithoutPromptLogprobsRefusesTheReservation) {
  auto engine = FakeEngine::Create({.num_pages = 8, .data_ranks = 2});
  auto layout = *kvtransfer::MakeKvLayout(engine->config(), engine->kv_pool().options());
  kvtransfer::KvReceiver receiver(&engine->kv_pool(), layout,
                                  kvtransfer::KvReceiverOptions{absl::Seconds(30)});
  DecodeRunnerOptions o;
  o.kv_endpoint = "decode-dp";
  o.kv_transport = "fake";
  DecodeRunner runner(engine.get(), &receiver, o);
  auto spec = Spec("dp", Prompt(10, 1), 2, true);
  spec.sampling.prompt_logprobs = 0;
  auto r = runner.Reserve(spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("data-parallel attention"));
  EXPECT_EQ(engine->rank_pool(0).free_pages() + engine->rank_pool(1).free_pages(), 16);
}

TEST_F(DecodeRunnerTest, ReservationsLeaveAPagePerRunningRequestToGrowInto) {
  // Two running requests hold 30 of 32 pages; a new one-page reservation would leave 1 page
  // for 2 growing requests: refused (the router waits and retries), not taken from them.
  for (const char* id : {"a", "b"}) {
    auto r = runner_->Reserve(Spec(id, Prompt(14 * 64, 1), 200, true));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reserved_pages, 15);
    ASSERT_TRUE(runner_->OpenStream(r->session_id, std::make_shared<RecordingSink>()).ok());
  }
  ASSERT_TRUE(runner_->Step());  // both admitted
  EXPECT_EQ(runner_->load().running, 2);
  absl::Status s = runner_->Reserve(Spec("c", Prompt(10, 2), 5, true)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("2 are free and 2 stay free for the 2 running requests"));
  ASSERT_TRUE(runner_->Abort("a").ok());
  ASSERT_TRUE(runner_->Abort("b").ok());
  RunUntilIdle();
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// Admission is one locked section: reservations racing for the same id or the same pages get
// exactly one answer each, and the pages taken are those of the reservations admitted.
TEST_F(DecodeRunnerTest, ConcurrentReservationsAreAdmittedOnceAndCountPagesExactly) {
  constexpr int kThreads = 8;
  std::atomic<int> admitted{0}, already{0}, full{0};
  auto reserve = [&](const std::string& id) {
    // 4 pages of prompt + the first new token: 5 pages.
    absl::Status s = runner_->Reserve(Spec(id, Prompt(4 * 64, 3), 5, true)).status();
    if (s.ok()) ++admitted;
    if (s.code() == absl::StatusCode::kAlreadyExists) ++already;
    if (s.code() == absl::StatusCode::kResourceExhausted) ++full;
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(reserve, "same");
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 1);
  EXPECT_EQ(already.load(), kThreads - 1);
  threads.clear();
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(reserve, absl::StrCat("r", i));
  for (auto& t : threads) t.join();
  // 32 pages hold six reservations of 5 ("same" and five of the eight).
  EXPECT_EQ(admitted.load(), 6);
  EXPECT_EQ(full.load(), kThreads - 5);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages - 6 * 5);
  for (const char* id : {"same", "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"}) {
    (void)runner_->Abort(id);
  }
  RunUntilIdle();
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// What Reserve checks of a (valid) spec: this worker's layout, pool and table. The spec's own
// values are checked at the RPC edge (decode_service_test.cc, ToReserveSpec).
TEST_F(DecodeRunnerTest, BadReservationsGetTheRightCodes) {
  auto code = [&](ReserveSpec s) { return runner_->Reserve(std::move(s)).status(); };
  EXPECT_EQ(runner_->bounds().vocab_size, kVocab);
  EXPECT_EQ(runner_->bounds().max_context, 4096);
  auto other = Spec("x", Prompt(5, 0), 5, false);
  other.prefill_compat_hash = "0123456789abcdef";
  EXPECT_THAT(code(other).message(), HasSubstr("KV compatibility hash is 0123456789abcdef"));
  EXPECT_EQ(code(other).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(code(Spec("x", Prompt(64, 0), 33 * 64 - 64, true)).message(),
              HasSubstr("needs 33 KV pages; this decode worker has 32"));
  // 1984 prompt tokens + the first new one take all 32 pages: nothing is left now.
  ASSERT_TRUE(runner_->Reserve(Spec("big", Prompt(31 * 64, 0), 1, true)).ok());
  EXPECT_EQ(code(Spec("y", Prompt(64, 0), 64 * 2, true)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code(Spec("big", Prompt(5, 0), 5, true)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(runner_->Abort("big").ok());
  runner_->Step();  // the loop ends it and frees its pages
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  EXPECT_EQ(runner_->OpenStream("nope#1", std::make_shared<RecordingSink>()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(runner_->Abort("nope").code(), absl::StatusCode::kNotFound);
  auto r = runner_->Reserve(Spec("z", Prompt(5, 0), 5, true));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(runner_->OpenStream(r->session_id, std::make_shared<RecordingSink>()).ok());
  EXPECT_EQ(runner_->OpenStream(r->session_id, std::make_shared<RecordingSink>()).code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace mlaserve::decode
