// Test helper for sparse_fwd / sparse_decode: SparseMlaParams over a LatentBatch.
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/sparse_fwd/api.h"
#include "kernels/testing/mla_case.h"

namespace mlaserve::kernels::testing {

inline SparseMlaParams SparseParamsFor(const LatentBatch& c, const std::vector<int32_t>& indices,
                                       int top_k, std::vector<float>& out,
                                       std::vector<float>& lse) {
  SparseMlaParams p;
  p.batch = c.batch; p.num_heads = c.num_heads; p.kv_lora_rank = c.rank; p.rope_dim = c.rope;
  p.top_k = top_k;
  p.q = c.q.data(); p.q_token_stride = static_cast<int64_t>(c.num_heads) * c.width();
  p.q_head_stride = c.width();
  p.kv_cache = c.cache.data(); p.num_pages = c.layout.num_pages;
  p.block_table = c.layout.block_table.data(); p.max_pages_per_seq = c.layout.max_pages_per_seq;
  p.cu_seqlens_q = c.cu_q.data(); p.seqlens_k = c.seqlens_k.data();
  p.indices = indices.data();
  out.assign(static_cast<size_t>(c.total_q()) * c.num_heads * c.rank, kPoison);
  lse.assign(static_cast<size_t>(c.total_q()) * c.num_heads, kPoison);
  p.out = out.data(); p.lse = lse.data(); p.softmax_scale = c.scale;
  return p;
}

// Random index lists: each row picks from its visible positions, in random order, with
// some -1 padding and (if allow_repeats) some repeated positions.
inline std::vector<int32_t> RandomIndices(const LatentBatch& c, int top_k, bool allow_repeats,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(c.total_q()) * top_k, -1);
  for (int t = 0; t < c.total_q(); ++t) {
    const int visible = c.query_pos(t) + 1;
    std::vector<int32_t> pos(visible);
    for (int j = 0; j < visible; ++j) pos[j] = j;
    std::shuffle(pos.begin(), pos.end(), rng);
    for (int j = 0; j < top_k; ++j) {
      const uint64_t r = rng() % 8;
      if (r == 0) continue;  // padding in the middle
      if (allow_repeats && r == 1 && j > 0 && idx[t * top_k + j - 1] >= 0) {
        idx[t * top_k + j] = idx[t * top_k + j - 1];
      } else if (j < visible) {
        idx[t * top_k + j] = pos[j];
      }
    }
  }
  return idx;
}

}  // namespace mlaserve::kernels::testing
