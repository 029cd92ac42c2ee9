// kStream path of the routed experts (moe_cuda.h): few tokens per expert, as in decode.
//
// With a handful of tokens per expert the products are matrix-vector work: the time is the
// time to read the touched experts' weights once. So each block owns a slab of one active
// expert's weight rows and streams it through a deep cp.async ring (kStages tiles of 64 K
// columns in flight), while the expert's tokens (at most kTok per pass) ride along as the
// narrow N side of m16n8k16 tensor-core products: weight rows are the M side (16 per warp),
// tokens the N side (two n8 tiles). Nothing is padded to a 64-row token tile, and the grid is
// (weight slabs) x (active experts), so only touched experts are read.
//
// gate_up: a block reads the gate rows of features [f0, f0+64) and the matching up rows of
//   W_gate_up (inter rows further in the stacked layout, 8 rows further in kInterleaved8), so
//   each thread holds gate and up of the same (feature, token) pairs and writes
//   act(gate) * up directly (the separate activation pass and the [A, 2*inter] buffer go):
//   SiLU compiled in, any other activation (StreamArgs::act_fn) through one switch an output.
// down: a block reads 64 rows of W_down and writes bf16 rows for the combine.
// An expert with more than kTok tokens is processed in passes of kTok (weights re-read, mostly
// from DRAM); kTok is 32 instead of 16 where the batch averages more than
// kStreamWideTokensPerExpert rows per expert (StreamTokensPerPass), and the dispatcher sends
// larger batches to the grouped GEMMs instead.
// Shared experts (MoeSharedExperts) ride along as slices of `inter` features past the routed
// slots of the grid, over every token, so a decode step's MoE block streams all its weights in
// two launches. Both kernels launch with PDL; the weights of their first stages go in flight
// before the wait where the expert is known without the kernel just before (shared slices;
// the down product's routed experts, listed by the permutation two kernels back; gate_up's
// routed experts where the call was handed its ids, derived from them), and gate_up's shared
// slices run whole before it (their input precedes the routing), under the routing.
// RunStreamExperts strings the whole path: routing + permutation, gate_up, down, combine.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

#include "kernels/common/activation_math.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_active_slot.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_silu.cuh"

