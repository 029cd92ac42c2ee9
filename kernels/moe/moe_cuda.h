// Internal to the moe family's CUDA backend: the pieces moe_experts.cu strings together.
//
// Routed experts on the GPU run in these stages, none of which syncs with the host (the
// per-expert token counts exist only on the device, so CUDA graph capture stays possible):
//   1. permute (moe_permute.cu): a stable counting sort of the num_tokens * top_k assignments
//      by expert over many blocks (per-chunk expert counts, a scan, a scatter that places
//      every assignment at its sorted row) and, for kSm90, the copy of each x row to its
//      sorted row (in the scatter for one chunk, a launch of its own for more);
//   2. the gate_up product over each expert's rows, and act(gate) * up (SiLU fused into the
//      product where the path can; any other activation as a pass of its own, below);
//   3. the down product, one bf16 row per assignment (rounded as Hugging Face's expert output
//      is);
//   4. the combine (moe_rows.cu): each token's top_k rows weighted and summed in token order
//      (f32, one rounding), so no atomics and the same bytes on every run; with the shared
//      experts' rows (stream path) or an addend (grouped paths) as further terms, and the
//      residual add + next RMSNorm as its epilogue where the call asks.
// Steps 2-3 have three implementations, chosen per call by MoeExpertsPath (api.h):
//   kStream   few tokens per expert (decode): weights streamed once at copy bandwidth, tokens
//             as the narrow side of m16n8k16 products, act * up fused into the gate_up pass
//             (at one token: warp GEMVs in f32 instead, moe_stream_gemv.cu);
//   kSm90     CUTLASS 3 grouped GEMM (TMA + wgmma, warp-specialized persistent kernel over
//             (expert, tile) work) on gathered rows: prefill and large decode batches; with
//             kInterleaved8 weights SiLU * up runs in the gate_up GEMM's epilogue;
//   kTiled    the portable mma.sync grouped GEMM (any sm_80+ GPU, and the fallback).
// Activations other than SiLU (MoeExpertsParams::act): the stream kernels apply any of them in
// their gate_up pass (an instantiation that reads StreamArgs::act_fn and switches once an output;
// SiLU keeps the one with SiluMul compiled in), so the path choice, the stream path's folds
// (shared experts, norm epilogue) and the fused router are the same as for SiLU. The grouped
// paths fuse SiLU alone into the gate_up epilogue: for another activation they write the
// [A, 2*inter] gate_up product whole, run LaunchActMul over it, then the down product.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/dram_class.h"
#include "kernels/moe/api.h"

