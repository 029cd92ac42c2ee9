// mla_prefill CPU backend (also mla_decode's): every (query token, head) row attends its
// sequence's visible cache positions through the block table.
#include <algorithm>
#include <climits>
#include <vector>

#include "common/status.h"
#include "kernels/common/cpu_parallel.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/mla_prefill/mla_check.h"
#include "kernels/mla_prefill/mla_cpu.h"

namespace mlaserve::kernels {
namespace mla_internal {

// Shared with MlaDecodeCpu (which passes max_lq = 2).
absl::Status DenseMlaCpu(const MlaParams& p, const char* family, int max_lq) {
  RETURN_IF_ERROR(RequireCpuF32(family, "dtype", p.dtype));
  MlaShapeView view{family, p.batch, p.num_heads, p.kv_lora_rank, p.rope_dim, p.q,
                    p.q_token_stride, p.q_head_stride, p.kv_cache, p.num_pages, p.block_table,
                    p.max_pages_per_seq, p.cu_seqlens_q, p.seqlens_k, p.out, p.softmax_scale,
                    p.max_seqlen_q, p.max_seqlen_k};
  RETURN_IF_ERROR(CheckMlaIndexArrays(view, max_lq));
  const LatentCacheView cache{static_cast<const float*>(p.kv_cache), p.block_table,
                              p.max_pages_per_seq, p.kv_lora_rank, p.rope_dim};
  const auto* q = static_cast<const float*>(p.q);
  auto* out = static_cast<float*>(p.out);
  const int total_q = p.cu_seqlens_q[p.batch];
  std::vector<int> seq_of_token(total_q);
  for (int b = 0; b < p.batch; ++b)
    std::fill(seq_of_token.begin() + p.cu_seqlens_q[b], seq_of_token.begin() + p.cu_seqlens_q[b + 1], b);
  const int width = p.kv_lora_rank + p.rope_dim;
  const double cost = 2.0 * (width + p.kv_lora_rank) * std::max(1, p.max_seqlen_k);
  ParallelFor(static_cast<int64_t>(total_q) * p.num_heads, cost, [&](int64_t item) {
    const int t = static_cast<int>(item / p.num_heads);
    const int h = static_cast<int>(item % p.num_heads);
    const int b = seq_of_token[t];
    const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const int lk = p.seqlens_k[b];
    // Query i of b sits at position lk - lq + i; causal rows see positions <= that.
    const int i = t - p.cu_seqlens_q[b];
    const int end = p.causal ? lk - lq + i + 1 : lk;
    int next = 0;
    AttendLatentRow(
        cache, b, q + t * p.q_token_stride + h * p.q_head_stride, p.softmax_scale,
        [&](int32_t* positions) {
          const int n = std::min(cpu::kKeyBlock, end - next);
          for (int j = 0; j < n; ++j) positions[j] = next + j;
          next += std::max(n, 0);
          return n;
        },
        out + item * p.kv_lora_rank, p.lse != nullptr ? p.lse + item : nullptr);
  });
  return absl::OkStatus();
}

}  // namespace mla_internal

absl::Status MlaPrefillCpu(const MlaParams& p) {
  return mla_internal::DenseMlaCpu(p, "mla_prefill", INT_MAX);
}

}  // namespace mlaserve::kernels
