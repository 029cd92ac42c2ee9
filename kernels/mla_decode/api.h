// mla_decode: absorbed MLA for decode (1 query token per request, or 2 for speculative use)
// over the paged latent cache, with split-KV: a host-side plan cuts long contexts into chunks
// so that small batches still fill the GPU, and a combine step merges the partial results
// by their LSE. Same function as mla_prefill (see its header for q/cache/out semantics).
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
  size_t workspace_bytes = 0;    // partial outputs + partial LSE (+ the schedule or the order)
};

// The workspace of a chunk plan: the partials when it splits (num_splits > 1), then the chunks'
// longest-first order when it has one (its bytes start at MlaDecodeChunkOrderOffset).
size_t MlaDecodeChunkOrderOffset(int batch, int rows_per_request, int kv_lora_rank, int num_splits);
size_t MlaDecodeChunkWorkspaceBytes(int batch, int rows_per_request, int kv_lora_rank, int num_splits,
                                    bool longest_first);
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
};

absl::StatusOr<MlaDecodePlan> PlanMlaDecode(const MlaDecodeShape& shape);

absl::Status MlaDecode(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                       const KernelContext& ctx);
absl::Status MlaDecodeCpu(const MlaParams& p);
absl::Status MlaDecodeCuda(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                           void* stream);

}  // namespace mlaserve::kernels
