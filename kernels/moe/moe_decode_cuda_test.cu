// The MoE block of a decode step in few launches (kernels/moe/api.h): the routing inside the
// experts call (one kernel with the permutation up to kFusedRoutingMaxTokens tokens), the
// shared experts folded into the stream kernels and the combine (MoeSharedExperts), and the
// residual add + RMSNorm epilogue of the combine (MoeResidualNorm). Each against what it
// replaces: the separate routing kernel (bitwise: ids, weights, output), a CPU f32 reference of
// routed + shared experts (bf16 tolerance), and the combine followed by kernels/norm's RmsNorm
// (bitwise); fresh random inputs, outputs poisoned first; the whole folded call captured in a
// CUDA graph and replayed on new inputs; the refusals.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_testing.h"
#include "kernels/norm/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::DeviceBuffer;

const KernelContext kCuda{Backend::kCuda, nullptr};

float Silu(float v) { return v / (1.0f + std::exp(-v)); }

// One decode-shaped MoE block on the device: x, the routed experts (stacked gate_up), the
// shared MLP, router logits, a residual and a norm weight; and its CPU f32 reference.
struct Block {
  int T, H, I, E, k, S;  // tokens, hidden, inter, experts, top_k, shared inter (0: none)
  std::vector<float> x, gate_up, down, shared_gate_up, shared_down, logits, residual, norm_w;
  DeviceBuffer d_x, d_gu, d_dn, d_sgu, d_sdn, d_logits, d_norm_w;

  Block(int tokens, int hidden, int inter, int experts, int top_k, int shared, uint64_t seed)
      : T(tokens), H(hidden), I(inter), E(experts), k(top_k), S(shared) {
    const float su = 1.0f / std::sqrt(static_cast<float>(H));
    x = testing::RandomVector(static_cast<size_t>(T) * H, seed);
    gate_up = testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -2 * su, 2 * su);
    down = testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -0.05f, 0.05f);
    shared_gate_up = testing::RandomVector(static_cast<size_t>(2) * S * H, seed + 3, -2 * su, 2 * su);
    shared_down = testing::RandomVector(static_cast<size_t>(H) * S, seed + 4, -0.05f, 0.05f);
    logits = testing::RandomVector(static_cast<size_t>(T) * E, seed + 5, -3.0f, 3.0f);
    residual = testing::RandomVector(static_cast<size_t>(T) * H, seed + 6, -2.0f, 2.0f);
    norm_w = testing::RandomVector(H, seed + 7, 0.5f, 1.5f);
    for (auto* v : {&x, &gate_up, &down, &shared_gate_up, &shared_down, &residual, &norm_w}) {
      testing::RoundToBf16(*v);
    }
    d_x = testing::ToDeviceBf16(x);
    d_gu = testing::ToDeviceBf16(gate_up);
    d_dn = testing::ToDeviceBf16(down);
    d_sgu = testing::ToDeviceBf16(shared_gate_up);
    d_sdn = testing::ToDeviceBf16(shared_down);
    d_logits = testing::ToDevice(logits);
    d_norm_w = testing::ToDeviceBf16(norm_w);
  }

  MoeRoutingParams Routing() const {  // V2-Lite's: softmax, greedy, not normalised, scaled
    MoeRoutingParams r;
    r.num_tokens = T;
    r.num_experts = E;
    r.top_k = k;
    r.routed_scaling_factor = 1.5f;
    return r;
  }

  MoeExpertsParams Experts() const {
    MoeExpertsParams p;
    p.dtype = DType::kBF16;
    p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
    p.x = d_x.get(); p.gate_up = d_gu.get(); p.down = d_dn.get();
    return p;
  }

  // out[t] = sum_j w[t, j] * expert(x[t]) + shared(x[t]) in f32 over the bf16 inputs.
  std::vector<float> Reference(const std::vector<int32_t>& ids, const std::vector<float>& w) const {
    std::vector<float> out(static_cast<size_t>(T) * H, 0.0f);
    auto mlp = [&](const float* gu, const float* dn, int inter, const float* xt, float scale, float* o) {
      std::vector<float> act(inter);
      for (int f = 0; f < inter; ++f) {
        double g = 0, u = 0;
        for (int c = 0; c < H; ++c) {
          g += static_cast<double>(gu[static_cast<size_t>(f) * H + c]) * xt[c];
          u += static_cast<double>(gu[static_cast<size_t>(inter + f) * H + c]) * xt[c];
        }
        act[f] = Silu(static_cast<float>(g)) * static_cast<float>(u);
      }
      for (int h = 0; h < H; ++h) {
        double s = 0;
        for (int f = 0; f < inter; ++f) s += static_cast<double>(dn[static_cast<size_t>(h) * inter + f]) * act[f];
        o[h] += scale * static_cast<float>(s);
      }
    };
    for (int t = 0; t < T; ++t) {
      const float* xt = x.data() + static_cast<size_t>(t) * H;
      float* o = out.data() + static_cast<size_t>(t) * H;
      for (int j = 0; j < k; ++j) {
        const int64_t e = ids[static_cast<size_t>(t) * k + j];
        mlp(gate_up.data() + e * 2 * I * H, down.data() + e * H * I, I, xt, w[static_cast<size_t>(t) * k + j], o);
      }
      if (S > 0) mlp(shared_gate_up.data(), shared_down.data(), S, xt, 1.0f, o);
    }
    return out;
  }
};

