// sparse_decode CUDA backend vs the CPU reference: 1-2 queries per request, bf16 and fp8
// caches, fresh random inputs, outputs poisoned; two runs bitwise equal.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/sparse_cuda_case.h"

namespace mlaserve::kernels {
namespace {

absl::Status Decode(const SparseMlaParams& p, const KernelContext& ctx) { return SparseDecode(p, ctx); }

TEST(SparseDecodeCuda, Bf16OneAndTwoQueries) {
  for (int heads : {16, 128}) {
    testing::SparseCudaCase cs;
    cs.heads = heads; cs.top_k = 256; cs.lq = {1, 2, 1, 2}; cs.prefix = {700, 90, 3, 300};
    testing::ExpectSparseMatchesCpu(cs, Decode);
  }
}

TEST(SparseDecodeCuda, Fp8OneAndTwoQueries) {
  for (int heads : {64, 128}) {
    testing::SparseCudaCase cs;
    cs.fp8 = true; cs.heads = heads; cs.top_k = 320; cs.lq = {2, 1, 2}; cs.prefix = {1000, 40, 500};
    testing::ExpectSparseMatchesCpu(cs, Decode);
  }
}

TEST(SparseDecodeCuda, Fp8NoEmptyRowsShortContexts) {
  testing::SparseCudaCase cs;
  cs.fp8 = true; cs.heads = 128; cs.top_k = 2048; cs.empty_row = false;
  cs.lq = {1, 1}; cs.prefix = {2500, 100};
  testing::ExpectSparseMatchesCpu(cs, Decode);
}

// Determinism: two runs on the same inputs (outputs poisoned differently) give the same output
// and LSE bytes: at the fixture's widths (4 heads in a 16-row CTA, rank 64, rope 16 padded to
// 64, top_k 32) and at DeepSeek's with the fp8 cache.
void ExpectTwoRunsBitwiseEqual(int heads, int rank, int rope, int top_k, bool fp8) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << heads << " fp8=" << fp8);
  testing::LatentBatch c = testing::MakeLatentBatch({1, 2, 1}, {300, 40, 2000}, heads, rank, rope, seed);
  testing::RoundToBf16(c.q);
  testing::RoundToBf16(c.cache);
  const size_t slots = static_cast<size_t>(c.layout.num_pages) * kPageSize;
  std::vector<uint8_t> fp8_cache;
  if (fp8) {
    std::vector<int64_t> all(slots);
    for (size_t i = 0; i < slots; ++i) all[i] = static_cast<int64_t>(i);
    fp8_cache.assign(slots * kFp8LatentBytes, 0);
    Fp8CacheWriteParams w;
    w.num_tokens = static_cast<int>(slots); w.src = c.cache.data(); w.src_stride = c.width();
    w.slot_mapping = all.data(); w.cache = fp8_cache.data(); w.num_pages = c.layout.num_pages;
    ASSERT_TRUE(Fp8CacheWrite(w, KernelContext{}).ok());
  }
  const std::vector<int32_t> idx = testing::RandomIndices(c, top_k, /*allow_repeats=*/true, seed + 7);
  std::vector<float> host_out, host_lse;
  SparseMlaParams dp = testing::SparseParamsFor(c, idx, top_k, host_out, host_lse);
  testing::DeviceBuffer q = testing::ToDeviceBf16(c.q);
  testing::DeviceBuffer cache = fp8 ? testing::ToDevice(fp8_cache) : testing::ToDeviceBf16(c.cache);
  testing::DeviceBuffer table = testing::ToDevice(c.layout.block_table), cu_q = testing::ToDevice(c.cu_q);
  testing::DeviceBuffer seqlens = testing::ToDevice(c.seqlens_k), d_idx = testing::ToDevice(idx);
  const size_t rows = static_cast<size_t>(c.total_q()) * c.num_heads;
  testing::DeviceBuffer out(rows * c.rank * 2), lse(rows * sizeof(float));
  dp.dtype = DType::kBF16;
  dp.cache_dtype = fp8 ? DType::kFP8E4M3 : DType::kBF16;
  dp.max_seqlen_q = 2;
  dp.q = q.get(); dp.kv_cache = cache.get(); dp.block_table = table.as<int32_t>();
  dp.cu_seqlens_q = cu_q.as<int32_t>(); dp.seqlens_k = seqlens.as<int32_t>();
  dp.indices = d_idx.as<int32_t>(); dp.out = out.get(); dp.lse = lse.as<float>();
  std::vector<uint16_t> got[2];
  std::vector<float> got_lse[2];
  for (int run = 0; run < 2; ++run) {
    MLASERVE_CUDA_ASSERT(cudaMemset(out.get(), run == 0 ? 0xff : 0x7f, out.bytes()));
    MLASERVE_CUDA_ASSERT(cudaMemset(lse.get(), run == 0 ? 0xff : 0x7f, lse.bytes()));
    const auto st = SparseDecode(dp, KernelContext{Backend::kCuda, nullptr, 0});
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    got[run] = testing::ToHost<uint16_t>(out, rows * c.rank);
    got_lse[run] = testing::ToHost<float>(lse, rows);
  }
  EXPECT_EQ(testing::CountNan(testing::FromBf16(got[0])), 0u);
  EXPECT_TRUE(got[0] == got[1]) << "outputs differ between two runs";
  EXPECT_EQ(std::memcmp(got_lse[0].data(), got_lse[1].data(), rows * sizeof(float)), 0) << "LSEs differ";
}

TEST(SparseDecodeCudaDeterminism, FixtureWidthsTwoRunsBitwiseEqual) {
  ExpectTwoRunsBitwiseEqual(/*heads=*/4, /*rank=*/64, /*rope=*/16, /*top_k=*/32, /*fp8=*/false);
}

TEST(SparseDecodeCudaDeterminism, DeepSeekWidthsFp8TwoRunsBitwiseEqual) {
  ExpectTwoRunsBitwiseEqual(/*heads=*/128, /*rank=*/512, /*rope=*/64, /*top_k=*/2048, /*fp8=*/true);
}

TEST(SparseDecodeCuda, RejectsThreeQueries) {
  SparseMlaParams p;
  p.max_seqlen_q = 3;
  EXPECT_EQ(SparseDecodeCuda(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::kernels
