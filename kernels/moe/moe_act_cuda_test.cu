// The routed experts on CUDA with an activation other than SiLU (MoeExpertsParams::act) against
// the CPU reference: every path request (kAuto, kStream, kTiled, every kSm90 tile configuration)
// with the gate_up weights stacked and interleaved, on decode and prefill sizes with idle
// experts (hot and ragged routings) and assignments of no local expert (kNotLocal, -1). The
// stream kernels apply the activation in their gate_up pass (warp GEMVs at one token, the mma
// kernels beyond, 16 and 32 tokens a pass); the grouped GEMMs run unfused (moe_cuda.h), so no
// plan says fused SiLU. Bounds as moe_cuda_test.cu's: relative error within 1e-2 and every value
// within 5% of (rms + |value|).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/activation_math.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_testing.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::Routing;

const Activation kNonSilu[] = {
    Activation::kGelu,      Activation::kGelu10,    Activation::kGeluTanh, Activation::kGeluFast,
    Activation::kQuickGelu, Activation::kRelu,      Activation::kRelu2,    Activation::kRelu6,
    Activation::kLeakyRelu, Activation::kHardswish, Activation::kSigmoid,  Activation::kTanh,
    Activation::kMish,      Activation::kLinear,    Activation::kLaplace,  Activation::kSqrtSoftplus};

constexpr int32_t kNotLocal = -1;  // kernels/moe_shard's id of another rank's expert
constexpr int kNotLocalEvery = 7;  // with not_local set, every 7th assignment is kNotLocal

struct PathConfig {
  MoeExpertsPath path;
  int sm90_variant;
};

std::vector<PathConfig> EveryPathConfig() {
  std::vector<PathConfig> configs = {{MoeExpertsPath::kAuto, -1}, {MoeExpertsPath::kStream, -1},
                                     {MoeExpertsPath::kTiled, -1}};
  if (moe_cuda::Sm90Available()) {
    for (int v = 0; v < moe_cuda::kSm90Variants; ++v) configs.push_back({MoeExpertsPath::kSm90, v});
  }
  return configs;
}

// (tokens, hidden, inter, experts, top_k, routing, not_local)
using ActCase = std::tuple<int, int, int, int, int, Routing, bool>;
class MoeExpertsActCudaTest : public ::testing::TestWithParam<std::tuple<Activation, ActCase>> {};