struct Outputs {
  std::vector<uint16_t> out, residual, y;
  std::vector<int32_t> ids;
  std::vector<float> w;
};

// One MoeExperts call of `p` on fresh poisoned outputs (the routing's when p.routing is set; a
// fresh copy of the block's residual when p.norm is asked for).
void RunExperts(const Block& b, MoeExpertsParams p, const MoeRoutingParams* routing, bool norm, Outputs* r) {
  const size_t th = static_cast<size_t>(b.T) * b.H, tk = static_cast<size_t>(b.T) * b.k;
  auto d_out = testing::PoisonedBf16(th), d_res = testing::ToDeviceBf16(b.residual),
       d_y = testing::PoisonedBf16(th), d_w = testing::PoisonedF32(tk);
  auto d_ids = testing::ToDevice(std::vector<int32_t>(tk, -7));
  MoeRoutingParams route;
  if (routing != nullptr) {
    route = *routing;
    route.topk_ids = d_ids.as<int32_t>();
    route.topk_weights = d_w.as<float>();
    p.routing = &route;
    p.topk_ids = route.topk_ids;
    p.topk_weights = route.topk_weights;
  } else {
    ASSERT_TRUE(cudaMemcpy(d_ids.get(), p.topk_ids, tk * 4, cudaMemcpyDeviceToDevice) == cudaSuccess);
  }
  if (norm) {
    p.norm.residual = d_res.get();
    p.norm.weight = b.d_norm_w.get();
    p.norm.y = d_y.get();
    p.norm.eps = 1e-6f;
  }
  DeviceBuffer ws(MoeExpertsWorkspaceBytes(p));
  MLASERVE_CUDA_ASSERT(cudaMemset(ws.get(), 0xff, ws.bytes()));
  p.out = d_out.get();
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  const absl::Status st = MoeExperts(p, kCuda);
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  r->out = testing::ToHost<uint16_t>(d_out, th);
  r->residual = testing::ToHost<uint16_t>(d_res, th);
  r->y = testing::ToHost<uint16_t>(d_y, th);
  r->ids = testing::ToHost<int32_t>(d_ids, tk);
  r->w = testing::ToHost<float>(d_w, tk);
}

// (tokens, hidden, inter, experts, top_k, shared inter)
using FoldCase = std::tuple<int, int, int, int, int, int>;
class MoeDecodeFoldTest : public ::testing::TestWithParam<FoldCase> {};

// The routing inside the call gives the ids, weights and output of MoeRouting followed by the
// call, bit for bit, fused into the permutation's kernel up to kFusedRoutingMaxTokens tokens.
TEST_P(MoeDecodeFoldTest, RoutingInsideTheCallEqualsRoutingFirst) {
  const auto [T, H, I, E, k, S] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  Block b(T, H, I, E, k, S, seed);
  MoeRoutingParams routing = b.Routing();
  routing.logits = b.d_logits.as<float>();
  auto d_ids = testing::ToDevice(std::vector<int32_t>(static_cast<size_t>(T) * k, -7));
  auto d_w = testing::PoisonedF32(static_cast<size_t>(T) * k);
  MoeRoutingParams first = routing;
  first.topk_ids = d_ids.as<int32_t>();
  first.topk_weights = d_w.as<float>();
  ASSERT_TRUE(MoeRouting(first, kCuda).ok());
  MoeExpertsParams p = b.Experts();
  p.topk_ids = first.topk_ids;
  p.topk_weights = first.topk_weights;
  Outputs apart, inside;
  ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &apart));
  apart.w = testing::ToHost<float>(d_w, static_cast<size_t>(T) * k);
  ASSERT_NO_FATAL_FAILURE(RunExperts(b, b.Experts(), &routing, false, &inside));
  EXPECT_EQ(inside.ids, apart.ids);
  EXPECT_EQ(std::memcmp(inside.w.data(), apart.w.data(), apart.w.size() * sizeof(float)), 0);
  EXPECT_TRUE(inside.out == apart.out) << "the outputs differ";
  moe_cuda::PermuteArgs pa{};
  pa.num_assign = T * k;
  pa.num_experts = E;
  pa.routing = &routing;
  EXPECT_EQ(moe_cuda::PermuteFusesRouting(pa), T <= moe_cuda::kFusedRoutingMaxTokens);
}

