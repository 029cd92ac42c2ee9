// moe CUDA vs the CPU reference. Routing: ids equal per token except at near-ties (f32 scores
// on the GPU, rounded-from-double on the CPU), so at most a handful of tokens per thousand may
// differ, and where ids agree the weights agree within 1e-4. Experts (bf16): relative error
// within 1e-2 and every value within 5% of (rms + |value|), on uniform, hot and ragged
// routings (many row tiles per expert, idle experts), for every path, tile configuration and
// gate_up layout; and bit-identical to the 2026-11-24 stage kernels. The permutation, the weight
// preparation and graph capture: moe_pipeline_cuda_test.cu.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/device_arch.h"
#include "kernels/common/dram_class.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_testing.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::Routing;

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
        RouteCase{64, 32, 8, 4, 2, MoeScoring::kSoftmax, MoeTopkMethod::kGroupLimitedGreedy, true},
        // The kernel's register forms by expert count (<= 64, <= 256, <= 512 experts), each past
        // the boundary below it.
        RouteCase{500, 65, 6, 1, 1, MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, true},
        RouteCase{300, 384, 8, 1, 1, MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, true},
        RouteCase{200, 512, 8, 8, 4, MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, true}));

// (tokens, hidden, inter, experts, top_k, routing)
using ExpertsCase = std::tuple<int, int, int, int, int, Routing>;
class MoeExpertsCudaTest : public ::testing::TestWithParam<ExpertsCase> {};

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

// Every CUDA path (and kSm90's every tile configuration), with the gate_up weights stacked and
// interleaved (the fused SiLU epilogue on variants 1 and 3), against one CPU reference; and
// every one bit-identical to the same path and tile configuration run with the 2026-11-24
// stage kernels on stacked weights (one-block sort + gather, SiLU pass, 8-byte combine).
void CheckEveryPath(int T, int H, int I, int E, int k, const std::vector<int32_t>& ids, uint64_t seed) {
  if (!moe_cuda::Sm90Available()) std::printf("note: not a Hopper GPU; the kSm90 path is not tested\n");
  auto x = testing::RandomVector(static_cast<size_t>(T) * H, seed);
  const float su = 1.0f / std::sqrt(static_cast<float>(H)), sd = 1.0f / std::sqrt(static_cast<float>(I));
  auto gate_up = testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -2 * su, 2 * su);
  auto down = testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -2 * sd, 2 * sd);
  testing::RoundToBf16(x); testing::RoundToBf16(gate_up); testing::RoundToBf16(down);
  std::vector<float> weights = testing::RandomVector(static_cast<size_t>(T) * k, seed + 3, 0.1f, 1.0f);
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
  // The interleaved copy through MoePrepareExpertWeights, checked against the host form.
  auto d_gu_il = testing::ToDeviceBf16(gate_up);
  MoePrepareParams prep;
  prep.num_experts = E; prep.hidden = H; prep.inter = I; prep.gate_up = d_gu_il.get();
  prep.layout = MoeGateUpLayout::kInterleaved8;
  const auto layout = MoePrepareExpertWeights(prep, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(*layout, MoeGateUpLayout::kInterleaved8);
  ASSERT_TRUE(testing::ToHost<uint16_t>(d_gu_il, gate_up.size()) ==
              testing::InterleaveGateUp(testing::ToBf16(gate_up), E, I, H));
  auto d_ids = testing::ToDevice(ids);
  auto d_w = testing::ToDevice(weights);
  g.x = d_x.get(); g.down = d_dn.get(); g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
  auto run = [&](MoeExpertsParams q, std::vector<uint16_t>* out) {
    auto d_out = testing::PoisonedBf16(want.size());
    testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(q));
    MLASERVE_CUDA_ASSERT(cudaMemset(d_ws.get(), 0xff, d_ws.bytes()));  // poison the workspace too
    q.out = d_out.get(); q.workspace = d_ws.get(); q.workspace_bytes = d_ws.bytes();
    const absl::Status st = MoeExperts(q, KernelContext{Backend::kCuda, nullptr});
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    *out = testing::ToHost<uint16_t>(d_out, want.size());
  };
  for (const PathConfig& c : EveryPathConfig()) {
    g.path = c.path;
    g.sm90_variant = c.sm90_variant;
    std::vector<uint16_t> baseline;
    {
      SCOPED_TRACE(::testing::Message() << "path=" << static_cast<int>(c.path) << " sm90_variant="
                                        << c.sm90_variant << " baseline stages, stacked");
      MoeExpertsParams b = g;
      b.gate_up = d_gu.get();
      b.gate_up_layout = MoeGateUpLayout::kStacked;
      b.baseline = {true, true, true};
      ASSERT_NO_FATAL_FAILURE(run(b, &baseline));
      const auto got = testing::FromBf16(baseline);
      EXPECT_LE(testing::RelativeError(got, want), 1e-2);
      EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);
    }
    for (const MoeGateUpLayout gl : {MoeGateUpLayout::kStacked, MoeGateUpLayout::kInterleaved8}) {
      SCOPED_TRACE(::testing::Message() << "path=" << static_cast<int>(c.path) << " sm90_variant="
                                        << c.sm90_variant << " layout=" << static_cast<int>(gl));
      g.gate_up = gl == MoeGateUpLayout::kStacked ? d_gu.get() : d_gu_il.get();
      g.gate_up_layout = gl;
      std::vector<uint16_t> out;
      ASSERT_NO_FATAL_FAILURE(run(g, &out));
      const auto got = testing::FromBf16(out);
      EXPECT_LE(testing::RelativeError(got, want), 1e-2);
      EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);
      EXPECT_TRUE(out == baseline) << "differs from the baseline stages in "
                                   << [&] { size_t n = 0; for (size_t i = 0; i < out.size(); ++i) n += out[i] != baseline[i]; return n; }()
                                   << " of " << out.size() << " values";
    }
  }
}

