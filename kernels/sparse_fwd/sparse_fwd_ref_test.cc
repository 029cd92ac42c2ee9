#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/sparse_fwd/api.h"
#include "kernels/testing/sparse_case.h"

namespace mlaserve::kernels {
namespace {

// (heads, rank/rope, with_prefix)
class SparseFwdTest
    : public ::testing::TestWithParam<std::tuple<int, std::pair<int, int>, bool>> {};

testing::LatentBatch MakeBatch(int heads, std::pair<int, int> dims, bool with_prefix, uint64_t seed) {
  std::mt19937 rng(seed);
  // Fewer tokens for the wide shapes keep the naive double reference fast.
  const int max_len = dims.first * heads >= 2048 ? 50 : (dims.first >= 256 ? 100 : 200);
  std::vector<int> lq(3), prefix(3);
  for (int b = 0; b < 3; ++b) {
    lq[b] = 1 + static_cast<int>(rng() % max_len);
    prefix[b] = with_prefix ? static_cast<int>(rng() % 100) : 0;
  }
  return testing::MakeLatentBatch(lq, prefix, heads, dims.first, dims.second, seed);
}

// Indices = every visible position (shuffled, padded with -1) is dense causal MLA.
TEST_P(SparseFwdTest, AllVisibleEqualsDenseMla) {
  const auto [heads, dims, with_prefix] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const auto c = MakeBatch(heads, dims, with_prefix, seed);
  const int top_k = *std::max_element(c.lk.begin(), c.lk.end()) + 5;
  std::mt19937_64 rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(c.total_q()) * top_k, -1);
  for (int t = 0; t < c.total_q(); ++t) {
    const int visible = c.query_pos(t) + 1;
    for (int j = 0; j < visible; ++j) idx[t * top_k + j] = j;
    std::shuffle(idx.begin() + t * top_k, idx.begin() + (t + 1) * top_k, rng);
  }
  std::vector<float> out, lse;
  ASSERT_TRUE(SparseFwd(testing::SparseParamsFor(c, idx, top_k, out, lse), KernelContext{}).ok());

  MlaParams mp;
  mp.batch = c.batch; mp.num_heads = c.num_heads; mp.kv_lora_rank = c.rank; mp.rope_dim = c.rope;
  mp.q = c.q.data(); mp.q_token_stride = static_cast<int64_t>(c.num_heads) * c.width();
  mp.q_head_stride = c.width(); mp.kv_cache = c.cache.data(); mp.num_pages = c.layout.num_pages;
  mp.block_table = c.layout.block_table.data(); mp.max_pages_per_seq = c.layout.max_pages_per_seq;
  mp.cu_seqlens_q = c.cu_q.data(); mp.seqlens_k = c.seqlens_k.data();
  mp.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end());
  mp.max_seqlen_k = *std::max_element(c.lk.begin(), c.lk.end());
  std::vector<float> dense_out(out.size(), testing::kPoison), dense_lse(lse.size(), testing::kPoison);
  mp.out = dense_out.data(); mp.lse = dense_lse.data(); mp.softmax_scale = c.scale;
  ASSERT_TRUE(MlaPrefill(mp, KernelContext{}).ok());
  EXPECT_LT(testing::RelativeError(out, dense_out), 1e-6);
  EXPECT_LT(testing::LseError(lse, dense_lse), 1e-6);
}

// Random subsets with padding and repeated entries, against the naive reference (which
// attends every listed entry, repeats included).
TEST_P(SparseFwdTest, RandomSubsetsMatchNaive) {
  const auto [heads, dims, with_prefix] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const auto c = MakeBatch(heads, dims, with_prefix, seed);
  const int top_k = 96;
  const auto idx = testing::RandomIndices(c, top_k, /*allow_repeats=*/true, seed + 9);
  std::vector<float> out, lse;
  ASSERT_TRUE(SparseFwd(testing::SparseParamsFor(c, idx, top_k, out, lse), KernelContext{}).ok());
  std::vector<float> want_out, want_lse;
  testing::NaiveLatentAttention(
      c, [&](int t) { return std::vector<int>(idx.begin() + t * top_k, idx.begin() + (t + 1) * top_k); },
      want_out, want_lse);
  EXPECT_LT(testing::RelativeError(out, want_out), 1e-5);
  EXPECT_LT(testing::LseError(lse, want_lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SparseFwdTest,
                         ::testing::Combine(::testing::Values(1, 4, 16),
                                            ::testing::Values(std::pair{512, 64}, std::pair{32, 16}),
                                            ::testing::Bool()));

TEST(SparseFwdSemantics, RepeatedEntryCountsTwiceAndEmptyRowIsZero) {
  std::vector<int> lq = {2}, prefix = {1};
  const auto c = testing::MakeLatentBatch(lq, prefix, 1, 8, 4, 5);
  // Row 0: {0, 0, 1} weights position 0 twice; row 1: all padding.
  std::vector<int32_t> idx = {0, 0, 1, -1, -1, -1};
  std::vector<float> out, lse;
  ASSERT_TRUE(SparseFwd(testing::SparseParamsFor(c, idx, 3, out, lse), KernelContext{}).ok());
  std::vector<float> want_out, want_lse;
  testing::NaiveLatentAttention(
      c, [&](int t) { return std::vector<int>(idx.begin() + t * 3, idx.begin() + t * 3 + 3); },
      want_out, want_lse);
  EXPECT_LT(testing::RelativeError(out.data(), want_out.data(), 8), 1e-6);
  EXPECT_NEAR(lse[0], want_lse[0], 1e-6);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(out[8 + d], 0.0f);
  EXPECT_EQ(lse[1], -std::numeric_limits<float>::infinity());
}

TEST(SparseFwdValidation, RefusesOutOfRangeIndex) {
  std::vector<int> lq = {1}, prefix = {2};
  const auto c = testing::MakeLatentBatch(lq, prefix, 1, 8, 4, 5);
  std::vector<int32_t> idx = {0, 3};
  std::vector<float> out, lse;
  auto st = SparseFwd(testing::SparseParamsFor(c, idx, 2, out, lse), KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("indices[0][1]=3"), std::string::npos) << st.message();
  idx = {0, 1};
  auto p = testing::SparseParamsFor(c, idx, 2, out, lse);
  p.cache_dtype = DType::kFP8E4M3;
  st = SparseFwd(p, KernelContext{});
  EXPECT_NE(st.message().find("cache_dtype=fp8_e4m3"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