// Shared experts folded in, with and without the norm epilogue, against the f32 reference; the
// epilogue bit for bit against the folded combine followed by kernels/norm's RmsNorm.
TEST_P(MoeDecodeFoldTest, SharedExpertsAndNormEpilogueMatchTheUnfusedForms) {
  const auto [T, H, I, E, k, S] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  Block b(T, H, I, E, k, S, seed);
  const std::vector<int32_t> ids = testing::MakeRouting(T, E, k, testing::Routing::kUniform, seed + 9);
  const std::vector<float> w = testing::RandomVector(static_cast<size_t>(T) * k, seed + 10, 0.1f, 1.0f);
  auto d_ids = testing::ToDevice(ids);
  auto d_w = testing::ToDevice(w);
  MoeExpertsParams p = b.Experts();
  p.topk_ids = d_ids.as<int32_t>();
  p.topk_weights = d_w.as<float>();
  p.shared = {b.d_sgu.get(), b.d_sdn.get(), S};
  MoeExpertsParams with_norm = p;
  with_norm.norm.residual = b.d_x.get();  // any aligned pointers: only the query reads them here
  with_norm.norm.weight = b.d_norm_w.get();
  with_norm.norm.y = b.d_x.get();
  if (S > 0 && T > kMoeFoldSharedMaxTokens) {  // the separate gated MLP is faster there
    EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(p, Backend::kCuda));
    return;
  }
  ASSERT_TRUE(MoeExpertsFoldsSharedAndNorm(p, Backend::kCuda));
  ASSERT_TRUE(MoeExpertsFoldsSharedAndNorm(with_norm, Backend::kCuda));
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(p, Backend::kCpu));

  const std::vector<float> want = b.Reference(ids, w);
  Outputs shared, normed;
  ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &shared));
  const std::vector<float> got = testing::FromBf16(shared.out);
  EXPECT_LE(testing::RelativeError(got, want), 1e-2);
  EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);

  // The shared gate_up interleaved (MoePrepareExpertWeights as one expert: how the loader
  // prepares it on Hopper): the same bits, only the weight rows move.
  {
    auto d_sgu_il = testing::ToDeviceBf16(b.shared_gate_up);
    if (S > 0) {
      MoePrepareParams prep;
      prep.num_experts = 1; prep.hidden = H; prep.inter = S; prep.gate_up = d_sgu_il.get();
      prep.layout = MoeGateUpLayout::kInterleaved8;
      ASSERT_TRUE(MoePrepareExpertWeights(prep, kCuda).ok());
    }
    MoeExpertsParams il = p;
    il.shared.gate_up = S > 0 ? d_sgu_il.get() : nullptr;
    il.shared.gate_up_layout = MoeGateUpLayout::kInterleaved8;
    Outputs interleaved;
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, il, nullptr, false, &interleaved));
    EXPECT_TRUE(interleaved.out == shared.out) << "interleaved shared gate_up differs from stacked";
  }

  ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, true, &normed));
  EXPECT_TRUE(std::all_of(normed.out.begin(), normed.out.end(), [](uint16_t v) { return v == 0x7fc0; }))
      << "the norm epilogue must leave out untouched";
  // The unfused form: residual += out; y = rmsnorm(residual), by kernels/norm.
  auto d_out = testing::ToDevice(shared.out);
  auto d_res = testing::ToDeviceBf16(b.residual);
  auto d_y = testing::PoisonedBf16(static_cast<size_t>(T) * H);
  RmsNormParams n;
  n.dtype = DType::kBF16;
  n.rows = T; n.dim = H; n.x = d_out.get(); n.x_stride = H; n.residual = d_res.get();
  n.weight = b.d_norm_w.get(); n.y = d_y.get(); n.y_stride = H; n.eps = 1e-6f;
  ASSERT_TRUE(RmsNorm(n, kCuda).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_TRUE(normed.residual == testing::ToHost<uint16_t>(d_res, static_cast<size_t>(T) * H))
      << "residual differs from the combine + RmsNorm";
  EXPECT_TRUE(normed.y == testing::ToHost<uint16_t>(d_y, static_cast<size_t>(T) * H))
      << "normed output differs from the combine + RmsNorm";
  // And against the reference: residual + out, normalised.
  std::vector<float> res_want(want.size()), y_want(want.size());
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int h = 0; h < H; ++h) {
      const size_t i = static_cast<size_t>(t) * H + h;
      res_want[i] = b.residual[i] + want[i];
      ss += static_cast<double>(res_want[i]) * res_want[i];
    }
    const double inv = 1.0 / std::sqrt(ss / H + 1e-6);
    for (int h = 0; h < H; ++h) {
      const size_t i = static_cast<size_t>(t) * H + h;
      y_want[i] = static_cast<float>(b.norm_w[h] * res_want[i] * inv);
    }
  }
  EXPECT_LE(testing::RelativeError(testing::FromBf16(normed.residual), res_want), 1e-2);
  EXPECT_LE(testing::RelativeError(testing::FromBf16(normed.y), y_want), 2e-2);
}

