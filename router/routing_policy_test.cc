#include "router/routing_policy.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

using ::testing::ElementsAre;

WorkerSnapshot W(const std::string& id, int free_pages, int inflight = 0) {
  WorkerSnapshot w;
  w.id = id;
  w.state = WorkerState::kHealthy;
  w.estimated_free_pages = free_pages;
  w.router_inflight = inflight;
  return w;
}

TEST(RoutingPolicy, DecodePrefersMostFreePagesAndSkipsFullOnes) {
  std::vector<WorkerSnapshot> ws = {W("decode-1", 10), W("decode-2", 40), W("decode-3", 3),
                                    W("decode-4", 40, 2)};
  EXPECT_THAT(RankDecodeWorkers(ws, 4, 4), ElementsAre("decode-2", "decode-4", "decode-1"));
  EXPECT_TRUE(RankDecodeWorkers(ws, 41, 41).empty());
}

TEST(RoutingPolicy, DecodeNeedsRoomNowAndAPoolThatHoldsTheWholeRequest) {
  // Room now counts the prompt's pages only (decoding grows page by page), but a worker
  // whose pool could never hold prompt + max_new_tokens is skipped.
  WorkerSnapshot small = W("decode-1", 40);
  small.descriptor.load.kv_pages_total = 40;
  WorkerSnapshot large = W("decode-2", 5);
  large.descriptor.load.kv_pages_total = 1000;
  std::vector<WorkerSnapshot> ws = {small, large};
  EXPECT_THAT(RankDecodeWorkers(ws, 2, 30), ElementsAre("decode-1", "decode-2"));
  EXPECT_THAT(RankDecodeWorkers(ws, 2, 41), ElementsAre("decode-2"));
  EXPECT_THAT(RankDecodeWorkers(ws, 6, 41), ElementsAre());
}

TEST(RoutingPolicy, ADataParallelWorkerHoldsARequestOnOneRank) {
  // 2 ranks of 40 pages: 80 in all, but a request's pages must fit one rank's pool.
  WorkerSnapshot dp = W("decode-1", 30);
  dp.descriptor.load.kv_pages_total = 80;
  dp.descriptor.load.ranks = {RankLoad{.kv_pages_total = 40, .kv_pages_free = 30},
                              RankLoad{.kv_pages_total = 40, .kv_pages_free = 20}};
  std::vector<WorkerSnapshot> ws = {dp};
  EXPECT_THAT(RankDecodeWorkers(ws, 2, 40), ElementsAre("decode-1"));
  EXPECT_THAT(RankDecodeWorkers(ws, 2, 41), ElementsAre());
}

TEST(RoutingPolicy, DecodeSkipsWorkersAtTheirRequestLimit) {
  WorkerSnapshot busy = W("decode-1", 100);
  busy.descriptor.load.max_running_requests = 2;
  busy.estimated_running_requests = 2;  // the registry's estimate (worker_registry_test)
  WorkerSnapshot by_router = W("decode-2", 100, 4);
  by_router.descriptor.load.max_running_requests = 4;
  by_router.estimated_running_requests = 4;  // the registry's estimate is at least router_inflight
  std::vector<WorkerSnapshot> ws = {busy, by_router, W("decode-3", 1)};
  EXPECT_THAT(RankDecodeWorkers(ws, 1, 1), ElementsAre("decode-3"));
  // One of decode-1's requests ended since its report: it has room again at once.
  ws[0].estimated_running_requests = 1;
  EXPECT_THAT(RankDecodeWorkers(ws, 1, 1), ElementsAre("decode-1", "decode-3"));
}

TEST(RoutingPolicy, PrefillPrefersFewestPendingTokens) {
  WorkerSnapshot a = W("prefill-1", 0);
  a.router_prefill_tokens = 500;
  WorkerSnapshot b = W("prefill-2", 0);
  b.descriptor.load.pending_prefill_tokens = 100;
  WorkerSnapshot c = W("prefill-3", 0);
  c.router_prefill_tokens = 50;
  c.descriptor.load.pending_prefill_tokens = 60;
  std::vector<WorkerSnapshot> ws = {a, b, c};
  EXPECT_THAT(RankPrefillWorkers(ws), ElementsAre("prefill-2", "prefill-3", "prefill-1"));
}

