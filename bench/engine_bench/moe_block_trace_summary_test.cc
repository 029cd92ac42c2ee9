#include "bench/engine_bench/moe_block_trace_summary.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::bench {
namespace {

using kernels::moe_trace::BlockRecord;
using kernels::moe_trace::LaunchRecord;

constexpr uint64_t kUs = 1000;

// A layer at `t0` (ns): a router of 2 CTAs on SMs 0 and 1 ending at +6 us; gate_up with one
// shared slot (2 blocks, SMs 2-3, +1 .. +9 us) and one routed slot (3 blocks: SMs 0, 4, 5; the
// one on SM 0 starting after the router ended and ending last, at +20 us); down of 2 blocks.
std::vector<LaunchRecord> Layer(uint64_t t0) {
  LaunchRecord router{"router", 2, 1, 0, {}};
  router.blocks = {{0, 0, 0, t0, t0 + 1 * kUs, t0 + 3 * kUs}, {1, 1, 0, t0 + kUs / 2, t0 + 1 * kUs, t0 + 6 * kUs}};
  LaunchRecord gate_up{"gate_up", 3, 2, 1, {}};
  gate_up.blocks = {{2, 0, 0, t0 + 1 * kUs, t0 + 9 * kUs, t0 + 9 * kUs},
                    {3, 1, 0, t0 + 1 * kUs, t0 + 8 * kUs, t0 + 8 * kUs},
                    {0, 0, 1, t0 + 7 * kUs, t0 + 7 * kUs, t0 + 20 * kUs},
                    {4, 1, 1, t0 + 2 * kUs, t0 + 6 * kUs, t0 + 15 * kUs},
                    {5, 2, 1, t0 + 2 * kUs, t0 + 7 * kUs, t0 + 16 * kUs}};
  LaunchRecord down{"down", 2, 1, 0, {}};
  down.blocks = {{6, 0, 0, t0 + 12 * kUs, t0 + 20 * kUs, t0 + 30 * kUs},
                 {7, 1, 0, t0 + 13 * kUs, t0 + 21 * kUs, t0 + 31 * kUs}};
  return {router, gate_up, down};
}

TEST(MoeBlockTraceSummaryTest, SummarizesTheLastStepsLayers) {
  std::vector<LaunchRecord> launches = Layer(1'000'000);            // an earlier step: left out
  for (const LaunchRecord& l : Layer(900'000'000)) launches.push_back(l);
  for (const LaunchRecord& l : Layer(900'100'000)) launches.push_back(l);
  launches.push_back({"router", 4, 1, 0, {}});                       // never ran: no blocks
  const std::string s = SummarizeMoeBlockTrace(launches, 10'000'000);
  EXPECT_NE(s.find("2 layers of the last step"), std::string::npos) << s;
  // Layer 0: router 2 CTAs on 2 SMs ending at 6.0; gate_up 5 blocks on 5 SMs, at most 1 an SM;
  // shared 1.0 .. 9.0; routed first start 2.0, waits 6.0 / 7.0 / 7.0, last end 20.0; one block
  // started after the router's end, one ran on a router SM; down from 12.0, waits 20.0 / 21.0
  // (the median of two rounds up), last end 31.0.
  EXPECT_NE(s.find("| 0 | 2 / 2 | 6.0 | 5 / 5 / 1 | 1.0 .. 9.0 | 2.0; 6.0 / 7.0 / 7.0; 20.0 | 1 | 1 | "
                   "2: 12.0; 20.0 / 21.0; 31.0 |"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("| 1 | 2 / 2 | 6.0 |"), std::string::npos) << s;
  // The middle layer (1): its latest-ending gate_up block first, on router SM 0.
  EXPECT_NE(s.find("layer 1: gate_up's latest-ending blocks"), std::string::npos) << s;
  const size_t first = s.find("| 0 | 1 | 0 | 7.0 | 7.0 | 20.0 | yes |");
  const size_t second = s.find("| 5 | 1 | 2 | 2.0 | 7.0 | 16.0 | no |");
  EXPECT_NE(first, std::string::npos) << s;
  EXPECT_NE(second, std::string::npos) << s;
  EXPECT_LT(first, second) << s;
}

TEST(MoeBlockTraceSummaryTest, SaysSoWithoutARouterLaunch) {
  std::vector<LaunchRecord> launches = {{"gate_up", 1, 1, 0, {{0, 0, 0, 10, 20, 30}}}};
  EXPECT_EQ(SummarizeMoeBlockTrace(launches, 1000), "moe block trace: no router launch in the last step's records\n");
  EXPECT_EQ(SummarizeMoeBlockTrace({}, 1000), "moe block trace: no router launch in the last step's records\n");
}

}  // namespace
}  // namespace mlaserve::bench