// A hidden state stored zero-padded past the model's width (model/model_widths.h: hidden 130
// stored as 136): the norm epilogue divides by real_dim, bit for bit as kernels/norm's RmsNorm
// with the same real_dim after the plain combine, and keeps the padding zero. Both kernels that
// take the epilogue: the stream path's (3 tokens) and the grouped paths' (512 tokens).
TEST(MoeNormEpilogueTest, PaddedRowsDivideByTheRealWidth) {
  constexpr int kH = 136, kReal = 130, kI = 72, kE = 8, kK = 2;
  for (const int T : {3, 512}) {
    const uint64_t seed = testing::FreshSeed();
    SCOPED_TRACE(::testing::Message() << "tokens=" << T << " seed=" << seed);
    Block b(T, kH, kI, kE, kK, 0, seed);
    for (int t = 0; t < T; ++t) {
      for (int h = kReal; h < kH; ++h) {
        b.x[static_cast<size_t>(t) * kH + h] = 0.0f;
        b.residual[static_cast<size_t>(t) * kH + h] = 0.0f;
      }
    }
    for (int h = kReal; h < kH; ++h) {
      b.norm_w[h] = 0.0f;
      for (int e = 0; e < kE; ++e) {
        std::fill_n(b.down.begin() + (static_cast<size_t>(e) * kH + h) * kI, kI, 0.0f);
      }
    }
    b.d_x = testing::ToDeviceBf16(b.x);
    b.d_dn = testing::ToDeviceBf16(b.down);
    b.d_norm_w = testing::ToDeviceBf16(b.norm_w);
    const std::vector<int32_t> ids = testing::MakeRouting(T, kE, kK, testing::Routing::kUniform, seed + 9);
    const std::vector<float> w = testing::RandomVector(static_cast<size_t>(T) * kK, seed + 10, 0.1f, 1.0f);
    auto d_ids = testing::ToDevice(ids);
    auto d_w = testing::ToDevice(w);
    MoeExpertsParams p = b.Experts();
    p.topk_ids = d_ids.as<int32_t>();
    p.topk_weights = d_w.as<float>();
    MoeExpertsParams with_norm = p;
    with_norm.norm.residual = b.d_x.get();  // any aligned pointers: only the queries read them
    with_norm.norm.weight = b.d_norm_w.get();
    with_norm.norm.y = b.d_x.get();
    ASSERT_TRUE(MoeExpertsFoldsSharedAndNorm(with_norm, Backend::kCuda) ||
                MoeExpertsFoldsAddendAndNorm(with_norm, Backend::kCuda));

    Outputs plain, normed;
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &plain));
    p.norm.real_dim = kReal;
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, true, &normed));
    auto d_out = testing::ToDevice(plain.out);
    auto d_res = testing::ToDeviceBf16(b.residual);
    auto d_y = testing::PoisonedBf16(static_cast<size_t>(T) * kH);
    RmsNormParams n;
    n.dtype = DType::kBF16;
    n.rows = T; n.dim = kH; n.x = d_out.get(); n.x_stride = kH; n.residual = d_res.get();
    n.weight = b.d_norm_w.get(); n.y = d_y.get(); n.y_stride = kH; n.eps = 1e-6f;
    n.real_dim = kReal;
    ASSERT_TRUE(RmsNorm(n, kCuda).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_TRUE(normed.residual == testing::ToHost<uint16_t>(d_res, static_cast<size_t>(T) * kH))
        << "residual differs from the combine + RmsNorm(real_dim)";
    EXPECT_TRUE(normed.y == testing::ToHost<uint16_t>(d_y, static_cast<size_t>(T) * kH))
        << "normed output differs from the combine + RmsNorm(real_dim)";
    // Against the f32 reference over the real columns; the padding stays exactly zero.
    const std::vector<float> want = b.Reference(ids, w);
    std::vector<float> y_want(want.size(), 0.0f);
    for (int t = 0; t < T; ++t) {
      double ss = 0;
      for (int h = 0; h < kReal; ++h) {
        const size_t i = static_cast<size_t>(t) * kH + h;
        ss += static_cast<double>(b.residual[i] + want[i]) * (b.residual[i] + want[i]);
      }
      const double inv = 1.0 / std::sqrt(ss / kReal + 1e-6);
      for (int h = 0; h < kReal; ++h) {
        const size_t i = static_cast<size_t>(t) * kH + h;
        y_want[i] = static_cast<float>(b.norm_w[h] * (b.residual[i] + want[i]) * inv);
      }
    }
    const std::vector<float> y = testing::FromBf16(normed.y), res = testing::FromBf16(normed.residual);
    EXPECT_LE(testing::RelativeError(y, y_want), 2e-2);
    for (int t = 0; t < T; ++t) {
      for (int h = kReal; h < kH; ++h) {
        const size_t i = static_cast<size_t>(t) * kH + h;
        ASSERT_EQ(y[i], 0.0f) << "y padding at token " << t << ", column " << h;
        ASSERT_EQ(res[i], 0.0f) << "residual padding at token " << t << ", column " << h;
      }
    }
  }
}

