// The work of one latent-attention CTA (both CUDA kernels: latent_attention_kernel.cuh and
// latent_attention_sm90.cu): grid (row block, KV split, request), or the chunk order's item at the
// grid's (split, request) position -> the request's query rows
// [r0, r0 + rows_per_cta) and the keys [kv_begin, kv_end) it attends, in 64-key tiles.
#pragma once

#include <climits>

#include "kernels/mla_prefill/latent_attention.h"

namespace mlaserve::kernels::mla_cuda {

struct LatentCtaWork {
  int b = 0, split_index = 0;
  int q_start = 0, lq = 0, lk = 0;  // the request's first query row, query and key counts
  int rows_total = 0;               // lq * num_heads
  int r0 = 0;                       // this CTA's first row (row = query token * heads + head)
  int first_pos = 0;                // position of query token 0
  int kv_begin = 0, kv_end = 0;     // keys of this split, cut at the causal limit of the last row
  int n_tiles = 0;                  // 64-key tiles in [kv_begin, kv_end)
  bool unread = false;              // a chunk past the request's keys: the combine skips it
  int chunks_with_keys = 1;         // chunks: the request's chunks that hold keys

  // No rows for this CTA: return before touching shared memory.
  __device__ __forceinline__ bool empty() const { return r0 >= rows_total; }

  // Rows [r0, r0 + rows_per_cta) of request b over its keys [kv_begin, min(lk, kv_limit)), cut
  // at the causal limit of the last row.
  __device__ __forceinline__ static LatentCtaWork For(const MlaParams& p, int b, int r0, int kv_begin,
                                                      int kv_limit, int rows_per_cta) {
    const int q_start = p.cu_seqlens_q[b];
    return Make(p, b, q_start, p.cu_seqlens_q[b + 1] - q_start, p.seqlens_k[b], r0, kv_begin, kv_limit,
                rows_per_cta);
  }

  // The same from the request's query rows [q_start, q_start + lq) and key count lk, known.
  __device__ __forceinline__ static LatentCtaWork Make(const MlaParams& p, int b, int q_start, int lq, int lk,
                                                       int r0, int kv_begin, int kv_limit, int rows_per_cta) {
    LatentCtaWork w;
    w.b = b;
    w.q_start = q_start;
    w.lq = lq;
    w.lk = lk;
    const int H = p.num_heads;
    w.rows_total = w.lq * H;
    w.r0 = r0;
    if (w.empty()) return w;
    w.first_pos = w.lk - w.lq;
    w.kv_begin = kv_begin;
    w.kv_end = min(w.lk, kv_limit);
    if (p.causal) w.kv_end = min(w.kv_end, w.first_pos + min(w.lq - 1, (w.r0 + rows_per_cta - 1) / H) + 1);
    w.n_tiles = w.kv_end > w.kv_begin ? PagesFor(w.kv_end - w.kv_begin) : 0;
    return w;
  }

  // The chunked grid: blockIdx.x is the row block; (y, z) the KV split and the request, or with
  // split.chunk_order the chunk that the order puts at position z * num_splits + y.
  struct Chunk {
    int request, split_index;
  };
  __device__ __forceinline__ static Chunk ChunkOf(const LatentSplit& split) {
    if (split.chunk_order == nullptr) return {static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.y)};
    // From L2 (__ldcg): a prebuilt order may be read before the PDL wait (pdl.cuh, rule 3).
    const int item = __ldcg(split.chunk_order + blockIdx.z * gridDim.y + blockIdx.y);
    return {item / split.num_splits, item % split.num_splits};
  }

  // The chunks' length in keys: split.chunk_tokens, or the pick at split.chunk_pages_at (read from
  // L2 where the order is: before the PDL wait where the order may be).
  __device__ __forceinline__ static int ChunkTokens(const LatentSplit& split) {
    return split.chunk_pages_at != nullptr ? __ldcg(split.chunk_pages_at) * kPageSize : split.chunk_tokens;
  }

  __device__ __forceinline__ static LatentCtaWork Of(const MlaParams& p, const LatentSplit& split,
                                                     int rows_per_cta) {
    return Of(p, split, rows_per_cta, ChunkOf(split));
  }

  __device__ __forceinline__ static LatentCtaWork Of(const MlaParams& p, const LatentSplit& split,
                                                     int rows_per_cta, Chunk chunk) {
    const int split_index = chunk.split_index;
    const int chunk_tokens = ChunkTokens(split);
    const int kv_begin = chunk_tokens > 0 ? split_index * chunk_tokens : 0;
    const int kv_limit = chunk_tokens > 0 ? kv_begin + chunk_tokens : INT_MAX;
    LatentCtaWork w = For(p, chunk.request, blockIdx.x * rows_per_cta, kv_begin, kv_limit, rows_per_cta);
    w.split_index = split_index;
    w.chunks_with_keys = mla_internal::LatentChunksWithKeys(w.lk, chunk_tokens, split.num_splits);
    w.unread = split_index >= w.chunks_with_keys;
    return w;
  }
};

}  // namespace mlaserve::kernels::mla_cuda
