// indexer CPU backend: per query token, score every visible cached key (read in place
// through the block table), then select the top-k with a partial sort.
#include <algorithm>
#include <climits>
#include <numeric>
#include <vector>

#include "common/status.h"
#include "kernels/common/cpu_attention.h"
#include "kernels/common/cpu_parallel.h"
#include "kernels/indexer/api.h"
#include "kernels/mla_prefill/mla_check.h"

namespace mlaserve::kernels {

absl::Status IndexerCpu(const IndexerParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("indexer", "dtype", p.dtype));
  const mla_internal::MlaShapeView view{
      "indexer", p.batch, p.num_heads, p.head_dim, 0, p.q,
      static_cast<int64_t>(p.num_heads) * p.head_dim, p.head_dim, p.k_cache, p.num_pages,
      p.block_table, p.max_pages_per_seq, p.cu_seqlens_q, p.seqlens_k, p.topk_indices,
      p.softmax_scale, p.max_seqlen_q, p.max_seqlen_k};
  RETURN_IF_ERROR(mla_internal::CheckMlaIndexArrays(view, INT_MAX));
  const auto* q = static_cast<const float*>(p.q);
  const auto* k_cache = static_cast<const float*>(p.k_cache);
  const int total_q = p.cu_seqlens_q[p.batch];
  std::vector<int> seq_of_token(total_q);
  for (int b = 0; b < p.batch; ++b)
    std::fill(seq_of_token.begin() + p.cu_seqlens_q[b], seq_of_token.begin() + p.cu_seqlens_q[b + 1], b);
  const double cost = 2.0 * p.num_heads * p.head_dim * std::max(1, p.max_seqlen_k / 2);

  ParallelFor(total_q, cost, [&](int64_t t) {
    const int b = seq_of_token[t];
    const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const int visible = p.seqlens_k[b] - lq + static_cast<int>(t - p.cu_seqlens_q[b]) + 1;
    const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
    const float* qt = q + t * p.num_heads * p.head_dim;
    const float* wt = p.weights + t * p.num_heads;
    thread_local std::vector<float> scores;
    thread_local std::vector<int32_t> order;
    scores.resize(visible);
    for (int s = 0; s < visible; ++s) {
      const float* k = k_cache + (static_cast<int64_t>(table[s / kPageSize]) * kPageSize + s % kPageSize) * p.head_dim;
      float score = 0;
      for (int h = 0; h < p.num_heads; ++h) {
        const float dot = p.softmax_scale * cpu::Dot(qt + h * p.head_dim, k, p.head_dim);
        score += wt[h] * std::max(dot, 0.0f);
      }
      scores[s] = score;
    }
    const int keep = std::min(p.top_k, visible);
    order.resize(visible);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int32_t a, int32_t c) {
      return scores[a] > scores[c] || (scores[a] == scores[c] && a < c);
    });
    int32_t* out = p.topk_indices + t * p.top_k;
    std::copy(order.begin(), order.begin() + keep, out);
    std::fill(out + keep, out + p.top_k, -1);
  });
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
