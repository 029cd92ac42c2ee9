// Shared can-implement checks of the absorbed-MLA families (mla_prefill, mla_decode, and the
// dense fields of sparse_fwd / sparse_decode): shapes and pointers in the dispatcher, and the
// index arrays (host pointers) in the CPU backend.
#pragma once

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels::mla_internal {

struct MlaShapeView {
  const char* family;
  int batch, num_heads, kv_lora_rank, rope_dim;
  const void* q;
  int64_t q_token_stride, q_head_stride;
  const void* kv_cache;
  int num_pages;
  const int32_t* block_table;
  int max_pages_per_seq;
  const int32_t* cu_seqlens_q;
  const int32_t* seqlens_k;
  const void* out;
  float softmax_scale;
  int max_seqlen_q = -1;  // -1: the family has no such field
  int max_seqlen_k = -1;
};

inline absl::Status CheckMlaShape(const MlaShapeView& s) {
  RETURN_IF_ERROR(RequireNonNegative("batch", s.batch));
  RETURN_IF_ERROR(RequirePositive("num_heads", s.num_heads));
  RETURN_IF_ERROR(RequirePositive("kv_lora_rank", s.kv_lora_rank));
  RETURN_IF_ERROR(RequireNonNegative("rope_dim", s.rope_dim));
  RETURN_IF_ERROR(RequirePositive("num_pages", s.num_pages));
  RETURN_IF_ERROR(RequirePositive("max_pages_per_seq", s.max_pages_per_seq));
  if (!(s.softmax_scale > 0.0f) || s.softmax_scale == std::numeric_limits<float>::infinity()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.family, ": softmax_scale=", s.softmax_scale, " must be finite and > 0"));
  }
  if (s.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("q", s.q));
  RETURN_IF_ERROR(RequireNonNull("kv_cache", s.kv_cache));
  RETURN_IF_ERROR(RequireNonNull("block_table", s.block_table));
  RETURN_IF_ERROR(RequireNonNull("cu_seqlens_q", s.cu_seqlens_q));
  RETURN_IF_ERROR(RequireNonNull("seqlens_k", s.seqlens_k));
  RETURN_IF_ERROR(RequireNonNull("out", s.out));
  const int width = s.kv_lora_rank + s.rope_dim;
  if (s.num_heads > 1) RETURN_IF_ERROR(RequireAtLeast("q_head_stride", s.q_head_stride,
                                                      "kv_lora_rank+rope_dim", width));
  RETURN_IF_ERROR(RequireAtLeast("q_token_stride", s.q_token_stride,
                                 "(num_heads-1)*q_head_stride+kv_lora_rank+rope_dim",
                                 (s.num_heads - 1) * s.q_head_stride + width));
  return absl::OkStatus();
}

// CPU only: sequence lengths consistent, and every page a sequence uses inside the cache.
// max_lq bounds the queries per request (decode: 2).
inline absl::Status CheckMlaIndexArrays(const MlaShapeView& s, int max_lq) {
  if (s.cu_seqlens_q[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.family, ": cu_seqlens_q[0]=", s.cu_seqlens_q[0], " must be 0"));
  }
  for (int b = 0; b < s.batch; ++b) {
    const int lq = s.cu_seqlens_q[b + 1] - s.cu_seqlens_q[b];
    const int lk = s.seqlens_k[b];
    if (lq < 0 || lq > max_lq) {
      return absl::InvalidArgumentError(absl::StrCat(s.family, ": request ", b, " has ", lq,
                                                     " queries; allowed 0..", max_lq));
    }
    if (lk < lq) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.family, ": seqlens_k[", b, "]=", lk, " is less than its ", lq,
          " queries (the keys include the query tokens)"));
    }
    if ((s.max_seqlen_q >= 0 && lq > s.max_seqlen_q) ||
        (s.max_seqlen_k >= 0 && lk > s.max_seqlen_k)) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.family, ": request ", b, " has ", lq, " queries and ", lk, " keys, beyond max_seqlen_q=",
          s.max_seqlen_q, ", max_seqlen_k=", s.max_seqlen_k));
    }
    const int64_t pages = PagesFor(static_cast<int64_t>(lk));
    if (pages > s.max_pages_per_seq) {
      return absl::InvalidArgumentError(absl::StrCat(s.family, ": seqlens_k[", b, "]=", lk,
                                                     " needs ", pages,
                                                     " pages; max_pages_per_seq=",
                                                     s.max_pages_per_seq));
    }
    const int32_t* table = s.block_table + static_cast<int64_t>(b) * s.max_pages_per_seq;
    for (int64_t i = 0; i < pages; ++i) {
      if (table[i] < 0 || table[i] >= s.num_pages) {
        return absl::InvalidArgumentError(absl::StrCat(s.family, ": block_table[", b, "][", i,
                                                       "]=", table[i], " is outside [0, ",
                                                       s.num_pages, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels::mla_internal