TEST_P(MoeExpertsActCudaTest, EveryPathMatchesCpu) {
  const Activation act = std::get<0>(GetParam());
  const auto [T, H, I, E, k, routing, not_local] = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " act=" << ActivationName(act)
                                    << " routing=" << testing::RoutingName(routing));
  if (!moe_cuda::Sm90Available()) std::printf("note: not a Hopper GPU; the kSm90 path is not tested\n");
  auto x = testing::RandomVector(static_cast<size_t>(T) * H, seed);
  // Gate products of a few units (up to ~+-3.5 here), so that the activations' shapes matter
  // (relu's kink, tanh's and sigmoid's saturation) without relu6's cap dominating.
  const float su = 3.0f / std::sqrt(static_cast<float>(H)), sd = 1.0f / std::sqrt(static_cast<float>(I));
  auto gate_up = testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -su, su);
  auto down = testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -2 * sd, 2 * sd);
  testing::RoundToBf16(x); testing::RoundToBf16(gate_up); testing::RoundToBf16(down);
  std::vector<int32_t> ids = testing::MakeRouting(T, E, k, routing, seed + 4);
  if (not_local) {
    for (size_t a = 0; a < ids.size(); a += kNotLocalEvery) ids[a] = kNotLocal;
  }
  std::vector<float> weights = testing::RandomVector(static_cast<size_t>(T) * k, seed + 3, 0.1f, 1.0f);
  MoeExpertsParams p;
  p.act = act;
  p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
  std::vector<float> want(static_cast<size_t>(T) * H);
  std::vector<uint8_t> ws(MoeExpertsWorkspaceBytes(p));
  p.x = x.data(); p.topk_ids = ids.data(); p.topk_weights = weights.data(); p.gate_up = gate_up.data();
  p.down = down.data(); p.out = want.data(); p.workspace = ws.data(); p.workspace_bytes = ws.size();
  ASSERT_TRUE(MoeExperts(p, KernelContext{}).ok());

  MoeExpertsParams g = p;
  g.dtype = DType::kBF16;
  auto d_x = testing::ToDeviceBf16(x), d_gu = testing::ToDeviceBf16(gate_up), d_dn = testing::ToDeviceBf16(down);
  auto d_gu_il = testing::ToDeviceBf16(gate_up);
  MoePrepareParams prep;
  prep.num_experts = E; prep.hidden = H; prep.inter = I; prep.gate_up = d_gu_il.get();
  prep.layout = MoeGateUpLayout::kInterleaved8;
  ASSERT_TRUE(MoePrepareExpertWeights(prep, KernelContext{Backend::kCuda, nullptr}).ok());
  auto d_ids = testing::ToDevice(ids);
  auto d_w = testing::ToDevice(weights);
  g.x = d_x.get(); g.down = d_dn.get(); g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
  for (const PathConfig& c : EveryPathConfig()) {
    for (const MoeGateUpLayout gl : {MoeGateUpLayout::kStacked, MoeGateUpLayout::kInterleaved8}) {
      SCOPED_TRACE(::testing::Message() << "path=" << static_cast<int>(c.path) << " sm90_variant="
                                        << c.sm90_variant << " layout=" << static_cast<int>(gl));
      g.path = c.path;
      g.sm90_variant = c.sm90_variant;
      g.gate_up = gl == MoeGateUpLayout::kStacked ? d_gu.get() : d_gu_il.get();
      g.gate_up_layout = gl;
      const moe_cuda::ExpertsPlan plan = moe_cuda::PlanExperts(g);
      if (c.path != MoeExpertsPath::kAuto) EXPECT_EQ(plan.path, c.path);
      if (c.path == MoeExpertsPath::kAuto && T <= kMoeStreamMaxTokens) EXPECT_EQ(plan.path, MoeExpertsPath::kStream);
      EXPECT_FALSE(plan.fused_silu);
      auto d_out = testing::PoisonedBf16(want.size());
      testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(g));
      MLASERVE_CUDA_ASSERT(cudaMemset(d_ws.get(), 0xff, d_ws.bytes()));  // poison the workspace too
      g.out = d_out.get(); g.workspace = d_ws.get(); g.workspace_bytes = d_ws.bytes();
      const absl::Status st = MoeExperts(g, KernelContext{Backend::kCuda, nullptr});
      ASSERT_TRUE(st.ok()) << st;
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      const auto got = testing::ToHostBf16(d_out, want.size());
      EXPECT_LE(testing::RelativeError(got, want), 1e-2);
      EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);
    }
  }
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<Activation, ActCase>>& info) {
  const ActCase& c = std::get<1>(info.param);
  return std::string(ActivationName(std::get<0>(info.param))) + "_" + std::to_string(std::get<0>(c)) +
         "tok_" + testing::RoutingName(std::get<5>(c)) + (std::get<6>(c) ? "_notlocal" : "");
}

// Every activation on a decode size (one token, the stream path's shape) and a prefill size
// with idle experts and kNotLocal assignments.
INSTANTIATE_TEST_SUITE_P(
    EveryActivation, MoeExpertsActCudaTest,
    ::testing::Combine(::testing::ValuesIn(kNonSilu),
                       ::testing::Values(ActCase{1, 64, 32, 8, 2, Routing::kUniform, false},
                                         ActCase{300, 512, 200, 64, 6, Routing::kRagged, true})),
    CaseName);

