#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/norm/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::FreshSeed;
using testing::RandomVector;
using testing::RelativeError;

// (rows, dim, fused_residual, y_aliases_x)
class RmsNormTest : public ::testing::TestWithParam<std::tuple<int, int, bool, bool>> {};

TEST_P(RmsNormTest, MatchesNaiveDouble) {
  const auto [rows, dim, fused, alias] = GetParam();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int64_t stride = dim + 3;
  const float eps = 1e-6f;
  auto x = RandomVector(rows * stride, seed, -3.0f, 3.0f);
  auto residual = RandomVector(static_cast<size_t>(rows) * dim, seed + 1);
  auto weight = RandomVector(dim, seed + 2, 0.5f, 1.5f);
  std::vector<float> want_y(static_cast<size_t>(rows) * dim), want_res = residual;
  for (int r = 0; r < rows; ++r) {
    std::vector<double> v(dim);
    for (int j = 0; j < dim; ++j) {
      v[j] = x[r * stride + j];
      if (fused) {
        v[j] += residual[r * dim + j];
        want_res[r * dim + j] = static_cast<float>(v[j]);
      }
    }
    double ss = 0;
    for (double e : v) ss += e * e;
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int j = 0; j < dim; ++j) want_y[r * dim + j] = static_cast<float>(weight[j] * v[j] * inv);
  }
  std::vector<float> y(rows * stride);
  testing::Poison(y);
  RmsNormParams p;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = stride;
  p.residual = fused ? residual.data() : nullptr;
  p.weight = weight.data();
  p.y = alias ? x.data() : y.data();
  p.y_stride = stride; p.eps = eps;
  ASSERT_TRUE(RmsNorm(p, KernelContext{}).ok());
  const std::vector<float>& ybuf = alias ? x : y;
  std::vector<float> got(static_cast<size_t>(rows) * dim);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < dim; ++j) got[r * dim + j] = ybuf[r * stride + j];
  EXPECT_LT(RelativeError(got, want_y), 1e-6);
  if (fused) EXPECT_LT(RelativeError(residual, want_res), 1e-7);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Combine(::testing::Values(1, 5, 64),
                                            ::testing::Values(1, 7, 512), ::testing::Bool(),
                                            ::testing::Bool()));

// A row zero-padded past its real width (the hidden state of model/model_widths.h) with
// real_dim set normalises as the unpadded row does, bit for bit (the padding adds 0.0 to the
// sum of squares), and y and the residual stay zero in the padding (zero weights there).
// (rows, (real_dim, padded dim), fused_residual)
class RmsNormRealDimTest
    : public ::testing::TestWithParam<std::tuple<int, std::pair<int, int>, bool>> {};

