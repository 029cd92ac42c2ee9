// Cost model and the fallback profile built from it.
#include "profiles/cost_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiles/attention_path_policy.h"
#include "profiles/device_facts.h"

namespace mlaserve::profiles {
namespace {

const DeviceFacts kH100{"NVIDIA H100 80GB HBM3", "9.0", 132, 232448, 3000.0, 790.0};
const AttentionShape kV3{128, 128, 64, 128, 512, "bf16"};

TEST(CostModel, PrefixFavoursMlaAndLongExtendFavoursMha) {
  const SequenceShape fresh{0, 4096};
  const PathCost a = EstimatePathCost(kH100, kV3, std::span(&fresh, 1));
  EXPECT_LT(a.mha_us, a.mla_us);
  // A short extend over a long cached prefix: decompressing the prefix dominates MHA.
  const SequenceShape cached{16384, 64};
  const PathCost b = EstimatePathCost(kH100, kV3, std::span(&cached, 1));
  EXPECT_GT(b.mha_us, b.mla_us);
  EXPECT_GT(a.mha_us, 0.0);
}

TEST(CostModel, FallbackProfileIsValidAndUsesTheDevice) {
  auto p = BuildCostModelProfile(kH100, kV3, 16);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(ValidateProfile(*p).ok());
  EXPECT_EQ(p->origin, "cost-model");
  EXPECT_EQ(p->sparse.decode_max_rows, 11622);
  EXPECT_EQ(p->sparse.sparse_fwd_min_rows, 11623);
  EXPECT_FALSE(p->sparse.measured);
  EXPECT_EQ(p->chunk_size, 8192);
  EXPECT_EQ(p->mha_mla.cells.size(), 8u * 6u * 6u);
  EXPECT_GT(p->local_prefill_threshold, 0);
  EXPECT_GT(p->prefill_estimate.Micros(4096), p->prefill_estimate.Micros(1024) * 4);

  auto policy = AttentionPathPolicy::Create(*p, "cost-model", {});
  ASSERT_TRUE(policy.ok());
  const SequenceShape fresh{0, 4096};
  EXPECT_EQ((*policy)->Choose(std::span(&fresh, 1)).path, PrefillPath::kMha);
  const SequenceShape cached{8192, 32};  // decompressing 8k rows for 32 queries
  EXPECT_EQ((*policy)->Choose(std::span(&cached, 1)).path, PrefillPath::kMla);
}

TEST(CostModel, RefusesFactsWithoutRates) {
  DeviceFacts d = kH100;
  d.matrix_tflops = 0;
  EXPECT_THAT(std::string(BuildCostModelProfile(d, kV3).status().message()),
              ::testing::HasSubstr("device.matrix_tflops"));
  d = kH100;
  d.copy_gbs = 0;
  EXPECT_THAT(std::string(BuildCostModelProfile(d, kV3).status().message()),
              ::testing::HasSubstr("device.copy_gbs"));
}

TEST(CostModel, LocalPrefillThresholdIsLargestFittingLength) {
  EXPECT_EQ(ChooseLocalPrefillThreshold([](int l) { return l * 1.0; }, 300.0), 256);
  EXPECT_EQ(ChooseLocalPrefillThreshold([](int l) { return l * 1.0; }, 10.0), 0);
  EXPECT_EQ(ChooseLocalPrefillThreshold([](int) { return 0.0; }, 1.0), 8192);
}

TEST(DeviceFacts, NominalRatesFromAttributes) {
  // H100 SXM: 132 SMs at 1.98 GHz, HBM3 at 2.619 GHz on a 5120-bit bus.
  const DeviceFacts d = NominalDeviceFacts("NVIDIA H100 80GB HBM3", 9, 0, 132, 232448, 1980000,
                                           2619000, 5120);
  EXPECT_EQ(d.compute_capability, "9.0");
  EXPECT_NEAR(d.copy_gbs, 0.9 * 3352.3, 1.0);
  EXPECT_NEAR(d.matrix_tflops, 0.8 * 132 * 1.98e9 * 4096 / 1e12, 1.0);
  EXPECT_EQ(NominalMatrixFlopsPerSmClock(80), 2048);
  EXPECT_EQ(NominalMatrixFlopsPerSmClock(100), 8192);
  EXPECT_EQ(NominalMatrixFlopsPerSmClock(89), 1024);
}

}  // namespace
}  // namespace mlaserve::profiles
