// mla_decode: absorbed MLA for decode (1 query token per request, or 2 for speculative use)
// over the paged latent cache, with split-KV: a host-side plan cuts long contexts into chunks
// so that small batches still fill the GPU, and a combine step merges the partial results
// by their LSE. Same function as mla_prefill (see its header for q/cache/out semantics).
//
// Optionally the combine also applies W_UV (MlaValueProjection below), which removes the
// per-head GEMM after the attention where the plan has a combine for every row.
//
// Plan/run split (FlashInfer style): PlanMlaDecode runs on the host once per batch shape and
// sizes the workspace; MlaDecode launches without host syncs or allocation, so decode steps
// can be captured in CUDA graphs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "kernels/mla_prefill/api.h"

namespace mlaserve::kernels {

struct MlaDecodePlan {
  int num_splits = 1;            // KV chunks per (request, head group); 1 = no split
  int chunk_tokens = 0;          // tokens per split (multiple of kPageSize); 0 = whole context
  // The Hopper (wgmma) kernel's balanced schedule instead of chunks: this many persistent CTAs
  // per 64 query rows share the batch's pages evenly, whatever the lengths
  // (kernels/mla_decode/balanced_schedule.h). 0 = chunks only (CPU plan).
  int num_parts = 0;
  // Chunks: start the longest chunks first (a small kernel sorts them by pages on the device,
  // the CTAs take them in that order), so that the last wave holds the shortest. The plan sets it
  // where the chunk CTAs take more than one wave: the GPU starts CTAs in grid order, and in
  // request order one long request among the last CTAs decides when the call ends.
  bool longest_first = false;
  // Chunks whose length the metadata kernel picks from the batch's own lengths for this many SMs
  // (kernels/mla_decode/chunk_pick.h: between half the longest request's pages and all of them,
  // so num_splits is 2; MlaDecodeBuildMetadata writes the pick beside the longest-first order, and
  // the attention and combine kernels read it there). 0: chunk_tokens as planned. chunk_tokens
  // still holds half the planned width, used where no order is built (MLASERVE_MLA_ORDER=0).
  int chunk_pick_sms = 0;
  // The balanced schedule: the most pieces the plan expects a request to be cut into (a request of
  // max_seqlen_k keys over parts of the mean's pages; 0: no estimate, as in a plan built by hand).
  // Where it is at most a few, the combine runs a warp per row (mla_decode_internal::LaunchCombine).
  int max_pieces = 0;
  size_t workspace_bytes = 0;    // partial outputs + partial LSE (+ the schedule or the order)
  // The part of the workspace that depends only on the batch -- its lengths, block table and
  // query rows -- and not on the layer: the balanced schedule's records or the chunks'
  // longest-first order (0: the plan has neither). A decode step's layers share one: built
  // once by MlaDecodeBuildMetadata, passed to every layer's MlaDecode, which then launches
  // the attention and the combine only (FlashMLA's tile-scheduler metadata, our layout).
  size_t metadata_bytes = 0;
};

// The workspace of a chunk plan: the partials when it splits (num_splits > 1), then the chunks'
// longest-first order when it has one (its bytes start at MlaDecodeChunkOrderOffset).
size_t MlaDecodeChunkOrderOffset(int batch, int rows_per_request, int kv_lora_rank, int num_splits);
size_t MlaDecodeChunkWorkspaceBytes(int batch, int rows_per_request, int kv_lora_rank, int num_splits,
                                    bool longest_first);
// The order's bytes (batch x splits int32, rounded up to 16, then the pick's 144 bytes, whose
// first int32 is the picked chunk length in pages where the plan has chunk_pick_sms): a chunk
// plan's metadata_bytes. The pick sits at MlaDecodeChunkPickOffset from the order's start.
size_t MlaDecodeChunkOrderBytes(int batch, int num_splits);
size_t MlaDecodeChunkPickOffset(int batch, int num_splits);
// The most chunks (batch x splits) the order kernel sorts; a plan with more keeps grid order.
inline constexpr int kMlaDecodeMaxOrderedChunks = 4096;

// How PlanMlaDecode cuts the keys: kAuto picks by its cost estimate (the balanced schedule where
// it beats chunks on the shape's longest context; the mma.sync kernel always runs chunks).
enum class MlaDecodeSchedule : uint8_t { kAuto, kChunks, kBalanced };

struct MlaDecodeShape {
  int batch = 0;
  int num_heads = 0;
  int q_per_request = 1;         // 1 or 2
  int kv_lora_rank = 0;
  int rope_dim = 0;
  int max_seqlen_k = 0;
  int num_sms = 0;               // device multiprocessors (0 on CPU)
  MlaDecodeSchedule schedule = MlaDecodeSchedule::kAuto;
  // The sum of the requests' key counts where the caller knows it (0: every request taken at
  // max_seqlen_k). Only the choice of the balanced schedule uses it: chunks take as long as the
  // longest request, the balanced schedule as long as the mean.
  int64_t total_seqlen_k = 0;
  // The device's nominal DRAM bytes per multiprocessor clock (cuda::CurrentDeviceDramBytesPerSmClock;
  // 0: not known). On a lean-DRAM GPU (kernels/common/dram_class.h: the H100) kAuto charges the
  // balanced schedule's extra partials more, as measured there.
  double dram_bytes_per_sm_clock = 0;
};

absl::StatusOr<MlaDecodePlan> PlanMlaDecode(const MlaDecodeShape& shape);

// The absorbed form's value up-projection done by the combine kernel, so that no per-head GEMM
// follows the attention (one launch fewer per layer in a decode step):
//   value_out[t, h, c] = sum_k bf16(out[t, h, k]) * w[h * head_stride + c * row_stride + k]
// for c < v_dim, k < kv_lora_rank, where bf16(out[t, h, :]) is the latent row exactly as
// MlaDecode writes it to p.out (which it still does), f32 sums, rounded once to bf16: the
// per-head GEMM over p.out's rows up to its f32 summation order. w is W_UV, a view of kv_b_proj
// ([v_dim, kv_lora_rank] per head). A weight: the combine loads it before its PDL wait
// (kernels/common/pdl.cuh, rule 3), so nothing in the stream may write it.
struct MlaValueProjection {
  const void* w = nullptr;   // bf16, 16-byte aligned; head h's row c at w + h * head_stride + c * row_stride
  int64_t row_stride = 0;    // elements: a multiple of 8, at least kv_lora_rank
  int64_t head_stride = 0;   // elements: a multiple of 8
  int v_dim = 0;             // output columns per head
  void* out = nullptr;       // bf16, (t, h, c) at out[t * out_token_stride + h * out_head_stride + c]
  int64_t out_token_stride = 0;  // at least num_heads * out_head_stride (outputs never overlap)
  int64_t out_head_stride = 0;   // at least v_dim
};

// The most query tokens (batch x max_seqlen_q) for which MlaDecodeTakesValueProjection says
// yes. A combine CTA projects one row onto 16 output columns, so W_UV is read once per query
// token (from L2 after the first), T x |W_UV| bytes in all, where the GEMM reads it once whatever
// T. Measured in the engine's decode step (V2-Lite, 16 heads, H200, 2026-11-29): batch 1 -0.04
// ms, batch 4 even, batch 8 +0.1 ms against the combine + GEMM pair.
inline constexpr int64_t kMlaFusedValueMaxTokens = 4;

// Whether MlaDecode(p, plan, ..., ctx, &projection) should carry the value projection: the CUDA
// backend, bf16, a plan whose combine kernel runs for every row (chunks with num_splits > 1, or
// the balanced schedule where the Hopper kernel takes it; a plan of one chunk writes p.out from
// the attention kernel and has no combine to fold into), at most kMlaFusedValueMaxTokens query tokens,
// and MLASERVE_MLA_FUSED_UV is not "0" (read once per process; for A/B timing). The caller runs the
// per-head GEMM itself when it answers false.
bool MlaDecodeTakesValueProjection(const MlaParams& p, const MlaDecodePlan& plan, const KernelContext& ctx);

// Builds the plan's metadata (MlaDecodePlan::metadata_bytes; 16-byte aligned) from p's
// seqlens_k, cu_seqlens_q and block_table with one small kernel on ctx's stream; nothing where
// metadata_bytes is 0 or the call would not use it (the CPU backend; a plan that the mma.sync
// kernel runs in grid order; MLASERVE_MLA_ORDER=0). Every later MlaDecode with the same plan,
// the same p.kernel and the same contents of those three arrays -- the other layers of a decode
// step -- may pass it as `metadata`. Launched with PDL like the kernels after it; graph-safe.
absl::Status MlaDecodeBuildMetadata(const MlaParams& p, const MlaDecodePlan& plan, void* metadata,
                                    const KernelContext& ctx);

// value_proj (null: none) is accepted wherever the plan's combine runs for every row on CUDA
// (bf16), whatever the row count; elsewhere, and for a projection whose pointers, strides or
// widths break the contract above, INVALID_ARGUMENT naming the value.
// metadata (null: MlaDecode builds its own in the workspace, one more launch): what
// MlaDecodeBuildMetadata built for this plan and batch. With it the workspace's metadata part
// is not touched (the partials' part still is). Where the caller sets p.inputs_before_wait and
// the metadata was complete before the kernel just before this call started (built two
// launches back or earlier), the chunk kernels read it before their PDL wait too.
absl::Status MlaDecode(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                       const KernelContext& ctx, const MlaValueProjection* value_proj = nullptr,
                       const void* metadata = nullptr);
absl::Status MlaDecodeCpu(const MlaParams& p);
absl::Status MlaDecodeCuda(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                           void* stream, const MlaValueProjection* value_proj = nullptr,
                           const void* metadata = nullptr);
absl::Status MlaDecodeBuildMetadataCuda(const MlaParams& p, const MlaDecodePlan& plan, void* metadata,
                                        void* stream);

}  // namespace mlaserve::kernels
