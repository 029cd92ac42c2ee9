// moe: expert routing (top-k selection with DeepSeek's methods) and grouped expert compute.
//
// Routing semantics follow Hugging Face's DeepseekV2TopkRouter / DeepseekV3TopkRouter:
//   scores = softmax(logits) or sigmoid(logits)                          (f32)
//   kGreedy:            top_k of scores
//   kGroupLimitedGreedy: group score = max within group; keep topk_group groups; top_k of the
//                        kept experts (others scored 0)
//   kNoauxTc:           choice = scores + correction_bias; group score = sum of the top-2
//                        choices in the group; keep topk_group groups; top_k of choice among
//                        kept experts; weights = scores (without bias) of the chosen experts
//   norm_topk_prob:     weights /= (sum(weights) + 1e-20)
//   weights *= routed_scaling_factor
// Ties are broken towards the lower expert index. Output order of the k experts is by
// descending choice score.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/activation.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

enum class MoeScoring : uint8_t { kSoftmax, kSigmoid };
enum class MoeTopkMethod : uint8_t { kGreedy, kGroupLimitedGreedy, kNoauxTc };

// Optional part of MoeRoutingParams: the router projection whose f32 logits the routing reads,
// done by the routing kernel itself (weight == null: the logits are an input, as usual). Taken
// only inside an experts call and only where MoeExpertsFusesRouter says so (CUDA decode steps:
// one launch computes logits = x weight^T, routes and permutes); elsewhere run the projection
// first (a GEMM into `logits`) and leave weight null. The kernel splits the experts' weight rows
// over its CTAs, reads them with 16-byte loads, sums in f32 in a fixed order (the same bits
// every run; not the GEMM's bits, within f32 rounding of an exact dot product), writes the
// logits to MoeRoutingParams::logits (the same buffer as `logits` here) and routes them in the
// CTA that finishes last.
struct MoeRouterProjection {
  DType dtype = DType::kBF16;    // of weight and x; the fused kernel takes bf16 only
  const void* weight = nullptr;  // [num_experts, hidden] (gate.weight), 16-byte aligned
  const void* x = nullptr;       // [num_tokens, hidden], row stride hidden, 16-byte aligned
  int hidden = 0;
  float* logits = nullptr;       // [num_tokens, num_experts] f32, written: == routing's logits
  // One device word, 0 before the call, left 0 by it (the CTAs take tickets on it to elect the
  // last one, which resets it). Calls that may run at the same time need different words.
  uint32_t* ticket = nullptr;
};

struct MoeRoutingParams {
  int num_tokens = 0;
  int num_experts = 0;
  int top_k = 0;
  int n_group = 1;      // experts split into n_group equal groups
  int topk_group = 1;
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopkMethod method = MoeTopkMethod::kGreedy;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  const float* logits = nullptr;           // [num_tokens, num_experts] f32
  const float* correction_bias = nullptr;  // [num_experts] f32, kNoauxTc only (may be null = 0)
  int32_t* topk_ids = nullptr;             // [num_tokens, top_k]
  float* topk_weights = nullptr;           // [num_tokens, top_k]
  MoeRouterProjection router;              // weight null: logits are an input (MoeRouting)
};

absl::Status MoeRouting(const MoeRoutingParams& p, const KernelContext& ctx);
absl::Status MoeRoutingCpu(const MoeRoutingParams& p);
absl::Status MoeRoutingCuda(const MoeRoutingParams& p, void* stream);

// How the CUDA backend computes the routed experts' products (moe_cuda.h). kAuto chooses by
// shape; the others force one path (benchmarks and tests). The CPU backend ignores it.
enum class MoeExpertsPath : uint8_t {
  kAuto,
  kStream,  // weights streamed once per touched expert, tokens as the narrow side (decode)
  kSm90,    // CUTLASS grouped GEMM, TMA + wgmma (Hopper)
  kTiled,   // portable mma.sync grouped GEMM (sm_80+)
};
// kAuto takes kStream up to this many tokens, or while experts get at most this many rows on
// average (num_tokens * top_k / num_experts); the grouped GEMMs beyond.
inline constexpr int kMoeStreamMaxTokens = 16;
inline constexpr int kMoeStreamMaxRowsPerExpert = 16;