// Two unlike prefill workers: "fast" is 4x quicker per token (a measured profile of a faster
// GPU), "slow" has the shorter queue. By finish time the fast one wins despite its longer
// queue; the profile JSON is the one workers send (only "prefill_estimate" is read here).
WorkerSnapshot Prefill(const std::string& id, int64_t pending, const std::string& profile_json) {
  WorkerSnapshot w = W(id, 0);
  w.role = WorkerRole::kPrefill;
  w.descriptor.load.pending_prefill_tokens = pending;
  w.descriptor.profile.profile_json = profile_json;
  w.descriptor.profile.prefill_estimate = PrefillEstimateFromProfileJson(profile_json);
  return w;
}

constexpr char kFastProfile[] =
    R"({"format": "mlaserve-gpu-profile", "prefill_estimate": {"attn_us_per_token": 0.1,)"
    R"( "attn_us_per_token_sq": 1e-5, "dense_us_per_token": 0.2}})";
constexpr char kSlowProfile[] =
    R"({"format": "mlaserve-gpu-profile", "prefill_estimate": {"attn_us_per_token": 0.4,)"
    R"( "attn_us_per_token_sq": 4e-5, "dense_us_per_token": 0.8}})";

TEST(RoutingPolicy, PrefillEstimateParsedFromProfileJson) {
  const auto e = PrefillEstimateFromProfileJson(kFastProfile);
  ASSERT_TRUE(e.has_value());
  EXPECT_DOUBLE_EQ(e->attn_us_per_token, 0.1);
  EXPECT_DOUBLE_EQ(e->attn_us_per_token_sq, 1e-5);
  EXPECT_DOUBLE_EQ(e->dense_us_per_token, 0.2);
  // 1000 queued + 1000 new: 2000 * 0.3 + 1000^2 * 1e-5 = 600 + 10.
  EXPECT_DOUBLE_EQ(e->FinishMicros(1000, 1000), 610.0);
  EXPECT_FALSE(PrefillEstimateFromProfileJson("").has_value());
  EXPECT_FALSE(PrefillEstimateFromProfileJson("not json").has_value());
  EXPECT_FALSE(PrefillEstimateFromProfileJson(R"({"chunk_size": 8192})").has_value());
  EXPECT_FALSE(PrefillEstimateFromProfileJson(
                   R"({"prefill_estimate": {"attn_us_per_token": -1, "attn_us_per_token_sq": 0,)"
                   R"( "dense_us_per_token": 1}})")
                   .has_value());
  EXPECT_FALSE(PrefillEstimateFromProfileJson(
                   R"({"prefill_estimate": {"attn_us_per_token": 1, "dense_us_per_token": 1}})")
                   .has_value());
}

TEST(RoutingPolicy, PrefillRanksUnlikeWorkersByEstimatedFinish) {
  // fast: (3000 + 2000) * 0.3 + 2000^2 * 1e-5 = 1540 us; slow: (1000 + 2000) * 1.2 + 160 = 3760.
  std::vector<WorkerSnapshot> ws = {Prefill("prefill-slow", 1000, kSlowProfile),
                                    Prefill("prefill-fast", 3000, kFastProfile)};
  EXPECT_THAT(RankPrefillWorkers(ws, 2000), ElementsAre("prefill-fast", "prefill-slow"));
  // A much longer queue on the fast one tips it: (20000 + 2000) * 0.3 + 40 = 6640 > 3760.
  ws[1].descriptor.load.pending_prefill_tokens = 20000;
  EXPECT_THAT(RankPrefillWorkers(ws, 2000), ElementsAre("prefill-slow", "prefill-fast"));
  // The router's own in-flight tokens count as pending too.
  ws[1].descriptor.load.pending_prefill_tokens = 0;
  ws[1].router_prefill_tokens = 20000;
  EXPECT_THAT(RankPrefillWorkers(ws, 2000), ElementsAre("prefill-slow", "prefill-fast"));
}

TEST(RoutingPolicy, PrefillFallsBackToPendingTokensUnlessEveryWorkerHasAnEstimate) {
  std::vector<WorkerSnapshot> ws = {Prefill("prefill-slow", 1000, kSlowProfile),
                                    Prefill("prefill-fast", 3000, kFastProfile),
                                    Prefill("prefill-none", 2000, "")};
  EXPECT_THAT(RankPrefillWorkers(ws, 2000),
              ElementsAre("prefill-slow", "prefill-none", "prefill-fast"));
}

