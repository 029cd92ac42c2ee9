#include "kernels/common/l2_prefetch.h"

#include <array>
#include <cstdint>

#include "gtest/gtest.h"

namespace mlaserve::kernels {
namespace {

const void* At(uintptr_t address) { return reinterpret_cast<const void*>(address); }

TEST(L2PrefetchTest, FitKeepsTheOrderAndCutsTheRegionThatCrossesTheBudget) {
  const std::array<L2PrefetchRegion, 4> wanted = {{
      {At(0x1000), 600},
      {At(0x9000), 300},
      {At(0x20000), 500},  // crosses the budget of 1000: its first 100 bytes
      {At(0x40000), 50},   // past the budget: left out
  }};
  const L2PrefetchHint hint = FitL2Prefetch(wanted.data(), wanted.size(), 1000);
  ASSERT_EQ(hint.count, 3);
  EXPECT_EQ(hint.regions[0].data, At(0x1000));
  EXPECT_EQ(hint.regions[0].bytes, 600u);
  EXPECT_EQ(hint.regions[1].data, At(0x9000));
  EXPECT_EQ(hint.regions[1].bytes, 300u);
  EXPECT_EQ(hint.regions[2].data, At(0x20000));
  EXPECT_EQ(hint.regions[2].bytes, 100u);
  EXPECT_EQ(hint.total_bytes(), 1000u);
}

TEST(L2PrefetchTest, FitSkipsEmptyRegionsAndStopsAtTheRegionLimit) {
  std::array<L2PrefetchRegion, L2PrefetchHint::kMaxRegions + 3> wanted{};
  wanted[0] = {nullptr, 4096};  // no weight (a layer without shared experts, say)
  wanted[1] = {At(0x1000), 0};
  for (size_t i = 2; i < wanted.size(); ++i) wanted[i] = {At(0x100000 * i), 16};
  const L2PrefetchHint hint = FitL2Prefetch(wanted.data(), wanted.size(), size_t{1} << 30);
  ASSERT_EQ(hint.count, L2PrefetchHint::kMaxRegions);
  EXPECT_EQ(hint.regions[0].data, At(0x200000));
  EXPECT_EQ(hint.total_bytes(), 16u * L2PrefetchHint::kMaxRegions);
}

TEST(L2PrefetchTest, NoBudgetOrNothingWantedIsAnEmptyHint) {
  const std::array<L2PrefetchRegion, 1> one = {{{At(0x1000), 64}}};
  EXPECT_TRUE(FitL2Prefetch(one.data(), one.size(), 0).empty());
  EXPECT_TRUE(FitL2Prefetch(nullptr, 0, 1 << 20).empty());
  EXPECT_EQ(L2PrefetchBlocks(FitL2Prefetch(one.data(), one.size(), 0), 66), 0);
}

TEST(L2PrefetchTest, BlocksScaleWithTheBytesWithinTheLimit) {
  const std::array<L2PrefetchRegion, 2> wanted = {{{At(0x1000), 64}, {At(0x2000), 64}}};
  // A few bytes: one block.
  EXPECT_EQ(L2PrefetchBlocks(FitL2Prefetch(wanted.data(), wanted.size(), 1 << 30), 66), 1);
  const std::array<L2PrefetchRegion, 1> big = {{{At(0x1000), 23u << 20}}};  // 23 MiB
  EXPECT_EQ(L2PrefetchBlocks(FitL2Prefetch(big.data(), big.size(), 1u << 30), 66), 23);
  EXPECT_EQ(L2PrefetchBlocks(FitL2Prefetch(big.data(), big.size(), 1u << 30), 8), 8);
  EXPECT_EQ(L2PrefetchBlocks(FitL2Prefetch(big.data(), big.size(), 1u << 30), 0), 0);
}

}  // namespace
}  // namespace mlaserve::kernels
