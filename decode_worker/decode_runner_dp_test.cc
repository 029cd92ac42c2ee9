// DecodeRunner over a data-parallel-attention engine (docs/parallel.md): a FakeEngine with one
// pool per rank, whose chunks read and write their rank's pool only (so KV that landed in
// another rank's pool than the request's reads back as corrupt). Requests are spread over the
// ranks and stay there; KV imports land in the owning rank's pool; growth, preemption, aborts
// and cancels give pages back to that pool.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode_worker/decode_runner.h"
#include "decode_worker/testing/decode_runner_harness.h"
#include "decode_worker/testing/recording_sink.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/fake_transport.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::decode {
namespace {

using ::mlaserve::testing::FakeEngine;
using ::mlaserve::testing::RecordingSink;
using ::testing::HasSubstr;

constexpr int kVocab = 64;

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 7 + salt) % kVocab;
  return p;
}

class DataParallelDecodeTest : public testing::DecodeRunnerHarness {
 protected:
  // `ranks` pools of `pages` pages; `max_running` per rank.
  void Build(int ranks, int pages, int max_running = 4) {
    pages_ = pages;
    DecodeRunnerOptions o;
    o.scheduler = {.max_running = max_running, .max_batch_tokens = 64, .chunk_size = 32};
    DecodeRunnerHarness::Build({.num_pages = pages, .data_ranks = ranks}, o, 64);
  }
  void PrefillAndShip(const Reservation& r, const std::vector<int32_t>& prompt) {
    DecodeRunnerHarness::PrefillAndShip(r, prompt, kVocab);
  }
  int Free(int rank) { return decode_->rank_pool(rank).free_pages(); }

  int pages_ = 0;
};

TEST_F(DataParallelDecodeTest, RequestsSpreadOverRanksAndImportIntoTheirRanksPool) {
  Build(/*ranks=*/2, /*pages=*/16);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<int> ranks;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Prompt(70 + 10 * i, i));
    const bool local = i % 2 == 1;
    auto r = runner_->Reserve(Spec(absl::StrCat("q", i), prompts.back(), 12, local));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->session.rank, r->rank);  // the KV transfer names the rank's pool
    ranks.push_back(r->rank);
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(runner_->OpenStream(r->session_id, sinks.back()).ok());
    if (!local) {
      const int other = Free(1 - r->rank);
      PrefillAndShip(*r, prompts.back());
      EXPECT_EQ(Free(1 - r->rank), other) << "the import touched the other rank's pool";
    }
  }
  // The most room first, then the fewest requests: 0, 1, 0, 1 (each takes 2 pages).
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 0, 1}));
  const DecodeLoad held = runner_->load();
  ASSERT_EQ(held.ranks.size(), 2u);
  EXPECT_EQ(held.ranks[0].pending, 2);
  EXPECT_EQ(held.ranks[1].kv_pages_free, 16 - 2 - 2);
  EXPECT_EQ(held.kv_pages_total, 32);
  ASSERT_TRUE(runner_->Step());
  EXPECT_EQ(runner_->load().ranks[1].running, 2);
  EXPECT_THAT(metrics_.RenderText(),
              HasSubstr("mlaserve_decode_rank_running_requests{rank=\"1\"} 2"));
  RunUntilIdle();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(sinks[i]->finish()) << i << ": " << sinks[i]->error();
    EXPECT_EQ(sinks[i]->tokens(), FakeEngine::ExpectedTokens(prompts[i], 12, kVocab)) << i;
  }
  // One step runs both ranks' chunks (rank 0's decode tokens, rank 1's prompt chunks).
  EXPECT_EQ(decode_->batch_ranks()[0], (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(Free(0), 16);
  EXPECT_EQ(Free(1), 16);
}

TEST_F(DataParallelDecodeTest, AbortsCancelsAndFailuresReturnTheOwningRanksPages) {
  Build(2, 16);
  auto a = runner_->Reserve(Spec("a", Prompt(100, 1), 300, true));  // rank 0
  auto b = runner_->Reserve(Spec("b", Prompt(10, 2), 300, true));   // rank 1
  auto c = runner_->Reserve(Spec("c", Prompt(200, 3), 10, false));  // rank 1: KV never comes
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(b->rank, 1);
  EXPECT_EQ(c->rank, 1);
  auto sa = std::make_shared<RecordingSink>(), sb = std::make_shared<RecordingSink>(),
       sc = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(a->session_id, sa).ok());
  ASSERT_TRUE(runner_->OpenStream(b->session_id, sb).ok());
  ASSERT_TRUE(runner_->OpenStream(c->session_id, sc).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(runner_->Step());
  EXPECT_LT(Free(0), 16);
  EXPECT_LT(Free(1), 16);
  ASSERT_TRUE(runner_->Abort("a").ok());
  runner_->CancelStream(b->session_id);
  EXPECT_TRUE(receiver_->Fail(c->session_id, absl::UnavailableError("prefill worker gone")));
  RunUntilIdle();
  ASSERT_TRUE(sa->finish());
  EXPECT_EQ(sa->finish()->reason, FinishReason::kAbort);
  EXPECT_EQ(sc->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Free(0), 16);
  EXPECT_EQ(Free(1), 16);
  EXPECT_EQ(runner_->load().running + runner_->load().pending, 0);
}

TEST_F(DataParallelDecodeTest, GrowthPreemptsOnlyWithinTheRankAndRecomputesTheSameTokens) {
  // 5 pages a rank. Rank 0: two requests of 60 prompt + 200 new tokens (5 pages each at the
  // end) cannot both hold their pages: the later one is preempted and recomputed. Rank 1: one
  // short request that must not be disturbed.
  Build(2, 5);
  std::vector<std::vector<int32_t>> prompts = {Prompt(60, 1), Prompt(20, 2), Prompt(60, 3)};
  const std::vector<int> max_new = {200, 20, 200};
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<int> ranks;
  for (int i = 0; i < 3; ++i) {
    auto r = runner_->Reserve(Spec(absl::StrCat("g", i), prompts[i], max_new[i], true));
    ASSERT_TRUE(r.ok()) << r.status();
    ranks.push_back(r->rank);
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(runner_->OpenStream(r->session_id, sinks.back()).ok());
  }
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 0}));
  RunUntilIdle();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sinks[i]->finish()) << i << ": " << sinks[i]->error();
    EXPECT_EQ(sinks[i]->tokens(), FakeEngine::ExpectedTokens(prompts[i], max_new[i], kVocab))
        << i;
  }
  const std::string text = metrics_.RenderText();
  EXPECT_THAT(text, HasSubstr("mlaserve_decode_preemptions_total 1\n"));
  EXPECT_EQ(Free(0), 5);
  EXPECT_EQ(Free(1), 5);
}