TEST_P(RmsNormRealDimTest, EqualsTheUnpaddedRow) {
  const auto [rows, widths, fused] = GetParam();
  const auto [real, padded] = widths;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const float eps = 1e-6f;
  const auto x = RandomVector(static_cast<size_t>(rows) * real, seed, -3.0f, 3.0f);
  const auto residual = RandomVector(static_cast<size_t>(rows) * real, seed + 1);
  const auto weight = RandomVector(real, seed + 2, 0.5f, 1.5f);
  // The same values at the start of padded rows, zeros after.
  const auto pad = [&](const std::vector<float>& v, int n) {
    std::vector<float> out(static_cast<size_t>(n) * padded, 0.0f);
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < real; ++j) out[r * padded + j] = v[r * real + j];
    return out;
  };
  const std::vector<float> x_p = pad(x, rows), weight_p = pad(weight, 1);
  std::vector<float> res = residual, res_p = pad(residual, rows);
  std::vector<float> y(x.size()), y_p(x_p.size());
  testing::Poison(y);
  testing::Poison(y_p);
  RmsNormParams p;
  p.rows = rows; p.dim = real; p.x = x.data(); p.x_stride = real;
  p.residual = fused ? res.data() : nullptr; p.weight = weight.data();
  p.y = y.data(); p.y_stride = real; p.eps = eps;
  ASSERT_TRUE(RmsNorm(p, KernelContext{}).ok());
  RmsNormParams q = p;
  q.dim = padded; q.real_dim = real; q.x = x_p.data(); q.x_stride = padded;
  q.residual = fused ? res_p.data() : nullptr; q.weight = weight_p.data();
  q.y = y_p.data(); q.y_stride = padded;
  ASSERT_TRUE(RmsNorm(q, KernelContext{}).ok());
  EXPECT_EQ(y_p, pad(y, rows));
  if (fused) EXPECT_EQ(res_p, pad(res, rows));
  // And against the formula over the real width (HF's mean over hidden_size).
  const float* src = fused ? res.data() : x.data();
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int j = 0; j < real; ++j) ss += static_cast<double>(src[r * real + j]) * src[r * real + j];
    const double inv = 1.0 / std::sqrt(ss / real + eps);
    for (int j = 0; j < real; ++j) {
      ASSERT_NEAR(y_p[r * padded + j], weight[j] * src[r * real + j] * inv,
                  1e-6 * (1.0 + std::abs(y_p[r * padded + j])));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormRealDimTest,
                         ::testing::Combine(::testing::Values(1, 9),
                                            ::testing::Values(std::pair{1, 8}, std::pair{28, 32},
                                                              std::pair{36, 40},
                                                              std::pair{100, 104},
                                                              std::pair{64, 64}),
                                            ::testing::Bool()));

TEST(NormValidation, RealDimAboveDimIsRefused) {
  std::vector<float> buf(16);
  RmsNormParams p;
  p.rows = 2; p.dim = 8; p.x = buf.data(); p.x_stride = 8; p.weight = buf.data();
  p.y = buf.data(); p.y_stride = 8; p.real_dim = 9;
  const absl::Status st = RmsNorm(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("real_dim=9"), std::string::npos) << st.message();
}

// (rows, dim, with_bias)
class LayerNormTest : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(LayerNormTest, MatchesNaiveDouble) {
  const auto [rows, dim, with_bias] = GetParam();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const float eps = 1e-6f;
  // An offset mean checks that the variance is not computed as E[x^2] - E[x]^2 in f32.
  auto x = RandomVector(static_cast<size_t>(rows) * dim, seed, 9.0f, 11.0f);
  auto weight = RandomVector(dim, seed + 1, 0.5f, 1.5f);
  auto bias = RandomVector(dim, seed + 2);
  std::vector<float> want(x.size()), y(x.size());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < dim; ++j) mean += x[r * dim + j];
    mean /= dim;
    for (int j = 0; j < dim; ++j) var += (x[r * dim + j] - mean) * (x[r * dim + j] - mean);
    var /= dim;
    for (int j = 0; j < dim; ++j)
      want[r * dim + j] = static_cast<float>((x[r * dim + j] - mean) / std::sqrt(var + eps) *
                                                 weight[j] + (with_bias ? bias[j] : 0.0));
  }
  testing::Poison(y);
  LayerNormParams p;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = dim;
  p.weight = weight.data(); p.bias = with_bias ? bias.data() : nullptr;
  p.y = y.data(); p.y_stride = dim; p.eps = eps;
  ASSERT_TRUE(LayerNorm(p, KernelContext{}).ok());
  EXPECT_LT(RelativeError(y, want), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormTest,
                         ::testing::Combine(::testing::Values(1, 9), ::testing::Values(2, 128),
                                            ::testing::Bool()));

TEST(NormValidation, NamesBadValues) {
  std::vector<float> buf(16);
  RmsNormParams p;
  p.rows = 2; p.dim = 4; p.x = buf.data(); p.x_stride = 2; p.weight = buf.data();
  p.y = buf.data(); p.y_stride = 4;
  auto st = RmsNorm(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x_stride=2"), std::string::npos) << st.message();
  p.x_stride = 4; p.weight = nullptr;
  st = RmsNorm(p, KernelContext{});
  EXPECT_NE(st.message().find("weight is null"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
