// kStream path at one token (decode at batch 1): the routed and shared experts' products as warp
// GEMVs, each weight row read once straight from device memory into registers.
//
// Why not the cp.async kernel of moe_stream.cu: its stage is 128-byte pieces of 64-128 weight
// rows 4 KB apart, and one or two blocks an SM keep too little of that in flight. Measured on
// the H200 (mlaserve-stream-probe, 2026-11-29, 69 MB in one wave): that pattern read at 56% of
// copy bandwidth with one CTA an SM (72-75% with two), the m16n8k16 fragment pattern (8 rows x
// 64 B per load) at 75-78%, and warps loading 512 contiguous bytes a row per instruction at 90%
// (two CTAs of 256 threads an SM) to 95% (four). At one token the tensor cores buy nothing, so
// here a warp owns two weight rows at a time -- a feature's gate and up rows (gate_up), or two
// output rows (down) -- and its lanes load 16-byte chunks c = lane + 32 j of both rows (the
// whole warp reads 512 contiguous bytes a row per instruction), 1024 columns a segment (8
// loads a lane in flight, at 4 blocks an SM: kGemvDefaultSegLoads); each lane multiplies its
// chunks by the token's columns (shared memory, bf16) in f32, chunk by chunk in column order,
// and a fixed xor-shuffle tree sums the lanes. Same sums on every run; not the bits of the mma
// kernel (another order of the sums).
//
// Grid: (blocks a slot, slots), one wave of the GPU's resident blocks; a task is a feature
// (gate_up) or an output row pair (down), a block takes an even share of its slot's tasks and its
// 8 warps every 8th of them. (A first version with short-lived blocks of 1-2 tasks a warp read
// no faster than the mma kernels: each block paid the wait and the token rows' staging before
// its loads.) Slots are the shared slices first, then the
// routed experts' slots: blocks are dispatched in that order, so gate_up's shared slices (which
// run whole before the PDL wait, reading only x: moe_stream.cu) start first, under the routing.
// Where gate_up follows the routing launch (no early ids) the shared slices get no grid rows:
// every warp of the grid takes its share of their features before the wait, then its block's
// share of its routed slot (SpreadsShared, below).
// Weights of a block's first task go in flight before the wait where the expert is known
// without the kernel just before (shared slices; down's routed experts, from the permutation
// two kernels back, read from L2; gate_up's routed experts where the call was handed its ids,
// derived from them: moe_active_slot.cuh), as moe_stream.cu does. An expert with more rows than kTok (not
// on the decode path: a token's experts are distinct) runs passes of kTok rows.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/activation_math.h"
#include "kernels/common/bf16_vec.cuh"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_active_slot.cuh"
#include "kernels/moe/moe_block_trace.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_silu.cuh"

