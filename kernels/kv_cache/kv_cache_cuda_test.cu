// kv_cache CUDA vs the CPU reference: CacheWrite through a permuted slot mapping with padding
// slots (-1), then CacheGather of random ranges through permuted block tables, entry dims 576
// (the latent cache), 32 (indexer keys) and an odd width (element path).
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_cache/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/paged.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

class KvCacheCudaTest : public ::testing::TestWithParam<int> {};  // entry_dim

TEST_P(KvCacheCudaTest, WriteThenGatherMatchesCpu) {
  const int dim = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const std::vector<int> seq_lens = {1, 64, 65, 700, 3000};
  const auto layout = testing::MakePagedLayout(seq_lens, seed);
  const int batch = layout.batch;
  const size_t cache_n = static_cast<size_t>(layout.num_pages) * kPageSize * dim;
  auto cache0 = testing::RandomVector(cache_n, seed + 1);
  testing::RoundToBf16(cache0);
  // Write: every position of every sequence, in shuffled order, with padding rows mixed in.
  std::vector<int64_t> slots;
  for (int b = 0; b < batch; ++b)
    for (int pos = 0; pos < seq_lens[b]; ++pos) slots.push_back(layout.Slot(b, pos));
  for (int i = 0; i < 5; ++i) slots.push_back(-1);
  std::shuffle(slots.begin(), slots.end(), rng);
  const int tokens = static_cast<int>(slots.size());
  const int64_t src_stride = dim + (dim % 8 == 0 ? 8 : 1);
  auto src = testing::RandomVector(static_cast<size_t>(tokens) * src_stride, seed + 2);
  testing::RoundToBf16(src);
  std::vector<float> want_cache = cache0;
  CacheWriteParams w;
  w.dtype = DType::kF32; w.num_tokens = tokens; w.entry_dim = dim; w.src = src.data();
  w.src_stride = src_stride; w.slot_mapping = slots.data(); w.cache = want_cache.data();
  w.num_pages = layout.num_pages;
  ASSERT_TRUE(CacheWrite(w, KernelContext{}).ok());
  auto d_cache = testing::ToDeviceBf16(cache0), d_src = testing::ToDeviceBf16(src);
  auto d_slots = testing::ToDevice(slots);
  CacheWriteParams gw = w;
  gw.dtype = DType::kBF16; gw.src = d_src.get(); gw.slot_mapping = d_slots.as<int64_t>();
  gw.cache = d_cache.get();
  ASSERT_TRUE(CacheWrite(gw, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(testing::ToHostBf16(d_cache, cache_n), want_cache);

  // Gather: a random [start, start + len) of each sequence.
  std::vector<int32_t> start(batch), len(batch);
  for (int b = 0; b < batch; ++b) {
    start[b] = static_cast<int32_t>(rng() % seq_lens[b]);
    len[b] = static_cast<int32_t>(rng() % (seq_lens[b] - start[b] + 1));
  }
  std::vector<int> lens(len.begin(), len.end());
  const auto cu = testing::CumSum(lens);
  const size_t dst_n = static_cast<size_t>(cu[batch]) * dim;
  std::vector<float> want_dst(dst_n);
  CacheGatherParams gp;
  gp.dtype = DType::kF32; gp.batch = batch; gp.entry_dim = dim; gp.cache = want_cache.data();
  gp.num_pages = layout.num_pages; gp.block_table = layout.block_table.data();
  gp.max_pages_per_seq = layout.max_pages_per_seq; gp.start = start.data(); gp.len = len.data();
  gp.cu_dst = cu.data(); gp.dst = want_dst.data();
  ASSERT_TRUE(CacheGather(gp, KernelContext{}).ok());
  auto d_table = testing::ToDevice(layout.block_table), d_start = testing::ToDevice(start);
  auto d_len = testing::ToDevice(len), d_cu = testing::ToDevice(cu);
  auto d_dst = testing::PoisonedBf16(dst_n);
  CacheGatherParams gg = gp;
  gg.dtype = DType::kBF16; gg.cache = d_cache.get(); gg.block_table = d_table.as<int32_t>();
  gg.start = d_start.as<int32_t>(); gg.len = d_len.as<int32_t>(); gg.cu_dst = d_cu.as<int32_t>();
  gg.dst = d_dst.get();
  ASSERT_TRUE(CacheGather(gg, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(testing::ToHostBf16(d_dst, dst_n), want_dst);
}

INSTANTIATE_TEST_SUITE_P(EntryDims, KvCacheCudaTest, ::testing::Values(576, 32, 13));

}  // namespace
}  // namespace mlaserve::kernels