// Two activations over the shapes of moe_cuda_test.cu that stress the grouped paths: decode
// batches of V2-Lite's expert shape, hot experts, K and N tails (136 / 72, 1032 / 520), top_k 12.
INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsActCudaTest,
    ::testing::Combine(::testing::Values(Activation::kGeluTanh, Activation::kRelu2),
                       ::testing::Values(ActCase{16, 2048, 1408, 64, 6, Routing::kUniform, false},
                                         ActCase{130, 256, 96, 32, 8, Routing::kHot, false},
                                         ActCase{513, 136, 72, 2, 1, Routing::kUniform, true},
                                         ActCase{97, 1032, 520, 48, 5, Routing::kRagged, false},
                                         ActCase{1000, 512, 264, 64, 6, Routing::kHot, true},
                                         ActCase{200, 128, 64, 16, 12, Routing::kUniform, false})),
    CaseName);

// A decode step as the engine makes it (model/layers/feed_forward.cc): the router projection,
// the routing, the shared experts and the next norm all inside one call on the stream path,
// with an activation other than SiLU (each activation's bits are the kernels' ActivateAt). The
// folds and the fused router are offered as for SiLU, and the call matches the CPU: logits from
// the bf16 router weights, the CPU's routing + experts, the shared MLP and the residual + norm
// in f32. One token (the warp GEMVs) and four (the mma stream kernels).
TEST(MoeExpertsActCudaDecodeTest, FoldedCallWithTheRouterInsideMatchesCpu) {
  for (const Activation act : {Activation::kGeluTanh, Activation::kRelu2, Activation::kMish}) {
    for (const int T : {1, 4}) {
      constexpr int H = 256, I = 64, E = 16, k = 4, S = 2 * I;
      const uint64_t seed = testing::FreshSeed();
      SCOPED_TRACE(::testing::Message() << "seed=" << seed << " act=" << ActivationName(act) << " T=" << T);
      const float su = 3.0f / std::sqrt(static_cast<float>(H)), sd = 1.0f / std::sqrt(static_cast<float>(I));
      auto x = testing::RandomVector(static_cast<size_t>(T) * H, seed);
      auto gate_up = testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -su, su);
      auto down = testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -2 * sd, 2 * sd);
      auto router_w = testing::RandomVector(static_cast<size_t>(E) * H, seed + 3, -su, su);
      auto shared_gu = testing::RandomVector(static_cast<size_t>(2) * S * H, seed + 4, -su, su);
      auto shared_dn = testing::RandomVector(static_cast<size_t>(H) * S, seed + 5, -sd, sd);
      auto residual = testing::RandomVector(static_cast<size_t>(T) * H, seed + 6, -2.0f, 2.0f);
      auto norm_w = testing::RandomVector(H, seed + 7, 0.5f, 1.5f);
      for (auto* v : {&x, &gate_up, &down, &router_w, &shared_gu, &shared_dn, &residual, &norm_w}) {
        testing::RoundToBf16(*v);
      }

      // The CPU: logits = x router^T, then the routing and the routed experts in one call.
      std::vector<float> logits(static_cast<size_t>(T) * E);
      for (int t = 0; t < T; ++t) {
        for (int e = 0; e < E; ++e) {
          double acc = 0;
          for (int h = 0; h < H; ++h) {
            acc += static_cast<double>(x[static_cast<size_t>(t) * H + h]) * router_w[static_cast<size_t>(e) * H + h];
          }
          logits[static_cast<size_t>(t) * E + e] = static_cast<float>(acc);
        }
      }
      MoeRoutingParams routing;
      routing.num_tokens = T; routing.num_experts = E; routing.top_k = k;
      routing.scoring = MoeScoring::kSoftmax; routing.norm_topk_prob = true;
      std::vector<int32_t> want_ids(T * k);
      std::vector<float> want_w(T * k), routed(static_cast<size_t>(T) * H);
      MoeRoutingParams cpu_routing = routing;
      cpu_routing.logits = logits.data(); cpu_routing.topk_ids = want_ids.data(); cpu_routing.topk_weights = want_w.data();
      MoeExpertsParams c;
      c.act = act;
      c.num_tokens = T; c.hidden = H; c.inter = I; c.num_experts = E; c.top_k = k;
      c.x = x.data(); c.gate_up = gate_up.data(); c.down = down.data();
      c.topk_ids = want_ids.data(); c.topk_weights = want_w.data(); c.routing = &cpu_routing;
      std::vector<uint8_t> ws(MoeExpertsWorkspaceBytes(c));
      c.out = routed.data(); c.workspace = ws.data(); c.workspace_bytes = ws.size();
      ASSERT_TRUE(MoeExperts(c, KernelContext{}).ok());
      // + the shared MLP (stacked gate_up), then residual += out; y = norm_w * rmsnorm(residual).
      std::vector<float> res_want(residual), y_want(residual.size());
      for (int t = 0; t < T; ++t) {
        const float* xt = x.data() + static_cast<size_t>(t) * H;
        std::vector<float> a(S);
        for (int f = 0; f < S; ++f) {
          double g = 0, u = 0;
          for (int h = 0; h < H; ++h) {
            g += static_cast<double>(shared_gu[static_cast<size_t>(f) * H + h]) * xt[h];
            u += static_cast<double>(shared_gu[static_cast<size_t>(S + f) * H + h]) * xt[h];
          }
          a[f] = ActivateAt(act, static_cast<float>(g)) * static_cast<float>(u);
        }
        double ss = 0;
        for (int h = 0; h < H; ++h) {
          double o = routed[static_cast<size_t>(t) * H + h];
          for (int f = 0; f < S; ++f) o += static_cast<double>(shared_dn[static_cast<size_t>(h) * S + f]) * a[f];
          float& r = res_want[static_cast<size_t>(t) * H + h];
          r += static_cast<float>(o);
          ss += static_cast<double>(r) * r;
        }
        const double inv = 1.0 / std::sqrt(ss / H + 1e-6);
        for (int h = 0; h < H; ++h) {
          const size_t i = static_cast<size_t>(t) * H + h;
          y_want[i] = static_cast<float>(norm_w[h] * res_want[i] * inv);
        }
      }

      // The device: one call, the router projection inside.
      auto d_x = testing::ToDeviceBf16(x), d_gu = testing::ToDeviceBf16(gate_up), d_dn = testing::ToDeviceBf16(down);
      auto d_router = testing::ToDeviceBf16(router_w);
      auto d_sgu = testing::ToDeviceBf16(shared_gu), d_sdn = testing::ToDeviceBf16(shared_dn);
      auto d_res = testing::ToDeviceBf16(residual), d_norm_w = testing::ToDeviceBf16(norm_w);
      auto d_logits = testing::PoisonedF32(static_cast<size_t>(T) * E);
      auto d_ids = testing::ToDevice(std::vector<int32_t>(T * k, -1));
      auto d_w = testing::PoisonedF32(T * k);
      auto d_out = testing::PoisonedBf16(static_cast<size_t>(T) * H), d_y = testing::PoisonedBf16(static_cast<size_t>(T) * H);
      auto d_ticket = testing::ToDevice(std::vector<uint32_t>(1, 0));
      MoeRoutingParams with_router = routing;
      with_router.logits = d_logits.as<float>();
      with_router.topk_ids = d_ids.as<int32_t>();
      with_router.topk_weights = d_w.as<float>();
      with_router.router.weight = d_router.get();
      with_router.router.x = d_x.get();
      with_router.router.hidden = H;
      with_router.router.logits = d_logits.as<float>();
      with_router.router.ticket = d_ticket.as<uint32_t>();
      MoeExpertsParams g;
      g.dtype = DType::kBF16;
      g.act = act;
      g.num_tokens = T; g.hidden = H; g.inter = I; g.num_experts = E; g.top_k = k;
      g.x = d_x.get(); g.gate_up = d_gu.get(); g.down = d_dn.get();
      g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
      g.routing = &with_router;
      g.shared = {d_sgu.get(), d_sdn.get(), S};
      g.norm.residual = d_res.get(); g.norm.weight = d_norm_w.get(); g.norm.y = d_y.get(); g.norm.eps = 1e-6f;
      EXPECT_EQ(moe_cuda::PlanExperts(g).path, MoeExpertsPath::kStream);
      ASSERT_TRUE(MoeExpertsFoldsSharedAndNorm(g, Backend::kCuda) || moe_cuda::DecodeFoldsDisabled());
      if (moe_cuda::DecodeFoldsDisabled()) return;  // MLASERVE_MOE_FOLD=0 in the shell: nothing to run
      ASSERT_TRUE(MoeExpertsFusesRouter(g, Backend::kCuda));
      testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(g));
      MLASERVE_CUDA_ASSERT(cudaMemset(d_ws.get(), 0xff, d_ws.bytes()));
      g.out = d_out.get(); g.workspace = d_ws.get(); g.workspace_bytes = d_ws.bytes();
      const absl::Status st = MoeExperts(g, KernelContext{Backend::kCuda, nullptr});
      ASSERT_TRUE(st.ok()) << st;
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      ASSERT_EQ(testing::ToHost<int32_t>(d_ids, T * k), want_ids) << "routed differently (a near-tie?)";
      const auto got_res = testing::ToHostBf16(d_res, res_want.size());
      const auto got_y = testing::ToHostBf16(d_y, y_want.size());
      EXPECT_EQ(testing::CountNan(got_y), 0u);
      EXPECT_LE(testing::RelativeError(got_res, res_want), 1e-2);
      EXPECT_LE(testing::RelativeError(got_y, y_want), 2e-2);
      EXPECT_LE(testing::MaxScaledError(got_y, y_want), 5e-2);
    }
  }
}

