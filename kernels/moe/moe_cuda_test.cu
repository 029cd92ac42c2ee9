// moe CUDA vs the CPU reference. Routing: ids equal per token except at near-ties (f32 scores
// on the GPU, rounded-from-double on the CPU), so at most a handful of tokens per thousand may
// differ, and where ids agree the weights agree within 1e-4. Experts (bf16): relative error
// within 1e-2, on uniform and on skewed routings (many row tiles per expert, idle experts).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// (tokens, experts, top_k, n_group, topk_group, scoring, method, norm)
using RouteCase = std::tuple<int, int, int, int, int, MoeScoring, MoeTopkMethod, bool>;
class MoeRoutingCudaTest : public ::testing::TestWithParam<RouteCase> {};

TEST_P(MoeRoutingCudaTest, MatchesCpu) {
  const auto [T, E, k, ng, tg, scoring, method, norm] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto logits = testing::RandomVector(static_cast<size_t>(T) * E, seed, -3.0f, 3.0f);
  auto bias = testing::RandomVector(E, seed + 1, -0.1f, 0.1f);
  MoeRoutingParams p;
  p.num_tokens = T; p.num_experts = E; p.top_k = k; p.n_group = ng; p.topk_group = tg;
  p.scoring = scoring; p.method = method; p.norm_topk_prob = norm; p.routed_scaling_factor = 2.5f;
  std::vector<int32_t> want_ids(T * k);
  std::vector<float> want_w(T * k);
  p.logits = logits.data(); p.correction_bias = bias.data(); p.topk_ids = want_ids.data();
  p.topk_weights = want_w.data();
  ASSERT_TRUE(MoeRouting(p, KernelContext{}).ok());
  auto d_logits = testing::ToDevice(logits), d_bias = testing::ToDevice(bias);
  auto d_ids = testing::ToDevice(std::vector<int32_t>(T * k, -1));
  auto d_w = testing::PoisonedF32(T * k);
  MoeRoutingParams g = p;
  g.logits = d_logits.as<float>(); g.correction_bias = d_bias.as<float>();
  g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
  ASSERT_TRUE(MoeRouting(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto ids = testing::ToHost<int32_t>(d_ids, T * k);
  const auto w = testing::ToHost<float>(d_w, T * k);
  int differing = 0;
  std::vector<float> got_w, ref_w;
  for (int t = 0; t < T; ++t) {
    if (!std::equal(ids.begin() + t * k, ids.begin() + (t + 1) * k, want_ids.begin() + t * k)) {
      ++differing;
      continue;
    }
    got_w.insert(got_w.end(), w.begin() + t * k, w.begin() + (t + 1) * k);
    ref_w.insert(ref_w.end(), want_w.begin() + t * k, want_w.begin() + (t + 1) * k);
  }
  EXPECT_LE(differing, std::max(1, T / 500)) << "tokens routed differently (near-ties allowed)";
  EXPECT_LE(testing::RelativeError(got_w, ref_w), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, MoeRoutingCudaTest,
    ::testing::Values(
        RouteCase{1, 8, 2, 1, 1, MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, false},
        RouteCase{1000, 64, 6, 1, 1, MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, false},  // V2-Lite
        RouteCase{777, 160, 6, 8, 3, MoeScoring::kSoftmax, MoeTopkMethod::kGroupLimitedGreedy, false},  // V2
        RouteCase{1000, 256, 8, 8, 4, MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, true},  // V3
        RouteCase{33, 16, 4, 4, 1, MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, true},  // masked -inf picks
        RouteCase{64, 32, 8, 4, 2, MoeScoring::kSoftmax, MoeTopkMethod::kGroupLimitedGreedy, true}));

// (tokens, hidden, inter, experts, top_k, skewed)
using ExpertsCase = std::tuple<int, int, int, int, int, bool>;
class MoeExpertsCudaTest : public ::testing::TestWithParam<ExpertsCase> {};

// Every CUDA path (and kSm90's every tile configuration) against one CPU reference.
TEST_P(MoeExpertsCudaTest, EveryPathMatchesCpu) {
  const auto [T, H, I, E, k, skewed] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto x = testing::RandomVector(static_cast<size_t>(T) * H, seed);
  const float su = 1.0f / std::sqrt(static_cast<float>(H)), sd = 1.0f / std::sqrt(static_cast<float>(I));
  auto gate_up = testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -2 * su, 2 * su);
  auto down = testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -2 * sd, 2 * sd);
  testing::RoundToBf16(x); testing::RoundToBf16(gate_up); testing::RoundToBf16(down);
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(T * k);
  std::vector<float> weights = testing::RandomVector(T * k, seed + 3, 0.1f, 1.0f);
  std::vector<int> perm(E);
  for (int t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    if (!skewed) std::shuffle(perm.begin(), perm.end(), rng);  // skewed: every token picks 0..k-1
    std::copy(perm.begin(), perm.begin() + k, ids.begin() + t * k);
  }
  MoeExpertsParams p;
  p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
  std::vector<float> want(static_cast<size_t>(T) * H);
  std::vector<uint8_t> ws(MoeExpertsWorkspaceBytes(p));
  p.x = x.data(); p.topk_ids = ids.data(); p.topk_weights = weights.data(); p.gate_up = gate_up.data();
  p.down = down.data(); p.out = want.data(); p.workspace = ws.data(); p.workspace_bytes = ws.size();
  ASSERT_TRUE(MoeExperts(p, KernelContext{}).ok());

  MoeExpertsParams g = p;
  g.dtype = DType::kBF16;
  auto d_x = testing::ToDeviceBf16(x), d_gu = testing::ToDeviceBf16(gate_up), d_dn = testing::ToDeviceBf16(down);
  auto d_ids = testing::ToDevice(ids);
  auto d_w = testing::ToDevice(weights);
  g.x = d_x.get(); g.gate_up = d_gu.get(); g.down = d_dn.get(); g.topk_ids = d_ids.as<int32_t>();
  g.topk_weights = d_w.as<float>();
  std::vector<std::pair<MoeExpertsPath, int>> variants = {
      {MoeExpertsPath::kAuto, -1}, {MoeExpertsPath::kStream, -1}, {MoeExpertsPath::kTiled, -1}};
  for (int v = 0; v < 4; ++v) variants.push_back({MoeExpertsPath::kSm90, v});
  for (const auto& [path, variant] : variants) {
    SCOPED_TRACE(::testing::Message() << "path=" << static_cast<int>(path) << " sm90_variant=" << variant);
    g.path = path;
    g.sm90_variant = variant;
    auto d_out = testing::PoisonedBf16(want.size());
    testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(g));
    MLASERVE_CUDA_ASSERT(cudaMemset(d_ws.get(), 0xff, d_ws.bytes()));  // poison the workspace too
    g.out = d_out.get(); g.workspace = d_ws.get(); g.workspace_bytes = d_ws.bytes();
    ASSERT_TRUE(MoeExperts(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_LE(testing::RelativeError(testing::ToHostBf16(d_out, want.size()), want), 1e-2);
  }
}

// Every path on every shape: the stream path also on many tokens per expert (passes of 16),
// ragged K (200, 96: not a multiple of the 64-column stage), idle experts (skewed), and
// V2-Lite's expert shape; the Hopper grouped GEMM with experts of 0, 1 and hundreds of rows.
INSTANTIATE_TEST_SUITE_P(Shapes, MoeExpertsCudaTest,
                         ::testing::Values(ExpertsCase{1, 64, 32, 8, 2, false},
                                           ExpertsCase{7, 256, 128, 16, 4, false},
                                           ExpertsCase{16, 2048, 1408, 64, 6, false},
                                           ExpertsCase{300, 512, 200, 64, 6, false},
                                           ExpertsCase{130, 256, 96, 32, 8, true},
                                           ExpertsCase{64, 2048, 1408, 64, 6, false},
                                           ExpertsCase{1000, 512, 264, 64, 6, true}));

// Determinism: two runs on the same inputs give the same bytes, in the output and in the whole
// workspace (the sort is stable, so the sorted assignment ids at the head of the workspace are
// grouped by expert in ascending assignment order; parts no kernel writes keep the identical
// poison). Hot experts (every token picks experts 0..k-1 in a shuffled order) make many
// lanes of a warp collide on one expert, where an atomic slot counter would race.
class MoeExpertsDeterminismTest : public ::testing::TestWithParam<std::tuple<int, int, int, int, int>> {};

TEST_P(MoeExpertsDeterminismTest, TwoRunsAreBitwiseEqualAndTheSortIsStable) {
  const auto [T, H, I, E, k] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto x = testing::RandomVector(static_cast<size_t>(T) * H, seed);
  auto gate_up = testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -0.1f, 0.1f);
  auto down = testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -0.1f, 0.1f);
  std::vector<float> weights = testing::RandomVector(static_cast<size_t>(T) * k, seed + 3, 0.1f, 1.0f);
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(T) * k);
  std::vector<int> perm(E);
  for (int t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    // Half the tokens pick the hot experts 0..k-1 (shuffled), the rest random distinct ones.
    std::shuffle(perm.begin(), t % 2 == 0 ? perm.begin() + k : perm.end(), rng);
    std::copy(perm.begin(), perm.begin() + k, ids.begin() + static_cast<size_t>(t) * k);
  }
  MoeExpertsParams g;
  g.dtype = DType::kBF16;
  g.num_tokens = T; g.hidden = H; g.inter = I; g.num_experts = E; g.top_k = k;
  auto d_x = testing::ToDeviceBf16(x), d_gu = testing::ToDeviceBf16(gate_up), d_dn = testing::ToDeviceBf16(down);
  auto d_ids = testing::ToDevice(ids);
  auto d_w = testing::ToDevice(weights);
  g.x = d_x.get(); g.gate_up = d_gu.get(); g.down = d_dn.get(); g.topk_ids = d_ids.as<int32_t>();
  g.topk_weights = d_w.as<float>();
  const size_t ws_bytes = MoeExpertsWorkspaceBytes(g);
  const size_t out_n = static_cast<size_t>(T) * H;
  std::vector<uint16_t> out[2];
  std::vector<uint8_t> ws[2];
  for (int run = 0; run < 2; ++run) {
    auto d_out = testing::PoisonedBf16(out_n);
    testing::DeviceBuffer d_ws(ws_bytes);
    MLASERVE_CUDA_ASSERT(cudaMemset(d_ws.get(), 0xa5, ws_bytes));
    g.out = d_out.get(); g.workspace = d_ws.get(); g.workspace_bytes = ws_bytes;
    ASSERT_TRUE(MoeExperts(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    out[run] = testing::ToHost<uint16_t>(d_out, out_n);
    ws[run] = testing::ToHost<uint8_t>(d_ws, ws_bytes);
  }
  EXPECT_EQ(testing::CountNan(testing::FromBf16(out[0])), 0u);
  EXPECT_TRUE(out[0] == out[1]) << "output differs between two runs";
  EXPECT_TRUE(ws[0] == ws[1]) << "workspace differs between two runs";
  // Head of the workspace (moe.cc's layout): the sorted assignment ids, [T * k] int32.
  std::vector<int32_t> sorted(static_cast<size_t>(T) * k);
  std::memcpy(sorted.data(), ws[0].data(), sorted.size() * sizeof(int32_t));
  for (size_t r = 1; r < sorted.size(); ++r) {
    const int32_t a = sorted[r - 1], b = sorted[r];
    ASSERT_TRUE(ids[a] < ids[b] || (ids[a] == ids[b] && a < b))
        << "row " << r << ": assignment " << b << " (expert " << ids[b] << ") after " << a
        << " (expert " << ids[a] << ")";
  }
}

// (tokens, hidden, inter, experts, top_k): the fixture's 8 experts, V2-Lite's 64, and 512,
// whose sort needs more than 48 KiB of shared memory (33 * 4 bytes per expert).
INSTANTIATE_TEST_SUITE_P(Shapes, MoeExpertsDeterminismTest,
                         ::testing::Values(std::tuple{1, 64, 32, 8, 2}, std::tuple{517, 128, 48, 64, 6},
                                           std::tuple{2048, 64, 32, 512, 8}));

// Routing ties: tokens whose logits are all equal pick experts 0..k-1 (lower index first),
// the same ids and weights on two runs.
TEST(MoeRoutingDeterminismTest, TiedLogitsPickTheLowestExpertsOnEveryRun) {
  const int T = 300, E = 64, k = 6;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto logits = testing::RandomVector(static_cast<size_t>(T) * E, seed, -3.0f, 3.0f);
  for (int t = 0; t < T; t += 3) std::fill_n(logits.begin() + static_cast<size_t>(t) * E, E, 0.5f);
  for (const auto method : {MoeTopkMethod::kGreedy, MoeTopkMethod::kGroupLimitedGreedy, MoeTopkMethod::kNoauxTc}) {
    SCOPED_TRACE(::testing::Message() << "method=" << static_cast<int>(method));
    MoeRoutingParams g;
    g.num_tokens = T; g.num_experts = E; g.top_k = k; g.n_group = 8; g.topk_group = 4;
    g.scoring = method == MoeTopkMethod::kNoauxTc ? MoeScoring::kSigmoid : MoeScoring::kSoftmax;
    g.method = method;
    auto d_logits = testing::ToDevice(logits);
    g.logits = d_logits.as<float>();
    std::vector<int32_t> ids[2];
    std::vector<float> w[2];
    for (int run = 0; run < 2; ++run) {
      auto d_ids = testing::ToDevice(std::vector<int32_t>(T * k, -1));
      auto d_w = testing::PoisonedF32(T * k);
      g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
      ASSERT_TRUE(MoeRouting(g, KernelContext{Backend::kCuda, nullptr}).ok());
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      ids[run] = testing::ToHost<int32_t>(d_ids, T * k);
      w[run] = testing::ToHost<float>(d_w, T * k);
    }
    EXPECT_EQ(ids[0], ids[1]);
    EXPECT_EQ(std::memcmp(w[0].data(), w[1].data(), w[0].size() * sizeof(float)), 0);
    for (int t = 0; t < T; t += 3) {
      for (int j = 0; j < k; ++j) EXPECT_EQ(ids[0][t * k + j], j) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace mlaserve::kernels