// Decode shapes: one token (V2-Lite: 6 of 64 experts, shared 2 x 1408; hidden 1032 and 5128:
// norm blocks of 160 and 672 threads after the one-token GEMVs; at 4104-5128 the 1024-thread
// norm form, which loads up to 12 terms before its wait: 10 + 2 and 12 + 2 of them), a few, the fused
// routing's and the shared fold's limit and past them (17: shared experts refused, routing in
// the call unfused), odd widths (hidden 136, inter 72: K tails; shared = inter), no shared
// experts (the norm epilogue alone, at 40 tokens), a shared MLP of top_k slices.
INSTANTIATE_TEST_SUITE_P(Shapes, MoeDecodeFoldTest,
                         ::testing::Values(FoldCase{1, 2048, 1408, 64, 6, 2816},
                                           FoldCase{1, 1032, 128, 8, 2, 128},
                                           FoldCase{1, 5128, 64, 4, 2, 64},
                                           FoldCase{1, 5128, 64, 16, 10, 128},  // 12 terms: all before the wait
                                           FoldCase{1, 4104, 64, 32, 12, 128},  // 14 terms: after it
                                           FoldCase{2, 8200, 64, 4, 2, 64},  // > 1024 vectors a row
                                           FoldCase{3, 512, 256, 16, 4, 512},
                                           FoldCase{16, 256, 128, 32, 6, 256},
                                           FoldCase{17, 256, 128, 32, 6, 256},
                                           FoldCase{12, 136, 72, 8, 2, 72},
                                           FoldCase{40, 264, 40, 8, 3, 0},
                                           FoldCase{2, 128, 64, 8, 2, 128}));

