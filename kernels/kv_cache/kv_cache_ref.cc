// kv_cache CPU backend: row copies through the slot mapping / block table. Every index is
// checked before the first write, so a bad request leaves the cache untouched.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/kv_cache/api.h"

namespace mlaserve::kernels {

absl::Status CacheWriteCpu(const CacheWriteParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("cache_write", "dtype", p.dtype));
  const int64_t num_slots = static_cast<int64_t>(p.num_pages) * kPageSize;
  for (int t = 0; t < p.num_tokens; ++t) {
    if (p.slot_mapping[t] >= num_slots) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache_write: slot_mapping[", t, "]=", p.slot_mapping[t],
                       " is past the cache's ", num_slots, " slots"));
    }
  }
  const auto* src = static_cast<const float*>(p.src);
  auto* cache = static_cast<float*>(p.cache);
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;  // padding
    std::memcpy(cache + slot * p.entry_dim, src + t * p.src_stride, sizeof(float) * p.entry_dim);
  }
  return absl::OkStatus();
}

absl::Status CacheGatherCpu(const CacheGatherParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("cache_gather", "dtype", p.dtype));
  for (int b = 0; b < p.batch; ++b) {
    if (p.start[b] < 0 || p.len[b] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cache_gather: start[", b, "]=", p.start[b],
                                                     ", len[", b, "]=", p.len[b],
                                                     " must be >= 0"));
    }
    if (p.cu_dst[b + 1] - p.cu_dst[b] < p.len[b]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache_gather: len[", b, "]=", p.len[b], " exceeds its dst rows cu_dst[", b + 1,
          "]-cu_dst[", b, "]=", p.cu_dst[b + 1] - p.cu_dst[b]));
    }
    if (p.len[b] == 0) continue;
    const int64_t last_page = (static_cast<int64_t>(p.start[b]) + p.len[b] - 1) / kPageSize;
    if (last_page >= p.max_pages_per_seq) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache_gather: sequence ", b, " reaches page ", last_page,
                       "; max_pages_per_seq=", p.max_pages_per_seq));
    }
    const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
    for (int64_t pg = p.start[b] / kPageSize; pg <= last_page; ++pg) {
      if (table[pg] < 0 || table[pg] >= p.num_pages) {
        return absl::InvalidArgumentError(absl::StrCat("cache_gather: block_table[", b, "][", pg,
                                                       "]=", table[pg], " is outside [0, ",
                                                       p.num_pages, ")"));
      }
    }
  }
  const auto* cache = static_cast<const float*>(p.cache);
  auto* dst = static_cast<float*>(p.dst);
  for (int b = 0; b < p.batch; ++b) {
    const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
    // Copy page-contiguous runs at once.
    int i = 0;
    while (i < p.len[b]) {
      const int64_t pos = static_cast<int64_t>(p.start[b]) + i;
      const int in_page = static_cast<int>(pos % kPageSize);
      const int run = std::min(kPageSize - in_page, p.len[b] - i);
      const int64_t slot = static_cast<int64_t>(table[pos / kPageSize]) * kPageSize + in_page;
      std::memcpy(dst + (static_cast<int64_t>(p.cu_dst[b]) + i) * p.entry_dim,
                  cache + slot * p.entry_dim, sizeof(float) * run * p.entry_dim);
      i += run;
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
