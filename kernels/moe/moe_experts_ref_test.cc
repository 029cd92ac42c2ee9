#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

double NaiveSilu(double g) { return g / (1.0 + std::exp(-g)); }

// out[t] = sum_j w[t, j] * down_e(act(gate_e x) * up_e x), in double, token by token.
std::vector<float> NaiveExperts(const std::vector<float>& x, const std::vector<float>& gate_up,
                                const std::vector<float>& down, const std::vector<int32_t>& ids,
                                const std::vector<float>& weights, int T, int H, int I, int K,
                                const std::function<double(double)>& act_fn) {
  std::vector<float> want(static_cast<size_t>(T) * H, 0.0f);
  for (int t = 0; t < T; ++t) {
    std::vector<double> acc(H, 0.0);
    for (int j = 0; j < K; ++j) {
      const int e = ids[t * K + j];
      std::vector<double> act(I);
      for (int i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int h = 0; h < H; ++h) {
          g += static_cast<double>(gate_up[(static_cast<size_t>(e) * 2 * I + i) * H + h]) * x[t * H + h];
          u += static_cast<double>(gate_up[(static_cast<size_t>(e) * 2 * I + I + i) * H + h]) * x[t * H + h];
        }
        act[i] = act_fn(g) * u;
      }
      for (int h = 0; h < H; ++h) {
        double y = 0;
        for (int i = 0; i < I; ++i) y += down[(static_cast<size_t>(e) * H + h) * I + i] * act[i];
        acc[h] += weights[t * K + j] * y;
      }
    }
    for (int h = 0; h < H; ++h) want[t * H + h] = static_cast<float>(acc[h]);
  }
  return want;
}

// Random inputs of one experts test: x in [-x_range, x_range], gate_up in [-gate_range,
// gate_range], down in [-0.2, 0.2], routing weights in [0, 1]; Run calls the CPU backend on them
// with the given assignments, the output and workspace poisoned.
struct ExpertsInputs {
  int T, H, I, E, K;
  std::vector<float> x, gate_up, down, weights;

  ExpertsInputs(int t, int h, int i, int e, int k, uint64_t seed, float x_range = 1.0f, float gate_range = 0.2f)
      : T(t), H(h), I(i), E(e), K(k),
        x(testing::RandomVector(static_cast<size_t>(t) * h, seed, -x_range, x_range)),
        gate_up(testing::RandomVector(static_cast<size_t>(e) * 2 * i * h, seed + 1, -gate_range, gate_range)),
        down(testing::RandomVector(static_cast<size_t>(e) * h * i, seed + 2, -0.2f, 0.2f)),
        weights(testing::RandomVector(static_cast<size_t>(t) * k, seed + 3, 0.0f, 1.0f)) {}

  // Params over these inputs; out must hold T * H floats.
  MoeExpertsParams Params(const std::vector<int32_t>& ids, const std::vector<float>& w, std::vector<float>& out,
                          Activation act = Activation::kSilu) const {
    MoeExpertsParams p;
    p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = K;
    p.x = x.data(); p.topk_ids = ids.data(); p.topk_weights = w.data();
    p.gate_up = gate_up.data(); p.down = down.data(); p.out = out.data();
    p.act = act;
    return p;
  }

  std::vector<float> Run(const std::vector<int32_t>& ids, const std::vector<float>& w,
                         Activation act = Activation::kSilu) const {
    std::vector<float> out(static_cast<size_t>(T) * H);
    testing::Poison(out);
    MoeExpertsParams p = Params(ids, w, out, act);
    std::vector<char> ws(MoeExpertsWorkspaceBytes(p), static_cast<char>(0xff));  // poisoned workspace
    p.workspace = ws.data(); p.workspace_bytes = ws.size();
    EXPECT_TRUE(MoeExperts(p, KernelContext{}).ok());
    return out;
  }

  std::vector<float> Naive(const std::vector<int32_t>& ids, const std::function<double(double)>& act_fn) const {
    return NaiveExperts(x, gate_up, down, ids, weights, T, H, I, K, act_fn);
  }
};

// (num_tokens, hidden, inter, num_experts, top_k)
class MoeExpertsTest : public ::testing::TestWithParam<std::tuple<int, int, int, int, int>> {};

