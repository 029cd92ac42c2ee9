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
#include "kernels/testing/latent_params.h"
#include "kernels/testing/mla_case.h"

namespace mlaserve::kernels::testing {

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