namespace mlaserve::kernels::moe_cuda {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / cuda::kWarpSize;
// Chunks a lane loads per row per segment, and with them the registers and the blocks an SM: 4
// (1024 columns a segment; bounded to 64 registers, 4 blocks an SM: the default) or 8 (2048
// columns, 107-110 registers, 2 blocks an SM; MLASERVE_MOE_GEMV_SEG_LOADS=8, read per call, for
// A/B timing; any other value is the default). Each lane sums the same chunks in the same order
// either way: the same bytes. More warps with less each in flight took V2-Lite's decode step at
// batch 1 from 2.186-2.202 to 2.092-2.125 ms (H200, 2026-12-02; V3's one-token call even to 1%
// faster): beside each of the fused router's CTAs (114 registers a thread at V2-Lite's width:
// 29 K of an SM's 64 K) two such blocks fit, against one of the 8-chunk form. Tried there and
// slower: 8 chunks bounded to 3 blocks an SM (spilling), 4 chunks with the next segment's loads
// in flight before this one's products (two register sets, 2 blocks an SM), 2 chunks at 6 blocks
// an SM (docs/cuda_engine.md).
inline constexpr int kGemvDefaultSegLoads = 4;
// The down product's rows where 4-chunk segments would end on a short one: 6 chunks a lane
// (1536 columns) take a row of up to 1536 columns in one segment, at 3 blocks an SM (80
// registers under the bound of 85, no spills). V2-Lite's down rows are 1408 columns: with 4
// chunks a task was a 1024-column segment, then a 384-column one with 1.5 loads a lane in
// flight, two round trips, the second nearly empty; now one round trip of the whole row pair.
// Each lane still sums the chunks lane + 32 j in column order: the same bytes as every other
// segment length. DownSegLoads says when; MLASERVE_MOE_GEMV_DOWN_SEG_LOADS=4 (read per call)
// keeps the 4-chunk segments (A/B timing).
inline constexpr int kGemvWholeRowSegLoads = 6;
template <int kSegLoads>
inline constexpr int kGemvMinBlocks = kSegLoads == 4 ? 4 : kSegLoads == 6 ? 3 : 1;
constexpr int kGemvMaxSmem = 48 * 1024;  // token rows in shared memory: the default limit, no opt-in


// The two weight rows of task `task` of expert `e` (>= 0: routed; -1 - j: shared slice j).
template <bool kGateUp>
__device__ __forceinline__ void TaskRows(const StreamArgs& g, int64_t e, int task, const __nv_bfloat16* (&row)[2]) {
  const int64_t I = g.inter, H = g.hidden;
  if constexpr (kGateUp) {
    // Feature `task`: its gate row and its up row (stacked: `up` rows further; kInterleaved8:
    // the 16-row block of its 8 features, 8 rows further).
    const __nv_bfloat16* w_e;
    int64_t up = I;
    bool interleaved = g.gate_up_interleaved;
    if (e >= 0) {
      w_e = g.gate_up + e * 2 * I * H;
    } else {
      const int64_t j = -1 - e;
      interleaved = g.shared_gate_up_interleaved;
      w_e = g.shared_gate_up + j * (interleaved ? 2 : 1) * I * H;
      up = static_cast<int64_t>(g.shared_slots) * I;  // the shared MLP's inter
    }
    const int64_t f = task;
    const int64_t gate_row = interleaved ? (f / 8) * 16 + f % 8 : f;
    const int64_t up_row = interleaved ? gate_row + 8 : up + f;
    row[0] = w_e + gate_row * H;
    row[1] = w_e + up_row * H;
  } else {
    // Output rows 2 task and 2 task + 1 of W_down (hidden is a multiple of 8).
    const __nv_bfloat16* w_e;
    int64_t ldw = I;
    if (e >= 0) {
      w_e = g.down + e * H * I;
    } else {
      w_e = g.shared_down + (-1 - e) * I;
      ldw = static_cast<int64_t>(g.shared_slots) * I;
    }
    row[0] = w_e + (2 * static_cast<int64_t>(task)) * ldw;
    row[1] = row[0] + ldw;
  }
}

// The L2 policy of the weight loads: `evict_first` from createpolicy (StreamGemvKernel's
// l2_evict_first), or 0 for the plain streaming load (cuda::LoadStreamingVec). A weight vector is
// read once a step, so evict-first keeps it from pushing out what L2 holds for the kernels after
// it: likely the next layer's q | kv_a weights, which the small-M kernel prefetches into L2 under
// the down product's tail (not traced).
__device__ __forceinline__ uint64_t WeightPolicy(bool evict_first) {
  uint64_t policy = 0;
  if (evict_first) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// Issues segment `seg`'s loads of both rows: chunk seg * kSegChunks + lane + 32 j, under `policy`
// (WeightPolicy; 0: plain loads).
template <int kSegLoads>
__device__ __forceinline__ void LoadSegment(const __nv_bfloat16* const (&row)[2], int seg, int K, int lane,
                                            uint4 (&w)[2][kSegLoads], uint64_t policy) {
  constexpr int kSegChunks = kSegLoads * cuda::kWarpSize;
#pragma unroll
  for (int j = 0; j < kSegLoads; ++j) {
    const int col = (seg * kSegChunks + lane + j * cuda::kWarpSize) * cuda::kBf16PerChunk;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      w[h][j] = col >= K        ? make_uint4(0, 0, 0, 0)
                : policy != 0 ? cuda::LoadStreamingVec(row[h] + col, policy)
                              : cuda::LoadStreamingVec(row[h] + col);
    }
  }
}

// One task of expert `e` (>= 0: routed; -1 - j: shared slice j) over the pass's n token rows
// staged in xs: its weights' segments (the first already in `w` where `loaded`), f32 sums chunk
// by chunk in column order, a fixed xor-shuffle tree, and lane t writes token t's output to row
// r0 + t of act (gate_up) or ys (down). The same sums wherever a task runs.
template <bool kGateUp, int kTok, bool kAnyAct, int kSegLoads>
__device__ __forceinline__ void RunTask(const StreamArgs& g, int64_t e, int task, int r0, int n,
                                        const __nv_bfloat16* xs, int K, int segs, int lane, uint4 (&w)[2][kSegLoads],
                                        bool loaded, uint64_t policy) {
  constexpr int kSegChunks = kSegLoads * cuda::kWarpSize;
  const int row_chunks = K / cuda::kBf16PerChunk;
  float acc[2][kTok];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[h][t] = 0.0f;
  }
  const __nv_bfloat16* row[2];
  TaskRows<kGateUp>(g, e, task, row);
  for (int seg = 0; seg < segs; ++seg) {
    if (!loaded) LoadSegment(row, seg, K, lane, w, policy);
    loaded = false;
#pragma unroll
    for (int j = 0; j < kSegLoads; ++j) {
      const int chunk = seg * kSegChunks + lane + j * cuda::kWarpSize;
      if (chunk >= row_chunks) break;
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t < n) {
          const uint4 xv = reinterpret_cast<const uint4*>(xs)[t * row_chunks + chunk];
          acc[0][t] = cuda::Dot8(w[0][j], xv, acc[0][t]);
          acc[1][t] = cuda::Dot8(w[1][j], xv, acc[1][t]);
        }
      }
    }
  }
  // Sum the lanes (a fixed tree: every lane ends with the same sums).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