namespace mlaserve::kernels::moe_cuda {

// Rows of one grouped product: expert e owns rows [offsets[e], offsets[e+1]) of `a` (or of the
// gathered x when `sorted` is set: row r is x[sorted[r] / top_k]) and of `c`.
struct GroupedGemmArgs {
  const __nv_bfloat16* a;
  int64_t lda;
  const int32_t* sorted;   // non-null: gather rows through it
  int top_k;
  const __nv_bfloat16* w;  // [E][N, K] row-major
  int64_t w_expert_stride;
  int n, k;
  __nv_bfloat16* c;        // [A, N] rows in sorted order, row stride ldc
  int64_t ldc;
  const int32_t* offsets;       // [E + 1]
  const int32_t* tile_offsets;  // [E + 1], row tiles of kTiledRows (tiled path only)
  int num_experts;
};

// --- kTiled (moe_tiled_gemm.cu)
inline constexpr int kTiledRows = 64;  // rows per tile of the tiled grouped GEMM
absl::Status LaunchTiledGemm(const GroupedGemmArgs& g, int max_tiles, cudaStream_t s);

// --- kStream (moe_stream.cu). `active` lists the experts with rows ([0, count) valid, count
// at active[E]); grids are sized by `max_active` = min(E, assignments), known on the host.
struct StreamArgs {
  const __nv_bfloat16* x;       // [num_tokens, hidden]
  const int32_t* sorted;        // [A] assignment ids by expert
  const int32_t* offsets;       // [E + 1]
  const int32_t* active;        // [E + 1]
  int top_k, hidden, inter, num_experts, max_active;
  const __nv_bfloat16* gate_up; // [E][2*inter, hidden]
  const __nv_bfloat16* down;    // [E][hidden, inter]
  __nv_bfloat16* act;           // [A, inter]   act_fn(gate) * up, rows in sorted order
  __nv_bfloat16* ys;            // [A, hidden]  down output, rows in sorted order
  bool gate_up_interleaved;     // gate_up rows in MoeGateUpLayout::kInterleaved8
  Activation act_fn = Activation::kSilu;  // MoeExpertsParams::act (kSilu: compiled in)
  // Shared experts (MoeSharedExperts) as shared_slots pseudo-experts of `inter` features after
  // the max_active routed slots: slice j is features [j*inter, (j+1)*inter) of the shared MLP
  // (its down product splits the same way along K), over every token; its rows are
  // [num_assign + j*num_tokens, + num_tokens) of act and ys, in token order.
  const __nv_bfloat16* shared_gate_up;  // [2*shared_slots*inter, hidden]
  bool shared_gate_up_interleaved;      // kInterleaved8 (else stacked)
  const __nv_bfloat16* shared_down;     // [hidden, shared_slots*inter]
  int shared_slots;                     // 0: none
  int num_tokens, num_assign;
  // The call's topk_ids where the gate_up launch may read them before its PDL wait (their writer
  // is at least two kernels back: the call has no routing inside it) and num_assign <=
  // kActiveSlotMaxAssign; else null. gate_up's routed slots then derive their expert from them
  // (moe_active_slot.cuh) and put its first weights in flight under the permutation.
  // MLASERVE_MOE_EARLY_EXPERTS=0 in the environment keeps it null (timing comparisons; read per
  // call, by RunStreamExperts).
  const int32_t* early_ids;
  // The warp-GEMV launches set it to their block-trace region (moe_block_trace.cuh; null: none).
  uint64_t* block_trace = nullptr;
  // Set by the one-token gate_up GEMV's launch (moe_stream_gemv.cu, SpreadsShared): no grid rows
  // of shared slices; every warp of the grid takes its share of the shared features before the
  // PDL wait, then its block's share of its routed slot.
  bool spread_shared = false;
};
absl::Status LaunchStreamGateUp(const StreamArgs& a, cudaStream_t s);
absl::Status LaunchStreamDown(const StreamArgs& a, cudaStream_t s);
// At kStreamGemvMaxTokens token the two launches above run the warp-GEMV kernels of
// moe_stream_gemv.cu (each weight row read once, 512 contiguous bytes a warp load, one wave of
// blocks) instead of the mma kernels; StreamGemvTakes says when for each product
// (MLASERVE_MOE_STREAM_GEMV, read per call: 0 = never, gate_up / down = that product alone).
inline constexpr int kStreamGemvMaxTokens = 1;
bool StreamGemvTakes(const StreamArgs& a, bool gate_up);
// The chunks a lane loads per row per segment of the one-token down GEMV at this `inter` (its K):
// 6 where 4-chunk segments (1024 columns) would leave a short second one and 6-chunk segments
// (1536 columns) take the whole row (V2-Lite's 1408), else 4; MLASERVE_MOE_GEMV_DOWN_SEG_LOADS=4
// or 6 (read per call) forces one (moe_stream_gemv.cu). MLASERVE_MOE_GEMV_SEG_LOADS=8 overrides
// both products.
int DownSegLoads(int64_t inter);
absl::Status LaunchStreamGemvGateUp(const StreamArgs& a, cudaStream_t s);
absl::Status LaunchStreamGemvDown(const StreamArgs& a, cudaStream_t s);
// A/B timing of the SMs' L1 / shared split around the one-token MoE launches: `percent` 0-100 asks
// `kernel` for that shared-memory carveout (cudaFuncAttributePreferredSharedMemoryCarveout, a
// hint); below 0 leaves the driver's choice, as always. The launches read it once from
// MLASERVE_MOE_GEMV_CARVEOUT (the GEMVs) and MLASERVE_MOE_ROUTER_CARVEOUT (both fused router forms).
// The twelfth session's max-shared carveout for every kernel cost 0.1 ms a step; the
// thirty-fifth's cluster router (36 KB of shared memory a CTA) slowed the gate_up GEMV after it.
absl::Status PreferDecodeCarveout(const void* kernel, int percent, const char* env_name);

// --- kSm90 (moe_gemm_sm90_v<N>.cu): d[rows of e] = a[rows of e] * w_e^T for every expert
// (bf16 d), the per-expert problem shapes and pointers built on the device from `offsets`.
// Variants are tile configurations with a way of storing (moe_gemm_sm90.cuh): 0-6 the
// configurations Sm90Coop128x128, Sm90Coop128x256, Sm90Coop128x256Cluster2, Sm90Pingpong64x256,
// Sm90Pingpong128x128, Sm90Coop128x256ClusterN2, Sm90Pingpong128x128ClusterN2 with CUTLASS's TMA
// epilogue; 7-11 configurations 1, 3, 4, 5, 6 storing from registers (Sm90Store::kDirect). A
// fused SiLU epilogue (always a direct store) exists for configurations 1, 3, 4, 5, 6, under
// both of their variant numbers. 12 and 14 are our kernel (moe_gemm_sm90_own.cuh), cooperative
// 128 x 256 and ping-pong 64 x 256 tiles: one TMA descriptor per operand for the whole call (no
// per-expert descriptors), direct stores, fused SiLU. 13 is configuration 7, ping-pong 64x128,
// with direct stores only (no TMA epilogue form). kAuto picks per shape and product.
inline constexpr int kSm90Variants = 15;
inline constexpr int kSm90FirstDirectVariant = 7;
inline constexpr int kSm90OwnVariant = 12;          // ours, cooperative 128 x 256
inline constexpr int kSm90OwnPingPongVariant = 14;  // ours, ping-pong 64 x 256
struct Sm90GroupedArgs {
  const __nv_bfloat16* a;       // [A, K] row stride lda, rows in sorted order
  int64_t lda;
  const __nv_bfloat16* w;       // [E][N, K]
  void* d;                      // [A, N] bf16, row stride ldd
  int64_t ldd;
  int n, k, num_experts;
  const int32_t* offsets;       // [E + 1]; null: one group of `rows` rows (a dense product)
  void* args_block;             // Sm90ArgsBlockBytes(E) bytes: per-expert shapes, pointers, strides
  void* workspace;              // Sm90WorkspaceBytes() bytes for CUTLASS
  int rows = 0;                 // with offsets null
  // Variants 12 and 14 only: the rows of `a`, the extent of its TMA descriptor (with offsets
  // null, `rows` is taken).
  int a_rows = 0;
};
// The same product with SiLU * up in the epilogue, for gate_up weights in kInterleaved8: d is
// [A, N/2] (row stride ldd), d[r, f] = silu(gate_f) * up_f, gate and up rounded to bf16 first
// (as the separate pass reads them), so the output equals the unfused product + SiLU pass.
// Compiled for the tile configurations Sm90HasFusedSiluMul names.
absl::Status LaunchSm90GroupedOwnV12(const Sm90GroupedArgs& g, cudaStream_t s);
absl::Status LaunchSm90GroupedOwnSiluMulV12(const Sm90GroupedArgs& g, cudaStream_t s);
absl::Status LaunchSm90GroupedOwnV14(const Sm90GroupedArgs& g, cudaStream_t s);
absl::Status LaunchSm90GroupedOwnSiluMulV14(const Sm90GroupedArgs& g, cudaStream_t s);
bool Sm90HasFusedSiluMul(int variant);
// "coop128x256", "pp64x256/reg", ...: the tile shape, c2m / c2n for clusters of 2 along M / N,
// /reg for the direct store (benchmarks' tables).
const char* Sm90VariantName(int variant);
absl::Status LaunchSm90GroupedSiluMul(int variant, const Sm90GroupedArgs& g, cudaStream_t s);
size_t Sm90ArgsBlockBytes(int num_experts);  // the largest over the variants
size_t Sm90WorkspaceBytes(int num_experts);  // the largest over the variants
bool Sm90Available();                        // the current device is sm_90 (wgmma, TMA)
absl::Status LaunchSm90Grouped(int variant, const Sm90GroupedArgs& g, cudaStream_t s);
#define MLASERVE_MOE_SM90_DECLARE(N)                                              \
  absl::Status LaunchSm90GroupedV##N(const Sm90GroupedArgs& g, cudaStream_t s); \
  size_t Sm90WorkspaceBytesV##N(int num_experts);                               \
  size_t Sm90ArgsBlockBytesV##N(int num_experts);
#define MLASERVE_MOE_SM90_SILU_DECLARE(N)                                                \
  absl::Status LaunchSm90GroupedSiluMulV##N(const Sm90GroupedArgs& g, cudaStream_t s); \
  size_t Sm90WorkspaceBytesSiluMulV##N(int num_experts);                               \
  size_t Sm90ArgsBlockBytesSiluMulV##N(int num_experts);                               \
  absl::Status LaunchSm90GroupedDirectV##N(const Sm90GroupedArgs& g, cudaStream_t s);  \
  size_t Sm90WorkspaceBytesDirectV##N(int num_experts);                                \
  size_t Sm90ArgsBlockBytesDirectV##N(int num_experts);
MLASERVE_MOE_SM90_DECLARE(0)
MLASERVE_MOE_SM90_DECLARE(1)
MLASERVE_MOE_SM90_DECLARE(2)
MLASERVE_MOE_SM90_DECLARE(3)
MLASERVE_MOE_SM90_DECLARE(4)
MLASERVE_MOE_SM90_DECLARE(5)
MLASERVE_MOE_SM90_DECLARE(6)
MLASERVE_MOE_SM90_SILU_DECLARE(1)
MLASERVE_MOE_SM90_SILU_DECLARE(3)
MLASERVE_MOE_SM90_SILU_DECLARE(4)
MLASERVE_MOE_SM90_SILU_DECLARE(5)
MLASERVE_MOE_SM90_SILU_DECLARE(6)
MLASERVE_MOE_SM90_SILU_DECLARE(7)
#undef MLASERVE_MOE_SM90_DECLARE
#undef MLASERVE_MOE_SM90_SILU_DECLARE

// --- Stage 1, the permutation (moe_permute.cu). Writes the expert row offsets [E + 1], the
// row-tile offsets of the tiled path [E + 1], the experts with rows (active, count at
// active[E]), each sorted row's assignment id (sorted [A]) and each assignment's row
// (position [A], -1 for an id outside [0, E)); with xg set, also xg[r] = x[sorted[r] / top_k].
// Rows of one expert keep assignment order (token order), so the outputs are the same on
// every run and the same as the baseline's.
//
// Where the x rows are copied when there is more than one chunk of assignments (prefill on
// kSm90); every form writes the same bytes.
enum class PermuteRowCopy : uint8_t {
  kAuto,       // kApart, unless MLASERVE_MOE_SCATTER_SPLIT=0 in the environment (read once)
  kApart,      // a ranking launch of one block per chunk, then LaunchGatherRows: whole rows
               // in destination order over every SM
  kInScatter,  // in the scatter: a block per (chunk, column slice) ranks its chunk again and
               // copies its slice of the chunk's rows (the earlier form, kept for comparisons)
};
struct PermuteArgs {
  const int32_t* topk_ids;      // [A]
  int num_assign, num_experts, top_k;
  const __nv_bfloat16* x;       // [num_tokens, hidden]
  int hidden;
  __nv_bfloat16* xg;            // [A, hidden] or null: no row gather
  int32_t* sorted;
  int32_t* offsets;
  int32_t* tile_offsets;
  int32_t* position;
  int32_t* active;
  int32_t* chunk_counts;        // PermuteScratchBytes(A, E): per-chunk expert counts
  // Optional: the routing that writes topk_ids (and the weights), run first; for decode steps
  // (PermuteFusesRouting) in the same kernel as the permutation.
  const MoeRoutingParams* routing = nullptr;
  PermuteRowCopy row_copy = PermuteRowCopy::kAuto;  // tests pin a form; the rest leave kAuto
};
// MLASERVE_MOE_FOLD=0 in the environment: no routing fused into the permutation and no shared
// experts or norm epilogue folded (MoeExpertsFoldsSharedAndNorm false): the separate kernels,
// for timing comparisons. Read once. The grouped paths' fold (MoeExpertsFoldsAddendAndNorm)
// has its own switch, MLASERVE_MOE_PREFILL_FOLD.
bool DecodeFoldsDisabled();
// Tokens up to which LaunchPermute routes and permutes in one block (a warp routes a token at
// a time: beyond a few tokens per warp the separate, parallel routing kernel is faster).
inline constexpr int kFusedRoutingMaxTokens = 16;
bool PermuteFusesRouting(const PermuteArgs& a);
inline constexpr int kMaxExperts = 1024;
size_t PermuteScratchBytes(int num_assign, int num_experts);
// Whether LaunchPermute copies a's x rows in a launch of its own (xg set, more than one chunk,
// row_copy resolving to kApart).
bool PermuteCopiesRowsApart(const PermuteArgs& a);
// With routing->router.weight set, LaunchPermute runs LaunchRouterPermute. `observer` (may be
// null) is told ExpertsStage::kPermute after the ranking's launches and, where the rows are
// copied apart, kGather after the copy.
class ExpertsStageObserver;
absl::Status LaunchPermute(const PermuteArgs& a, cudaStream_t s, ExpertsStageObserver* observer = nullptr);
// The router projection fused in too (moe_router_permute.cu): one launch computes the routing's
// logits (MoeRouterProjection), routes them and permutes, with the outputs of the routing +
// LaunchPermute pair. RouterPermuteRuns: whether it takes `a` (PermuteFusesRouting, and the
// projection's shape, dtype, alignment and ticket); LaunchRouterPermute refuses the rest with
// INVALID_ARGUMENT. MLASERVE_MOE_FUSED_ROUTER=0 in the environment turns it off (read once):
// MoeExpertsFusesRouter is then false, and callers run the GEMM and RoutePermuteKernel (timing
// comparisons).
bool FusedRouterDisabled();
bool RouterPermuteRuns(const PermuteArgs& a);
absl::Status LaunchRouterPermute(const PermuteArgs& a, cudaStream_t s);
// Baseline: one block sorts (SortKernel), then a separate kernel gathers the rows.
absl::Status LaunchBaselineSort(const PermuteArgs& a, cudaStream_t s);
absl::Status LaunchBaselineGather(const PermuteArgs& a, cudaStream_t s);

// --- Row passes (moe_rows.cu).
// xg[r] = x[sorted[r] / top_k] for the rows [0, offsets[E]) of a's finished permutation (its
// kApart row copy): a warp per row, rows in destination order, a grid of a few blocks per SM.
absl::Status LaunchGatherRows(const PermuteArgs& a, cudaStream_t s);
// In place over rows [0, offsets[E]) of h (row stride 2*inter), gate_up output in `layout`:
// the first inter columns of each row become silu(gate) * up. `max_rows` >= offsets[E] sizes
// the grid on the host.
absl::Status LaunchSiluMul(__nv_bfloat16* h, const int32_t* offsets, int num_experts, int inter,
                           int max_rows, bool interleaved, cudaStream_t s);
// The same pass for any activation: act(gate) * up (activation_math.h); LaunchSiluMul for kSilu.
absl::Status LaunchActMul(Activation act, __nv_bfloat16* h, const int32_t* offsets, int num_experts,
                          int inter, int max_rows, bool interleaved, cudaStream_t s);
// out[t] = sum_j w[t, j] * ys[position[t*top_k + j]] (f32 in j order, one rounding), plus
// the shared slices' rows ys[shared_base + s*num_tokens + t] (weight 1, after the routed ones),
// plus addend[t] (MoeExpertsParams::addend, weight 1, last); with residual set, the
// MoeResidualNorm epilogue instead of writing out.
struct CombineArgs {
  const __nv_bfloat16* ys;      // [A, hidden]
  const int32_t* position;      // [A]
  const float* topk_weights;    // [A]
  __nv_bfloat16* out;           // [num_tokens, hidden]
  int num_tokens, top_k, hidden;
  int shared_slots = 0;
  int shared_base = 0;          // A
  __nv_bfloat16* residual = nullptr;     // [num_tokens, hidden] or null
  const __nv_bfloat16* norm_weight = nullptr;
  __nv_bfloat16* norm_y = nullptr;
  float norm_eps = 0.0f;
  int norm_dim = 0;             // what the mean of squares divides by (MoeResidualNorm::real_dim)
  const __nv_bfloat16* addend = nullptr;  // [num_tokens, hidden] or null
  // Which kernel runs the norm epilogue. True (the stream path, decode steps: a grid of about
  // one wave, whose prologue overlaps the kernel before): the one that loads the positions,
  // routing weights, residual and norm weight before its PDL wait. False (the grouped paths,
  // prefill: many waves of blocks, where that overlap is one wave's and those loads' registers,
  // spilled under the 1024-thread bound, cost every block): the one without them.
  bool early_loads_kernel = true;
  // Whether that kernel does load early (LaunchCombine sets it; MLASERVE_MOE_COMBINE_EARLY_LOADS=0
  // turns it off for timing).
  bool early_loads = false;
  // Whether that kernel lets the next kernel of the stream launch at its start, before its own PDL
  // wait (moe_rows.cu; LaunchCombine sets it; MLASERVE_MOE_COMBINE_EARLY_RELEASE=0 turns it off
  // for timing). The kernel after it must then not read the down product's rows (`ys`) before its
  // own wait: pdl.cuh's two-kernels-back rule does not hold across this kernel.
  bool release_early = false;
};
// The most hidden values the combine's norm epilogue takes (one block per token, as
// kernels/norm's one-pass RMSNorm: at most 4 16-byte vectors a thread, 1024 threads).
inline constexpr int kCombineNormMaxHidden = 32768;
absl::Status LaunchCombine(const CombineArgs& a, cudaStream_t s);
absl::Status LaunchBaselineCombine(const CombineArgs& a, cudaStream_t s);

// --- The experts call stage by stage (moe_experts.cu), for mlaserve-moe-bench's per-stage
// timings: `observer` is told on the host after each stage's launches, in order, and may record
// an event on the stream there. MoeExpertsCuda is RunExperts(p, s, nullptr); p must have passed
// MoeExperts' checks.
enum class ExpertsStage : uint8_t { kPermute, kGather, kGateUp, kSiluMul, kDown, kCombine };
inline constexpr int kExpertsStages = 6;
const char* ExpertsStageName(ExpertsStage stage);
class ExpertsStageObserver {
 public:
  virtual ~ExpertsStageObserver() = default;
  virtual void AfterStage(ExpertsStage stage, cudaStream_t s) = 0;
};
// What a call with these params runs: the path (kAuto resolved), the kSm90 tile configuration
// of each product and whether SiLU * up runs in the gate_up GEMM's epilogue (never for another
// activation).
struct ExpertsPlan {
  MoeExpertsPath path;
  int gate_up_variant;  // -1 off kSm90
  int down_variant;     // -1 off kSm90
  bool fused_silu;
};
ExpertsPlan PlanExperts(const MoeExpertsParams& p);

// What kAuto's kSm90 tile choice reads of the GPU: its multiprocessors (how evenly a
// weight-bound product's tiles spread) and its nominal DRAM bytes per multiprocessor clock
// (cuda::CurrentDeviceDramBytesPerSmClock): on a lean-DRAM GPU (kernels/common/dram_class.h: the
// H100's 12.8, not the H200's) the larger cooperative 128 x 256 tile, which reads each expert's
// weights half as often as the 64-row ping-pong tiles, wins from 224 rows an expert where our
// ping-pong kernel does not run (V2-Lite from 289 rows, V3 from 224; moe_experts.cu).
struct Sm90Device {
  int sms;
  double dram_bytes_per_sm_clock;
};
Sm90Device CurrentSm90Device();
struct Sm90Choice {
  int gate_up, down;  // kSm90 variants
};
// kAuto's tile configuration per product for p on `device` (no environment, no device query).
Sm90Choice ChooseSm90Variants(const MoeExpertsParams& p, const Sm90Device& device);

// The kStream path, whole (moe_stream.cu): the routing (p.routing) and the permutation, gate_up
// and down of the routed experts and of the shared slices (p.shared), the combine (with the
// p.norm epilogue). The workspace pieces are moe_experts.cu's carving.
struct StreamWorkspace {
  int32_t* sorted;
  int32_t* offsets;
  int32_t* tile_offsets;
  int32_t* position;
  int32_t* active;
  int32_t* chunk_counts;
  __nv_bfloat16* act;  // [A + shared rows, inter]: the gate_up part (room for 2A rows)
  __nv_bfloat16* ys;   // [A + shared rows, hidden]: the down part (room for 2A bf16 rows)
};
absl::Status RunStreamExperts(const MoeExpertsParams& p, const StreamWorkspace& w, cudaStream_t s,
                              ExpertsStageObserver* observer);
absl::Status RunExperts(const MoeExpertsParams& p, cudaStream_t s, ExpertsStageObserver* observer);

}  // namespace mlaserve::kernels::moe_cuda
