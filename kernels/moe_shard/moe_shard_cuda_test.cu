// moe_shard CUDA vs the CPU reference: an index remap, so results must match exactly.
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe_shard/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

TEST(MoeLocalizeCuda, MatchesCpuExactly) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  constexpr int kExperts = 256;
  const int64_t n = 4099 * 8;
  std::vector<int32_t> ids(n);
  std::vector<float> w(n);
  for (int64_t a = 0; a < n; ++a) {
    ids[a] = std::uniform_int_distribution<int>(0, kExperts - 1)(rng);
    w[a] = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  }
  for (const int begin : {0, 96, 224}) {
    MoeLocalizeParams p;
    p.num_assignments = n;
    p.num_experts = kExperts;
    p.expert_begin = begin;
    p.local_experts = 32;
    std::vector<int32_t> want_ids(n);
    std::vector<float> want_w(n);
    p.topk_ids = ids.data(); p.topk_weights = w.data();
    p.local_ids = want_ids.data(); p.local_weights = want_w.data();
    ASSERT_TRUE(MoeLocalize(p, KernelContext{}).ok());
    auto d_ids = testing::ToDevice(ids);
    auto d_w = testing::ToDevice(w);
    auto d_lids = testing::ToDevice(std::vector<int32_t>(n, -1));
    auto d_lw = testing::PoisonedF32(n);
    MoeLocalizeParams g = p;
    g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
    g.local_ids = d_lids.as<int32_t>(); g.local_weights = d_lw.as<float>();
    ASSERT_TRUE(MoeLocalize(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(testing::ToHost<int32_t>(d_lids, n), want_ids);
    EXPECT_EQ(testing::ToHost<float>(d_lw, n), want_w);
  }
}

}  // namespace
}  // namespace mlaserve::kernels