namespace mlaserve::kernels::moe_cuda {
namespace {

using cuda::CpAsync16;
using cuda::SwizzledOffset;

constexpr int kBK = 64;    // K columns per stage
constexpr int kStreamWideTokensPerExpert = 8;  // StreamTokensPerPass
constexpr int kChunksPerRow = kBK / cuda::kBf16PerChunk;
constexpr int kRowsPerWarp = 16;

// kTok tokens per pass: 16 (two n8 tiles), or 32 for batches whose experts may get more than
// 16 rows (each pass past the first re-reads the weights, mostly from DRAM: at batch 128 of
// V2-Lite 9% more bytes than the experts hold). The stages shrink with the wider token tile so
// that two blocks still fit on an SM.
template <bool kGateUp, int kTokT>
struct StreamShape {
  // 64 output features per block, 16 per warp; for gate_up each warp reads both the gate and
  // the up rows of its features (128 weight rows per block), for down 64 rows.
  static constexpr int kTok = kTokT;
  static constexpr int kTokGroups = kTok / 16;                 // ldmatrix x4 groups of tokens
  static constexpr int kFeatures = 64;                         // outputs per block
  static constexpr int kWRows = kGateUp ? 2 * kFeatures : kFeatures;
  static constexpr int kWarps = kFeatures / kRowsPerWarp;      // 4
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = kGateUp ? (kTok == 16 ? 6 : 5) : (kTok == 16 ? 10 : 9);
  static constexpr int kWTileBytes = kWRows * kBK * 2;
  static constexpr int kXTileBytes = kTok * kBK * 2;
  static constexpr int kStageBytes = kWTileBytes + kXTileBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kWLoads = kWRows * kChunksPerRow / kThreads;
  static constexpr int kXLoads = kTok * kChunksPerRow / kThreads;  // token-tile chunks per thread
  static_assert(kTok == 16 || kTok == 32);
  static_assert(kWRows * kChunksPerRow % kThreads == 0);
  static_assert(kTok * kChunksPerRow % kThreads == 0);
  static_assert(2 * kSmemBytes <= 227 * 1024, "two blocks per SM");
};

// kAnyAct (gate_up only): act(gate) * up for StreamArgs::act_fn, read at run time (ActivateAt);
// false: SiLU, the form every DeepSeek checkpoint takes, compiled as before.
template <bool kGateUp, int kTok, bool kAnyAct = false>
__global__ void __launch_bounds__(StreamShape<kGateUp, kTok>::kThreads)
    StreamExpertsKernel(const __grid_constant__ StreamArgs g) {
  using S = StreamShape<kGateUp, kTok>;
  const int slot = blockIdx.y;
  // A routed expert's slot, or (past max_active) a slice of the shared experts: its weights,
  // the row stride of its weight (down: the shared MLP's rows are wider), how far its up rows
  // are from its gate rows (gate_up, stacked), and its rows of act / ys.
  const bool shared = slot >= g.max_active;
  const int64_t I = g.inter, H = g.hidden;
  const int f0 = blockIdx.x * S::kFeatures;
  const int out_dim = kGateUp ? g.inter : g.hidden;  // features this product writes
  const int K = kGateUp ? g.hidden : g.inter;
  const int k_tiles = (K + kBK - 1) / kBK;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = cuda::SmemAddress(smem);

  // Weight rows this thread copies, fixed for the whole block, once the expert is known.
  const __nv_bfloat16* w_src[S::kWLoads];
  bool w_ok[S::kWLoads];
  auto point_weights = [&](int64_t e) {  // e: a routed expert; -1 - j: shared slice j
    const __nv_bfloat16* w_e;
    int64_t ldw = kGateUp ? H : I, up_rows = I;
    bool interleaved = kGateUp && g.gate_up_interleaved;
    if (e >= 0) {
      w_e = kGateUp ? g.gate_up + e * 2 * I * H : g.down + e * H * I;
    } else {
      // Slice j: features [j*I, (j+1)*I) of the shared MLP. Stacked, its gate rows start at
      // row j*I and its up rows `width` further; interleaved (blocks of 8 features, I % 8 ==
      // 0), its 2*I rows are contiguous from row 2*j*I, in the routed experts' layout.
      const int64_t j = -1 - e;
      const int64_t width = static_cast<int64_t>(g.shared_slots) * I;  // the shared MLP's inter
      interleaved = kGateUp && g.shared_gate_up_interleaved;
      w_e = !kGateUp ? g.shared_down + j * I
                     : g.shared_gate_up + j * (interleaved ? 2 : 1) * I * H;
      if (!kGateUp) ldw = width;
      up_rows = width;
    }
#pragma unroll
    for (int q = 0; q < S::kWLoads; ++q) {
      const int c = tid + q * S::kThreads;
      const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
      const int feature = f0 + row % S::kFeatures;
      w_ok[q] = feature < out_dim;
      // The gate row of `feature` and its up row: up_rows apart (stacked), or in the 16-row
      // block of its 8 features, 8 apart (interleaved).
      int64_t src_row = feature;
      if (interleaved) {
        src_row = (feature / 8) * 16 + feature % 8 + (row >= S::kFeatures ? 8 : 0);
      } else if (kGateUp && row >= S::kFeatures) {
        src_row = up_rows + feature;
      }
      if (!w_ok[q]) src_row = 0;
      w_src[q] = w_e + src_row * ldw + chunk * cuda::kBf16PerChunk;
    }
  };
  auto load_weights = [&](int stage, int kt) {
    const uint32_t w_base = smem_base + stage * S::kStageBytes;
#pragma unroll
    for (int q = 0; q < S::kWLoads; ++q) {
      const int c = tid + q * S::kThreads;
      const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
      const bool in_k = kt * kBK + chunk * cuda::kBf16PerChunk < K;  // K % 8 == 0
      CpAsync16(w_base + SwizzledOffset(row, chunk, kChunksPerRow), w_src[q] + kt * kBK, w_ok[q] && in_k);
    }
  };
  auto load_prologue_weights = [&] {
#pragma unroll
    for (int s = 0; s < S::kStages - 1; ++s) {
      if (s < k_tiles) load_weights(s, s);
    }
  };

  // Before the PDL wait (kernels/common/pdl.cuh, rule 3), the weights of the first stages go in
  // flight where the expert is known without the previous kernel: a shared slice always; a
  // routed expert in the down product, whose list the permutation wrote before gate_up (which
  // waits before it lets this kernel in) -- read from L2. gate_up's routed slots cannot read the
  // permutation (the kernel just before), but where the call's ids may be read here (early_ids)
  // they derive the expert it will list from them (moe_active_slot.cuh). No commit yet: these
  // join the first stage's group.
  bool weights_in_flight = false;
  int64_t early_expert = -1;
  if (shared) {
    point_weights(-1 - (slot - g.max_active));
    load_prologue_weights();
    weights_in_flight = true;
  } else {
    if (!kGateUp) {
      if (slot < __ldcg(&g.active[g.num_experts])) early_expert = __ldcg(&g.active[slot]);
    } else if (g.early_ids != nullptr) {
      early_expert = ActiveExpertOfSlot(g.early_ids, g.num_assign, g.num_experts, slot);
    }
    if (early_expert >= 0) {
      point_weights(early_expert);
      load_prologue_weights();
      weights_in_flight = true;
    }
  }
  // A shared slice of gate_up runs whole before the wait: it reads only x, whose writer precedes
  // the routing / permutation launch this kernel follows (and that launch waits before it lets
  // this one in: pdl.cuh, rule 3), and writes only its own rows of act, which no kernel before it
  // in the step reads after the previous layer's down product. So its weights stream while the
  // routing's latency chain runs. It still waits before it completes: the down product after it
  // reads what the permutation wrote, trusting that this grid's completion means that one's.
  const bool before_wait = kGateUp && shared;
  if (!before_wait) {
    cuda::PdlEnter();  // launched with PDL: act, sorted, offsets and the outputs only after this
  }
  int row_begin, row_end;
  if (!shared) {
    const bool listed = slot < g.active[g.num_experts];
    const int64_t e = listed ? g.active[slot] : -1;
    if (weights_in_flight && e != early_expert) {
      // Not the expert loaded early (never expected: the early map is the permutation's): let
      // those copies land, then load the listed expert's (or leave).
      cuda::CpAsyncCommit();
      cuda::CpAsyncWait<0>();
      weights_in_flight = false;
    }
    if (!listed) return;
    row_begin = g.offsets[e];
    row_end = g.offsets[e + 1];
    if (!weights_in_flight) point_weights(e);
  } else {
    row_begin = g.num_assign + (slot - g.max_active) * g.num_tokens;
    row_end = row_begin + g.num_tokens;
  }

  for (int r0 = row_begin; r0 < row_end; r0 += kTok) {
    // The token-tile chunks this thread copies in this pass: chunk tid + q * kThreads.
    const __nv_bfloat16* x_src[S::kXLoads];
    bool x_ok[S::kXLoads];
#pragma unroll
    for (int q = 0; q < S::kXLoads; ++q) {
      const int xc = tid + q * S::kThreads;
      const int x_row = xc / kChunksPerRow, x_chunk = xc % kChunksPerRow;
      x_ok[q] = r0 + x_row < row_end;
      x_src[q] = nullptr;
      if (x_ok[q]) {
        // gate_up: the row's token (a shared slice's rows are the tokens in order).
        const int64_t token = shared ? r0 + x_row - row_begin : g.sorted[r0 + x_row] / g.top_k;
        x_src[q] = kGateUp ? g.x + token * g.hidden : g.act + static_cast<int64_t>(r0 + x_row) * g.inter;
        x_src[q] += x_chunk * cuda::kBf16PerChunk;
      }
    }
    auto load_x = [&](int stage, int kt) {
      const uint32_t x_base = smem_base + stage * S::kStageBytes + S::kWTileBytes;
#pragma unroll
      for (int q = 0; q < S::kXLoads; ++q) {
        const int xc = tid + q * S::kThreads;
        const int x_row = xc / kChunksPerRow, x_chunk = xc % kChunksPerRow;
        const bool in_k = kt * kBK + x_chunk * cuda::kBf16PerChunk < K;
        CpAsync16(x_base + SwizzledOffset(x_row, x_chunk, kChunksPerRow),
                  x_ok[q] ? x_src[q] + kt * kBK : nullptr, x_ok[q] && in_k);
      }
    };

    float acc[2][kTok / 8][4] = {};  // [gate, up (gate_up only)][token n8 tile][fragment]
    // Prologue: the first kStages - 1 stages' weights (unless already in flight), then their
    // token tiles one group each: group 0 = all prologue weights + tile 0, group s = tile s, so
    // the main loop's wait for group kt still finds stage kt's weights and tokens landed.
    if (!weights_in_flight) load_prologue_weights();
    weights_in_flight = false;  // a later pass (more than kTok rows) reloads them
#pragma unroll
    for (int s = 0; s < S::kStages - 1; ++s) {
      if (s < k_tiles) load_x(s, s);
      cuda::CpAsyncCommit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      cuda::CpAsyncWait<S::kStages - 2>();
      __syncthreads();
      const int next = kt + S::kStages - 1;
      if (next < k_tiles) {
        load_weights(next % S::kStages, next);
        load_x(next % S::kStages, next);
      }
      cuda::CpAsyncCommit();
      const uint32_t w_base = smem_base + (kt % S::kStages) * S::kStageBytes;
      const uint32_t x_base = w_base + S::kWTileBytes;
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        uint32_t bx[S::kTokGroups][4];  // group j: tokens 16j..16j+7 in [0..1], +8..+15 in [2..3]
#pragma unroll
        for (int j = 0; j < S::kTokGroups; ++j) {
          cuda::LdMatrixX4(x_base + SwizzledOffset(16 * j + (lane % 8) + 8 * (lane / 16), kk * 2 + (lane / 8) % 2,
                                                   kChunksPerRow),
                           bx[j]);
        }
#pragma unroll
        for (int half = 0; half < (kGateUp ? 2 : 1); ++half) {
          uint32_t aw[4];
          const int row = half * S::kFeatures + warp * kRowsPerWarp + (lane % 16);
          cuda::LdMatrixX4(w_base + SwizzledOffset(row, kk * 2 + lane / 16, kChunksPerRow), aw);
#pragma unroll
          for (int j = 0; j < S::kTokGroups; ++j) {
            cuda::MmaBf16(acc[half][2 * j], aw, bx[j][0], bx[j][1]);
            cuda::MmaBf16(acc[half][2 * j + 1], aw, bx[j][2], bx[j][3]);
          }
        }
      }
    }
    cuda::CpAsyncWait<0>();
    __syncthreads();  // the next pass refills stage 0 while slow warps may still read it

    // Fragment (i): feature row lane/4 (+8 for i >= 2), token column 2*(lane%4) + (i & 1).
#pragma unroll
    for (int ni = 0; ni < kTok / 8; ++ni) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int feature = f0 + warp * kRowsPerWarp + lane / 4 + (i >= 2 ? 8 : 0);
        const int r = r0 + ni * 8 + 2 * (lane % 4) + (i & 1);
        if (feature >= out_dim || r >= row_end) continue;
        if constexpr (kGateUp) {
          const float gv = acc[0][ni][i], uv = acc[1][ni][i];
          const float v = kAnyAct ? ActivateAt(g.act_fn, gv) * uv : SiluMul(gv, uv);
          g.act[static_cast<int64_t>(r) * g.inter + feature] = __float2bfloat16_rn(v);
        } else {
          g.ys[static_cast<int64_t>(r) * g.hidden + feature] = __float2bfloat16_rn(acc[0][ni][i]);
        }
      }
    }
  }
  if (before_wait) cuda::PdlEnter();
}

