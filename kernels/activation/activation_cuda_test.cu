// SiLU-and-mul CUDA vs the CPU reference (bf16 in and out: relative error within 1e-2; f32
// tight), with padded row strides.
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activation/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

class SiluAndMulCudaTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SiluAndMulCudaTest, MatchesCpu) {
  const auto [rows, dim] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int64_t xs = 2 * dim + 8, os = dim + 4;
  auto x = testing::RandomVector(rows * xs, seed, -4.0f, 4.0f);
  testing::RoundToBf16(x);
  std::vector<float> want(rows * os, 0.0f);
  SiluAndMulParams p;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = xs; p.out = want.data(); p.out_stride = os;
  ASSERT_TRUE(SiluAndMul(p, KernelContext{}).ok());
  for (const bool bf16 : {true, false}) {
    auto d_x = bf16 ? testing::ToDeviceBf16(x) : testing::ToDevice(x);
    auto d_o = bf16 ? testing::PoisonedBf16(want.size()) : testing::PoisonedF32(want.size());
    SiluAndMulParams g = p;
    g.dtype = bf16 ? DType::kBF16 : DType::kF32; g.x = d_x.get(); g.out = d_o.get();
    ASSERT_TRUE(SiluAndMul(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    auto got = bf16 ? testing::ToHostBf16(d_o, want.size()) : testing::ToHost<float>(d_o, want.size());
    std::vector<float> g_rows, w_rows;
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < dim; ++j) { g_rows.push_back(got[r * os + j]); w_rows.push_back(want[r * os + j]); }
    EXPECT_LE(testing::RelativeError(g_rows, w_rows), bf16 ? 1e-2 : 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SiluAndMulCudaTest,
                         ::testing::Values(std::tuple{1, 8}, std::tuple{33, 1408},
                                           std::tuple{257, 18432}, std::tuple{5, 13}));

}  // namespace
}  // namespace mlaserve::kernels