TEST_P(MoeExpertsCudaTest, EveryPathMatchesCpuAndTheBaselineBitwise) {
  const auto [T, H, I, E, k, routing] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " routing=" << testing::RoutingName(routing));
  CheckEveryPath(T, H, I, E, k, testing::MakeRouting(T, E, k, routing, seed + 4), seed);
}

// Experts whose row counts sit on each side of the 64- and 128-row tile boundaries (and one with
// none), top_k 1, the tokens in a shuffled order: every tile configuration's last tile of an
// expert full, one row past full, or with rows in its first 64-row half only (the fiftieth
// session's half-skipping variant, not kept, ran here; docs/BENCHMARKS.md).
TEST(MoeExpertsTileBoundaryCudaTest, EveryPathMatchesCpuAndTheBaselineBitwise) {
  const std::vector<int> counts = {1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 0, 320, 100};
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::vector<int32_t> ids;
  for (size_t e = 0; e < counts.size(); ++e) ids.insert(ids.end(), counts[e], static_cast<int32_t>(e));
  std::mt19937_64 rng(seed + 4);
  std::shuffle(ids.begin(), ids.end(), rng);
  CheckEveryPath(static_cast<int>(ids.size()), 256, 136, static_cast<int>(counts.size()), 1, ids, seed);
}

