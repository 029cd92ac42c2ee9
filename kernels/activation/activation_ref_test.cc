// ActAndMul on the CPU against independent double-precision formulas (HF's definitions,
// transformers 5.17 activations.py / torch), at chosen points and on random rows. The CUDA
// backend against this one: activation_cuda_test.cu.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activation/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr double kPi = 3.14159265358979323846;

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double GeluErf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double Softplus(double x) { return x > 20.0 ? x : std::log(1.0 + std::exp(x)); }

// act(x) in double, written from the definitions, not from activation_ref.cc.
double Want(Activation a, double x) {
  switch (a) {
    case Activation::kSilu: return x * Sigmoid(x);
    case Activation::kGelu: return GeluErf(x);
    case Activation::kGelu10: return std::min(10.0, std::max(-10.0, GeluErf(x)));
    case Activation::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x)));
    case Activation::kGeluFast:
      return 0.5 * x * (1.0 + std::tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)));
    case Activation::kQuickGelu: return x * Sigmoid(1.702 * x);
    case Activation::kRelu: return std::max(x, 0.0);
    case Activation::kRelu2: return std::max(x, 0.0) * std::max(x, 0.0);
    case Activation::kRelu6: return std::min(std::max(x, 0.0), 6.0);
    case Activation::kLeakyRelu: return x >= 0 ? x : 0.01 * x;
    case Activation::kHardswish: return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
    case Activation::kSigmoid: return Sigmoid(x);
    case Activation::kTanh: return std::tanh(x);
    case Activation::kMish: return x * std::tanh(Softplus(x));
    case Activation::kLinear: return x;
    case Activation::kLaplace:
      return 0.5 * (1.0 + std::erf((x - 0.707107) / (0.282095 * std::sqrt(2.0))));
    case Activation::kSqrtSoftplus: return std::sqrt(Softplus(x));
  }
  return NAN;
}

const Activation kAll[] = {
    Activation::kSilu,      Activation::kGelu,      Activation::kGelu10,   Activation::kGeluTanh,
    Activation::kGeluFast,  Activation::kQuickGelu, Activation::kRelu,     Activation::kRelu2,
    Activation::kRelu6,     Activation::kLeakyRelu, Activation::kHardswish, Activation::kSigmoid,
    Activation::kTanh,      Activation::kMish,      Activation::kLinear,   Activation::kLaplace,
    Activation::kSqrtSoftplus};

// act(g) * up for one row of gates (up = `up` everywhere), through ActAndMul.
std::vector<float> RunRow(Activation a, const std::vector<float>& gates, float up) {
  const int dim = static_cast<int>(gates.size());
  std::vector<float> x(gates);
  x.resize(2 * gates.size(), up);
  std::vector<float> out(gates.size());
  testing::Poison(out);
  ActAndMulParams p;
  p.act = a;
  p.rows = 1; p.dim = dim; p.x = x.data(); p.x_stride = 2 * dim;
  p.out = out.data(); p.out_stride = dim;
  EXPECT_TRUE(ActAndMul(p, KernelContext{}).ok());
  return out;
}

class ActivationPointsTest : public ::testing::TestWithParam<Activation> {};

