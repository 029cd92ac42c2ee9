// The router projection fused into the decode step's routing + permutation kernel
// (MoeRouterProjection, moe_router_permute.cu), against what it replaces: its logits against a
// double-precision dot product (f32 tolerance), its picks and permutation bit for bit against
// RoutePermuteKernel run on its own logits, the picks against the CPU routing of the exact
// logits, the permutation's invariants; the launch replayed in a CUDA graph (the ticket resets,
// the same bits every time); a whole experts call with the fused router against the unfused
// call on the same logits; where it is refused. Fresh random inputs, outputs poisoned first,
// tokens drawn so no two candidate scores sit within kMargin of each other at a selection
// boundary (the routing is then stable under the logits' f32 rounding).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/api.h"
#include "kernels/moe/block_trace.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::DeviceBuffer;

const KernelContext kCuda{Backend::kCuda, nullptr};
constexpr double kMargin = 1e-4;      // score gap kept at every selection boundary
constexpr double kLogitTol = 1e-5;    // of sum |w x|: f32 sums of <= 16384 exact products
constexpr int kMaxDraws = 200;        // x rows drawn per token before giving up

enum class Method { kGreedySoftmax, kNoauxSigmoid };

// The routing of a shape: V2-Lite's greedy softmax (scaled, not normalised), or V3's noaux_tc
// sigmoid with a correction bias, 8 groups, normalised and scaled.
MoeRoutingParams RoutingOf(Method m, int T, int E) {
  MoeRoutingParams r;
  r.num_tokens = T;
  r.num_experts = E;
  if (m == Method::kGreedySoftmax) {
    r.top_k = 6;
    r.routed_scaling_factor = 1.5f;
  } else {
    r.top_k = 8;
    r.n_group = 8;
    r.topk_group = E >= 256 ? 4 : 3;
    r.scoring = MoeScoring::kSigmoid;
    r.method = MoeTopkMethod::kNoauxTc;
    r.norm_topk_prob = true;
    r.routed_scaling_factor = 2.5f;
  }
  return r;
}

// Whether every selection of `r` over these exact logits of one token is kMargin clear:
// the top topk_group group scores (and the next one), and the top_k + 1 best kept choices.
bool ClearOfTies(const MoeRoutingParams& r, const std::vector<double>& logits, const std::vector<float>& bias) {
  const int E = r.num_experts;
  std::vector<double> scores(E), choice(E);
  if (r.scoring == MoeScoring::kSoftmax) {
    const double m = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += (scores[e] = std::exp(logits[e] - m));
    for (auto& s : scores) s /= sum;
  } else {
    for (int e = 0; e < E; ++e) scores[e] = 1.0 / (1.0 + std::exp(-logits[e]));
  }
  const bool noaux = r.method == MoeTopkMethod::kNoauxTc;
  for (int e = 0; e < E; ++e) choice[e] = scores[e] + (noaux ? bias[e] : 0.0);
  auto clear = [](std::vector<double> v, int n) {  // the n + 1 largest kMargin apart
    std::sort(v.begin(), v.end(), std::greater<>());
    for (int i = 0; i < n && i + 1 < static_cast<int>(v.size()); ++i) {
      if (v[i] - v[i + 1] < kMargin) return false;
    }
    return true;
  };
  std::vector<double> kept = choice;
  if (r.method != MoeTopkMethod::kGreedy) {
    const int size = E / r.n_group;
    std::vector<double> group(r.n_group);
    for (int g = 0; g < r.n_group; ++g) {
      std::vector<double> c(choice.begin() + g * size, choice.begin() + (g + 1) * size);
      std::sort(c.begin(), c.end(), std::greater<>());
      group[g] = noaux ? c[0] + c[1] : c[0];
      if (noaux && c[1] - c[2] < kMargin) return false;  // the pair summed is unambiguous
    }
    if (!clear(group, r.topk_group)) return false;
    std::vector<int> order(r.n_group);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return group[a] > group[b]; });
    kept.clear();
    for (int i = 0; i < r.topk_group; ++i) {
      kept.insert(kept.end(), choice.begin() + order[i] * size, choice.begin() + (order[i] + 1) * size);
    }
  }
  return clear(kept, r.top_k);
}