// The whole folded call (routing, permutation, shared slices, combine + norm) captured in a CUDA
// graph (its kernels launch with PDL) and replayed on new logits, x and residual: every replay
// equals the eager call on the same inputs, bit for bit.
void CheckFoldedReplays(int T) {
  const int H = 256, I = 128, E = 16, k = 4, S = 256;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " tokens=" << T);
  Block b(T, H, I, E, k, S, seed);
  const size_t th = static_cast<size_t>(T) * H, tk = static_cast<size_t>(T) * k;
  auto d_ids = testing::ToDevice(std::vector<int32_t>(tk, 0));
  auto d_w = testing::PoisonedF32(tk);
  auto d_res = testing::ToDeviceBf16(b.residual);
  auto d_y = testing::PoisonedBf16(th);
  auto d_out = testing::PoisonedBf16(th);
  MoeRoutingParams routing = b.Routing();
  routing.logits = b.d_logits.as<float>();
  routing.topk_ids = d_ids.as<int32_t>();
  routing.topk_weights = d_w.as<float>();
  MoeExpertsParams p = b.Experts();
  p.routing = &routing;
  p.topk_ids = routing.topk_ids;
  p.topk_weights = routing.topk_weights;
  p.shared = {b.d_sgu.get(), b.d_sdn.get(), S};
  p.norm = {d_res.get(), b.d_norm_w.get(), d_y.get(), 1e-6f};
  p.out = d_out.get();
  DeviceBuffer ws(MoeExpertsWorkspaceBytes(p));
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  cudaStream_t stream;
  MLASERVE_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const KernelContext on_stream{Backend::kCuda, stream};
  ASSERT_TRUE(MoeExperts(p, on_stream).ok());  // warm-up (shared-memory attributes)
  MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MLASERVE_CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status captured = MoeExperts(p, on_stream);
  MLASERVE_CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured;
  MLASERVE_CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 4; ++replay) {
    SCOPED_TRACE(::testing::Message() << "replay " << replay);
    const auto logits = testing::RandomVector(static_cast<size_t>(T) * E, seed + 100 + replay, -3.0f, 3.0f);
    auto x = testing::RandomVector(th, seed + 200 + replay);
    auto res = testing::RandomVector(th, seed + 300 + replay, -2.0f, 2.0f);
    std::vector<uint16_t> got_res, got_y, want_res, want_y;
    for (const bool graphed : {true, false}) {
      MLASERVE_CUDA_ASSERT(cudaMemcpy(b.d_logits.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
      const auto xb = testing::ToBf16(x), rb = testing::ToBf16(res);
      MLASERVE_CUDA_ASSERT(cudaMemcpy(b.d_x.get(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
      MLASERVE_CUDA_ASSERT(cudaMemcpy(d_res.get(), rb.data(), rb.size() * 2, cudaMemcpyHostToDevice));
      if (graphed) {
        MLASERVE_CUDA_ASSERT(cudaGraphLaunch(exec, stream));
      } else {
        ASSERT_TRUE(MoeExperts(p, on_stream).ok());
      }
      MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
      (graphed ? got_res : want_res) = testing::ToHost<uint16_t>(d_res, th);
      (graphed ? got_y : want_y) = testing::ToHost<uint16_t>(d_y, th);
    }
    EXPECT_TRUE(got_res == want_res);
    EXPECT_TRUE(got_y == want_y);
    EXPECT_EQ(testing::CountNan(testing::FromBf16(got_y)), 0u);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// (4 tokens: the mma stream kernels; 1: the warp GEMVs of moe_stream_gemv.cu.)
TEST(MoeDecodeGraphTest, FoldedCallReplaysAsEager) {
  for (const int tokens : {4, 1}) ASSERT_NO_FATAL_FAILURE(CheckFoldedReplays(tokens));
}

using testing::ScopedEnv;

// The warp-GEMV stream kernels (moe_stream_gemv.cu, at kStreamGemvMaxTokens token) against the
// f32 reference and against the mma stream kernels (MLASERVE_MOE_STREAM_GEMV=0) on the same
// inputs: routed experts stacked and interleaved (the same bits: only the rows move), the shared
// slices (first in the grid, under the routing), K past one 2048-column segment (gate_up
// at hidden 7168; down at inter 2304), K tails (136 / 72), an expert picked several times by one
// token (more rows than a pass holds: passes re-read the weights), and 2 tokens (not taken);
// two runs bit for bit, and the same bits without the early slot -> expert map of gate_up.
// (tokens, hidden, inter, experts, top_k, shared inter, repeated experts in a token)
using GemvCase = std::tuple<int, int, int, int, int, int, bool>;
class MoeStreamGemvTest : public ::testing::TestWithParam<GemvCase> {};

TEST_P(MoeStreamGemvTest, MatchesTheReferenceAndTheMmaKernels) {
  const auto [T, H, I, E, k, S, repeated] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  ScopedEnv defaults("MLASERVE_MOE_STREAM_GEMV", nullptr);  // not an A/B setting left in the shell
  ScopedEnv early_default("MLASERVE_MOE_EARLY_EXPERTS", nullptr);
  ScopedEnv seg_default("MLASERVE_MOE_GEMV_SEG_LOADS", nullptr);
  ScopedEnv down_seg_default("MLASERVE_MOE_GEMV_DOWN_SEG_LOADS", nullptr);
  ScopedEnv spread_default("MLASERVE_MOE_GEMV_SPREAD_SHARED", nullptr);
  Block b(T, H, I, E, k, S, seed);
  std::vector<int32_t> ids = testing::MakeRouting(T, E, k, testing::Routing::kUniform, seed + 9);
  if (repeated) {  // token t picks expert (t % E) in all but its last slot
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j + 1 < k; ++j) ids[static_cast<size_t>(t) * k + j] = t % E;
    }
  }
  const std::vector<float> w = testing::RandomVector(static_cast<size_t>(T) * k, seed + 10, 0.1f, 1.0f);
  auto d_ids = testing::ToDevice(ids);
  auto d_w = testing::ToDevice(w);
  MoeExpertsParams p = b.Experts();
  p.path = MoeExpertsPath::kStream;
  p.topk_ids = d_ids.as<int32_t>();
  p.topk_weights = d_w.as<float>();
  if (S > 0) p.shared = {b.d_sgu.get(), b.d_sdn.get(), S};
  moe_cuda::StreamArgs args{};
  args.num_tokens = T; args.hidden = H; args.inter = I;
  EXPECT_EQ(moe_cuda::StreamGemvTakes(args, true), T <= moe_cuda::kStreamGemvMaxTokens);
  EXPECT_EQ(moe_cuda::StreamGemvTakes(args, false), T <= moe_cuda::kStreamGemvMaxTokens);

  const std::vector<float> want = b.Reference(ids, w);
  Outputs gemv, again, mma, interleaved;
  ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &gemv));
  ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &again));
  {
    ScopedEnv off("MLASERVE_MOE_STREAM_GEMV", "0");
    EXPECT_FALSE(moe_cuda::StreamGemvTakes(args, true));
    EXPECT_FALSE(moe_cuda::StreamGemvTakes(args, false));
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &mma));
  }
  // gate_up's routed weights only after the PDL wait (no early slot -> expert map: the call is
  // handed its ids, so both kernels map early by default): the same bytes, both kernels.
  // Without early ids gate_up spreads the shared slices over every warp (SpreadsShared, where
  // there are shared experts); MLASERVE_MOE_GEMV_SPREAD_SHARED=0 keeps their grid rows: the same
  // bytes.
  Outputs late, late_rows, late_mma;
  {
    ScopedEnv off("MLASERVE_MOE_EARLY_EXPERTS", "0");
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &late));
    {
      ScopedEnv rows("MLASERVE_MOE_GEMV_SPREAD_SHARED", "0");
      ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &late_rows));
    }
    ScopedEnv mma_only("MLASERVE_MOE_STREAM_GEMV", "0");
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &late_mma));
  }
  // The 8-chunk segments (110 registers, 2 blocks an SM; the default takes 4-chunk ones): each
  // lane sums the same chunks in the same order, so the same bytes.
  Outputs eight;
  {
    ScopedEnv set("MLASERVE_MOE_GEMV_SEG_LOADS", "8");
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &eight));
  }
  // The down product's segment length forced both ways (the default picks by inter): each lane
  // sums the same chunks in the same order, so the same bytes.
  Outputs down_seg[2];
  for (int i = 0; i < 2; ++i) {
    ScopedEnv set("MLASERVE_MOE_GEMV_DOWN_SEG_LOADS", i == 0 ? "4" : "6");
    EXPECT_EQ(moe_cuda::DownSegLoads(I), i == 0 ? 4 : 6);
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &down_seg[i]));
  }
  Outputs mixed[2];  // one product on each kernel
  for (const char* which : {"gate_up", "down"}) {
    ScopedEnv one("MLASERVE_MOE_STREAM_GEMV", which);
    const bool g = std::strcmp(which, "gate_up") == 0;
    EXPECT_EQ(moe_cuda::StreamGemvTakes(args, g), T <= moe_cuda::kStreamGemvMaxTokens);
    EXPECT_FALSE(moe_cuda::StreamGemvTakes(args, !g));
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, p, nullptr, false, &mixed[g ? 0 : 1]));
  }
  {
    auto d_gu_il = testing::ToDeviceBf16(b.gate_up);
    auto d_sgu_il = testing::ToDeviceBf16(b.shared_gate_up);
    MoePrepareParams prep;
    prep.num_experts = E; prep.hidden = H; prep.inter = I; prep.gate_up = d_gu_il.get();
    prep.layout = MoeGateUpLayout::kInterleaved8;
    ASSERT_TRUE(MoePrepareExpertWeights(prep, kCuda).ok());
    MoeExpertsParams il = p;
    il.gate_up = d_gu_il.get();
    il.gate_up_layout = MoeGateUpLayout::kInterleaved8;
    if (S > 0) {
      prep.num_experts = 1; prep.inter = S; prep.gate_up = d_sgu_il.get();
      ASSERT_TRUE(MoePrepareExpertWeights(prep, kCuda).ok());
      il.shared.gate_up = d_sgu_il.get();
      il.shared.gate_up_layout = MoeGateUpLayout::kInterleaved8;
    }
    ASSERT_NO_FATAL_FAILURE(RunExperts(b, il, nullptr, false, &interleaved));
  }
  const std::vector<float> got = testing::FromBf16(gemv.out), got_mma = testing::FromBf16(mma.out);
  EXPECT_EQ(testing::CountNan(got), 0u);
  EXPECT_LE(testing::RelativeError(got, want), 1e-2);
  EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);
  EXPECT_LE(testing::RelativeError(got_mma, want), 1e-2);
  EXPECT_LE(testing::RelativeError(got, got_mma), 1e-2);
  for (const Outputs& m : mixed) EXPECT_LE(testing::RelativeError(testing::FromBf16(m.out), want), 1e-2);
  EXPECT_TRUE(gemv.out == again.out) << "two runs differ";
  EXPECT_TRUE(gemv.out == late.out) << "the early expert map changed the GEMVs' bytes";
  EXPECT_TRUE(late.out == late_rows.out) << "the spread shared slices differ from their grid rows";
  EXPECT_TRUE(gemv.out == eight.out) << "8-chunk segments differ from the default's 4";
  EXPECT_TRUE(gemv.out == down_seg[0].out) << "down's 4-chunk segments differ from the default's";
  EXPECT_TRUE(gemv.out == down_seg[1].out) << "down's 6-chunk segments differ from the default's";
  EXPECT_TRUE(mma.out == late_mma.out) << "the early expert map changed the mma kernels' bytes";
  EXPECT_TRUE(gemv.out == interleaved.out) << "interleaved gate_up differs from stacked";
}