// Tokens per pass of the stream kernels for a call of num_assign rows over num_experts: 32 where
// the rows average more than kStreamWideTokensPerExpert per expert (an expert's second pass of 16
// would read its weights again), else 16. MLASERVE_MOE_STREAM_TOK=16|32 forces one (A/B timing).
int StreamTokensPerPass(int num_assign, int num_experts) {
  static const int forced = [] {
    const char* v = std::getenv("MLASERVE_MOE_STREAM_TOK");
    return v != nullptr && (std::strcmp(v, "16") == 0 || std::strcmp(v, "32") == 0) ? std::atoi(v) : 0;
  }();
  if (forced != 0) return forced;
  return num_assign > kStreamWideTokensPerExpert * num_experts ? 32 : 16;
}

template <bool kGateUp, int kTok>
absl::Status LaunchStreamTok(const StreamArgs& a, cudaStream_t s) {
  using S = StreamShape<kGateUp, kTok>;
  auto* kernel = StreamExpertsKernel<kGateUp, kTok>;
  if constexpr (kGateUp) {
    if (a.act_fn != Activation::kSilu) kernel = StreamExpertsKernel<kGateUp, kTok, true>;
  }
  const int out_dim = kGateUp ? a.inter : a.hidden;
  if (auto st = cuda::CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes),
          "moe_experts stream: raising the shared-memory limit");
      !st.ok()) {
    return st;
  }
  cuda::LaunchShape shape;
  shape.grid = dim3((out_dim + S::kFeatures - 1) / S::kFeatures, a.max_active + a.shared_slots);
  shape.block = dim3(S::kThreads);
  shape.smem_bytes = S::kSmemBytes;
  shape.stream = s;
  return cuda::LaunchPdl(kGateUp ? "moe_experts stream gate_up" : "moe_experts stream down", shape,
                         kernel, a);
}

