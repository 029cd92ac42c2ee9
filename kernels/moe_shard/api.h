// moe_shard: an expert-parallel rank's view of the routing (docs/parallel.md). The rank holds
// experts [expert_begin, expert_begin + local_experts) of the model's routed experts, stored as
// local experts 0..local_experts-1. Every assignment (token t, slot j) of the routing becomes
//   topk_ids[t, j] in the rank's range:  local_ids = topk_ids - expert_begin, weight kept;
//   otherwise:                           local_ids = kNotLocal (-1), weight 0,
// and kernels/moe's MoeExperts over the local stack skips the kNotLocal assignments (an id
// outside [0, num_experts) belongs to no expert there: no row in the permutation, the GEMMs or
// the combine), so it computes this rank's share of every token's sum over ~T*k/N rows, and
// the shares add up across ranks to the single-rank result.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

// The local id of an assignment to another rank's expert.
inline constexpr int32_t kNotLocal = -1;

struct MoeLocalizeParams {
  int64_t num_assignments = 0;        // num_tokens * top_k
  int num_experts = 0;                // routed experts of the model
  int expert_begin = 0;
  int local_experts = 0;
  const int32_t* topk_ids = nullptr;      // [num_assignments]
  const float* topk_weights = nullptr;    // [num_assignments]
  int32_t* local_ids = nullptr;           // [num_assignments], in [0, local_experts) or kNotLocal
  float* local_weights = nullptr;         // [num_assignments]
};

absl::Status MoeLocalize(const MoeLocalizeParams& p, const KernelContext& ctx);
absl::Status MoeLocalizeCpu(const MoeLocalizeParams& p);
absl::Status MoeLocalizeCuda(const MoeLocalizeParams& p, void* stream);

// All-to-all dispatch (model/layers/feed_forward_a2a.cc): the rows a rank sends, and the sum of
// the partial rows that come back. Indices are built on the host from the routing and uploaded.
//   MoeGatherRows:  out[i, :] = x[rows[i], :] for i < num_rows.
//   MoeCombineRows: out[t, :] = sum over j < num_sources, in order j = 0, 1, ..., of
//                   parts[slots[t, j], :] (slots[t, j] < 0: nothing), in f32, then rounded
//                   once to dtype: a fixed order, so a run is deterministic.
// dtype f32 on both backends, bf16 on CUDA; INVALID_ARGUMENT naming anything else.
struct MoeGatherRowsParams {
  DType dtype = DType::kF32;
  int64_t num_rows = 0;
  int hidden = 0;
  const void* x = nullptr;        // [*, hidden]
  const int32_t* rows = nullptr;  // [num_rows], rows of x
  void* out = nullptr;            // [num_rows, hidden]
};
struct MoeCombineRowsParams {
  DType dtype = DType::kF32;
  int num_tokens = 0;
  int num_sources = 0;
  int hidden = 0;
  const void* parts = nullptr;     // [*, hidden]
  const int32_t* slots = nullptr;  // [num_tokens, num_sources], rows of parts or -1
  void* out = nullptr;             // [num_tokens, hidden], overwritten
};

absl::Status MoeGatherRows(const MoeGatherRowsParams& p, const KernelContext& ctx);
absl::Status MoeGatherRowsCpu(const MoeGatherRowsParams& p);
absl::Status MoeGatherRowsCuda(const MoeGatherRowsParams& p, void* stream);
absl::Status MoeCombineRows(const MoeCombineRowsParams& p, const KernelContext& ctx);
absl::Status MoeCombineRowsCpu(const MoeCombineRowsParams& p);
absl::Status MoeCombineRowsCuda(const MoeCombineRowsParams& p, void* stream);

// Fixed-capacity all-to-all dispatch (model/layers/feed_forward_a2a.cc, docs/parallel.md): the
// exchange a CUDA graph can hold. Every rank sends every rank (itself included) a block of
// exactly `capacity` rows whatever the routing, so the exchange's sizes are fixed and no count
// crosses to the host; a row's place in its block and the block's fill are worked out here, on
// the device. The counts travel in-band: a padding row carries kNotLocal ids (and zero
// weights and values), which the destination's experts skip, so it needs no count.
//   MoeDispatchFixed: token t goes to rank p once if any of its k experts is one of p's
//     ([p * experts_per_rank, (p + 1) * experts_per_rank)): row i of block p is the i-th such
//     token in token order, with its k ids local to p (kNotLocal for the others) and their
//     weights (0 for kNotLocal); rows past the block's fill are padding. A token reaches a rank
//     at most once, so capacity >= num_tokens always holds every token.
//   MoeUnpackMeta: a received meta block back into the [rows, k] ids and weights MoeExperts
//     takes (ids and weights travel in one int32 exchange: one collective instead of two).
// send_rows dtype f32 on both backends, bf16 on CUDA.
struct MoeDispatchFixedParams {
  DType dtype = DType::kF32;
  int num_tokens = 0;        // this rank's rows; 0 sends padding only
  int hidden = 0;
  int top_k = 0;
  int num_ranks = 0;
  int experts_per_rank = 0;  // rank p holds global experts [p * experts_per_rank, ...)
  int capacity = 0;          // rows per destination block, >= num_tokens
  const void* x = nullptr;              // [num_tokens, hidden]
  const int32_t* topk_ids = nullptr;    // [num_tokens, top_k], global expert ids
  const float* topk_weights = nullptr;  // [num_tokens, top_k]
  void* send_rows = nullptr;  // [num_ranks * capacity, hidden]; padding rows zero
  // [num_ranks * capacity, 2 * top_k]: a row's k local ids, then its k weights' f32 bits.
  int32_t* send_meta = nullptr;
  // [num_tokens, num_ranks]: the row p * capacity + i that (t, p) went to, or -1 (the rows
  // rank p's partial sums come back in: MoeCombineRows' slots).
  int32_t* slots = nullptr;
  int32_t* row_tokens = nullptr;  // [num_ranks * capacity]: each send row's token, or -1
};
struct MoeUnpackMetaParams {
  int64_t num_rows = 0;
  int top_k = 0;
  const int32_t* meta = nullptr;  // [num_rows, 2 * top_k] as MoeDispatchFixed writes it
  int32_t* ids = nullptr;         // [num_rows, top_k]
  float* weights = nullptr;       // [num_rows, top_k]
};

absl::Status MoeDispatchFixed(const MoeDispatchFixedParams& p, const KernelContext& ctx);
absl::Status MoeDispatchFixedCpu(const MoeDispatchFixedParams& p);
absl::Status MoeDispatchFixedCuda(const MoeDispatchFixedParams& p, void* stream);
absl::Status MoeUnpackMeta(const MoeUnpackMetaParams& p, const KernelContext& ctx);
absl::Status MoeUnpackMetaCpu(const MoeUnpackMetaParams& p);
absl::Status MoeUnpackMetaCuda(const MoeUnpackMetaParams& p, void* stream);

}  // namespace mlaserve::kernels
