// mla_prefill CUDA vs the CPU reference (MlaPrefillCpu on the same bf16-rounded inputs):
// ragged chunks after prefixes, permuted pages, 16 and 128 heads, DeepSeek and fixture widths.
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/testing/cuda_latent.h"

namespace mlaserve::kernels {
namespace {

struct PrefillCase {
  int heads, rank, rope;
  std::vector<int> lq;
  int max_prefix;
};

// Each case with each latent kernel (the wgmma ones where they apply: rank 512 on sm_90; kWgmma
// takes the few-rows kernel for requests of up to 16 rows, kWgmma64 the 64-row one always).
class MlaPrefillCudaTest : public ::testing::TestWithParam<std::tuple<PrefillCase, LatentKernel>> {};

TEST_P(MlaPrefillCudaTest, MatchesCpuReference) {
  const PrefillCase& pc = std::get<0>(GetParam());
  const LatentKernel kernel = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> prefix(pc.lq.size());
  for (auto& x : prefix) x = static_cast<int>(rng() % (pc.max_prefix + 1));
  auto c = testing::MakeLatentBatch(pc.lq, prefix, pc.heads, pc.rank, pc.rope, seed);
  testing::PoisonSlotsPastLength(c);
  testing::RoundLatentBatch(c);
  std::vector<float> want, want_lse;
  MlaParams hp = testing::HostLatentParams(c, want, want_lse);
  ASSERT_TRUE(MlaPrefill(hp, KernelContext{}).ok());
  testing::DeviceLatent d(c);
  if ((kernel == LatentKernel::kWgmma || kernel == LatentKernel::kWgmma64) && !LatentWgmmaApplies(d.params)) {
    GTEST_SKIP() << "the wgmma latent kernels do not apply (rank " << pc.rank << ", rope "
                 << pc.rope << ", or no sm_90a kernel for this device)";
  }
  d.params.kernel = kernel;
  const auto st = MlaPrefill(d.params, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  testing::ExpectLatentMatches(c, d, want, want_lse);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MlaPrefillCudaTest,
    ::testing::Combine(::testing::Values(PrefillCase{16, 512, 64, {1, 37, 200}, 700},
                      PrefillCase{16, 512, 64, {130}, 0},
                      PrefillCase{128, 512, 64, {1, 40}, 500},
                      PrefillCase{16, 512, 64, {1000}, 2000},
                      PrefillCase{4, 64, 16, {5, 77, 300}, 100},
                      PrefillCase{2, 32, 16, {9, 64}, 64},
                      PrefillCase{6, 40, 8, {1, 37, 260}, 100},  // deepseek_v2_odd as stored
                      PrefillCase{1, 512, 64, {3, 1, 2}, 9000},
                      // few rows (the few-rows kernel where kWgmma picks it): causal across the
                      // request's tokens within one CTA's 16 rows
                      PrefillCase{4, 512, 64, {4, 1, 3}, 1500}, PrefillCase{8, 512, 64, {2, 1}, 3000},
                      PrefillCase{2, 512, 64, {3, 6}, 200}),
                       ::testing::Values(LatentKernel::kMmaSync, LatentKernel::kWgmma, LatentKernel::kWgmma64)));

}  // namespace
}  // namespace mlaserve::kernels
