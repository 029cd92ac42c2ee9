// mha_prefill CPU backend: flash-style attention, one (query token, head) row per work item,
// keys scored in blocks with an online softmax (O(head_dim) memory per row).
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cpu_attention.h"
#include "kernels/common/cpu_parallel.h"
#include "kernels/common/param_check.h"
#include "kernels/mha_prefill/api.h"

namespace mlaserve::kernels {
namespace {

absl::Status CheckSeqlens(const MhaPrefillParams& p) {
  for (int b = 0; b < p.batch; ++b) {
    const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const int lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    if (lq < 0 || lk < 0 || p.cu_seqlens_q[0] != 0 || p.cu_seqlens_k[0] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mha_prefill: cu_seqlens of sequence ", b, " are not non-decreasing from 0 (",
                       "lq=", lq, ", lk=", lk, ")"));
    }
    if (lq > p.max_seqlen_q || lk > p.max_seqlen_k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mha_prefill: sequence ", b, " has lq=", lq, ", lk=", lk, " beyond max_seqlen_q=",
          p.max_seqlen_q, ", max_seqlen_k=", p.max_seqlen_k));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MhaPrefillCpu(const MhaPrefillParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("mha_prefill", "dtype", p.dtype));
  RETURN_IF_ERROR(CheckSeqlens(p));
  const auto* q = static_cast<const float*>(p.q);
  const auto* k = static_cast<const float*>(p.k);
  const auto* v = static_cast<const float*>(p.v);
  // A split K (api.h): each head's first k_own dims from k, the rest from the shared k_rope row.
  const auto* k_rope = static_cast<const float*>(p.k_rope);
  const int k_own = p.head_dim_qk - (k_rope != nullptr ? p.k_rope_dim : 0);
  auto* out = static_cast<float*>(p.out);
  const int total_q = p.cu_seqlens_q[p.batch];
  std::vector<int> seq_of_token(total_q);
  for (int b = 0; b < p.batch; ++b)
    std::fill(seq_of_token.begin() + p.cu_seqlens_q[b], seq_of_token.begin() + p.cu_seqlens_q[b + 1], b);
  const int group = p.num_heads / p.num_kv_heads;
  const double cost = 4.0 * (p.head_dim_qk + p.head_dim_v) * std::max(1, p.max_seqlen_k / 2);

  ParallelFor(static_cast<int64_t>(total_q) * p.num_heads, cost, [&](int64_t item) {
    const int t = static_cast<int>(item / p.num_heads);
    const int h = static_cast<int>(item % p.num_heads);
    const int kvh = h / group;
    const int b = seq_of_token[t];
    const int i = t - p.cu_seqlens_q[b];
    const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const int lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    const int k_end = p.causal ? std::clamp(i + lk - lq + 1, 0, lk) : lk;
    const float* qr = q + t * p.q_token_stride + h * p.q_head_stride;
    const int64_t k0 = p.cu_seqlens_k[b];
    thread_local std::vector<float> acc;
    acc.resize(p.head_dim_v);
    cpu::OnlineSoftmaxRow row(p.head_dim_v, acc.data());
    float scores[cpu::kKeyBlock];
    for (int j0 = 0; j0 < k_end; j0 += cpu::kKeyBlock) {
      const int n = std::min(cpu::kKeyBlock, k_end - j0);
      for (int j = 0; j < n; ++j) {
        const float* kr = k + (k0 + j0 + j) * p.k_token_stride + kvh * p.k_head_stride;
        float dot = cpu::Dot(qr, kr, k_own);
        if (k_rope != nullptr) dot += cpu::Dot(qr + k_own, k_rope + (k0 + j0 + j) * p.k_rope_token_stride, p.k_rope_dim);
        scores[j] = p.softmax_scale * dot;
      }
      row.AddBlock(scores, n, [&](int j) {
        return v + (k0 + j0 + j) * p.v_token_stride + kvh * p.v_head_stride;
      });
    }
    row.Finish(out + t * p.out_token_stride + h * p.out_head_stride,
               p.lse != nullptr ? p.lse + item : nullptr);
  });
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
