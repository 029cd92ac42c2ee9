// L2Prefetch's checks (every backend) and the CPU's no-op.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/prefetch/api.h"

namespace mlaserve::kernels {
namespace {

TEST(L2Prefetch, CpuDoesNothingAndTouchesNothing) {
  alignas(16) static uint8_t buf[4096];
  for (size_t i = 0; i < sizeof(buf); ++i) buf[i] = static_cast<uint8_t>(i * 7);
  L2PrefetchParams p;
  p.ranges[0] = {buf, sizeof(buf)};
  p.ranges[1] = {nullptr, 0};  // unused
  p.num_ranges = 2;
  p.evict_last = true;
  EXPECT_TRUE(L2Prefetch(p, KernelContext{}).ok());
  for (size_t i = 0; i < sizeof(buf); ++i) ASSERT_EQ(buf[i], static_cast<uint8_t>(i * 7));
  EXPECT_FALSE(L2PrefetchLaunches(KernelContext{}));
}

TEST(L2Prefetch, NamesBadRanges) {
  alignas(16) static uint8_t buf[64];
  L2PrefetchParams p;
  p.num_ranges = kL2PrefetchMaxRanges + 1;
  absl::Status s = L2Prefetch(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_ranges=9"), std::string::npos) << s;

  p.num_ranges = 1;
  p.ranges[0] = {nullptr, 32};
  s = L2Prefetch(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("range 0 is null"), std::string::npos) << s;

  p.ranges[0] = {buf + 8, 32};
  s = L2Prefetch(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("16-byte aligned"), std::string::npos) << s;

  p.ranges[0] = {buf, 24};
  s = L2Prefetch(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("24 bytes"), std::string::npos) << s;

  p.ranges[0] = {buf, 64};
  p.ctas = -1;
  s = L2Prefetch(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ctas=-1"), std::string::npos) << s;
}

// The ranges kept in order while they fit the budget; one too large is dropped, a later smaller
// one still kept, empty ones dropped; none fitting leaves none. The CPU has no cache to fit.
TEST(L2Prefetch, FitsTheRangesToTheCache) {
  alignas(16) static uint8_t buf[256];
  L2PrefetchParams p;
  p.num_ranges = 4;
  p.ranges[0] = {buf, 64};
  p.ranges[1] = {buf + 64, 128};  // 64 + 128 > 160: left out
  p.ranges[2] = {buf + 192, 0};   // empty
  p.ranges[3] = {buf + 208, 48};
  EXPECT_EQ(FitL2PrefetchRanges(&p, 160), 112u);
  ASSERT_EQ(p.num_ranges, 2);
  EXPECT_EQ(p.ranges[0].data, buf);
  EXPECT_EQ(p.ranges[0].bytes, 64u);
  EXPECT_EQ(p.ranges[1].data, buf + 208);
  EXPECT_EQ(p.ranges[1].bytes, 48u);
  EXPECT_EQ(p.ranges[2].bytes, 0u);
  EXPECT_TRUE(L2Prefetch(p, KernelContext{}).ok());
  EXPECT_EQ(FitL2PrefetchRanges(&p, 32), 0u);  // neither fits
  EXPECT_EQ(p.num_ranges, 0);
  EXPECT_EQ(L2PrefetchCacheBytes(KernelContext{}), 0u);
}

}  // namespace
}  // namespace mlaserve::kernels