// Row order of each expert's gate_up weights [2*inter, hidden].
//   kStacked:      the inter gate rows, then the inter up rows (Hugging Face's gate_up_proj;
//                  what checkpoints hold and the only layout the CPU backend takes).
//   kInterleaved8: blocks of 8 gate rows and the same 8 features' up rows alternate: row
//                  16*j + i is gate feature 8*j + i, row 16*j + 8 + i is up feature 8*j + i
//                  (i < 8). A tile of the gate_up product then holds matching gate and up
//                  columns, so the Hopper grouped GEMM writes silu(gate) * up from its epilogue
//                  (no [A, 2*inter] buffer, no SiLU pass). Needs inter % 8 == 0. Every CUDA path
//                  reads it; MoePrepareExpertWeights produces it, once, where weights are loaded.
enum class MoeGateUpLayout : uint8_t { kStacked, kInterleaved8 };

// The CUDA backend's stage kernels of 2026-11-24, kept selectable so mlaserve-moe-bench and the
// tests compare them with the current ones in one process. All false: the current kernels.
struct MoeBaselineStages {
  bool permute = false;  // one-block counting sort, then (kSm90) a separate x-row gather
  bool silu = false;     // kSm90 with kInterleaved8 weights: SiLU * up as its own pass
  bool combine = false;  // combine with 8-byte loads (now 16-byte)
};

// Shared experts folded into the routed experts' call (decode steps on CUDA, where
// MoeExpertsFoldsSharedAndNorm says so): every token's shared MLP, down(silu(gate x) * up x),
// joins the routed rows in the combine with weight 1 (one f32 sum, one rounding), instead of
// running as its own gated MLP (two launches) that accumulates into out. inter 0: none.
struct MoeSharedExperts {
  const void* gate_up = nullptr;  // [2*inter, hidden], rows as gate_up_layout says
  const void* down = nullptr;     // [hidden, inter]
  int inter = 0;                  // the shared MLP's width (n_shared_experts x moe_inter)
  MoeGateUpLayout gate_up_layout = MoeGateUpLayout::kStacked;
};

// Optional epilogue of the combine (where MoeExpertsFoldsSharedAndNorm or
// MoeExpertsFoldsAddendAndNorm says so): the MoE output goes into the residual stream,
// normalised for the next block, instead of into out -- kernels/norm's fused RmsNorm with x =
// the MoE output (the same bits as the combine followed by RmsNorm): residual += out (rounded
// to dtype); y = weight * rmsnorm(residual).
struct MoeResidualNorm {
  void* residual = nullptr;      // [num_tokens, hidden], read and written; null: no epilogue
  const void* weight = nullptr;  // [hidden]
  void* y = nullptr;             // [num_tokens, hidden]
  float eps = 1e-6f;
  // The width the mean of squares divides by: the model's real hidden_size where the rows are
  // stored zero-padded past it (model/model_widths.h; the padding adds nothing to the sum, as
  // RmsNormParams::real_dim). 0: hidden.
  int real_dim = 0;
};

// Routed experts: out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]), where
// expert_e(x) = down_e( act(gate_e x) * up_e x ), act = silu unless `act` says otherwise (both
// backends run every kernels/common/activation.h function; on CUDA, SiLU is fused into the
// products where the path can, and any other activation takes a grouped path with the gate_up
// product written whole and an act-and-mul pass over it: moe_cuda.h). Tokens are grouped by
// expert (sorted), and each expert runs one GEMM over its tokens, never one GEMM per token. An
// assignment whose id is outside [0, num_experts) belongs to no expert of this stack (an
// expert-parallel rank's view of another rank's expert, kernels/moe_shard's kNotLocal): it gets
// no row in the permutation, the GEMMs or the combine and adds nothing to out (its weight is
// not read).
struct MoeExpertsParams {
  DType dtype = DType::kF32;  // of x, weights and out
  int num_tokens = 0;
  int hidden = 0;
  int inter = 0;         // moe_intermediate_size
  int num_experts = 0;
  int top_k = 0;
  const void* x = nullptr;                // [num_tokens, hidden]
  const int32_t* topk_ids = nullptr;      // [num_tokens, top_k]
  const float* topk_weights = nullptr;    // [num_tokens, top_k]
  const void* gate_up = nullptr;          // [num_experts, 2*inter, hidden], rows as gate_up_layout says
  const void* down = nullptr;             // [num_experts, hidden, inter]
  void* out = nullptr;                    // [num_tokens, hidden], overwritten
  void* workspace = nullptr;              // MoeExpertsWorkspaceBytes(p) bytes
  size_t workspace_bytes = 0;
  MoeExpertsPath path = MoeExpertsPath::kAuto;
  int sm90_variant = -1;  // kSm90 tile configuration (moe_cuda.h); -1 = chosen by shape
  MoeGateUpLayout gate_up_layout = MoeGateUpLayout::kStacked;
  MoeBaselineStages baseline;  // CUDA only; benchmarks and tests
  // Optional: the routing that writes topk_ids / topk_weights, run by this call first (on CUDA,
  // for decode-sized batches, in one kernel with the permutation). Its topk_ids / topk_weights
  // must be this call's, its num_tokens / num_experts / top_k this call's (global expert ids:
  // not with kernels/moe_shard's local ids).
  const MoeRoutingParams* routing = nullptr;
  MoeSharedExperts shared;  // CUDA, where MoeExpertsFoldsSharedAndNorm(p): else inter must be 0
  // CUDA, where MoeExpertsFoldsSharedAndNorm(p) or MoeExpertsFoldsAddendAndNorm(p): else
  // residual null.
  MoeResidualNorm norm;
  // Optional, where MoeExpertsFoldsAddendAndNorm(p) (else null): [num_tokens, hidden] of dtype,
  // row stride hidden, 16-byte aligned, one more term of every token's sum, weight 1, after its
  // routed rows (f32, one rounding with them). Prefill on one GPU: the shared experts' output,
  // computed by the caller before the call (a dense GEMM pair), so that it needs no read-add-
  // write of out and the norm epilogue can take the whole MoE output. The bits differ from
  // out = bf16(routed), then out += shared (a GEMM with beta 1: bf16(shared_f32 + out)): here
  // the shared output is rounded to bf16 first and the routed sum is not, bf16(routed_f32 +
  // bf16(shared_f32)); either way two roundings, and the two differ by at most half a bf16
  // ulp of each term before the final one.
  const void* addend = nullptr;
  Activation act = Activation::kSilu;  // of the routed (and folded shared) experts
};

