// RmsNorm (plain and fused with the residual add) and LayerNorm, CUDA vs the CPU reference:
// bf16 within 1e-2, f32 within 1e-5; strided rows; y aliasing x. RmsNorm widths reach both
// kernels: the vectorized one (multiples of 16 bytes up to 4 vectors a thread: 64 .. 7168) and
// the generic one (100 and 2050 in bf16, 2050 in f32, 40000); and zero-padded rows normalised
// over a real width below dim.
#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/norm/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

std::vector<float> Rows(const std::vector<float>& v, int rows, int dim, int64_t stride) {
  std::vector<float> out;
  for (int r = 0; r < rows; ++r) out.insert(out.end(), v.begin() + r * stride, v.begin() + r * stride + dim);
  return out;
}

// (rows, dim, residual, in_place, bf16)
class RmsNormCudaTest : public ::testing::TestWithParam<std::tuple<int, int, bool, bool, bool>> {};

TEST_P(RmsNormCudaTest, MatchesCpu) {
  const auto [rows, dim, with_res, in_place, bf16] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int64_t stride = dim + 8;
  auto x = testing::RandomVector(rows * stride, seed, -2.0f, 2.0f);
  auto res = testing::RandomVector(static_cast<size_t>(rows) * dim, seed + 1, -2.0f, 2.0f);
  auto w = testing::RandomVector(dim, seed + 2, 0.5f, 1.5f);
  testing::RoundToBf16(x); testing::RoundToBf16(res); testing::RoundToBf16(w);
  std::vector<float> want_y = x, want_res = res;
  RmsNormParams p;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = stride; p.weight = w.data();
  p.residual = with_res ? want_res.data() : nullptr; p.y = want_y.data(); p.y_stride = stride;
  p.eps = 1e-6f;
  ASSERT_TRUE(RmsNorm(p, KernelContext{}).ok());
  const bool half = bf16;  // (lambdas capture a copy, not the structured binding)
  auto up = [half](const std::vector<float>& v) { return half ? testing::ToDeviceBf16(v) : testing::ToDevice(v); };
  auto down = [half](const testing::DeviceBuffer& b, size_t n) {
    return half ? testing::ToHostBf16(b, n) : testing::ToHost<float>(b, n);
  };
  auto d_x = up(x), d_res = up(res), d_w = up(w);
  auto d_y = bf16 ? testing::PoisonedBf16(x.size()) : testing::PoisonedF32(x.size());
  RmsNormParams g = p;
  g.dtype = bf16 ? DType::kBF16 : DType::kF32;
  g.x = d_x.get(); g.weight = d_w.get(); g.residual = with_res ? d_res.get() : nullptr;
  g.y = in_place ? d_x.get() : d_y.get();
  ASSERT_TRUE(RmsNorm(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const double tol = bf16 ? 1e-2 : 1e-5;
  auto got_y = down(in_place ? d_x : d_y, x.size());
  EXPECT_LE(testing::RelativeError(Rows(got_y, rows, dim, stride), Rows(want_y, rows, dim, stride)), tol);
  if (with_res) EXPECT_LE(testing::RelativeError(down(d_res, res.size()), want_res), tol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCudaTest,
                         ::testing::Combine(::testing::Values(1, 16, 77),
                                            ::testing::Values(64, 100, 512, 1536, 2050, 7168, 40000),
                                            ::testing::Bool(), ::testing::Bool(), ::testing::Bool()));

// Rows zero-padded past their real width (the hidden state, model/model_widths.h), real_dim
// below dim: the CUDA kernels divide by real_dim as the CPU reference does, and the padding of y
// and of the residual stays exactly zero. The padded widths are multiples of 8, so bf16 rows take
// the vectorized kernel (up to 7168) and the generic one (40000).
// (rows, (real_dim, dim), residual, bf16)
class RmsNormCudaRealDimTest
    : public ::testing::TestWithParam<std::tuple<int, std::pair<int, int>, bool, bool>> {};

TEST_P(RmsNormCudaRealDimTest, DividesByTheRealWidth) {
  const auto [rows, widths, with_res, bf16] = GetParam();
  // Plain copies: the lambdas below capture them (not structured bindings).
  const int real = widths.first, dim = widths.second;
  const bool half = bf16;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  // Random values in [0, real) of each row, zeros in [real, dim).
  auto padded = [&](int n, uint64_t s, float lo, float hi) {
    std::vector<float> v = testing::RandomVector(static_cast<size_t>(n) * dim, s, lo, hi);
    for (int r = 0; r < n; ++r) {
      std::fill(v.begin() + r * dim + real, v.begin() + (r + 1) * dim, 0.0f);
    }
    testing::RoundToBf16(v);
    return v;
  };
  const std::vector<float> x = padded(rows, seed, -2.0f, 2.0f), w = padded(1, seed + 2, 0.5f, 1.5f);
  const std::vector<float> res = padded(rows, seed + 1, -2.0f, 2.0f);
  std::vector<float> want_y(x.size()), want_res = res;
  RmsNormParams p;
  p.rows = rows; p.dim = dim; p.real_dim = real;
  p.x = x.data(); p.x_stride = dim; p.weight = w.data();
  p.residual = with_res ? want_res.data() : nullptr; p.y = want_y.data(); p.y_stride = dim;
  p.eps = 1e-6f;
  ASSERT_TRUE(RmsNorm(p, KernelContext{}).ok());
  auto d_x = bf16 ? testing::ToDeviceBf16(x) : testing::ToDevice(x);
  auto d_w = bf16 ? testing::ToDeviceBf16(w) : testing::ToDevice(w);
  auto d_res = bf16 ? testing::ToDeviceBf16(res) : testing::ToDevice(res);
  auto d_y = bf16 ? testing::PoisonedBf16(x.size()) : testing::PoisonedF32(x.size());
  RmsNormParams g = p;
  g.dtype = bf16 ? DType::kBF16 : DType::kF32;
  g.x = d_x.get(); g.weight = d_w.get(); g.y = d_y.get();
  g.residual = with_res ? d_res.get() : nullptr;
  ASSERT_TRUE(RmsNorm(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  auto down = [&](const testing::DeviceBuffer& b) {
    return half ? testing::ToHostBf16(b, x.size()) : testing::ToHost<float>(b, x.size());
  };
  const std::vector<float> got_y = down(d_y), got_res = down(d_res);
  const double tol = bf16 ? 1e-2 : 1e-5;
  EXPECT_LE(testing::RelativeError(got_y, want_y), tol);
  if (with_res) EXPECT_LE(testing::RelativeError(got_res, want_res), tol);
  for (int r = 0; r < rows; ++r) {
    for (int j = real; j < dim; ++j) {
      ASSERT_EQ(got_y[r * dim + j], 0.0f) << "y row " << r << " col " << j;
      if (with_res) ASSERT_EQ(got_res[r * dim + j], 0.0f) << "residual row " << r << " col " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCudaRealDimTest,
                         ::testing::Combine(::testing::Values(1, 16, 77),
                                            ::testing::Values(std::pair{28, 32}, std::pair{100, 104},
                                                              std::pair{2044, 2048},
                                                              std::pair{7161, 7168},
                                                              std::pair{39999, 40000}),
                                            ::testing::Bool(), ::testing::Bool()));

class LayerNormCudaTest : public ::testing::TestWithParam<std::tuple<int, int, bool, bool>> {};

TEST_P(LayerNormCudaTest, MatchesCpu) {
  const auto [rows, dim, with_bias, bf16] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto x = testing::RandomVector(static_cast<size_t>(rows) * dim, seed, 1.0f, 3.0f);  // mean far from 0
  auto w = testing::RandomVector(dim, seed + 1, 0.5f, 1.5f);
  auto b = testing::RandomVector(dim, seed + 2);
  testing::RoundToBf16(x); testing::RoundToBf16(w); testing::RoundToBf16(b);
  std::vector<float> want(x.size());
  LayerNormParams p;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = dim; p.weight = w.data();
  p.bias = with_bias ? b.data() : nullptr; p.y = want.data(); p.y_stride = dim;
  ASSERT_TRUE(LayerNorm(p, KernelContext{}).ok());
  auto d_x = bf16 ? testing::ToDeviceBf16(x) : testing::ToDevice(x);
  auto d_w = bf16 ? testing::ToDeviceBf16(w) : testing::ToDevice(w);
  auto d_b = bf16 ? testing::ToDeviceBf16(b) : testing::ToDevice(b);
  auto d_y = bf16 ? testing::PoisonedBf16(x.size()) : testing::PoisonedF32(x.size());
  LayerNormParams g = p;
  g.dtype = bf16 ? DType::kBF16 : DType::kF32;
  g.x = d_x.get(); g.weight = d_w.get(); g.bias = with_bias ? d_b.get() : nullptr; g.y = d_y.get();
  ASSERT_TRUE(LayerNorm(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  auto got = bf16 ? testing::ToHostBf16(d_y, x.size()) : testing::ToHost<float>(d_y, x.size());
  EXPECT_LE(testing::RelativeError(got, want), bf16 ? 1e-2 : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormCudaTest,
                         ::testing::Combine(::testing::Values(1, 50), ::testing::Values(128, 1000),
                                            ::testing::Bool(), ::testing::Bool()));

}  // namespace
}  // namespace mlaserve::kernels