template <bool kGateUp>
absl::Status LaunchStream(const StreamArgs& a, cudaStream_t s) {
  return StreamTokensPerPass(a.num_assign, a.num_experts) == 32 ? LaunchStreamTok<kGateUp, 32>(a, s)
                                                                 : LaunchStreamTok<kGateUp, 16>(a, s);
}

}  // namespace

absl::Status LaunchStreamGateUp(const StreamArgs& a, cudaStream_t s) {
  if (a.max_active + a.shared_slots == 0) return absl::OkStatus();
  return StreamGemvTakes(a, true) ? LaunchStreamGemvGateUp(a, s) : LaunchStream<true>(a, s);
}

absl::Status LaunchStreamDown(const StreamArgs& a, cudaStream_t s) {
  if (a.max_active + a.shared_slots == 0) return absl::OkStatus();
  return StreamGemvTakes(a, false) ? LaunchStreamGemvDown(a, s) : LaunchStream<false>(a, s);
}

namespace {

// Shared slices of `p` (MoeSharedExperts over `inter`-wide pseudo-experts), or -1 when the
// shared MLP does not split so (or would need more rows than the workspace holds: 2A).
int SharedSlots(const MoeExpertsParams& p) {
  if (p.shared.inter == 0) return 0;
  if (p.shared.inter % p.inter != 0) return -1;
  const int slots = p.shared.inter / p.inter;
  return slots <= p.top_k ? slots : -1;
}

// StreamArgs::early_ids' switch (moe_cuda.h).
bool EarlyExpertsDisabled() { return EnvSwitchedOff("MLASERVE_MOE_EARLY_EXPERTS"); }

}  // namespace