size_t MoeExpertsWorkspaceBytes(const MoeExpertsParams& p);
// Whether MoeExperts(p) on `backend` takes p.shared and p.norm (set p.shared.inter, and the
// rest of p's shape, before asking): the CUDA stream path (decode steps) when the shared MLP
// splits into at most top_k slices of `inter` features, hidden <= 32768, and, with shared
// experts, at most kMoeFoldSharedMaxTokens tokens; never with p.addend set. Any act (the stream
// kernels apply it in their gate_up pass). False on the CPU, which keeps the separate gated MLP
// and RmsNorm.
// A shared slice streams its weights once per 16 tokens; past that the dense GEMMs of the
// separate gated MLP are faster (H100, V2-Lite, batch 128: 21.0 ms a step folded vs 17.7).
inline constexpr int kMoeFoldSharedMaxTokens = 16;
bool MoeExpertsFoldsSharedAndNorm(const MoeExpertsParams& p, Backend backend);
bool MoeExpertsCudaFoldsSharedAndNorm(const MoeExpertsParams& p);  // CUDA builds only
// Whether MoeExperts(p) on `backend` takes p.addend and p.norm, either or both (set them, and
// the rest of p's shape, before asking; p.shared must be empty): the CUDA grouped-GEMM paths
// (kSm90, kTiled: prefill-sized batches), whose combine then adds the addend and runs the
// norm epilogue, for bf16, hidden % 8 == 0 and <= 32768, 16-byte aligned addend and norm
// pointers, and MLASERVE_MOE_PREFILL_FOLD not "0" in the environment (read once; timing
// comparisons). Any act: the addend and the norm are the combine's, after the products. False
// on the stream path (decode steps fold the shared experts themselves:
// MoeExpertsFoldsSharedAndNorm), with the baseline combine, and on the CPU, which keeps the
// separate shared MLP and RmsNorm.
bool MoeExpertsFoldsAddendAndNorm(const MoeExpertsParams& p, Backend backend);
bool MoeExpertsCudaFoldsAddendAndNorm(const MoeExpertsParams& p);  // CUDA builds only
// Whether MoeExperts(p) on `backend` takes p.routing->router (the router projection in the
// routing's kernel; set it, and the rest of p, before asking): the CUDA stream path (any act)
// with the routing fused into the permutation (decode steps: num_tokens <= kMoeStreamMaxTokens),
// bf16 weight and x, hidden % 8 == 0 and <= kMoeFusedRouterMaxHidden, 16-byte aligned weight
// and x, a ticket, and MLASERVE_MOE_FUSED_ROUTER not "0" (nor MLASERVE_MOE_FOLD). False on the
// CPU. Where false, callers compute the logits first and leave router.weight null.
inline constexpr int kMoeFusedRouterMaxHidden = 16384;
bool MoeExpertsFusesRouter(const MoeExpertsParams& p, Backend backend);
bool MoeExpertsCudaFusesRouter(const MoeExpertsParams& p);  // CUDA builds only
absl::Status MoeExperts(const MoeExpertsParams& p, const KernelContext& ctx);
absl::Status MoeExpertsCpu(const MoeExpertsParams& p);
absl::Status MoeExpertsCuda(const MoeExpertsParams& p, void* stream);
// One-time preparation of the routed experts' gate_up weights for the CUDA backend, where the
// weights are uploaded (before the first MoeExperts call; not inside a captured step): rewrites
// `gate_up` in place into `layout`, or, when `layout` is unset, into the layout this device's
// fastest path wants (kInterleaved8 on Hopper for bf16 with inter % 8 == 0, else kStacked:
// nothing is touched). Returns the layout the weights are in afterwards; pass it as
// MoeExpertsParams::gate_up_layout. The CPU backend leaves the weights stacked. Synchronises
// the stream (it allocates and frees a staging buffer of at most 256 MiB, or of one expert's
// gate_up where that is larger: a dense layer's prepared as one expert).
struct MoePrepareParams {
  DType dtype = DType::kBF16;
  int num_experts = 0;  // experts in the stack (an expert-parallel rank's own)
  int hidden = 0;
  int inter = 0;        // rows per half: moe_intermediate_size, or a rank's slice of it
  void* gate_up = nullptr;  // [num_experts, 2*inter, hidden], kStacked on entry
  std::optional<MoeGateUpLayout> layout;  // unset: the device's choice
};
absl::StatusOr<MoeGateUpLayout> MoePrepareExpertWeights(const MoePrepareParams& p,
                                                        const KernelContext& ctx);
