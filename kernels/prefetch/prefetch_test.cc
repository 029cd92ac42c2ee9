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

}  // namespace
}  // namespace mlaserve::kernels