// kAuto's tile configuration per product (moe_experts.cu, ChooseSm90Variants), on a 132-SM
// GPU with the H200's DRAM (not lean): our ping-pong 64 x 256 kernel (variant 14) for both at
// 65-288 rows an expert with hidden <= 4096; else gate_up on 128 x 256 from 512 rows an expert,
// else ping-pong 64 x 256; down on ping-pong 64 x 256 with the register-stored epilogue (variant 8)
// above 64 rows and on 128 x 256 from 1024; at most 64 rows ping-pong 64 x 256, except where
// ping-pong 64 x 128 spreads a weight-bound product over the SMs by 5 points more (V2-Lite gate_up
// at 24-64 rows: 704 tiles of 64 x 256 on 132 SMs against 1408; not its down, 512 against 1024,
// nor V3's 4096 against 8192). With the H100's DRAM (lean), the cooperative 128 x 256 tile for
// both products from 224 rows where our ping-pong kernel does not run (V2-Lite above 288 rows,
// V3 from 224); the rest is the same. The choices the benchmarks measured (H200 2026-12-01,
// H100 2026-12-05 and 2026-12-06).
TEST(MoeExpertsPlanTest, TileConfigurationByShapeAndDram) {
  struct Case {
    int tokens, hidden, inter, experts, top_k, gate_up, down, lean_gate_up, lean_down;
  };
  const Case cases[] = {
      {256, 2048, 1408, 64, 6, 13, 3, 13, 3},    {512, 2048, 1408, 64, 6, 13, 3, 13, 3},
      {640, 2048, 1408, 64, 6, 13, 3, 13, 3},    {704, 2048, 1408, 64, 6, 14, 14, 14, 14},
      {768, 2048, 1408, 64, 6, 14, 14, 14, 14},  {1024, 2048, 1408, 64, 6, 14, 14, 14, 14},
      {2048, 2048, 1408, 64, 6, 14, 14, 14, 14}, {3072, 2048, 1408, 64, 6, 14, 14, 14, 14},
      {3073, 2048, 1408, 64, 6, 3, 8, 1, 1},     {4096, 2048, 1408, 64, 6, 3, 8, 1, 1},
      {5461, 2048, 1408, 64, 6, 3, 8, 1, 1},     {5462, 2048, 1408, 64, 6, 1, 8, 1, 1},
      {8192, 2048, 1408, 64, 6, 1, 8, 1, 1},     {10922, 2048, 1408, 64, 6, 1, 8, 1, 1},
      {10923, 2048, 1408, 64, 6, 1, 1, 1, 1},    {16384, 2048, 1408, 64, 6, 1, 1, 1, 1},
      {1024, 7168, 2048, 256, 8, 3, 3, 3, 3},    {2048, 7168, 2048, 256, 8, 3, 3, 3, 3},
      {4096, 7168, 2048, 256, 8, 3, 8, 3, 8},    {7167, 7168, 2048, 256, 8, 3, 8, 3, 8},
      {7168, 7168, 2048, 256, 8, 3, 8, 1, 1},
      {8192, 7168, 2048, 256, 8, 3, 8, 1, 1},    {16384, 7168, 2048, 256, 8, 1, 8, 1, 1},
  };
  // The nominal DRAM bytes per SM clock (cuda::CurrentDeviceDramBytesPerSmClock) of an H200-class
  // and of the H100 SXM (2 x 2.619 GHz x 640 B / (132 x 1.98 GHz)); 0 = unknown, taken as not lean.
  constexpr double kRich = 15.7, kLean = 12.8, kUnknown = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "tokens=" << c.tokens << " experts=" << c.experts);
    MoeExpertsParams p;
    p.dtype = DType::kBF16;
    p.num_tokens = c.tokens; p.hidden = c.hidden; p.inter = c.inter; p.num_experts = c.experts; p.top_k = c.top_k;
    p.gate_up_layout = MoeGateUpLayout::kInterleaved8;
    for (const double dram : {kRich, kUnknown}) {
      const moe_cuda::Sm90Choice rich = moe_cuda::ChooseSm90Variants(p, {132, dram});
      EXPECT_EQ(rich.gate_up, c.gate_up) << "dram " << dram;
      EXPECT_EQ(rich.down, c.down) << "dram " << dram;
    }
    const moe_cuda::Sm90Choice lean = moe_cuda::ChooseSm90Variants(p, {132, kLean});
    EXPECT_EQ(lean.gate_up, c.lean_gate_up);
    EXPECT_EQ(lean.down, c.lean_down);
    if (!moe_cuda::Sm90Available()) continue;
    // On this GPU the plan is the choice for its own facts, the SiLU fused into gate_up.
    const moe_cuda::ExpertsPlan plan = moe_cuda::PlanExperts(p);
    const moe_cuda::Sm90Choice here = moe_cuda::ChooseSm90Variants(p, moe_cuda::CurrentSm90Device());
    EXPECT_EQ(plan.path, MoeExpertsPath::kSm90);
    EXPECT_EQ(plan.gate_up_variant, here.gate_up);
    EXPECT_EQ(plan.down_variant, here.down);
    EXPECT_TRUE(plan.fused_silu);
  }
}

// The DRAM fact the tile choice reads, on this GPU: an H100 SXM is lean, an H200 is not (their
// nominal 12.8 and >= 15 bytes per SM clock), other GPUs only a positive value.
TEST(MoeExpertsPlanTest, DramBytesPerSmClockOfThisGpu) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) GTEST_SKIP() << "no CUDA device";
  const moe_cuda::Sm90Device d = moe_cuda::CurrentSm90Device();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const std::string name = prop.name;
  SCOPED_TRACE(name);
  EXPECT_GT(d.sms, 0);
  EXPECT_GT(d.dram_bytes_per_sm_clock, 0);
  if (name.find("H100") != std::string::npos && name.find("HBM3") != std::string::npos) {
    EXPECT_LT(d.dram_bytes_per_sm_clock, kLeanDramBytesPerSmClock);
  }
  if (name.find("H200") != std::string::npos) {
    EXPECT_GE(d.dram_bytes_per_sm_clock, kLeanDramBytesPerSmClock);
  }
  std::printf("%s: %d SMs, %.2f nominal DRAM bytes per SM clock\n", prop.name, d.sms, d.dram_bytes_per_sm_clock);
}