// The down GEMV's segment length by inter: one 6-chunk segment where 4-chunk ones would leave a
// short second segment and 6 chunks a lane cover the row, else 4 (and the override both ways).
TEST(MoeStreamGemvPlanTest, DownSegmentLengthByInter) {
  ScopedEnv unset("MLASERVE_MOE_GEMV_DOWN_SEG_LOADS", nullptr);
  EXPECT_EQ(moe_cuda::DownSegLoads(1408), 6);  // V2-Lite
  EXPECT_EQ(moe_cuda::DownSegLoads(1536), 6);
  EXPECT_EQ(moe_cuda::DownSegLoads(1032), 6);
  EXPECT_EQ(moe_cuda::DownSegLoads(1024), 4);
  EXPECT_EQ(moe_cuda::DownSegLoads(256), 4);
  EXPECT_EQ(moe_cuda::DownSegLoads(1544), 4);
  EXPECT_EQ(moe_cuda::DownSegLoads(2048), 4);  // V3
  {
    ScopedEnv four("MLASERVE_MOE_GEMV_DOWN_SEG_LOADS", "4");
    EXPECT_EQ(moe_cuda::DownSegLoads(1408), 4);
  }
  ScopedEnv six("MLASERVE_MOE_GEMV_DOWN_SEG_LOADS", "6");
  EXPECT_EQ(moe_cuda::DownSegLoads(2048), 6);
  EXPECT_EQ(moe_cuda::DownSegLoads(256), 6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeStreamGemvTest,
                         ::testing::Values(GemvCase{1, 2048, 1408, 64, 6, 2816, false},
                                           GemvCase{1, 512, 256, 16, 4, 512, false},
                                           GemvCase{1, 512, 256, 16, 4, 0, false},
                                           GemvCase{1, 136, 72, 8, 2, 72, false},
                                           GemvCase{1, 7168, 256, 8, 4, 256, false},
                                           GemvCase{1, 128, 2304, 4, 2, 2304, false},
                                           GemvCase{1, 256, 128, 8, 4, 128, true},
                                           GemvCase{1, 256, 64, 4, 3, 0, true},
                                           GemvCase{2, 256, 128, 16, 4, 256, false}));

// What is refused, naming the value: shared experts or the epilogue where they are not folded
// (the grouped GEMM paths, a shared MLP that does not split into <= top_k inter-wide slices),
// and a routing that does not route this call's assignments.
TEST(MoeDecodeRefusalTest, RefusesWhatIsNotFolded) {
  Block b(2, 128, 64, 8, 2, 128, testing::FreshSeed());
  auto d_ids = testing::ToDevice(std::vector<int32_t>{0, 1, 2, 3});
  auto d_w = testing::ToDevice(std::vector<float>{1, 1, 1, 1});
  auto d_out = testing::PoisonedBf16(2 * 128);
  MoeExpertsParams p = b.Experts();
  p.topk_ids = d_ids.as<int32_t>();
  p.topk_weights = d_w.as<float>();
  p.out = d_out.get();
  p.shared = {b.d_sgu.get(), b.d_sdn.get(), 128};
  DeviceBuffer ws(MoeExpertsWorkspaceBytes(p));
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  MoeExpertsParams tiled = p;
  tiled.path = MoeExpertsPath::kTiled;
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(tiled, Backend::kCuda));
  const absl::Status st = MoeExperts(tiled, kCuda);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("shared.inter=128"), std::string::npos) << st;
  MoeExpertsParams wide = p;
  wide.shared.inter = 3 * 64;  // 3 slices > top_k 2
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(wide, Backend::kCuda));
  MoeExpertsParams odd = p;
  odd.shared.inter = 96;  // not a multiple of inter
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(odd, Backend::kCuda));
  EXPECT_EQ(MoeExperts(odd, kCuda).code(), absl::StatusCode::kInvalidArgument);
  MoeRoutingParams r = b.Routing();
  r.logits = b.d_logits.as<float>();
  r.topk_ids = d_ids.as<int32_t>();
  r.topk_weights = d_w.as<float>();
  r.num_tokens = 1;  // not this call's 2
  MoeExpertsParams routed = p;
  routed.routing = &r;
  const absl::Status mismatch = MoeExperts(routed, kCuda);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument) << mismatch;
  EXPECT_NE(mismatch.message().find("num_tokens=1"), std::string::npos) << mismatch;
}

}  // namespace
}  // namespace mlaserve::kernels
