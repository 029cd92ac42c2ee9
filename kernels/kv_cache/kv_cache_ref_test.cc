#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_cache/api.h"
#include "kernels/testing/paged.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::FreshSeed;

// (batch, max_len, entry_dim)
class CacheRoundTripTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(CacheRoundTripTest, WriteThenGatherWithPermutedPages) {
  const auto [batch, max_len, entry_dim] = GetParam();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> lens(batch);
  for (auto& l : lens) l = 1 + static_cast<int>(rng() % max_len);
  const auto layout = testing::MakePagedLayout(lens, seed);
  const auto cu = testing::CumSum(lens);
  const int total = cu[batch];

  // Write every token, plus padding rows (slot -1) that must be skipped.
  const int64_t src_stride = entry_dim + 2;
  auto src = testing::RandomVector((total + 2) * src_stride, seed + 1);
  std::vector<int64_t> slots;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < lens[b]; ++i) slots.push_back(layout.Slot(b, i));
  slots.push_back(-1);
  slots.push_back(-1);
  std::vector<float> cache(static_cast<size_t>(layout.num_pages) * kPageSize * entry_dim);
  testing::Poison(cache);
  CacheWriteParams w;
  w.num_tokens = total + 2; w.entry_dim = entry_dim; w.src = src.data(); w.src_stride = src_stride;
  w.slot_mapping = slots.data(); w.cache = cache.data(); w.num_pages = layout.num_pages;
  ASSERT_TRUE(CacheWrite(w, KernelContext{}).ok());

  // Gather a random window [start, start + len) of each sequence.
  std::vector<int32_t> start(batch), len(batch);
  std::vector<int> dst_lens(batch);
  for (int b = 0; b < batch; ++b) {
    start[b] = static_cast<int32_t>(rng() % lens[b]);
    len[b] = 1 + static_cast<int32_t>(rng() % (lens[b] - start[b]));
    dst_lens[b] = len[b];
  }
  const auto cu_dst = testing::CumSum(dst_lens);
  std::vector<float> dst(static_cast<size_t>(cu_dst[batch]) * entry_dim);
  testing::Poison(dst);
  CacheGatherParams g;
  g.batch = batch; g.entry_dim = entry_dim; g.cache = cache.data(); g.num_pages = layout.num_pages;
  g.block_table = layout.block_table.data(); g.max_pages_per_seq = layout.max_pages_per_seq;
  g.start = start.data(); g.len = len.data(); g.cu_dst = cu_dst.data(); g.dst = dst.data();
  ASSERT_TRUE(CacheGather(g, KernelContext{}).ok());
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < len[b]; ++i)
      for (int d = 0; d < entry_dim; ++d)
        ASSERT_EQ(dst[(cu_dst[b] + i) * entry_dim + d],
                  src[(cu[b] + start[b] + i) * src_stride + d])
            << "b=" << b << " i=" << i << " d=" << d;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CacheRoundTripTest,
                         ::testing::Combine(::testing::Values(1, 3, 8),
                                            ::testing::Values(1, 64, 300),
                                            ::testing::Values(16, 576)));

TEST(CacheValidation, RefusesBadSlotAndPage) {
  std::vector<float> src(4), cache(kPageSize * 4);
  std::vector<int64_t> slots = {kPageSize};
  CacheWriteParams w;
  w.num_tokens = 1; w.entry_dim = 4; w.src = src.data(); w.src_stride = 4;
  w.slot_mapping = slots.data(); w.cache = cache.data(); w.num_pages = 1;
  auto st = CacheWrite(w, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("slot_mapping[0]=64"), std::string::npos) << st.message();

  std::vector<int32_t> table = {5}, start = {0}, len = {3}, cu_dst = {0, 3};
  std::vector<float> dst(12);
  CacheGatherParams g;
  g.batch = 1; g.entry_dim = 4; g.cache = cache.data(); g.num_pages = 1;
  g.block_table = table.data(); g.max_pages_per_seq = 1; g.start = start.data();
  g.len = len.data(); g.cu_dst = cu_dst.data(); g.dst = dst.data();
  st = CacheGather(g, KernelContext{});
  EXPECT_NE(st.message().find("block_table[0][0]=5"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
