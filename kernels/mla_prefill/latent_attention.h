// Host interface of the CUDA latent-attention kernel shared by mla_prefill and mla_decode
// (absorbed MLA over the paged latent cache; see mla_prefill/api.h for the math).
//
// A CTA owns `rows` query rows of one request (row = query token * num_heads + head, so all
// heads of a request share every cache tile it loads) and one KV split. With num_splits = 1 it
// writes the bf16 output and LSE directly; otherwise it writes partial outputs (already
// normalised; f32, or bf16 where LatentSplit::part_bf16) and f32 partial LSEs into the workspace,
// which mla_decode's combine kernel merges.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/mla_prefill/latent_tiling.h"

namespace mlaserve::kernels::mla_cuda {

using mla_internal::LatentRowsPerCta;  // rows per CTA; PlanMlaDecode counts CTAs with it

// A piece of one request's keys in the balanced schedule: pages [page_begin, page_end) of
// request `request`, written directly (slot < 0: the piece is the whole request) or as partial
// rows [slot * max_q * num_heads, ...) of part_out / part_lse. The schedule kernel also copies
// what the attention kernel needs to start the piece without a dependent global read: the
// request's query rows and key count, and the cache pages of its first two pages (-1 past
// page_end), so that a CTA can issue the next piece's loads while it finishes the current one.
// 48 bytes (16-byte multiple: one bulk copy into shared memory).
struct LatentSegment {
  int32_t request;
  int32_t page_begin, page_end;
  int32_t slot;
  int32_t q_start, q_len;   // the request's query rows [q_start, q_start + q_len)
  int32_t k_len;            // its keys (seqlens_k)
  int32_t first_pages[2];   // block_table[request][page_begin + i], or -1 past page_end
  int32_t reserved[3];
};
static_assert(sizeof(LatentSegment) % 16 == 0, "one bulk copy per segment record");

// How a batch's keys are cut across CTAs. Either chunks: num_splits chunks of chunk_tokens keys
// for every request (grid: row blocks x splits x requests; both kernels), or, with segments set,
// the balanced schedule of the Hopper kernel: num_parts persistent CTAs per row block, part i
// walking segments [part_segments[i], part_segments[i + 1]) (mla_decode builds it on the device
// from the lengths, MlaDecodeSchedule).
struct LatentSplit {
  int num_splits = 1;
  int chunk_tokens = 0;       // keys per split (multiple of kPageSize); 0 = whole context
  float* part_out = nullptr;  // chunks: [num_splits, batch * max_q * num_heads, kv_lora_rank]
                              // segments: [slots, max_q * num_heads, kv_lora_rank]
  float* part_lse = nullptr;  // the same rows, one LSE each (f32)
  // The partial outputs as bf16: part_out's memory then holds rows of kv_lora_rank bf16 (the same
  // row indices, half the bytes), which the combine reads back as f32. Only the 64-row Hopper
  // kernel's balanced schedule writes them (LatentRunsSm90WideKernel); LaunchLatentAttention
  // refuses it elsewhere.
  bool part_bf16 = false;
  int max_q = 0;              // query tokens per request the partial rows are laid out for
  const LatentSegment* segments = nullptr;  // device
  const int32_t* part_segments = nullptr;   // device, [num_parts + 1]
  int num_parts = 0;
  // Balanced schedule: a CTA issues the next segment's first loads (pages, Q) during the current
  // one's last page pair. false: at the next segment's start (for timing comparisons).
  bool prefetch_next = true;
  // Chunks in longest-first order (device, [batch * num_splits], mla_decode's order kernel): the
  // CTAs of grid column (y, z) take chunk chunk_order[z * num_splits + y] = request *
  // num_splits + split, so that the GPU, which starts CTAs in grid order, starts the longest
  // chunks first and fills the last wave with the shortest. null: request z, split y.
  const int32_t* chunk_order = nullptr;
  // The order was complete before the kernel just before this one started (built once per
  // decode step, two launches back or earlier: MlaDecodeBuildMetadata), so with
  // p.inputs_before_wait the chunk kernels read it before their PDL wait (pdl.cuh, rule 3).
  bool order_before_wait = false;
  // Chunks: the chunk length in pages at this device address instead of chunk_tokens (mla_decode's
  // pick from the batch's lengths, written by its order kernel beside chunk_order and read where
  // the order is). null: chunk_tokens.
  const int32_t* chunk_pages_at = nullptr;
  // Chunks (num_splits > 1): a request whose keys all fall in its first chunk
  // (mla_internal::LatentChunksWithKeys == 1) has that chunk's CTAs write its normalised output
  // and LSE directly, as without a split, instead of a partial that the combine would merge
  // alone; the combine leaves its rows (CombineArgs::single_chunk_direct). Only the 64-row Hopper
  // kernel (LatentRunsSm90WideKernel); LaunchLatentAttention refuses it elsewhere.
  bool single_chunk_direct = false;
};

// Whether the kernel LaunchLatentAttention runs for p (and this many rows a request) is the 64-row
// Hopper kernel, the only one that writes bf16 partials (LatentSplit::part_bf16, balanced
// schedule) and a chunk plan's requests of one chunk directly (LatentSplit::single_chunk_direct).
bool LatentRunsSm90WideKernel(const MlaParams& p, int64_t max_rows_per_request);

// Validates what the kernel adds to CheckMlaShape (dtype, dims, alignment) and launches.
// `max_rows_per_request` (= max_seqlen_q * num_heads) sizes the grid.
absl::Status LaunchLatentAttention(const MlaParams& p, const LatentSplit& split,
                                   int64_t max_rows_per_request, cudaStream_t stream);

}  // namespace mlaserve::kernels::mla_cuda