#pragma unroll
      for (int o = cuda::kWarpSize / 2; o > 0; o >>= 1) {
        acc[h][t] += __shfl_xor_sync(0xffffffffu, acc[h][t], o);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t < n && lane == t) {
      const int64_t r = r0 + t;
      if constexpr (kGateUp) {
        const float v = kAnyAct ? ActivateAt(g.act_fn, acc[0][t]) * acc[1][t] : SiluMul(acc[0][t], acc[1][t]);
        g.act[r * g.inter + task] = __float2bfloat16_rn(v);
      } else {
        g.ys[r * g.hidden + 2 * task] = __float2bfloat16_rn(acc[0][t]);
        g.ys[r * g.hidden + 2 * task + 1] = __float2bfloat16_rn(acc[1][t]);
      }
    }
  }
}

// kAnyAct: as StreamExpertsKernel's (moe_stream.cu): StreamArgs::act_fn at run time, or SiLU.
template <bool kGateUp, int kTok, bool kAnyAct, int kSegLoads>
__global__ void __launch_bounds__(kGemvThreads, kGemvMinBlocks<kSegLoads>)
    StreamGemvKernel(const __grid_constant__ StreamArgs g, bool l2_evict_first) {
  constexpr int kSegChunks = kSegLoads * cuda::kWarpSize;
  const uint64_t policy = WeightPolicy(l2_evict_first);
  extern __shared__ __align__(16) unsigned char smem[];
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);  // [kTok][K]: the pass's token rows
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const int K = kGateUp ? g.hidden : g.inter;
  const int tasks = kGateUp ? g.inter : g.hidden / 2;
  const int segs = (K + kSegChunks * cuda::kBf16PerChunk - 1) / (kSegChunks * cuda::kBf16PerChunk);
  // Shared slices first (blocks dispatch in this order), then the routed slots; the spread form
  // has routed slots only.
  const bool spread = kGateUp && kTok == 1 && g.spread_shared;
  const int shared_rows = spread ? 0 : g.shared_slots;
  const bool shared = static_cast<int>(blockIdx.y) < shared_rows;
  const int slot = shared ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y) - shared_rows;
  // The block's tasks: an even share of the slot's; warp w takes task_begin + w, then every 8th.
  const int task0 = static_cast<int>(static_cast<int64_t>(blockIdx.x) * tasks / gridDim.x) + warp;
  const int task_end = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * tasks / gridDim.x);
  __shared__ moe_trace::BlockClock clock;  // --moe-block-trace's record (kernels/moe/block_trace.h)
  clock.Begin(g.block_trace);

  uint4 w[2][kSegLoads];
  // The spread form: the token's x row staged once, and the warp's share of every shared slice's
  // features (warp w of the grid: features w, w + the grid's warps, ...), all before the wait
  // (x's writer is two kernels back: pdl.cuh, rule 3), under the routing.
  if (spread) {
    const int row_chunks = K / cuda::kBf16PerChunk;
    for (int c = threadIdx.x; c < row_chunks; c += kGemvThreads) {
      reinterpret_cast<uint4*>(xs)[c] = __ldcg(reinterpret_cast<const uint4*>(g.x) + c);
    }
    __syncthreads();
    const int grid_warps = static_cast<int>(gridDim.x * gridDim.y) * kGemvWarps;
    const int my_warp = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x) * kGemvWarps + warp;
    for (int f = my_warp; f < g.shared_slots * g.inter; f += grid_warps) {
      const int j = f / g.inter;
      RunTask<kGateUp, kTok, kAnyAct, kSegLoads>(g, -1 - j, f - j * g.inter, g.num_assign + j, 1, xs, K, segs,
                                                 lane, w, false, policy);
    }
  }
  // The first task's segment 0 before the PDL wait where the expert is known (rule 3; the
  // spread form's launch has no early ids: nothing is in flight after its shared features).
  const __nv_bfloat16* row[2] = {nullptr, nullptr};
  int64_t e = -1 - slot;
  bool loaded = false;
  if (shared) {
    loaded = true;
  } else if (!kGateUp && slot < __ldcg(&g.active[g.num_experts])) {
    e = __ldcg(&g.active[slot]);
    loaded = true;
  } else if (kGateUp && g.early_ids != nullptr) {
    // The call's ids may be read here (StreamArgs::early_ids): the slot's expert from them.
    const int early = ActiveExpertOfSlot(g.early_ids, g.num_assign, g.num_experts, slot);
    if (early >= 0) {
      e = early;
      loaded = true;
    }
  }
  if (loaded && task0 < task_end) {
    TaskRows<kGateUp>(g, e, task0, row);
    LoadSegment(row, 0, K, lane, w, policy);
  }
  // gate_up's shared slices run whole before the wait (moe_stream.cu says why), then wait before
  // they complete; everything else waits here.
  const bool before_wait = kGateUp && shared;
  if (!before_wait) {
    cuda::PdlEnter();
    clock.Waited(g.block_trace);
  }

  int row_begin, row_end;
  if (shared) {
    row_begin = g.num_assign + slot * g.num_tokens;
    row_end = row_begin + g.num_tokens;
  } else {
    if (slot >= g.active[g.num_experts]) {
      clock.Record(g.block_trace);
      return;
    }
    const int64_t listed = g.active[slot];
    if (loaded && listed != e) loaded = false;  // not the expert loaded early (never expected): reload
    e = listed;
    row_begin = g.offsets[e];
    row_end = g.offsets[e + 1];
  }
  // The weights go in flight before the token rows are staged (their loads are the longer wait).
  if (!loaded && task0 < task_end && row_begin < row_end) {
    TaskRows<kGateUp>(g, e, task0, row);
    LoadSegment(row, 0, K, lane, w, policy);
    loaded = true;
  }

  for (int r0 = row_begin; r0 < row_end; r0 += kTok) {
    const int n = min(kTok, row_end - r0);
    // The pass's token rows into shared memory (gate_up: x rows of the tokens; down: act rows;
    // the spread form staged the one token's row already).
    __syncthreads();  // the previous pass's readers are done
    const int row_chunks = K / cuda::kBf16PerChunk;
    for (int c = threadIdx.x; !spread && c < n * row_chunks; c += kGemvThreads) {
      const int t = c / row_chunks, chunk = c % row_chunks;
      const int r = r0 + t;
      const __nv_bfloat16* src;
      if constexpr (kGateUp) {
        const int64_t token = shared ? r - row_begin : g.sorted[r] / g.top_k;
        src = g.x + token * g.hidden;
      } else {
        src = g.act + static_cast<int64_t>(r) * g.inter;
      }
      // Past L1 (pdl.cuh, rule 3): gate_up's shared slices read x before the wait.
      reinterpret_cast<uint4*>(xs)[c] = __ldcg(reinterpret_cast<const uint4*>(src) + chunk);
    }
    __syncthreads();

    for (int task = task0; task < task_end; task += kGemvWarps) {
      RunTask<kGateUp, kTok, kAnyAct, kSegLoads>(g, e, task, r0, n, xs, K, segs, lane, w, loaded, policy);
      loaded = false;
    }
    loaded = false;  // a later pass (more than kTok rows) reloads the first task's weights
  }
  if (before_wait) {
    cuda::PdlEnter();
    clock.Waited(g.block_trace);
  }
  if (g.block_trace != nullptr) {
    __syncthreads();  // every warp's tasks are done
    clock.Record(g.block_trace);
  }
}

