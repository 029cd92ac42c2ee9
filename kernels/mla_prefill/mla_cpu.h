// The CPU backend's latent attention, shared by mla_prefill, mla_decode, sparse_fwd and
// sparse_decode: one (query token, head) row attends a list of cache positions, read in
// place through the block table (pages are never copied), with the online softmax of
// kernels/common/cpu_attention.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/cpu_attention.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels::mla_internal {

struct LatentCacheView {
  const float* cache;          // [num_pages, kPageSize, kv_lora_rank + rope_dim]
  const int32_t* block_table;  // [batch, max_pages_per_seq]
  int max_pages_per_seq;
  int kv_lora_rank;
  int rope_dim;

  const float* Row(int b, int64_t pos) const {
    const int64_t page = block_table[static_cast<int64_t>(b) * max_pages_per_seq + pos / kPageSize];
    return cache + (page * kPageSize + pos % kPageSize) * (kv_lora_rank + rope_dim);
  }
};

// Attends q_row (kv_lora_rank + rope_dim wide) of sequence b to the positions produced by
// next_block(int32_t* positions) -> count (at most cpu::kKeyBlock; 0 ends the list).
// Writes out_row (kv_lora_rank wide) and *lse (if non-null).
template <typename NextBlock>
void AttendLatentRow(const LatentCacheView& c, int b, const float* q_row, float softmax_scale,
                     NextBlock&& next_block, float* out_row, float* lse) {
  const int width = c.kv_lora_rank + c.rope_dim;
  thread_local std::vector<float> acc;
  acc.resize(c.kv_lora_rank);
  cpu::OnlineSoftmaxRow row(c.kv_lora_rank, acc.data());
  int32_t positions[cpu::kKeyBlock];
  const float* rows[cpu::kKeyBlock];
  float scores[cpu::kKeyBlock];
  for (;;) {
    const int n = next_block(positions);
    if (n <= 0) break;
    for (int j = 0; j < n; ++j) {
      rows[j] = c.Row(b, positions[j]);
      scores[j] = softmax_scale * cpu::Dot(q_row, rows[j], width);
    }
    row.AddBlock(scores, n, [&](int j) { return rows[j]; });
  }
  row.Finish(out_row, lse);
}

}  // namespace mlaserve::kernels::mla_internal

#include "absl/status/status.h"
#include "kernels/mla_prefill/api.h"

namespace mlaserve::kernels::mla_internal {

// Dense absorbed MLA on the CPU (mla_prefill_ref.cc); mla_decode calls it with max_lq = 2.
absl::Status DenseMlaCpu(const MlaParams& p, const char* family, int max_lq);

}  // namespace mlaserve::kernels::mla_internal