// A value of act that is no Activation: refused on the stream path as on the grouped ones,
// naming the value, and the output left as it was.
TEST(MoeExpertsActCudaDecodeTest, AnActThatIsNoActivationIsRefused) {
  constexpr int T = 1, H = 128, I = 64, E = 4, k = 2;
  auto d_x = testing::ToDeviceBf16(std::vector<float>(T * H, 0.5f));
  auto d_gu = testing::ToDeviceBf16(std::vector<float>(E * 2 * I * H, 0.01f));
  auto d_dn = testing::ToDeviceBf16(std::vector<float>(E * H * I, 0.01f));
  auto d_ids = testing::ToDevice(std::vector<int32_t>{0, 1});
  auto d_w = testing::ToDevice(std::vector<float>{0.5f, 0.5f});
  auto d_out = testing::PoisonedBf16(T * H);
  for (const MoeExpertsPath path : {MoeExpertsPath::kStream, MoeExpertsPath::kTiled}) {
    MoeExpertsParams g;
    g.dtype = DType::kBF16;
    g.act = static_cast<Activation>(200);
    g.path = path;
    g.num_tokens = T; g.hidden = H; g.inter = I; g.num_experts = E; g.top_k = k;
    g.x = d_x.get(); g.gate_up = d_gu.get(); g.down = d_dn.get();
    g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
    testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(g));
    g.out = d_out.get(); g.workspace = d_ws.get(); g.workspace_bytes = d_ws.bytes();
    const absl::Status st = MoeExperts(g, KernelContext{Backend::kCuda, nullptr});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("act=200"), std::string::npos) << st;
  }
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto out = testing::ToHost<uint16_t>(d_out, T * H);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == 0x7fc0; })) << "out was written";
}

}  // namespace
}  // namespace mlaserve::kernels
