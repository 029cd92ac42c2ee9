// ActAndMul on CUDA against the CPU reference, for every activation (one kernel templated on
// the activation), bf16 and f32 in and out, with padded row strides: fresh random
// gates in [-12, 12] (past relu6's cap and gelu_10's clip) rounded to bf16, so both backends
// read the same values. Error per value relative to (rms + |value|) of the reference: bf16 within
// 1e-2 (one bf16 rounding is 2^-9 of the value), f32 within 1e-5 (the two math libraries and
// nvcc's fused multiply-adds differ by a few ulps). Outputs start poisoned (NaN): every value
// must be written, and the padding past dim must stay untouched.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activation/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

const Activation kAll[] = {
    Activation::kSilu,      Activation::kGelu,      Activation::kGelu10,    Activation::kGeluTanh,
    Activation::kGeluFast,  Activation::kQuickGelu, Activation::kRelu,      Activation::kRelu2,
    Activation::kRelu6,     Activation::kLeakyRelu, Activation::kHardswish, Activation::kSigmoid,
    Activation::kTanh,      Activation::kMish,      Activation::kLinear,    Activation::kLaplace,
    Activation::kSqrtSoftplus};

constexpr float kGateRange = 12.0f;
constexpr double kBf16Bound = 1e-2;
constexpr double kF32Bound = 1e-5;

// max |got - want| / (rms(want) + |want|) over rows x dim of [rows, stride] buffers; +inf where
// got is NaN (unwritten). Counts the padding values [dim, stride) that are not NaN any more.
double ScaledError(const std::vector<float>& got, const std::vector<float>& want, int rows, int dim,
                   int64_t stride, int* padding_written) {
  double sq = 0;
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < dim; ++j) sq += static_cast<double>(want[r * stride + j]) * want[r * stride + j];
  const double rms = std::sqrt(sq / (static_cast<double>(rows) * dim));
  double worst = 0;
  *padding_written = 0;
  for (int r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < stride; ++j) {
      const float g = got[r * stride + j];
      if (j >= dim) {
        *padding_written += std::isnan(g) ? 0 : 1;
        continue;
      }
      if (std::isnan(g)) return INFINITY;
      const double w = want[r * stride + j];
      worst = std::max(worst, std::abs(g - w) / (rms + std::abs(w)));
    }
  }
  return worst;
}

class ActAndMulCudaTest
    : public ::testing::TestWithParam<std::tuple<Activation, std::tuple<int, int>>> {};

TEST_P(ActAndMulCudaTest, MatchesCpu) {
  const Activation act = std::get<0>(GetParam());
  const auto [rows, dim] = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " act=" << ActivationName(act));
  const int64_t xs = 2 * dim + 8, os = dim + 4;  // ragged strides
  auto x = testing::RandomVector(static_cast<size_t>(rows) * xs, seed, -kGateRange, kGateRange);
  testing::RoundToBf16(x);
  std::vector<float> want(static_cast<size_t>(rows) * os, 0.0f);
  ActAndMulParams p;
  p.act = act;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = xs; p.out = want.data(); p.out_stride = os;
  ASSERT_TRUE(ActAndMul(p, KernelContext{}).ok());
  for (const bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    auto d_x = bf16 ? testing::ToDeviceBf16(x) : testing::ToDevice(x);
    auto d_o = bf16 ? testing::PoisonedBf16(want.size()) : testing::PoisonedF32(want.size());
    ActAndMulParams g = p;
    g.dtype = bf16 ? DType::kBF16 : DType::kF32; g.x = d_x.get(); g.out = d_o.get();
    const absl::Status st = ActAndMul(g, KernelContext{Backend::kCuda, nullptr});
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const auto got = bf16 ? testing::ToHostBf16(d_o, want.size()) : testing::ToHost<float>(d_o, want.size());
    int padding_written = 0;
    EXPECT_LE(ScaledError(got, want, rows, dim, os, &padding_written), bf16 ? kBf16Bound : kF32Bound);
    EXPECT_EQ(padding_written, 0) << "values past dim were written";
  }
}

std::string CaseName(const ::testing::TestParamInfo<ActAndMulCudaTest::ParamType>& info) {
  const std::tuple<int, int> shape = std::get<1>(info.param);
  return std::string(ActivationName(std::get<0>(info.param))) + "_" + std::to_string(std::get<0>(shape)) +
         "x" + std::to_string(std::get<1>(shape));
}

// Decode-sized rows and the dense / expert widths of the models (V2-Lite's 1408, V3's 18432),
// and widths that are not multiples of a warp.
INSTANTIATE_TEST_SUITE_P(
    Shapes, ActAndMulCudaTest,
    ::testing::Combine(::testing::ValuesIn(kAll),
                       ::testing::Values(std::tuple{1, 8}, std::tuple{33, 1408}, std::tuple{257, 18432},
                                         std::tuple{5, 13})),
    CaseName);

// In place: the output overwrites the gate half of x (the MoE and dense-MLP callers' layout).
TEST(ActAndMulCuda, OutMayAliasTheGates) {
  constexpr int kRows = 17, kDim = 96;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const Activation act : {Activation::kGeluTanh, Activation::kRelu2, Activation::kSilu}) {
    SCOPED_TRACE(ActivationName(act));
    auto x = testing::RandomVector(static_cast<size_t>(kRows) * 2 * kDim, seed, -kGateRange, kGateRange);
    testing::RoundToBf16(x);
    std::vector<float> want(x);
    ActAndMulParams p;
    p.act = act;
    p.rows = kRows; p.dim = kDim; p.x = want.data(); p.x_stride = 2 * kDim;
    p.out = want.data(); p.out_stride = 2 * kDim;
    ASSERT_TRUE(ActAndMul(p, KernelContext{}).ok());
    auto d_x = testing::ToDeviceBf16(x);
    ActAndMulParams g = p;
    g.dtype = DType::kBF16; g.x = d_x.get(); g.out = d_x.get();
    ASSERT_TRUE(ActAndMul(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const auto got = testing::ToHostBf16(d_x, x.size());
    // The gate halves hold act(gate) * up; the up halves keep their values (ScaledError's count
    // of written values past dim means nothing here: they were never poisoned).
    int up_values = 0;
    EXPECT_LE(ScaledError(got, want, kRows, kDim, 2 * kDim, &up_values), kBf16Bound);
    for (int r = 0; r < kRows; ++r)
      for (int j = kDim; j < 2 * kDim; ++j) ASSERT_EQ(got[r * 2 * kDim + j], x[r * 2 * kDim + j]);
  }
}

// A dtype the CUDA kernels do not take is refused naming it, for SiLU and the others alike.
TEST(ActAndMulCuda, RefusesF16NamingIt) {
  auto d = testing::PoisonedF32(16);
  for (const Activation act : {Activation::kSilu, Activation::kGelu}) {
    ActAndMulParams p;
    p.act = act;
    p.dtype = DType::kF16;
    p.rows = 1; p.dim = 4; p.x = d.get(); p.x_stride = 8; p.out = d.get(); p.out_stride = 4;
    const absl::Status st = ActAndMul(p, KernelContext{Backend::kCuda, nullptr});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << ActivationName(act);
    EXPECT_NE(st.message().find("f16"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace mlaserve::kernels