// Waves of blocks the grid holds: 1, or MLASERVE_MOE_GEMV_WAVES (1-8, read per call; for A/B
// timing). Measured (H200, V2-Lite decode b 1): one wave with the blocks spread evenly over the
// slots; giving the routed slots of gate_up more blocks than the shared slices (which run under
// the routing) was no faster than the mma kernels.
int64_t GemvWaves() { return EnvIntInRange("MLASERVE_MOE_GEMV_WAVES", 1, 8, 1); }

// Whether the one-token gate_up launch takes the spread form (StreamArgs::spread_shared): one
// token, shared slices, and a fused routing (no early ids: the routed experts are known only after
// the wait). The shared slices' grid rows otherwise stream their 23 MB (V2-Lite) from a quarter of
// the blocks, ~1.2 TB/s under the routing, and go on beside the routed slots after it; spread
// over every warp they run at the whole wave's rate while the routing runs and leave the routed
// slots the whole GPU. MLASERVE_MOE_GEMV_SPREAD_SHARED=0 (read per launch: tests, A/B timing)
// keeps the rows. The same sums either way (RunTask): the same bytes.
bool SpreadsShared(const StreamArgs& a) {
  return a.num_tokens == 1 && a.shared_slots > 0 && a.early_ids == nullptr &&
         !EnvSwitchedOff("MLASERVE_MOE_GEMV_SPREAD_SHARED");
}