// Every path on every shape: decode sizes (one chunk of the permutation) and prefill sizes
// (several chunks), experts with 0 tokens and ragged counts (hot, ragged), top_k 1..12, E 2..256,
// hidden and inter that are not multiples of the tiles (136/72: K tails of the 64-column
// stages, N = 2*inter past the 128/256-column tiles; 200, 264, 520, 40), and V2-Lite's expert
// shape.
INSTANTIATE_TEST_SUITE_P(Shapes, MoeExpertsCudaTest,
                         ::testing::Values(ExpertsCase{1, 64, 32, 8, 2, Routing::kUniform},
                                           ExpertsCase{7, 256, 128, 16, 4, Routing::kUniform},
                                           ExpertsCase{16, 2048, 1408, 64, 6, Routing::kUniform},
                                           ExpertsCase{300, 512, 200, 64, 6, Routing::kUniform},
                                           ExpertsCase{130, 256, 96, 32, 8, Routing::kHot},
                                           ExpertsCase{64, 2048, 1408, 64, 6, Routing::kRagged},
                                           ExpertsCase{1000, 512, 264, 64, 6, Routing::kHot},
                                           ExpertsCase{513, 136, 72, 2, 1, Routing::kUniform},
                                           ExpertsCase{777, 264, 40, 256, 8, Routing::kRagged},
                                           ExpertsCase{2500, 128, 64, 160, 3, Routing::kRagged},
                                           ExpertsCase{97, 1032, 520, 48, 5, Routing::kRagged},
                                           ExpertsCase{200, 128, 64, 16, 12, Routing::kUniform}));

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
  auto d_gu_il = testing::ToDeviceBf16(gate_up);
  MoePrepareParams prep;
  prep.num_experts = E; prep.hidden = H; prep.inter = I; prep.gate_up = d_gu_il.get();
  prep.layout = MoeGateUpLayout::kInterleaved8;
  ASSERT_TRUE(MoePrepareExpertWeights(prep, KernelContext{Backend::kCuda, nullptr}).ok());
  // The current stages on interleaved weights (fused SiLU where kSm90 runs), then the
  // baseline stages on stacked weights.
  for (const bool baseline : {false, true}) {
    SCOPED_TRACE(::testing::Message() << (baseline ? "baseline stages" : "current stages"));
    g.gate_up = baseline ? d_gu.get() : d_gu_il.get();
    g.gate_up_layout = baseline ? MoeGateUpLayout::kStacked : MoeGateUpLayout::kInterleaved8;
    g.baseline = {baseline, baseline, baseline};
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
}

// (tokens, hidden, inter, experts, top_k): the fixture's 8 experts, V2-Lite's 64, and 512,
// whose one-block sort needs more than 48 KiB of shared memory (33 * 4 bytes per expert); 517
// and 2048 tokens span several chunks of the multi-block permutation.
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

// NaN logits (a broken upstream layer) still give every token top_k distinct experts in range
// (a NaN choice competes as -inf in the argmax rounds; without that the lanes' argmax over NaN
// need not agree, and a round could pick an expert twice): V2-Lite's, V3's and 512 experts.
TEST(MoeRoutingNanTest, NanLogitsStillPickDistinctExperts) {
  for (const int E : {64, 256, 512}) {
    const int T = 4, k = 8;
    SCOPED_TRACE(::testing::Message() << "E=" << E);
    auto logits = testing::RandomVector(static_cast<size_t>(T) * E, testing::FreshSeed(), -3.0f, 3.0f);
    logits[3] = std::nanf("");                                      // token 0: one NaN
    std::fill_n(logits.begin() + E, E, std::nanf(""));             // token 1: all NaN
    for (int e = 0; e < E; e += 2) logits[2 * E + e] = std::nanf("");  // token 2: every other
    MoeRoutingParams g;
    g.num_tokens = T; g.num_experts = E; g.top_k = k;
    auto d_logits = testing::ToDevice(logits);
    auto d_ids = testing::ToDevice(std::vector<int32_t>(T * k, -1));
    auto d_w = testing::PoisonedF32(T * k);
    g.logits = d_logits.as<float>(); g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
    ASSERT_TRUE(MoeRouting(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const auto ids = testing::ToHost<int32_t>(d_ids, T * k);
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> mine(ids.begin() + t * k, ids.begin() + (t + 1) * k);
      for (const int id : mine) EXPECT_TRUE(id >= 0 && id < E) << "token " << t << " id " << id;
      std::sort(mine.begin(), mine.end());
      EXPECT_EQ(std::adjacent_find(mine.begin(), mine.end()), mine.end()) << "token " << t << ": an expert twice";
    }
  }
}

}  // namespace
}  // namespace mlaserve::kernels