// A prefix every request shares (a system prompt) that one rank caches: its cache draws
// requests only while the rank is not overloaded against the least loaded rank, else every
// such request would pile onto that rank (waiting for batch slots, and each step as slow as
// its share) while the other ranks idle. Overloaded: its batch full while another has a free
// slot, or more than 16 requests more than it and 1.5 times as many.
TEST_F(DataParallelDecodeTest, ASharedCachedPrefixDoesNotPileRequestsOntoOneRank) {
  for (const int max_running : {4, 64}) {
    SCOPED_TRACE(max_running);
    runner_.reset();
    Build(/*ranks=*/2, /*pages=*/32, max_running);
    const std::vector<int32_t> system = Prompt(130, 5);
    Reservation primer;
    {
      ReserveSpec spec = Spec("primer", system, 4, /*local=*/false);
      spec.reuse_cached_pages = true;
      auto r = runner_->Reserve(spec);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->rank, 0);  // both idle: the first rank
      auto sink = std::make_shared<RecordingSink>();
      ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
      PrefillAndShip(*r, system);
      RunUntilIdle();
      ASSERT_TRUE(sink->finish()) << sink->error();
    }
    ASSERT_EQ(decode_->rank_pool(0).cached_pages(), 2);
    // Prompts of 148 tokens whose first two pages rank 0 caches (a third page each).
    const int n = max_running == 4 ? 8 : 20;
    std::vector<int> ranks;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Reservation> reserved;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> p(system.begin(), system.begin() + 128);
      for (int32_t t : Prompt(20, 10 + i)) p.push_back(t);
      ReserveSpec spec = Spec(absl::StrCat("q", i), p, 4, /*local=*/false);
      spec.reuse_cached_pages = true;
      auto r = runner_->Reserve(spec);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->session.cached_pages, r->rank == 0 ? 2 : 0);
      ranks.push_back(r->rank);
      prompts.push_back(std::move(p));
      reserved.push_back(*r);
    }
    if (max_running == 4) {
      // Rank 0 until its batch is full (4), then by room as if it cached nothing: 3 pages a
      // request on either rank, rank 0 having used 6 (two shared) and rank 1 none, then 3.
      EXPECT_EQ(ranks, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 0}));
    } else {
      // Rank 0 until it has 17 more than the least loaded rank (then rank 1 by room), and
      // again once it is back within 16.
      std::vector<int> want(17, 0);
      want.insert(want.end(), {1, 0, 1});
      EXPECT_EQ(ranks, want);
    }
    // Every one decodes right on its rank (the shared pages read back on rank 0).
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (int i = 0; i < n; ++i) {
      sinks.push_back(std::make_shared<RecordingSink>());
      ASSERT_TRUE(runner_->OpenStream(reserved[i].session_id, sinks.back()).ok());
      PrefillAndShip(reserved[i], prompts[i]);
    }
    RunUntilIdle();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(sinks[i]->finish()) << i << ": " << sinks[i]->error();
      EXPECT_EQ(sinks[i]->tokens(), FakeEngine::ExpectedTokens(prompts[i], 4, kVocab)) << i;
    }
    EXPECT_EQ(Free(0), 32);
    EXPECT_EQ(Free(1), 32);
  }
}

TEST_F(DataParallelDecodeTest, ARequestMustFitOneRankAndTheRefusalNamesEveryRank) {
  Build(2, 8);
  // The whole worker has 16 pages, but one request's pages are all on one rank.
  absl::Status s = runner_->Reserve(Spec("big", Prompt(64, 0), 9 * 64 - 64, true)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("needs 9 KV pages; this decode worker has 8 per "
                                     "data-parallel rank"));
  ASSERT_TRUE(runner_->Reserve(Spec("x", Prompt(5 * 64, 0), 10, true)).ok());  // 6 on rank 0
  ASSERT_TRUE(runner_->Reserve(Spec("y", Prompt(5 * 64, 1), 10, true)).ok());  // 6 on rank 1
  s = runner_->Reserve(Spec("z", Prompt(3 * 64, 2), 10, true)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("needs 4 KV pages on one data-parallel rank; none has them "
                                     "(rank 0: 2 free, 0 kept for its running requests; rank 1: "
                                     "2 free, 0 kept for its running requests)"));
  ASSERT_TRUE(runner_->Abort("x").ok());
  ASSERT_TRUE(runner_->Abort("y").ok());
  RunUntilIdle();
  EXPECT_EQ(Free(0), 8);
  EXPECT_EQ(Free(1), 8);
}

}  // namespace
}  // namespace mlaserve::decode