// A router of E rows over hidden H, T tokens of x (bf16 values), a correction bias, and the
// exact logits; each token's x drawn until its routing is clear of ties.
struct Router {
  int T, E, H;
  std::vector<float> w, x, bias;
  std::vector<double> exact, abs_sum;  // [T, E]: the dot products and their sum |w x|
  DeviceBuffer d_w, d_x, d_bias;

  Router(const MoeRoutingParams& r, int hidden, uint64_t seed) : T(r.num_tokens), E(r.num_experts), H(hidden) {
    const float a = 6.0f / std::sqrt(static_cast<float>(H));  // logits of std ~2
    w = testing::RandomVector(static_cast<size_t>(E) * H, seed, -a, a);
    testing::RoundToBf16(w);
    bias = testing::RandomVector(E, seed + 1, -0.1f, 0.1f);
    x.resize(static_cast<size_t>(T) * H);
    exact.resize(static_cast<size_t>(T) * E);
    abs_sum.resize(exact.size());
    for (int t = 0; t < T; ++t) {
      bool clear = false;
      for (int draw = 0; draw < kMaxDraws && !clear; ++draw) {
        std::vector<float> row = testing::RandomVector(H, seed + 1000 * (t + 1) + draw);
        testing::RoundToBf16(row);
        std::vector<double> logits(E);
        for (int e = 0; e < E; ++e) {
          double s = 0, sa = 0;
          for (int h = 0; h < H; ++h) {
            const double p = static_cast<double>(w[static_cast<size_t>(e) * H + h]) * row[h];
            s += p;
            sa += std::abs(p);
          }
          logits[e] = s;
          exact[static_cast<size_t>(t) * E + e] = s;
          abs_sum[static_cast<size_t>(t) * E + e] = sa;
        }
        clear = ClearOfTies(r, logits, bias);
        std::copy(row.begin(), row.end(), x.begin() + static_cast<size_t>(t) * H);
      }
      EXPECT_TRUE(clear) << "token " << t << ": no tie-free draw";
    }
    d_w = testing::ToDeviceBf16(w);
    d_x = testing::ToDeviceBf16(x);
    d_bias = testing::ToDevice(bias);
  }
};

