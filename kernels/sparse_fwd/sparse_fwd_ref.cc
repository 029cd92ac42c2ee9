// sparse_fwd CPU backend (also sparse_decode's): each (query token, head) row attends the
// cache rows its index list names, read in place through the block table.
#include <algorithm>
#include <climits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cpu_parallel.h"
#include "kernels/mla_prefill/mla_check.h"
#include "kernels/mla_prefill/mla_cpu.h"
#include "kernels/sparse_fwd/sparse_cpu.h"

namespace mlaserve::kernels {
namespace sparse_internal {

absl::Status SparseMlaCpu(const SparseMlaParams& p, const char* family, int max_lq) {
  RETURN_IF_ERROR(RequireCpuF32(family, "dtype", p.dtype));
  RETURN_IF_ERROR(RequireCpuF32(family, "cache_dtype", p.cache_dtype));
  const mla_internal::MlaShapeView view{
      family, p.batch, p.num_heads, p.kv_lora_rank, p.rope_dim, p.q, p.q_token_stride,
      p.q_head_stride, p.kv_cache, p.num_pages, p.block_table, p.max_pages_per_seq,
      p.cu_seqlens_q, p.seqlens_k, p.out, p.softmax_scale};
  RETURN_IF_ERROR(mla_internal::CheckMlaIndexArrays(view, max_lq));
  const int total_q = p.cu_seqlens_q[p.batch];
  std::vector<int> seq_of_token(total_q);
  for (int b = 0; b < p.batch; ++b)
    std::fill(seq_of_token.begin() + p.cu_seqlens_q[b], seq_of_token.begin() + p.cu_seqlens_q[b + 1], b);
  for (int t = 0; t < total_q; ++t) {
    const int32_t* idx = p.indices + static_cast<int64_t>(t) * p.top_k;
    const int lk = p.seqlens_k[seq_of_token[t]];
    for (int j = 0; j < p.top_k; ++j) {
      if (idx[j] < -1 || idx[j] >= lk) {
        return absl::InvalidArgumentError(absl::StrCat(
            family, ": indices[", t, "][", j, "]=", idx[j], " is neither -1 nor a position of its ",
            "sequence (seqlens_k=", lk, ")"));
      }
    }
  }
  const mla_internal::LatentCacheView cache{static_cast<const float*>(p.kv_cache), p.block_table,
                                            p.max_pages_per_seq, p.kv_lora_rank, p.rope_dim};
  const auto* q = static_cast<const float*>(p.q);
  auto* out = static_cast<float*>(p.out);
  const double cost = 2.0 * (2 * p.kv_lora_rank + p.rope_dim) * p.top_k;
  ParallelFor(static_cast<int64_t>(total_q) * p.num_heads, cost, [&](int64_t item) {
    const int t = static_cast<int>(item / p.num_heads);
    const int h = static_cast<int>(item % p.num_heads);
    const int32_t* idx = p.indices + static_cast<int64_t>(t) * p.top_k;
    int next = 0;
    mla_internal::AttendLatentRow(
        cache, seq_of_token[t], q + t * p.q_token_stride + h * p.q_head_stride, p.softmax_scale,
        [&](int32_t* positions) {
          int n = 0;
          while (n < cpu::kKeyBlock && next < p.top_k) {
            const int32_t pos = idx[next++];
            if (pos >= 0) positions[n++] = pos;
          }
          return n;
        },
        out + item * p.kv_lora_rank, p.lse != nullptr ? p.lse + item : nullptr);
  });
  return absl::OkStatus();
}

}  // namespace sparse_internal

absl::Status SparseFwdCpu(const SparseMlaParams& p) {
  return sparse_internal::SparseMlaCpu(p, "sparse_fwd", INT_MAX);
}

}  // namespace mlaserve::kernels
