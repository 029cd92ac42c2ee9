// WeightPrefetch off the GPU: its switch and a CPU engine's no-op calls (the CUDA engine's steps
// with it on are model_engine_cuda_test's, whose values it must not change).
#include "model/step/weight_prefetch.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace mlaserve::model {
namespace {

TEST(WeightPrefetch, ModeFromTheEnvironment) {
  const char* kVar = "MLASERVE_L2_PREFETCH";
  unsetenv(kVar);
  EXPECT_EQ(WeightPrefetch::ModeFromEnv(), 1);  // o_proj, the measured default
  for (const auto& [value, mode] : {std::pair{"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}, {"4", 4}}) {
    setenv(kVar, value, 1);
    EXPECT_EQ(WeightPrefetch::ModeFromEnv(), mode) << value;
  }
  for (const char* bad : {"", "5", "12", "x", "-1"}) {
    setenv(kVar, bad, 1);
    EXPECT_EQ(WeightPrefetch::ModeFromEnv(), 1) << "'" << bad << "'";
  }
  unsetenv(kVar);
}

TEST(WeightPrefetch, NothingToDoOnTheCpu) {
  absl::StatusOr<WeightPrefetch> w = WeightPrefetch::Create(kernels::KernelContext{}, 3, 4);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(w->active());
  alignas(16) static uint8_t buf[64];
  kernels::L2PrefetchParams p;
  p.ranges[0] = {buf, sizeof(buf)};
  p.num_ranges = 1;
  w->SetLayer(0, p);
  EXPECT_TRUE(w->AfterProjections(0, 1).ok());
  EXPECT_TRUE(w->AfterProjections(7, 1).ok());  // a layer it was never told of
  EXPECT_TRUE(w->EndStep().ok());
  w->BeginStep();
  EXPECT_TRUE(w->EndStep().ok());
}

}  // namespace
}  // namespace mlaserve::model