TEST_P(MoeExpertsTest, MatchesNaivePerTokenLoop) {
  const auto [T, H, I, E, K] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const ExpertsInputs in(T, H, I, E, K, seed);
  // Distinct experts per token, as routing produces; some experts get no token at all.
  std::vector<int32_t> ids(static_cast<size_t>(T) * K);
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> perm(E);
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < K; ++j) ids[t * K + j] = perm[j];
  }
  EXPECT_LT(testing::RelativeError(in.Run(ids, in.weights), in.Naive(ids, NaiveSilu)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeExpertsTest,
                         ::testing::Combine(::testing::Values(1, 37), ::testing::Values(16, 64),
                                            ::testing::Values(8, 48), ::testing::Values(4, 16),
                                            ::testing::Values(1, 4)));

// The experts apply p.act to their gates (HF: ACT2FN[hidden_act](gate) * up); a few of
// kernels/common/activation.h's functions, each against its own formula. Gates are O(1) so the
// negative side, relu6's cap and gelu_10's clip are not reached alike; the kernels/activation
// tests pin those. The CUDA backend against this one: moe_act_cuda_test.cu.
TEST(MoeExpertsActivation, AppliesTheActivationOfTheParams) {
  const int T = 9, E = 4, K = 2;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const ExpertsInputs in(T, 32, 16, E, K, seed, /*x_range=*/2.0f, /*gate_range=*/0.5f);
  std::vector<int32_t> ids(static_cast<size_t>(T) * K);
  for (int t = 0; t < T; ++t) {
    ids[t * K] = t % E;
    ids[t * K + 1] = (t + 1 + t / E) % E;
  }
  const std::vector<std::pair<Activation, std::function<double(double)>>> acts = {
      {Activation::kGelu, [](double g) { return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))); }},
      {Activation::kRelu, [](double g) { return g > 0 ? g : 0.0; }},
      {Activation::kRelu2, [](double g) { return g > 0 ? g * g : 0.0; }},
      {Activation::kMish, [](double g) { return g * std::tanh(std::log1p(std::exp(g))); }},
      {Activation::kLinear, [](double g) { return g; }},
      {Activation::kSilu, NaiveSilu}};
  std::vector<float> silu_out;
  for (const auto& [act, fn] : acts) {
    SCOPED_TRACE(ActivationName(act));
    const std::vector<float> out = in.Run(ids, in.weights, act);
    EXPECT_LT(testing::RelativeError(out, in.Naive(ids, fn)), 1e-5);
    if (act == Activation::kSilu) silu_out = out;
  }
  // The activation matters: GELU's output is not SiLU's.
  EXPECT_GT(testing::RelativeError(silu_out, in.Naive(ids, acts[0].second)), 1e-2);
}

TEST(MoeExpertsValidation, RefusesASmallWorkspace) {
  std::vector<float> x(8), gu(2 * 2 * 2 * 8), dn(2 * 8 * 2), out(8), w = {1.0f};
  std::vector<int32_t> ids = {1};
  MoeExpertsParams p;
  p.num_tokens = 1; p.hidden = 8; p.inter = 2; p.num_experts = 2; p.top_k = 1;
  p.x = x.data(); p.topk_ids = ids.data(); p.topk_weights = w.data(); p.gate_up = gu.data();
  p.down = dn.data(); p.out = out.data();
  std::vector<char> ws(MoeExpertsWorkspaceBytes(p));
  p.workspace = ws.data(); p.workspace_bytes = ws.size() - 1;
  auto st = MoeExperts(p, KernelContext{});
  EXPECT_NE(st.message().find("workspace_bytes="), std::string::npos) << st.message();
  p.workspace_bytes = ws.size();
  EXPECT_TRUE(MoeExperts(p, KernelContext{}).ok());
}

