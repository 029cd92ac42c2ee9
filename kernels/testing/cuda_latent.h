// Test helper for the CUDA absorbed-MLA kernels (mla_prefill, mla_decode): rounds a
// LatentBatch to bf16, computes the CPU reference on it (f32), uploads it, and compares the
// GPU outputs (poisoned before the run) with the reference.
#pragma once

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/mla_case.h"

namespace mlaserve::kernels::testing {

inline MlaParams HostLatentParams(const LatentBatch& c, std::vector<float>& out, std::vector<float>& lse) {
  MlaParams p;
  p.dtype = DType::kF32;
  p.batch = c.batch; p.num_heads = c.num_heads; p.kv_lora_rank = c.rank; p.rope_dim = c.rope;
  p.q = c.q.data(); p.q_token_stride = static_cast<int64_t>(c.num_heads) * c.width();
  p.q_head_stride = c.width();
  p.kv_cache = c.cache.data(); p.num_pages = c.layout.num_pages;
  p.block_table = c.layout.block_table.data(); p.max_pages_per_seq = c.layout.max_pages_per_seq;
  p.cu_seqlens_q = c.cu_q.data(); p.seqlens_k = c.seqlens_k.data();
  p.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end());
  p.max_seqlen_k = *std::max_element(c.lk.begin(), c.lk.end());
  out.assign(static_cast<size_t>(c.total_q()) * c.num_heads * c.rank, kPoison);
  lse.assign(static_cast<size_t>(c.total_q()) * c.num_heads, kPoison);
  p.out = out.data(); p.lse = lse.data(); p.softmax_scale = c.scale;
  return p;
}

// Device copies of a LatentBatch's inputs and poisoned outputs.
struct DeviceLatent {
  DeviceBuffer q, cache, table, cu_q, seqlens_k, out, lse;
  MlaParams params;  // bf16, device pointers

  explicit DeviceLatent(const LatentBatch& c) {
    q = ToDeviceBf16(c.q);
    cache = ToDeviceBf16(c.cache);
    table = ToDevice(c.layout.block_table);
    cu_q = ToDevice(c.cu_q);
    seqlens_k = ToDevice(c.seqlens_k);
    const size_t rows = static_cast<size_t>(c.total_q()) * c.num_heads;
    out = PoisonedBf16(rows * c.rank);
    lse = PoisonedF32(rows);
    std::vector<float> unused_out, unused_lse;
    params = HostLatentParams(c, unused_out, unused_lse);
    params.dtype = DType::kBF16;
    params.q = q.get(); params.kv_cache = cache.get(); params.block_table = table.as<int32_t>();
    params.cu_seqlens_q = cu_q.as<int32_t>(); params.seqlens_k = seqlens_k.as<int32_t>();
    params.out = out.get(); params.lse = lse.as<float>();
  }
};

// Writes NaN into every cache slot of a sequence's pages past its length (the tail of its last
// page): a kernel must not let a slot it should not read reach the output (P = 0 times NaN).
inline void PoisonSlotsPastLength(LatentBatch& c) {
  for (int b = 0; b < c.batch; ++b) {
    const int pages = PagesFor(c.lk[b]);
    for (int pos = c.lk[b]; pos < pages * kPageSize; ++pos) {
      float* row = &c.cache[c.layout.Slot(b, pos) * c.width()];
      std::fill(row, row + c.width(), std::numeric_limits<float>::quiet_NaN());
    }
  }
}

// Rounds the batch's inputs to bf16 in place (the CPU reference then sees the GPU's values).
inline void RoundLatentBatch(LatentBatch& c) {
  RoundToBf16(c.q);
  RoundToBf16(c.cache);
}

inline void ExpectLatentMatches(const LatentBatch& c, const DeviceLatent& d,
                                const std::vector<float>& want, const std::vector<float>& want_lse) {
  const size_t rows = static_cast<size_t>(c.total_q()) * c.num_heads;
  const auto got = ToHostBf16(d.out, rows * c.rank);
  const auto got_lse = ToHost<float>(d.lse, rows);
  EXPECT_EQ(CountNan(got), 0u);
  EXPECT_LE(RelativeError(got, want), 1e-2);
  EXPECT_LE(LseErrorOrInf(got_lse, want_lse), 1e-3);
}

}  // namespace mlaserve::kernels::testing
