// Test helper for the CUDA sparse kernels (sparse_fwd, sparse_decode): a random LatentBatch
// with random index lists (padding, repeats, contexts shorter than top_k, shared pages), the
// CPU reference on the values the GPU reads (bf16-rounded, or the dequantized fp8 cache), and
// the comparison of the GPU's poisoned outputs with it.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/sparse_fwd/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/sparse_case.h"

namespace mlaserve::kernels::testing {

struct SparseCudaCase {
  int heads = 16, rank = 512, rope = 64, top_k = 128;
  std::vector<int> lq, prefix;
  bool fp8 = false;
  bool empty_row = true;  // make one query's list all -1
};

// Runs `gpu_call` (SparseFwd or SparseDecode with a CUDA context) on a fresh random instance
// of `cs` and compares with `cpu_call` (the same family on the CPU).
template <typename Call>
void ExpectSparseMatchesCpu(const SparseCudaCase& cs, Call call) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << cs.heads << " rank=" << cs.rank
                                    << " top_k=" << cs.top_k << " fp8=" << cs.fp8);
  LatentBatch c = MakeLatentBatch(cs.lq, cs.prefix, cs.heads, cs.rank, cs.rope, seed);
  // Requests sharing a page (as a shared prefix would): request 1's first page is request 0's.
  if (c.batch > 1) c.layout.block_table[c.layout.max_pages_per_seq] = c.layout.block_table[0];
  RoundToBf16(c.q);
  RoundToBf16(c.cache);
  const size_t slots = static_cast<size_t>(c.layout.num_pages) * kPageSize;
  std::vector<uint8_t> fp8_cache;
  if (cs.fp8) {  // quantize, then give the CPU reference the dequantized values
    std::vector<int64_t> all(slots);
    for (size_t i = 0; i < slots; ++i) all[i] = static_cast<int64_t>(i);
    fp8_cache.assign(slots * kFp8LatentBytes, 0);
    Fp8CacheWriteParams w;
    w.num_tokens = static_cast<int>(slots); w.src = c.cache.data(); w.src_stride = c.width();
    w.slot_mapping = all.data(); w.cache = fp8_cache.data(); w.num_pages = c.layout.num_pages;
    ASSERT_TRUE(Fp8CacheWrite(w, KernelContext{}).ok());
    Fp8CacheReadParams r;
    r.num_tokens = w.num_tokens; r.cache = fp8_cache.data(); r.num_pages = c.layout.num_pages;
    r.slot_mapping = all.data(); r.dst = c.cache.data(); r.dst_stride = c.width();
    ASSERT_TRUE(Fp8CacheRead(r, KernelContext{}).ok());
  }
  std::vector<int32_t> idx = RandomIndices(c, cs.top_k, /*allow_repeats=*/true, seed + 7);
  if (cs.empty_row) std::fill(idx.begin(), idx.begin() + cs.top_k, -1);

  std::vector<float> want, want_lse;
  SparseMlaParams hp = SparseParamsFor(c, idx, cs.top_k, want, want_lse);
  hp.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end());
  ASSERT_TRUE(call(hp, KernelContext{}).ok());

  DeviceBuffer q = ToDeviceBf16(c.q);
  DeviceBuffer cache = cs.fp8 ? ToDevice(fp8_cache) : ToDeviceBf16(c.cache);
  DeviceBuffer table = ToDevice(c.layout.block_table), cu_q = ToDevice(c.cu_q);
  DeviceBuffer seqlens = ToDevice(c.seqlens_k), d_idx = ToDevice(idx);
  const size_t rows = static_cast<size_t>(c.total_q()) * c.num_heads;
  DeviceBuffer out = PoisonedBf16(rows * c.rank), lse = PoisonedF32(rows);
  SparseMlaParams dp = hp;
  dp.dtype = DType::kBF16;
  dp.cache_dtype = cs.fp8 ? DType::kFP8E4M3 : DType::kBF16;
  dp.q = q.get(); dp.kv_cache = cache.get(); dp.block_table = table.as<int32_t>();
  dp.cu_seqlens_q = cu_q.as<int32_t>(); dp.seqlens_k = seqlens.as<int32_t>();
  dp.indices = d_idx.as<int32_t>(); dp.out = out.get(); dp.lse = lse.as<float>();
  const auto st = call(dp, KernelContext{Backend::kCuda, nullptr, 0});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got = ToHostBf16(out, rows * c.rank);
  const auto got_lse = ToHost<float>(lse, rows);
  EXPECT_EQ(CountNan(got), 0u);
  EXPECT_LE(RelativeError(got, want), 1e-2);
  EXPECT_LE(LseErrorOrInf(got_lse, want_lse), 1e-3);
  if (cs.empty_row) {  // the all-padding query: out = 0, lse = -inf for every head
    for (int h = 0; h < c.num_heads; ++h) EXPECT_TRUE(std::isinf(got_lse[h]) && got_lse[h] < 0);
    for (int i = 0; i < c.num_heads * c.rank; ++i) ASSERT_EQ(got[i], 0.0f);
  }
}

}  // namespace mlaserve::kernels::testing