// Negative, zero, small and large gates, including gelu_10's clip (gelu(12) = 12 -> 10), relu6's
// cap, exp overflow in mish / sigmoid and the softplus threshold. f32 vs double: a few ulps.
TEST_P(ActivationPointsTest, MatchesDefinitionAtChosenPoints) {
  const Activation a = GetParam();
  const std::vector<float> gates = {-100.0f, -30.0f, -10.5f, -6.0f, -3.0f, -1.0f, -0.5f,
                                    -1e-3f,  0.0f,   1e-3f,  0.5f,  0.707107f, 1.0f, 2.5f,
                                    3.0f,    5.9f,   6.1f,   8.0f,  10.5f, 12.0f, 25.0f, 100.0f};
  constexpr float kUp = -1.5f;
  const std::vector<float> got = RunRow(a, gates, kUp);
  for (size_t i = 0; i < gates.size(); ++i) {
    const double want = Want(a, gates[i]) * kUp;
    EXPECT_NEAR(got[i], want, 2e-6 * std::max(1.0, std::abs(want)))
        << ActivationName(a) << "(" << gates[i] << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(All, ActivationPointsTest, ::testing::ValuesIn(kAll),
                         [](const auto& info) { return std::string(ActivationName(info.param)); });

// Exact values that pin each function's shape (caps, clips, slopes, zeros).
TEST(ActivationValues, CapsClipsAndSlopes) {
  const auto at = [](Activation a, float g) { return RunRow(a, {g}, 1.0f)[0]; };
  EXPECT_EQ(at(Activation::kGelu10, 12.0f), 10.0f);
  EXPECT_EQ(at(Activation::kGelu10, 10.5f), 10.0f);
  EXPECT_FLOAT_EQ(at(Activation::kGelu10, 9.0f), 9.0f);   // gelu(9) = 9 (1 - 1e-19)
  EXPECT_EQ(at(Activation::kRelu6, 8.0f), 6.0f);
  EXPECT_EQ(at(Activation::kRelu6, -2.0f), 0.0f);
  EXPECT_EQ(at(Activation::kRelu6, 2.5f), 2.5f);
  EXPECT_EQ(at(Activation::kRelu, -2.0f), 0.0f);
  EXPECT_EQ(at(Activation::kRelu2, 3.0f), 9.0f);
  EXPECT_EQ(at(Activation::kRelu2, -3.0f), 0.0f);
  EXPECT_FLOAT_EQ(at(Activation::kLeakyRelu, -2.0f), -0.02f);
  EXPECT_EQ(at(Activation::kLeakyRelu, 2.0f), 2.0f);
  EXPECT_EQ(at(Activation::kLinear, -7.25f), -7.25f);
  EXPECT_EQ(at(Activation::kHardswish, -3.0f), 0.0f);
  EXPECT_EQ(at(Activation::kHardswish, 4.0f), 4.0f);
  EXPECT_FLOAT_EQ(at(Activation::kSigmoid, 0.0f), 0.5f);
  EXPECT_FLOAT_EQ(at(Activation::kLaplace, 0.707107f), 0.5f);
  EXPECT_EQ(at(Activation::kMish, 100.0f), 100.0f);     // exp overflows to inf: tanh(inf) = 1
  EXPECT_EQ(at(Activation::kSigmoid, -100.0f), 0.0f);
  EXPECT_FLOAT_EQ(at(Activation::kSqrtSoftplus, 25.0f), 5.0f);  // past the threshold: sqrt(x)
  // The GELU forms differ: erf 0.841345 at 1, the tanh approximation 0.841192.
  EXPECT_NEAR(at(Activation::kGelu, 1.0f), 0.8413447, 1e-6);
  EXPECT_NEAR(at(Activation::kGeluTanh, 1.0f), 0.8411920, 1e-6);
  EXPECT_NEAR(at(Activation::kQuickGelu, 1.0f), 0.8457957, 1e-6);
}

class ActAndMulTest
    : public ::testing::TestWithParam<std::tuple<Activation, std::tuple<int, int>>> {};

TEST_P(ActAndMulTest, MatchesNaiveDouble) {
  const Activation a = std::get<0>(GetParam());
  const auto [rows, dim] = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " act=" << ActivationName(a));
  const int64_t x_stride = 2 * dim + 1, out_stride = dim + 2;
  auto x = testing::RandomVector(rows * x_stride, seed, -8.0f, 8.0f);
  std::vector<float> out(rows * out_stride);
  testing::Poison(out);
  ActAndMulParams p;
  p.act = a;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = x_stride;
  p.out = out.data(); p.out_stride = out_stride;
  ASSERT_TRUE(ActAndMul(p, KernelContext{}).ok());
  // Per element, relative to max(1, |want|): where the f32 formula cancels (1 + erf(g / sqrt 2)
  // at g = -7 is 0 in f32, as in torch's f32 GELU) the value is below 1e-10 anyway.
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < dim; ++j) {
      const double g = x[r * x_stride + j], u = x[r * x_stride + dim + j];
      const double want = Want(a, g) * u;
      ASSERT_NEAR(out[r * out_stride + j], want, 2e-6 * std::max(1.0, std::abs(want)))
          << "row " << r << " col " << j << " gate " << g << " up " << u;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ActAndMulTest,
    ::testing::Combine(::testing::ValuesIn(kAll),
                       ::testing::Combine(::testing::Values(1, 13), ::testing::Values(1, 96))));

// The output may overwrite the gate half of x (the MoE CPU path does so).
TEST(ActAndMul, OutMayAliasTheGates) {
  std::vector<float> x = {-1.0f, 0.5f, 2.0f, 3.0f, -2.0f, 0.25f};  // gates | ups, dim 3
  ActAndMulParams p;
  p.act = Activation::kGelu;
  p.rows = 1; p.dim = 3; p.x = x.data(); p.x_stride = 6; p.out = x.data(); p.out_stride = 6;
  ASSERT_TRUE(ActAndMul(p, KernelContext{}).ok());
  EXPECT_NEAR(x[0], GeluErf(-1.0) * 3.0, 1e-6);
  EXPECT_NEAR(x[1], GeluErf(0.5) * -2.0, 1e-6);
  EXPECT_NEAR(x[2], GeluErf(2.0) * 0.25, 1e-6);
}

// SiluAndMul (the name the CUDA callers use) is SiLU whatever act says.
TEST(ActAndMul, SiluAndMulIsSilu) {
  std::vector<float> x = {-1.0f, 2.0f}, out(1);
  SiluAndMulParams p;
  p.act = Activation::kRelu;
  p.rows = 1; p.dim = 1; p.x = x.data(); p.x_stride = 2; p.out = out.data(); p.out_stride = 1;
  ASSERT_TRUE(SiluAndMul(p, KernelContext{}).ok());
  EXPECT_NEAR(out[0], -1.0 * Sigmoid(-1.0) * 2.0, 1e-6);
}

TEST(ActAndMulValidation, NamesBadValues) {
  std::vector<float> buf(16);
  ActAndMulParams p;
  p.rows = 1; p.dim = 4; p.x = buf.data(); p.x_stride = 4; p.out = buf.data(); p.out_stride = 4;
  auto st = ActAndMul(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x_stride=4"), std::string::npos) << st.message();
}

// Every name of transformers 5.17's elementwise ACT2FN entries parses to its formula; the
// parametric ones (prelu, xielu) and unknown names are refused naming the value.
TEST(ActivationFromHfName, ParsesEveryElementwiseNameAndRefusesTheRest) {
  const std::vector<std::pair<const char*, Activation>> names = {
      {"silu", Activation::kSilu},           {"swish", Activation::kSilu},
      {"gelu", Activation::kGelu},           {"gelu_python", Activation::kGelu},
      {"gelu_10", Activation::kGelu10},      {"gelu_new", Activation::kGeluTanh},
      {"gelu_pytorch_tanh", Activation::kGeluTanh}, {"gelu_python_tanh", Activation::kGeluTanh},
      {"gelu_accurate", Activation::kGeluTanh},     {"gelu_fast", Activation::kGeluFast},
      {"quick_gelu", Activation::kQuickGelu}, {"relu", Activation::kRelu},
      {"relu2", Activation::kRelu2},         {"relu6", Activation::kRelu6},
      {"leaky_relu", Activation::kLeakyRelu}, {"hardswish", Activation::kHardswish},
      {"sigmoid", Activation::kSigmoid},     {"tanh", Activation::kTanh},
      {"mish", Activation::kMish},           {"linear", Activation::kLinear},
      {"laplace", Activation::kLaplace},     {"sqrtsoftplus", Activation::kSqrtSoftplus}};
  for (const auto& [name, act] : names) {
    auto got = ActivationFromHfName(name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    EXPECT_EQ(*got, act) << name;
  }
  EXPECT_EQ(std::size(kActivationHfNames), names.size());  // no name left untested
  for (const char* bad : {"prelu", "xielu", "gelu_tanh", "SiLU", "", "identity"}) {
    auto got = ActivationFromHfName(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << got.status();
    EXPECT_NE(got.status().message().find("supported: gelu, gelu_10"), std::string::npos)
        << got.status();
  }
  EXPECT_NE(ActivationFromHfName("prelu").status().message().find("learned parameters"),
            std::string::npos);
}

}  // namespace
}  // namespace mlaserve::kernels