TEST(RoutingPolicy, PrefillCountsOnlyTheTokensAWorkerHasNotCached) {
  // By pending tokens: prefill-1 has 100 queued but 960 of the 1000-token prompt cached.
  WorkerSnapshot a = W("prefill-1", 0);
  a.descriptor.load.pending_prefill_tokens = 100;
  std::vector<WorkerSnapshot> ws = {a, W("prefill-2", 0)};
  EXPECT_THAT(RankPrefillWorkers(ws, 1000), ElementsAre("prefill-2", "prefill-1"));
  const std::vector<int64_t> cached = {960, 0};
  EXPECT_THAT(RankPrefillWorkers(ws, 1000, cached), ElementsAre("prefill-1", "prefill-2"));
  // A queue longer by more than the saving still loses: 2000 + 40 > 0 + 1000.
  ws[0].descriptor.load.pending_prefill_tokens = 2000;
  EXPECT_THAT(RankPrefillWorkers(ws, 1000, cached), ElementsAre("prefill-2", "prefill-1"));
  // More cached than the prompt counts as the whole prompt: 900 + 0 < 1000.
  ws[0].descriptor.load.pending_prefill_tokens = 900;
  EXPECT_THAT(RankPrefillWorkers(ws, 1000, std::vector<int64_t>{5000, 0}),
              ElementsAre("prefill-1", "prefill-2"));
}

TEST(RoutingPolicy, PrefillEstimateCountsOnlyTheUncachedPart) {
  // Like GPUs: prefill-1 has 500 queued and 1920 of the 2000-token prompt cached, which costs
  // t(2000) - t(1920) = 80 * 0.3 + (2000^2 - 1920^2) * 1e-5 = 27.136 us behind 150 us of queue;
  // prefill-2 computes all of it: 600 + 40 = 640 us.
  std::vector<WorkerSnapshot> ws = {Prefill("prefill-1", 500, kFastProfile),
                                    Prefill("prefill-2", 0, kFastProfile)};
  EXPECT_THAT(RankPrefillWorkers(ws, 2000), ElementsAre("prefill-2", "prefill-1"));
  const std::vector<int64_t> cached = {1920, 0};
  EXPECT_THAT(RankPrefillWorkers(ws, 2000, cached), ElementsAre("prefill-1", "prefill-2"));
  // 5000 queued (1500 us) outweighs the saving.
  ws[0].descriptor.load.pending_prefill_tokens = 5000;
  EXPECT_THAT(RankPrefillWorkers(ws, 2000, cached), ElementsAre("prefill-2", "prefill-1"));
}

TEST(RoutingPolicy, PrefillWithoutCacheInformationRanksAsBefore) {
  std::vector<WorkerSnapshot> ws = {Prefill("prefill-slow", 1000, kSlowProfile),
                                    Prefill("prefill-fast", 3000, kFastProfile)};
  const std::vector<int64_t> none = {0, 0};
  EXPECT_THAT(RankPrefillWorkers(ws, 2000, none), ElementsAre("prefill-fast", "prefill-slow"));
  EXPECT_THAT(RankPrefillWorkers(ws, 2000, std::vector<int64_t>{0}),
              ElementsAre("prefill-fast", "prefill-slow"));
  ws[1].descriptor.load.pending_prefill_tokens = 20000;
  EXPECT_THAT(RankPrefillWorkers(ws, 2000, none), ElementsAre("prefill-slow", "prefill-fast"));
  // Equal loads and nothing cached: fewer requests in flight, then the id.
  std::vector<WorkerSnapshot> even = {W("prefill-2", 0), W("prefill-1", 0), W("prefill-3", 0, 1)};
  EXPECT_THAT(RankPrefillWorkers(even, 500, std::vector<int64_t>{0, 0, 0}),
              ElementsAre("prefill-1", "prefill-2", "prefill-3"));
}

TEST(RoutingPolicy, LocalPrefillUpToTheDecodeWorkersThreshold) {
  WorkerSnapshot d = W("decode-1", 10);
  d.descriptor.profile.local_prefill_threshold = 32;
  EXPECT_TRUE(ShouldPrefillLocally(1, d));
  EXPECT_TRUE(ShouldPrefillLocally(32, d));
  EXPECT_FALSE(ShouldPrefillLocally(33, d));
  d.descriptor.profile.local_prefill_threshold = 0;  // never
  EXPECT_FALSE(ShouldPrefillLocally(1, d));
}

}  // namespace
}  // namespace mlaserve::router