bool DecodeFoldsDisabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_MOE_FOLD");
  return disabled;
}

absl::Status RunStreamExperts(const MoeExpertsParams& p, const StreamWorkspace& w, cudaStream_t s,
                              ExpertsStageObserver* observer) {
  auto done = [&](ExpertsStage stage) {
    if (observer != nullptr) observer->AfterStage(stage, s);
  };
  if ((p.shared.inter != 0 || p.norm.residual != nullptr) && !MoeExpertsCudaFoldsSharedAndNorm(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: shared.inter=", p.shared.inter, " / the norm epilogue are not taken at inter=",
        p.inter, " top_k=", p.top_k, " hidden=", p.hidden, " (MoeExpertsFoldsSharedAndNorm)"));
  }
  if (p.addend != nullptr) {
    return absl::InvalidArgumentError(
        "moe_experts: the stream path takes no addend (MoeExpertsFoldsAddendAndNorm is false there)");
  }
  // The kernels switch over the activation per output; a value that is no enumerator is refused
  // here, naming it, as the grouped paths' LaunchActMul does.
  RETURN_IF_ERROR(VisitActivation("moe_experts", p.act, [](auto) { return absl::OkStatus(); }));
  const int slots = SharedSlots(p);
  const int num_assign = p.num_tokens * p.top_k;
  const int E = p.num_experts;
  const auto* x = static_cast<const __nv_bfloat16*>(p.x);

  // 1. The routing (when asked) and the permutation, one kernel for decode steps.
  PermuteArgs pa{p.topk_ids, num_assign, E, p.top_k, x, p.hidden, nullptr, w.sorted, w.offsets,
                 w.tile_offsets, w.position, w.active, w.chunk_counts};
  pa.routing = p.routing;
  RETURN_IF_ERROR(p.baseline.permute ? LaunchBaselineSort(pa, s) : LaunchPermute(pa, s));
  done(ExpertsStage::kPermute);

  // 2-3. The products: each touched expert's weights (and the shared slices') read once.
  StreamArgs a{};
  a.x = x;
  a.sorted = w.sorted;
  a.offsets = w.offsets;
  a.active = w.active;
  a.top_k = p.top_k;
  a.hidden = p.hidden;
  a.inter = p.inter;
  a.num_experts = E;
  a.max_active = std::min(E, num_assign);
  a.gate_up = static_cast<const __nv_bfloat16*>(p.gate_up);
  a.down = static_cast<const __nv_bfloat16*>(p.down);
  a.act = w.act;  // [A + shared rows, inter], compact
  a.act_fn = p.act;
  a.ys = w.ys;
  a.gate_up_interleaved = p.gate_up_layout == MoeGateUpLayout::kInterleaved8;
  a.shared_gate_up = static_cast<const __nv_bfloat16*>(p.shared.gate_up);
  a.shared_gate_up_interleaved = p.shared.gate_up_layout == MoeGateUpLayout::kInterleaved8;
  a.shared_down = static_cast<const __nv_bfloat16*>(p.shared.down);
  a.shared_slots = slots;
  a.num_tokens = p.num_tokens;
  a.num_assign = num_assign;
  // The ids were written before this call (no routing inside it), so two kernels back from
  // gate_up, with the permutation in between waiting before it lets gate_up in (pdl.cuh, rule 3).
  const bool early = p.routing == nullptr && !p.baseline.permute && num_assign <= kActiveSlotMaxAssign &&
                     !EarlyExpertsDisabled();
  a.early_ids = early ? p.topk_ids : nullptr;
  RETURN_IF_ERROR(LaunchStreamGateUp(a, s));
  done(ExpertsStage::kGateUp);
  RETURN_IF_ERROR(LaunchStreamDown(a, s));
  done(ExpertsStage::kDown);

  // 4. Combine in token order (shared rows after the routed ones), or into the residual + norm.
  CombineArgs ca{w.ys, w.position, p.topk_weights, static_cast<__nv_bfloat16*>(p.out),
                 p.num_tokens, p.top_k, p.hidden};
  ca.shared_slots = slots;
  ca.shared_base = num_assign;
  ca.residual = static_cast<__nv_bfloat16*>(p.norm.residual);
  ca.norm_weight = static_cast<const __nv_bfloat16*>(p.norm.weight);
  ca.norm_y = static_cast<__nv_bfloat16*>(p.norm.y);
  ca.norm_eps = p.norm.eps;
  ca.norm_dim = p.norm.real_dim > 0 ? p.norm.real_dim : p.hidden;
  RETURN_IF_ERROR(p.baseline.combine ? LaunchBaselineCombine(ca, s) : LaunchCombine(ca, s));
  done(ExpertsStage::kCombine);
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels::moe_cuda

namespace mlaserve::kernels {

bool MoeExpertsCudaFoldsSharedAndNorm(const MoeExpertsParams& p) {
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (p.norm.residual != nullptr &&
      !(aligned(p.norm.residual) && aligned(p.norm.weight) && aligned(p.norm.y))) {
    return false;
  }
  if (p.shared.inter != 0 && !(aligned(p.shared.gate_up) && aligned(p.shared.down))) return false;
  if (p.shared.inter != 0 && p.num_tokens > kMoeFoldSharedMaxTokens) return false;
  if (p.addend != nullptr) return false;  // the grouped paths' (MoeExpertsFoldsAddendAndNorm)
  if (moe_cuda::DecodeFoldsDisabled()) return false;
  return p.dtype == DType::kBF16 && p.num_tokens > 0 && p.top_k > 0 && p.inter > 0 &&
         p.inter % 8 == 0 && p.hidden % 8 == 0 && p.hidden <= moe_cuda::kCombineNormMaxHidden &&
         moe_cuda::PlanExperts(p).path == MoeExpertsPath::kStream && !p.baseline.combine &&
         moe_cuda::SharedSlots(p) >= 0;
}

}  // namespace mlaserve::kernels