// The router projection inside the routing (MoeRouterProjection) is a CUDA decode-step fusion:
// the CPU backend never takes it (MoeExpertsFusesRouter false), so MoeExperts refuses a router
// set there, naming the query, and MoeRouting refuses one everywhere; without it the same call
// runs.
TEST(MoeExpertsValidation, CpuRefusesTheFusedRouter) {
  std::vector<float> x(8), gu(2 * 2 * 2 * 8), dn(2 * 8 * 2), out(8), w(1), logits = {0.5f, -0.5f},
      router(2 * 8, 0.25f);
  std::vector<int32_t> ids(1);
  uint32_t ticket = 0;
  MoeRoutingParams r;
  r.num_tokens = 1; r.num_experts = 2; r.top_k = 1;
  r.logits = logits.data(); r.topk_ids = ids.data(); r.topk_weights = w.data();
  r.router.dtype = DType::kF32;
  r.router.weight = router.data(); r.router.x = x.data(); r.router.hidden = 8;
  r.router.logits = logits.data(); r.router.ticket = &ticket;
  MoeExpertsParams p;
  p.num_tokens = 1; p.hidden = 8; p.inter = 2; p.num_experts = 2; p.top_k = 1;
  p.x = x.data(); p.topk_ids = ids.data(); p.topk_weights = w.data(); p.gate_up = gu.data();
  p.down = dn.data(); p.out = out.data(); p.routing = &r;
  std::vector<char> ws(MoeExpertsWorkspaceBytes(p));
  p.workspace = ws.data(); p.workspace_bytes = ws.size();
  EXPECT_FALSE(MoeExpertsFusesRouter(p, Backend::kCpu));
  const absl::Status st = MoeExperts(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("MoeExpertsFusesRouter"), std::string::npos) << st.message();
  EXPECT_EQ(MoeRouting(r, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  r.router = {};
  EXPECT_TRUE(MoeExperts(p, KernelContext{}).ok());
  EXPECT_EQ(ids[0], 0);  // logits 0.5 > -0.5
}

// An id outside [0, num_experts) is another rank's expert (kernels/moe_shard's kNotLocal): it
// adds nothing, and the output equals a run where that slot names a valid expert with weight 0
// (within rounding: the BLAS GEMM over an expert's rows may block fewer rows differently).
TEST(MoeExpertsOutOfRange, AssignmentsToNoExpertAddNothing) {
  const int T = 23, H = 16, E = 4, K = 3;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const ExpertsInputs in(T, H, 8, E, K, seed);
  std::vector<int32_t> ids(T * K), valid(T * K);
  std::vector<float> zeroed = in.weights;
  for (int a = 0; a < T * K; ++a) {
    valid[a] = ids[a] = static_cast<int32_t>(rng() % E);
    if (a % 3 != 1) continue;
    ids[a] = a % 2 == 0 ? -1 : E + static_cast<int32_t>(rng() % 3);  // no expert here
    zeroed[a] = 0.0f;
  }
  ids[0] = ids[1] = ids[2] = -1;  // a token all of whose experts are elsewhere: out row 0
  zeroed[0] = zeroed[1] = zeroed[2] = 0.0f;
  const std::vector<float> skipped = in.Run(ids, in.weights);
  EXPECT_LT(testing::RelativeError(skipped, in.Run(valid, zeroed)), 1e-6);
  for (int h = 0; h < H; ++h) EXPECT_EQ(skipped[h], 0.0f);
}

// The interleaved gate_up layout is the CUDA backend's prepared form: the CPU backend keeps
// the checkpoint's stacked rows, says so, and refuses interleaved ones.
TEST(MoePrepareExpertWeights, CpuKeepsTheStackedLayout) {
  std::vector<float> gu(2 * 2 * 8 * 16, 1.0f);
  const std::vector<float> before = gu;
  MoePrepareParams p;
  p.dtype = DType::kF32;
  p.num_experts = 2; p.hidden = 16; p.inter = 8; p.gate_up = gu.data();
  const auto chosen = MoePrepareExpertWeights(p, KernelContext{});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(*chosen, MoeGateUpLayout::kStacked);
  EXPECT_EQ(gu, before);
  p.layout = MoeGateUpLayout::kInterleaved8;
  const auto refused = MoePrepareExpertWeights(p, KernelContext{});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("CPU"), std::string::npos) << refused.status();
  p.num_experts = 0;
  EXPECT_NE(MoePrepareExpertWeights(p, KernelContext{}).status().message().find("num_experts=0"),
            std::string::npos);
}

TEST(MoeExpertsValidation, CpuRefusesInterleavedWeights) {
  std::vector<float> x(8), gu(2 * 2 * 8 * 8), dn(2 * 8 * 8), out(8), w = {1.0f};
  std::vector<int32_t> ids = {1};
  MoeExpertsParams p;
  p.num_tokens = 1; p.hidden = 8; p.inter = 8; p.num_experts = 2; p.top_k = 1;
  p.x = x.data(); p.topk_ids = ids.data(); p.topk_weights = w.data(); p.gate_up = gu.data();
  p.down = dn.data(); p.out = out.data();
  std::vector<char> ws(MoeExpertsWorkspaceBytes(p));
  p.workspace = ws.data(); p.workspace_bytes = ws.size();
  p.gate_up_layout = MoeGateUpLayout::kInterleaved8;
  const auto st = MoeExperts(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("interleaved8"), std::string::npos) << st.message();
  p.gate_up_layout = MoeGateUpLayout::kStacked;
  EXPECT_TRUE(MoeExperts(p, KernelContext{}).ok());
}

// MoeExpertsParams::routing: the call routes first (the same ids, weights and output as
// MoeRouting then MoeExperts); on the CPU shared experts, an addend and the norm epilogue are
// never folded (MoeExpertsFoldsSharedAndNorm and MoeExpertsFoldsAddendAndNorm are false) and
// are refused when asked for.
TEST(MoeExpertsRoutingInside, CpuRoutesFirstAndFoldsNothing) {
  const int T = 5, H = 16, I = 8, E = 8, k = 2;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto x = testing::RandomVector(T * H, seed);
  auto gate_up = testing::RandomVector(E * 2 * I * H, seed + 1);
  auto down = testing::RandomVector(E * H * I, seed + 2);
  auto logits = testing::RandomVector(T * E, seed + 3, -3.0f, 3.0f);
  MoeRoutingParams r;
  r.num_tokens = T; r.num_experts = E; r.top_k = k; r.logits = logits.data();
  std::vector<int32_t> ids_first(T * k), ids_inside(T * k, -1);
  std::vector<float> w_first(T * k), w_inside(T * k, -1.0f);
  MoeRoutingParams first = r;
  first.topk_ids = ids_first.data();
  first.topk_weights = w_first.data();
  ASSERT_TRUE(MoeRouting(first, KernelContext{}).ok());
  MoeExpertsParams p;
  p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
  std::vector<uint8_t> ws(MoeExpertsWorkspaceBytes(p));
  std::vector<float> out_first(T * H), out_inside(T * H, -1.0f);
  p.x = x.data(); p.gate_up = gate_up.data(); p.down = down.data();
  p.workspace = ws.data(); p.workspace_bytes = ws.size();
  p.topk_ids = ids_first.data(); p.topk_weights = w_first.data(); p.out = out_first.data();
  ASSERT_TRUE(MoeExperts(p, KernelContext{}).ok());
  MoeRoutingParams inside = r;
  inside.topk_ids = ids_inside.data();
  inside.topk_weights = w_inside.data();
  p.routing = &inside;
  p.topk_ids = ids_inside.data(); p.topk_weights = w_inside.data(); p.out = out_inside.data();
  ASSERT_TRUE(MoeExperts(p, KernelContext{}).ok());
  EXPECT_EQ(ids_inside, ids_first);
  EXPECT_EQ(w_inside, w_first);
  EXPECT_EQ(out_inside, out_first);

  std::vector<float> shared_w(2 * I * H);
  p.shared = {shared_w.data(), shared_w.data(), I};
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(p, Backend::kCpu));
  const absl::Status st = MoeExperts(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("MoeExpertsFoldsSharedAndNorm"), std::string::npos) << st;
  p.shared = {};
  std::vector<float> addend(T * H);
  p.addend = addend.data();
  EXPECT_FALSE(MoeExpertsFoldsAddendAndNorm(p, Backend::kCpu));
  const absl::Status with_addend = MoeExperts(p, KernelContext{});
  EXPECT_EQ(with_addend.code(), absl::StatusCode::kInvalidArgument) << with_addend;
  EXPECT_NE(with_addend.message().find("MoeExpertsFoldsAddendAndNorm"), std::string::npos) << with_addend;
  p.addend = nullptr;
  inside.top_k = 1;  // not this call's top_k
  const absl::Status mismatch = MoeExperts(p, KernelContext{});
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument) << mismatch;
}

}  // namespace
}  // namespace mlaserve::kernels
