// The routed experts on CUDA with an activation other than SiLU (MoeExpertsParams::act) against
// the CPU reference: every path request (kAuto, kStream, kTiled, every kSm90 tile configuration)
// with the gate_up weights stacked and interleaved, on decode and prefill sizes with idle
// experts (hot and ragged routings) and assignments of no local expert (kNotLocal, -1). Such
// calls take a grouped GEMM unfused (moe_cuda.h): the plan never says kStream nor a fused SiLU
// epilogue, and the stream path's folds are not offered. Bounds as moe_cuda_test.cu's: relative
// error within 1e-2 and every value within 5% of (rms + |value|).
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
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
      EXPECT_NE(plan.path, MoeExpertsPath::kStream);
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

// A decode step as the engine makes it (model/layers/feed_forward.cc): the routing inside the
// call, the shared experts and the next norm asked for first. With a non-SiLU act the stream
// path's folds and the fused router projection are not offered (the same call with SiLU gets
// them: the query is not vacuous), and the call with the routing inside it runs unfused and
// matches the CPU's routing + experts.
TEST(MoeExpertsActCudaDecodeTest, StreamFoldsAreNotOfferedAndTheRoutedCallMatchesCpu) {
  constexpr int T = 4, H = 256, I = 64, E = 16, k = 4;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto x = testing::RandomVector(static_cast<size_t>(T) * H, seed);
  const float su = 3.0f / std::sqrt(static_cast<float>(H)), sd = 1.0f / std::sqrt(static_cast<float>(I));
  auto gate_up = testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -su, su);
  auto down = testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -2 * sd, 2 * sd);
  auto logits = testing::RandomVector(static_cast<size_t>(T) * E, seed + 3, -3.0f, 3.0f);
  testing::RoundToBf16(x); testing::RoundToBf16(gate_up); testing::RoundToBf16(down);

  auto d_x = testing::ToDeviceBf16(x), d_gu = testing::ToDeviceBf16(gate_up), d_dn = testing::ToDeviceBf16(down);
  auto d_logits = testing::ToDevice(logits);
  auto d_ids = testing::ToDevice(std::vector<int32_t>(T * k, -1));
  auto d_w = testing::PoisonedF32(T * k);
  auto d_shared_gu = testing::ToDeviceBf16(std::vector<float>(2 * I * H, 0.01f));
  auto d_shared_dn = testing::ToDeviceBf16(std::vector<float>(H * I, 0.01f));
  auto d_residual = testing::ToDeviceBf16(std::vector<float>(T * H, 0.5f));
  auto d_norm_w = testing::ToDeviceBf16(std::vector<float>(H, 1.0f));
  auto d_y = testing::PoisonedBf16(T * H);

  MoeRoutingParams routing;
  routing.num_tokens = T; routing.num_experts = E; routing.top_k = k;
  routing.scoring = MoeScoring::kSoftmax; routing.norm_topk_prob = true;
  routing.logits = d_logits.as<float>(); routing.topk_ids = d_ids.as<int32_t>();
  routing.topk_weights = d_w.as<float>();
  MoeExpertsParams g;
  g.dtype = DType::kBF16;
  g.num_tokens = T; g.hidden = H; g.inter = I; g.num_experts = E; g.top_k = k;
  g.x = d_x.get(); g.gate_up = d_gu.get(); g.down = d_dn.get();
  g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
  g.routing = &routing;
  g.act = Activation::kGelu;

  MoeExpertsParams folded = g;
  folded.shared.gate_up = d_shared_gu.get(); folded.shared.down = d_shared_dn.get(); folded.shared.inter = I;
  folded.norm.residual = d_residual.get(); folded.norm.weight = d_norm_w.get(); folded.norm.y = d_y.get();
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(folded, Backend::kCuda));
  MoeExpertsParams norm_only = folded;
  norm_only.shared = MoeSharedExperts{};
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(norm_only, Backend::kCuda));
  if (!moe_cuda::DecodeFoldsDisabled()) {
    MoeExpertsParams silu = folded;
    silu.act = Activation::kSilu;
    EXPECT_TRUE(MoeExpertsFoldsSharedAndNorm(silu, Backend::kCuda)) << "the SiLU call should fold";
  }
  MoeRoutingParams with_router = routing;
  with_router.router.weight = d_gu.get();  // any 16-byte aligned bf16 [E, H] rows
  with_router.router.x = d_x.get();
  with_router.router.hidden = H;
  with_router.router.logits = d_logits.as<float>();
  auto d_ticket = testing::ToDevice(std::vector<uint32_t>(1, 0));
  with_router.router.ticket = d_ticket.as<uint32_t>();
  MoeExpertsParams routed = g;
  routed.routing = &with_router;
  EXPECT_FALSE(MoeExpertsFusesRouter(routed, Backend::kCuda));

  // The call the engine then makes: the routing inside, nothing folded.
  std::vector<int32_t> want_ids(T * k);
  std::vector<float> want_w(T * k), want(static_cast<size_t>(T) * H);
  MoeRoutingParams cpu_routing = routing;
  cpu_routing.logits = logits.data(); cpu_routing.topk_ids = want_ids.data(); cpu_routing.topk_weights = want_w.data();
  MoeExpertsParams c = g;
  c.dtype = DType::kF32;
  c.x = x.data(); c.gate_up = gate_up.data(); c.down = down.data();
  c.topk_ids = want_ids.data(); c.topk_weights = want_w.data(); c.routing = &cpu_routing;
  std::vector<uint8_t> ws(MoeExpertsWorkspaceBytes(c));
  c.out = want.data(); c.workspace = ws.data(); c.workspace_bytes = ws.size();
  ASSERT_TRUE(MoeExperts(c, KernelContext{}).ok());

  auto d_out = testing::PoisonedBf16(want.size());
  testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(g));
  g.out = d_out.get(); g.workspace = d_ws.get(); g.workspace_bytes = d_ws.bytes();
  const absl::Status st = MoeExperts(g, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  ASSERT_EQ(testing::ToHost<int32_t>(d_ids, T * k), want_ids) << "routed differently (a near-tie?)";
  const auto got = testing::ToHostBf16(d_out, want.size());
  EXPECT_LE(testing::RelativeError(got, want), 1e-2);
  EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);
}

}  // namespace
}  // namespace mlaserve::kernels