// The permutation's outputs of one launch, on poisoned buffers.
struct Permuted {
  int A, E;
  DeviceBuffer logits, ids, weights, sorted, offsets, tile_offsets, position, active, chunk_counts;
  Permuted(int T, int E_, int k) : A(T * k), E(E_) {
    logits = testing::PoisonedF32(static_cast<size_t>(T) * E);
    ids = testing::ToDevice(std::vector<int32_t>(A, -7));
    weights = testing::PoisonedF32(A);
    for (auto* b : {&sorted, &position}) *b = testing::ToDevice(std::vector<int32_t>(A, 0x7f7f7f7f));
    for (auto* b : {&offsets, &tile_offsets, &active}) {
      *b = testing::ToDevice(std::vector<int32_t>(E + 1, 0x7f7f7f7f));
    }
    chunk_counts = DeviceBuffer(moe_cuda::PermuteScratchBytes(A, E));
  }
  moe_cuda::PermuteArgs Args(const MoeRoutingParams* r) const {
    moe_cuda::PermuteArgs a{ids.as<int32_t>(), A, E, r->top_k, nullptr, 0, nullptr, sorted.as<int32_t>(),
                            offsets.as<int32_t>(), tile_offsets.as<int32_t>(), position.as<int32_t>(),
                            active.as<int32_t>(), chunk_counts.as<int32_t>()};
    a.routing = r;
    return a;
  }
  struct Host {
    std::vector<float> logits, weights;
    std::vector<int32_t> ids, sorted, offsets, tile_offsets, position, active;
  };
  Host Read(int T) const {
    Host h;
    h.logits = testing::ToHost<float>(logits, static_cast<size_t>(T) * E);
    h.weights = testing::ToHost<float>(weights, A);
    h.ids = testing::ToHost<int32_t>(ids, A);
    h.sorted = testing::ToHost<int32_t>(sorted, A);
    h.position = testing::ToHost<int32_t>(position, A);
    h.offsets = testing::ToHost<int32_t>(offsets, E + 1);
    h.tile_offsets = testing::ToHost<int32_t>(tile_offsets, E + 1);
    h.active = testing::ToHost<int32_t>(active, E + 1);
    h.active.resize(std::max(0, std::min(E, h.active[E])));  // the listed experts only
    h.active.push_back(testing::ToHost<int32_t>(active, E + 1)[E]);
    return h;
  }
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two runs' picks (ids, weights bit for bit) and permutation equal; `what` names the second run.
void ExpectSamePicksAndPermutation(const Permuted::Host& got, const Permuted::Host& want, const char* what) {
  EXPECT_EQ(got.ids, want.ids) << what;
  EXPECT_TRUE(SameBits(got.weights, want.weights)) << "topk weights differ from " << what;
  EXPECT_EQ(got.sorted, want.sorted) << what;
  EXPECT_EQ(got.offsets, want.offsets) << what;
  EXPECT_EQ(got.tile_offsets, want.tile_offsets) << what;
  EXPECT_EQ(got.position, want.position) << what;
  EXPECT_EQ(got.active, want.active) << what;
}

// The router projection the fused kernel computes (bf16 weight and x; logits == the routing's).
MoeRouterProjection Projection(const void* weight, const void* x, int hidden, float* logits,
                               uint32_t* ticket) {
  return {DType::kBF16, weight, x, hidden, logits, ticket};
}

// The fused routing of `router` into `out`: the params it launches with.
MoeRoutingParams FusedRouting(const MoeRoutingParams& base, const Router& router, const Permuted& out,
                              uint32_t* ticket) {
  MoeRoutingParams r = base;
  r.correction_bias = r.method == MoeTopkMethod::kNoauxTc ? router.d_bias.as<float>() : nullptr;
  r.logits = out.logits.as<float>();
  r.topk_ids = out.ids.as<int32_t>();
  r.topk_weights = out.weights.as<float>();
  r.router = Projection(router.d_w.get(), router.d_x.get(), router.H, out.logits.as<float>(), ticket);
  return r;
}

// (tokens, experts, hidden, method)
using FusedCase = std::tuple<int, int, int, Method>;
class MoeRouterPermuteTest : public ::testing::TestWithParam<FusedCase> {};

TEST_P(MoeRouterPermuteTest, MatchesTheGemmFreeReferenceAndTheUnfusedKernel) {
  const auto [T, E, H, method] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const MoeRoutingParams base = RoutingOf(method, T, E);
  const int k = base.top_k, A = T * k;
  Router router(base, H, seed);
  auto ticket = testing::ToDevice(std::vector<uint32_t>{0});
  Permuted fused(T, E, k);
  const MoeRoutingParams r = FusedRouting(base, router, fused, ticket.as<uint32_t>());
  const moe_cuda::PermuteArgs fa = fused.Args(&r);
  ASSERT_TRUE(moe_cuda::RouterPermuteRuns(fa));
  const absl::Status st = moe_cuda::LaunchPermute(fa, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const Permuted::Host got = fused.Read(T);
  EXPECT_EQ(testing::ToHost<uint32_t>(ticket, 1)[0], 0u) << "the last CTA resets the ticket";

  // The ticket form (MLASERVE_MOE_ROUTER_CLUSTER=0; the cluster form takes up to 4 tokens of at
  // most 64 experts over hidden <= 2048, the others run the ticket form either way): the same
  // bits everywhere.
  {
    testing::ScopedEnv ticket_form("MLASERVE_MOE_ROUTER_CLUSTER", "0");
    Permuted other(T, E, k);
    const MoeRoutingParams r2 = FusedRouting(base, router, other, ticket.as<uint32_t>());
    ASSERT_TRUE(moe_cuda::LaunchPermute(other.Args(&r2), nullptr).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const Permuted::Host o = other.Read(T);
    EXPECT_TRUE(SameBits(o.logits, got.logits)) << "the forms' logits differ";
    ExpectSamePicksAndPermutation(got, o, "the ticket form");
    EXPECT_EQ(testing::ToHost<uint32_t>(ticket, 1)[0], 0u) << "the ticket form's last CTA resets the ticket";
  }

  // Logits: within f32 rounding of the exact dot products.
  for (size_t i = 0; i < got.logits.size(); ++i) {
    ASSERT_LE(std::abs(got.logits[i] - router.exact[i]), kLogitTol * router.abs_sum[i] + 1e-30)
        << "logit " << i << " (token " << i / E << ", expert " << i % E << ")";
  }

  // The unfused kernel (RoutePermuteKernel) on these logits: the same picks and permutation.
  Permuted unfused(T, E, k);
  MLASERVE_CUDA_ASSERT(cudaMemcpy(unfused.logits.get(), fused.logits.get(), got.logits.size() * 4,
                                  cudaMemcpyDeviceToDevice));
  MoeRoutingParams plain = base;
  plain.correction_bias = r.correction_bias;
  plain.logits = unfused.logits.as<float>();
  plain.topk_ids = unfused.ids.as<int32_t>();
  plain.topk_weights = unfused.weights.as<float>();
  ASSERT_TRUE(moe_cuda::LaunchPermute(unfused.Args(&plain), nullptr).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const Permuted::Host want = unfused.Read(T);
  ExpectSamePicksAndPermutation(got, want, "RoutePermuteKernel's");

  // The CPU routing of the exact logits (rounded to f32): the same ids, weights to f32 rounding.
  std::vector<float> exact_f32(router.exact.begin(), router.exact.end());
  std::vector<int32_t> cpu_ids(A);
  std::vector<float> cpu_w(A);
  MoeRoutingParams cpu = base;
  cpu.correction_bias = method == Method::kNoauxSigmoid ? router.bias.data() : nullptr;
  cpu.logits = exact_f32.data();
  cpu.topk_ids = cpu_ids.data();
  cpu.topk_weights = cpu_w.data();
  ASSERT_TRUE(MoeRoutingCpu(cpu).ok());
  EXPECT_EQ(got.ids, cpu_ids);
  for (int i = 0; i < A; ++i) EXPECT_NEAR(got.weights[i], cpu_w[i], 1e-4 * std::abs(cpu_w[i]) + 1e-6) << i;

  // The permutation's invariants: every pick once, experts in order, tokens in order within one.
  ASSERT_EQ(got.offsets[0], 0);
  ASSERT_EQ(got.offsets[E], A);
  std::vector<int32_t> listed;
  int tiles = 0;
  for (int e = 0; e < E; ++e) {
    const int rows = got.offsets[e + 1] - got.offsets[e];
    ASSERT_GE(rows, 0) << "expert " << e;
    EXPECT_EQ(got.tile_offsets[e], tiles) << "expert " << e;
    tiles += (rows + moe_cuda::kTiledRows - 1) / moe_cuda::kTiledRows;
    if (rows > 0) listed.push_back(e);
    for (int row = got.offsets[e]; row < got.offsets[e + 1]; ++row) {
      const int i = got.sorted[row];
      ASSERT_TRUE(i >= 0 && i < A) << "row " << row;
      EXPECT_EQ(got.ids[i], e) << "row " << row;
      EXPECT_EQ(got.position[i], row) << "pick " << i;
      if (row > got.offsets[e]) EXPECT_LT(got.sorted[row - 1], i) << "row " << row;
    }
  }
  EXPECT_EQ(got.tile_offsets[E], tiles);
  listed.push_back(static_cast<int32_t>(listed.size()));
  EXPECT_EQ(got.active, listed);
}

// The decode fold's token counts, V2-Lite's / V2's / V3's expert counts (and 32: the cluster
// form with CTAs that own no expert; 384: the 16-a-lane routing), V2-Lite's and V3's hidden
// sizes; both routings.
INSTANTIATE_TEST_SUITE_P(Shapes, MoeRouterPermuteTest,
                         ::testing::Combine(::testing::Values(1, 3, 8, 16), ::testing::Values(32, 64, 160, 256, 384),
                                            ::testing::Values(2048, 7168),
                                            ::testing::Values(Method::kGreedySoftmax, Method::kNoauxSigmoid)));

// The launch captured in a CUDA graph and replayed 3 times: the bits of the eager launch each
// time (the last CTA leaves the ticket 0 for the next replay).
TEST(MoeRouterPermuteGraphTest, ReplaysGiveTheSameBits) {
  for (const Method method : {Method::kGreedySoftmax, Method::kNoauxSigmoid}) {
    const uint64_t seed = testing::FreshSeed();
    SCOPED_TRACE(::testing::Message() << "seed=" << seed << " method=" << static_cast<int>(method));
    const int T = 3, E = 256, H = 7168;
    const MoeRoutingParams base = RoutingOf(method, T, E);
    Router router(base, H, seed);
    auto ticket = testing::ToDevice(std::vector<uint32_t>{0});
    Permuted out(T, E, base.top_k);
    const MoeRoutingParams r = FusedRouting(base, router, out, ticket.as<uint32_t>());
    cudaStream_t stream;
    MLASERVE_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ASSERT_TRUE(moe_cuda::LaunchPermute(out.Args(&r), stream).ok());
    MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
    const Permuted::Host eager = out.Read(T);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    MLASERVE_CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status captured = moe_cuda::LaunchPermute(out.Args(&r), stream);
    MLASERVE_CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(captured.ok()) << captured;
    MLASERVE_CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      SCOPED_TRACE(::testing::Message() << "replay " << replay);
      Permuted poisoned(T, E, base.top_k);  // poison the outputs between replays
      for (auto [dst, src] : {std::pair{&out.logits, &poisoned.logits}, {&out.weights, &poisoned.weights},
                              {&out.ids, &poisoned.ids}, {&out.sorted, &poisoned.sorted},
                              {&out.position, &poisoned.position}, {&out.offsets, &poisoned.offsets}}) {
        MLASERVE_CUDA_ASSERT(cudaMemcpy(dst->get(), src->get(), src->bytes(), cudaMemcpyDeviceToDevice));
      }
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());  // the poison lands before the replay
      MLASERVE_CUDA_ASSERT(cudaGraphLaunch(exec, stream));
      MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
      const Permuted::Host again = out.Read(T);
      EXPECT_TRUE(SameBits(again.logits, eager.logits));
      EXPECT_TRUE(SameBits(again.weights, eager.weights));
      EXPECT_EQ(again.ids, eager.ids);
      EXPECT_EQ(again.sorted, eager.sorted);
      EXPECT_EQ(again.position, eager.position);
      EXPECT_EQ(again.offsets, eager.offsets);
      EXPECT_EQ(testing::ToHost<uint32_t>(ticket, 1)[0], 0u);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// A whole experts call (the stream path: routing + permutation, gate_up, down, combine) over
// `router`'s tokens and random experts of `inter` features, routed as `base`: Run launches it on
// poisoned outputs (and a poisoned workspace), with the router fused or routing `logits` that
// are already there.
struct ExpertsCall {
  struct Result {
    std::vector<uint16_t> out;
    std::vector<int32_t> ids;
    std::vector<float> weights;
  };
  const MoeRoutingParams& base;
  const Router& router;
  int inter;
  DeviceBuffer gate_up, down, ticket;

  ExpertsCall(const MoeRoutingParams& b, const Router& r, int I, uint64_t seed)
      : base(b),
        router(r),
        inter(I),
        gate_up(testing::ToDeviceBf16(
            testing::RandomVector(static_cast<size_t>(r.E) * 2 * I * r.H, seed + 7, -0.05f, 0.05f))),
        down(testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(r.E) * r.H * I, seed + 8, -0.05f, 0.05f))),
        ticket(testing::ToDevice(std::vector<uint32_t>{0})) {}

  void Run(bool fused, const DeviceBuffer& logits, Result* c) const {
    const int T = router.T, E = router.E, H = router.H, k = base.top_k;
    auto d_out = testing::PoisonedBf16(static_cast<size_t>(T) * H);
    auto d_ids = testing::ToDevice(std::vector<int32_t>(T * k, -7));
    auto d_w = testing::PoisonedF32(T * k);
    MoeRoutingParams r = base;
    r.logits = logits.as<float>();
    r.topk_ids = d_ids.as<int32_t>();
    r.topk_weights = d_w.as<float>();
    if (fused) {
      r.router = Projection(router.d_w.get(), router.d_x.get(), H, logits.as<float>(), ticket.as<uint32_t>());
    }
    MoeExpertsParams p;
    p.dtype = DType::kBF16;
    p.num_tokens = T; p.hidden = H; p.inter = inter; p.num_experts = E; p.top_k = k;
    p.x = router.d_x.get(); p.gate_up = gate_up.get(); p.down = down.get(); p.out = d_out.get();
    p.topk_ids = r.topk_ids;
    p.topk_weights = r.topk_weights;
    p.routing = &r;
    ASSERT_EQ(MoeExpertsFusesRouter(p, Backend::kCuda), fused);
    DeviceBuffer ws(MoeExpertsWorkspaceBytes(p));
    MLASERVE_CUDA_ASSERT(cudaMemset(ws.get(), 0xff, ws.bytes()));
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();
    const absl::Status st = MoeExperts(p, kCuda);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    c->out = testing::ToHost<uint16_t>(d_out, static_cast<size_t>(T) * H);
    c->ids = testing::ToHost<int32_t>(d_ids, T * k);
    c->weights = testing::ToHost<float>(d_w, T * k);
  }
};

// The call with the router fused against the same call routing the fused kernel's logits: the
// same bits.
TEST(MoeRouterPermuteExpertsTest, FusedRouterCallEqualsTheCallOnItsLogits) {
  const int T = 3, E = 64, H = 2048, I = 128;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const MoeRoutingParams base = RoutingOf(Method::kGreedySoftmax, T, E);
  Router router(base, H, seed);
  const ExpertsCall call(base, router, I, seed);
  auto fused_logits = testing::PoisonedF32(static_cast<size_t>(T) * E);
  ExpertsCall::Result with_router, on_logits;
  ASSERT_NO_FATAL_FAILURE(call.Run(true, fused_logits, &with_router));
  const std::vector<float> logits = testing::ToHost<float>(fused_logits, static_cast<size_t>(T) * E);
  EXPECT_EQ(testing::CountNan(logits), 0u);
  auto copy = testing::ToDevice(logits);
  ASSERT_NO_FATAL_FAILURE(call.Run(false, copy, &on_logits));
  EXPECT_EQ(with_router.ids, on_logits.ids);
  EXPECT_TRUE(SameBits(with_router.weights, on_logits.weights));
  EXPECT_TRUE(with_router.out == on_logits.out) << "the experts' outputs differ";
  EXPECT_EQ(testing::CountNan(testing::FromBf16(with_router.out)), 0u);
}

// The block trace (block_trace.h) of a one-token call with the fused router: the router, gate_up
// and down launches in that order, every block's record (SM in range, start <= wait <= end), and
// the PDL order between them: no gate_up block passes its wait before the router's last block
// ended, none of down's before gate_up's last. The outputs equal the untraced call's.
TEST(MoeBlockTraceTest, RecordsTheOneTokenLaunchesBlocks) {
  const int T = 1, E = 64, H = 2048, I = 1408;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const MoeRoutingParams base = RoutingOf(Method::kGreedySoftmax, T, E);
  Router router(base, H, seed);
  const ExpertsCall call(base, router, I, seed);
  auto run = [&](std::vector<uint16_t>* out) {
    auto logits = testing::PoisonedF32(static_cast<size_t>(T) * E);
    ExpertsCall::Result r;
    ASSERT_NO_FATAL_FAILURE(call.Run(true, logits, &r));
    *out = std::move(r.out);
  };
  std::vector<uint16_t> untraced, traced;
  ASSERT_NO_FATAL_FAILURE(run(&untraced));
  if (!moe_trace::Started()) {
    const absl::Status st = moe_trace::Start();
    ASSERT_TRUE(st.ok()) << st;
  }
  auto before = moe_trace::Read();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_NO_FATAL_FAILURE(run(&traced));
  EXPECT_TRUE(traced == untraced) << "tracing changed the output";
  auto launches = moe_trace::Read();
  ASSERT_TRUE(launches.ok()) << launches.status();
  ASSERT_EQ(launches->size(), before->size() + 3) << "one router, one gate_up and one down launch";
  const moe_trace::LaunchRecord* l = launches->data() + before->size();
  int sms = 0;
  MLASERVE_CUDA_ASSERT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const char* kKernels[] = {"router", "gate_up", "down"};
  uint64_t first_wait[3] = {}, last_end[3] = {};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(kKernels[i]);
    EXPECT_EQ(l[i].kernel, kKernels[i]);
    EXPECT_EQ(l[i].shared_slots, 0);
    ASSERT_GT(l[i].grid_x * l[i].grid_y, 0);
    // Every block of these launches runs to its end (one token: each GEMV slot is a touched
    // expert), so each wrote its record.
    EXPECT_EQ(static_cast<int>(l[i].blocks.size()), l[i].grid_x * l[i].grid_y);
    first_wait[i] = UINT64_MAX;
    for (const moe_trace::BlockRecord& b : l[i].blocks) {
      EXPECT_GE(b.sm, 0);
      EXPECT_LT(b.sm, sms);
      EXPECT_GT(b.start_ns, 0u);
      EXPECT_GE(b.wait_ns, b.start_ns) << "block " << b.bx << "," << b.by;
      EXPECT_GE(b.end_ns, b.wait_ns) << "block " << b.bx << "," << b.by;
      first_wait[i] = std::min(first_wait[i], b.wait_ns);
      last_end[i] = std::max(last_end[i], b.end_ns);
    }
  }
  EXPECT_GE(first_wait[1], last_end[0]) << "a gate_up block passed its PDL wait before the router ended";
  EXPECT_GE(first_wait[2], last_end[1]) << "a down block passed its PDL wait before gate_up ended";
}

// Where the fused router is not taken: MoeExpertsFusesRouter false, and MoeExperts / MoeRouting
// refuse a router set there (the engine then runs the GEMM and leaves it unset).
TEST(MoeRouterPermuteRefusalTest, RefusesWhatItDoesNotTake) {
  const int T = 2, E = 64, H = 2048, I = 64, k = 6;
  const MoeRoutingParams base = RoutingOf(Method::kGreedySoftmax, T, E);
  auto w = testing::ToDeviceBf16(std::vector<float>(static_cast<size_t>(E) * H + 8, 0.01f));
  auto x = testing::ToDeviceBf16(std::vector<float>(static_cast<size_t>(17) * H, 0.5f));
  auto experts = testing::ToDeviceBf16(std::vector<float>(static_cast<size_t>(E) * 2 * I * H, 0.0f));
  auto logits = testing::PoisonedF32(static_cast<size_t>(17) * E);
  auto ids = testing::ToDevice(std::vector<int32_t>(17 * k, 0));
  auto weights = testing::PoisonedF32(17 * k);
  auto out = testing::PoisonedBf16(static_cast<size_t>(17) * H);
  auto ticket = testing::ToDevice(std::vector<uint32_t>{0});
  MoeRoutingParams r = base;
  r.logits = logits.as<float>();
  r.topk_ids = ids.as<int32_t>();
  r.topk_weights = weights.as<float>();
  r.router = Projection(w.get(), x.get(), H, logits.as<float>(), ticket.as<uint32_t>());
  MoeExpertsParams p;
  p.dtype = DType::kBF16;
  p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
  p.x = x.get(); p.gate_up = experts.get(); p.down = experts.get(); p.out = out.get();
  p.topk_ids = r.topk_ids;
  p.topk_weights = r.topk_weights;
  p.routing = &r;
  ASSERT_TRUE(MoeExpertsFusesRouter(p, Backend::kCuda));
  EXPECT_FALSE(MoeExpertsFusesRouter(p, Backend::kCpu));
  auto refused = [&](const char* what, auto change) {
    SCOPED_TRACE(what);
    MoeRoutingParams rr = r;
    MoeExpertsParams pp = p;
    pp.routing = &rr;
    change(rr, pp);
    EXPECT_FALSE(MoeExpertsFusesRouter(pp, Backend::kCuda));
    DeviceBuffer ws(MoeExpertsWorkspaceBytes(pp));
    pp.workspace = ws.get();
    pp.workspace_bytes = ws.bytes();
    const absl::Status st = MoeExperts(pp, kCuda);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  };
  refused("f32 router", [](MoeRoutingParams& rr, MoeExpertsParams&) { rr.router.dtype = DType::kF32; });
  refused("17 tokens", [](MoeRoutingParams& rr, MoeExpertsParams& pp) { rr.num_tokens = pp.num_tokens = 17; });
  refused("misaligned weight", [&](MoeRoutingParams& rr, MoeExpertsParams&) {
    rr.router.weight = static_cast<const char*>(w.get()) + 2;
  });
  refused("hidden % 8", [](MoeRoutingParams& rr, MoeExpertsParams&) { rr.router.hidden = H - 4; });
  refused("no ticket", [](MoeRoutingParams& rr, MoeExpertsParams&) { rr.router.ticket = nullptr; });
  refused("logits elsewhere", [&](MoeRoutingParams& rr, MoeExpertsParams&) { rr.router.logits = weights.as<float>(); });
  refused("tiled path", [](MoeRoutingParams&, MoeExpertsParams& pp) { pp.path = MoeExpertsPath::kTiled; });
  refused("baseline permute", [](MoeRoutingParams&, MoeExpertsParams& pp) { pp.baseline.permute = true; });
  const absl::Status alone = MoeRouting(r, kCuda);
  EXPECT_EQ(alone.code(), absl::StatusCode::kInvalidArgument) << alone;
}

}  // namespace
}  // namespace mlaserve::kernels