template <bool kGateUp, int kTok, bool kAnyAct, int kSegLoads>
absl::Status LaunchGemvTok(const StreamArgs& a, cudaStream_t s) {
  auto* kernel = StreamGemvKernel<kGateUp, kTok, kAnyAct, kSegLoads>;
  const int K = kGateUp ? a.hidden : a.inter;
  const size_t smem = static_cast<size_t>(kTok) * K * sizeof(__nv_bfloat16);  // <= kGemvMaxSmem
  const int tasks = kGateUp ? a.inter : a.hidden / 2;
  StreamArgs args = a;
  args.spread_shared = kGateUp && SpreadsShared(a);
  const int slots = a.max_active + (args.spread_shared ? 0 : a.shared_slots);
  // One wave: as many blocks as the GPU holds at once, spread evenly over the slots, each with
  // an even share of its slot's tasks (at least a task a warp). A block's prologue (the wait, the
  // token rows) is then paid once, and every warp keeps its loads in flight to the end.
  static const int carveout = EnvIntInRange("MLASERVE_MOE_GEMV_CARVEOUT", 0, 100, -1);
  RETURN_IF_ERROR(PreferDecodeCarveout(reinterpret_cast<const void*>(kernel), carveout, "MLASERVE_MOE_GEMV_CARVEOUT"));
  // Blocks an SM, queried once per device and shared-memory size (the registers are fixed).
  const int per_sm = cuda::CurrentDeviceBlocksPerSm(reinterpret_cast<const void*>(kernel), kGemvThreads, smem);
  if (per_sm < 1) {
    return absl::InternalError(
        absl::StrCat("moe_experts stream gemv: no block fits an SM, or the occupancy query failed (smem=", smem, ")"));
  }
  const int64_t resident = static_cast<int64_t>(per_sm) * std::max(1, cuda::CurrentDeviceSmCount());
  const int64_t most = (tasks + kGemvWarps - 1) / kGemvWarps;  // a task a warp at least
  const int64_t per_slot = std::clamp<int64_t>(GemvWaves() * resident / slots, 1, most);
  cuda::LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(per_slot), slots);
  shape.block = dim3(kGemvThreads);
  shape.smem_bytes = smem;
  shape.stream = s;
  args.block_trace = BlockTraceRegion(kGateUp ? "gate_up" : "down", shape.grid, slots - a.max_active);
  // The weights' loads evict-first in L2 (WeightPolicy): H200, V2-Lite decode b 1 median 1.981 ms
  // over seven rounds in two calls against 1.997 with the plain loads, b 4 even (docs/BENCHMARKS.md,
  // forty-first session). MLASERVE_MOE_GEMV_EVICT_FIRST=0 keeps the plain loads.
  static const bool evict_first = !EnvSwitchedOff("MLASERVE_MOE_GEMV_EVICT_FIRST");
  return cuda::LaunchPdl(kGateUp ? "moe_experts stream gemv gate_up" : "moe_experts stream gemv down", shape,
                         kernel, args, evict_first);
}