absl::StatusOr<MoeGateUpLayout> MoePrepareExpertWeightsCuda(const MoePrepareParams& p, void* stream);

// The shared experts' gate_up product with SiLU * up fused (the first half of their dense
// gated MLP; the model's dense layers use it too), for many rows on the CUDA backend: the Hopper grouped GEMM of the routed experts
// run as one group, with the fused epilogue (moe_gemm_sm90_direct.cuh), so the [rows, 2*inter]
// product is never written and no SiLU pass reads it back. act[r, f] = silu(g) * u with g, u
// the products of x[r] with gate row f and up row f, each rounded to bf16 first: the bits of
// the GEMM + kernels/activation SiluAndMul pair. The weight is in kInterleaved8
// (MoePrepareExpertWeights with num_experts = 1). MoeSharedGateUpRuns says whether this device
// and shape take it (bf16, sm_90, rows >= kMoeSharedGateUpMinRows: below, the grid holds too
// few tiles to keep the GPU busy; hidden, inter multiples of 8; 16-byte aligned pointers);
// callers use the GEMM and SiluAndMul otherwise.
inline constexpr int kMoeSharedGateUpMinRows = 1024;
struct MoeSharedGateUpParams {
  DType dtype = DType::kBF16;
  int rows = 0;
  int hidden = 0;
  int inter = 0;                  // the shared experts' intermediate size (or a rank's slice)
  const void* x = nullptr;        // [rows, hidden], row stride hidden
  const void* gate_up = nullptr;  // [2*inter, hidden], MoeGateUpLayout::kInterleaved8
  void* act = nullptr;            // [rows, inter], row stride inter
  void* workspace = nullptr;      // MoeSharedGateUpWorkspaceBytes() bytes
  size_t workspace_bytes = 0;
  int sm90_variant = -1;          // tile configuration (moe_cuda.h); -1 = chosen by shape
};
bool MoeSharedGateUpRuns(const MoeSharedGateUpParams& p, Backend backend);
size_t MoeSharedGateUpWorkspaceBytes();  // 0 in builds without CUDA
absl::Status MoeSharedGateUp(const MoeSharedGateUpParams& p, const KernelContext& ctx);
bool MoeSharedGateUpRunsCuda(const MoeSharedGateUpParams& p);
size_t MoeSharedGateUpWorkspaceBytesCuda();
absl::Status MoeSharedGateUpCuda(const MoeSharedGateUpParams& p, void* stream);

// Workspace the CUDA backend needs beyond the CPU layout (its active-expert list, the grouped
// GEMM's device-built arguments, the permutation's per-chunk expert counts); defined only in
// CUDA builds.
size_t MoeExpertsCudaWorkspaceBytes(const MoeExpertsParams& p);

}  // namespace mlaserve::kernels
