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

TEST(RoutingPolicy, PagesForTokensRoundsUp) {
  EXPECT_EQ(PagesForTokens(1), 1);
  EXPECT_EQ(PagesForTokens(64), 1);
  EXPECT_EQ(PagesForTokens(65), 2);
  EXPECT_EQ(PagesForTokens(0), 0);
}

TEST(RoutingPolicy, DecodePrefersMostFreePagesAndSkipsFullOnes) {
  std::vector<WorkerSnapshot> ws = {W("decode-1", 10), W("decode-2", 40), W("decode-3", 3),
                                    W("decode-4", 40, 2)};
  EXPECT_THAT(RankDecodeWorkers(ws, 4), ElementsAre("decode-2", "decode-4", "decode-1"));
  EXPECT_TRUE(RankDecodeWorkers(ws, 41).empty());
}

TEST(RoutingPolicy, DecodeSkipsWorkersAtTheirRequestLimit) {
  WorkerSnapshot busy = W("decode-1", 100);
  busy.descriptor.load.max_running_requests = 2;
  busy.descriptor.load.running_requests = 2;
  WorkerSnapshot by_router = W("decode-2", 100, 4);
  by_router.descriptor.load.max_running_requests = 4;
  std::vector<WorkerSnapshot> ws = {busy, by_router, W("decode-3", 1)};
  EXPECT_THAT(RankDecodeWorkers(ws, 1), ElementsAre("decode-3"));
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