// One token (kStreamGemvMaxTokens): every touched expert has one row (a token's experts are
// distinct), so the slots are exactly the touched experts and the wave is spread over work that
// exists. From 2 tokens the routed slots are an upper bound (at 2-4 tokens of V2-Lite a sixth of
// them empty) and a fixed wave over them measured slower than the mma kernels' many-block grid
// (V2-Lite gate_up at 2 / 4 tokens: 73.5 / 75.8% of copy bandwidth against 79.3 / 86.4%; H200,
// 2026-11-29), so the mma kernels keep them. kTok stays a parameter: an expert listed twice by
// one token runs passes.
template <bool kGateUp>
absl::Status LaunchGemv(const StreamArgs& a, cudaStream_t s) {
  if constexpr (kGateUp) {
    if (a.act_fn != Activation::kSilu) return LaunchGemvTok<true, 1, true, kGemvDefaultSegLoads>(a, s);
  }
  if (EnvIntInRange("MLASERVE_MOE_GEMV_SEG_LOADS", 4, 8, kGemvDefaultSegLoads) == 8) {
    return LaunchGemvTok<kGateUp, 1, false, 8>(a, s);
  }
  if constexpr (!kGateUp) {
    if (DownSegLoads(a.inter) == kGemvWholeRowSegLoads) {
      return LaunchGemvTok<false, 1, false, kGemvWholeRowSegLoads>(a, s);
    }
  }
  return LaunchGemvTok<kGateUp, 1, false, kGemvDefaultSegLoads>(a, s);
}

}  // namespace

int DownSegLoads(int64_t inter) {
  constexpr int64_t kDefaultCols = int64_t{kGemvDefaultSegLoads} * cuda::kWarpSize * cuda::kBf16PerChunk;
  constexpr int64_t kWholeRowCols = int64_t{kGemvWholeRowSegLoads} * cuda::kWarpSize * cuda::kBf16PerChunk;
  const bool whole_row = inter > kDefaultCols && inter <= kWholeRowCols;
  const int fallback = whole_row ? kGemvWholeRowSegLoads : kGemvDefaultSegLoads;
  const int forced = EnvIntInRange("MLASERVE_MOE_GEMV_DOWN_SEG_LOADS", 4, 6, fallback);
  return forced == kGemvDefaultSegLoads || forced == kGemvWholeRowSegLoads ? forced : fallback;
}

absl::Status PreferDecodeCarveout(const void* kernel, int percent, const char* env_name) {
  if (percent < 0) return absl::OkStatus();
  return cuda::CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent),
                          env_name);
}

bool StreamGemvTakes(const StreamArgs& a, bool gate_up) {
  // MLASERVE_MOE_STREAM_GEMV (read per call; A/B timing, tests): 0 = neither product,
  // gate_up / down = that product alone, anything else or unset = both.
  if (const char* v = std::getenv("MLASERVE_MOE_STREAM_GEMV")) {
    if (std::strcmp(v, "0") == 0) return false;
    if (std::strcmp(v, "gate_up") == 0 && !gate_up) return false;
    if (std::strcmp(v, "down") == 0 && gate_up) return false;
  }
  const int64_t k_max = std::max(a.hidden, a.inter);
  return a.num_tokens >= 1 && a.num_tokens <= kStreamGemvMaxTokens && a.hidden % 2 == 0 &&
         static_cast<int64_t>(kStreamGemvMaxTokens) * k_max * 2 <= kGemvMaxSmem;
}

absl::Status LaunchStreamGemvGateUp(const StreamArgs& a, cudaStream_t s) { return LaunchGemv<true>(a, s); }
absl::Status LaunchStreamGemvDown(const StreamArgs& a, cudaStream_t s) { return LaunchGemv<false>(a, s); }

}  // namespace mlaserve::kernels::moe_cuda
