#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/indexer/api.h"
#include "kernels/testing/paged.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

struct IndexerCase {
  std::vector<int> lq, lk;
  std::vector<int32_t> cu_q, seqlens_k;
  testing::PagedLayout layout;
  std::vector<float> q, weights, k_cache;
  int heads, dim;
  float scale;

  IndexerParams Params(int top_k, std::vector<int32_t>& out) const {
    IndexerParams p;
    p.batch = static_cast<int>(lq.size()); p.num_heads = heads; p.head_dim = dim; p.top_k = top_k;
    p.q = q.data(); p.weights = weights.data(); p.k_cache = k_cache.data();
    p.num_pages = layout.num_pages; p.block_table = layout.block_table.data();
    p.max_pages_per_seq = layout.max_pages_per_seq; p.cu_seqlens_q = cu_q.data();
    p.seqlens_k = seqlens_k.data();
    p.max_seqlen_q = *std::max_element(lq.begin(), lq.end());
    p.max_seqlen_k = *std::max_element(lk.begin(), lk.end());
    p.softmax_scale = scale;
    out.assign(static_cast<size_t>(cu_q.back()) * top_k, -7);
    p.topk_indices = out.data();
    return p;
  }

  // Brute-force double score of position s for query token t of sequence b.
  double Score(int t, int b, int s) const {
    const float* k = &k_cache[layout.Slot(b, s) * dim];
    double total = 0;
    for (int h = 0; h < heads; ++h) {
      double dot = 0;
      for (int d = 0; d < dim; ++d) dot += static_cast<double>(q[(t * heads + h) * dim + d]) * k[d];
      total += weights[t * heads + h] * std::max(0.0, dot * scale);
    }
    return total;
  }
};

IndexerCase MakeCase(const std::vector<int>& lq, const std::vector<int>& prefix, int heads, int dim,
                     uint64_t seed) {
  IndexerCase c;
  c.lq = lq;
  for (size_t b = 0; b < lq.size(); ++b) c.lk.push_back(lq[b] + prefix[b]);
  c.cu_q = testing::CumSum(lq);
  c.seqlens_k.assign(c.lk.begin(), c.lk.end());
  c.layout = testing::MakePagedLayout(c.lk, seed);
  c.heads = heads;
  c.dim = dim;
  c.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  c.q = testing::RandomVector(static_cast<size_t>(c.cu_q.back()) * heads * dim, seed + 1);
  c.weights = testing::RandomVector(static_cast<size_t>(c.cu_q.back()) * heads, seed + 2);
  c.k_cache = testing::RandomVector(static_cast<size_t>(c.layout.num_pages) * kPageSize * dim, seed + 3);
  return c;
}

// (heads, head_dim, top_k)
class IndexerTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(IndexerTest, MatchesBruteForce) {
  const auto [heads, dim, top_k] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> lq(3), prefix(3);
  for (int b = 0; b < 3; ++b) {
    lq[b] = 1 + static_cast<int>(rng() % (heads * dim > 500 ? 100 : 200));
    prefix[b] = static_cast<int>(rng() % 100);
  }
  const auto c = MakeCase(lq, prefix, heads, dim, seed);
  std::vector<int32_t> got;
  ASSERT_TRUE(Indexer(c.Params(top_k, got), KernelContext{}).ok());
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < lq[b]; ++i) {
      const int t = c.cu_q[b] + i;
      const int visible = prefix[b] + i + 1;
      std::vector<double> s(visible);
      for (int x = 0; x < visible; ++x) s[x] = c.Score(t, b, x);
      std::vector<int> order(visible);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return s[x] > s[y]; });
      const int keep = std::min(top_k, visible);
      std::vector<bool> seen(visible, false);
      for (int j = 0; j < top_k; ++j) {
        const int32_t g = got[static_cast<size_t>(t) * top_k + j];
        if (j >= keep) {
          ASSERT_EQ(g, -1) << "t=" << t << " j=" << j;
          continue;
        }
        ASSERT_GE(g, 0);
        ASSERT_LT(g, visible) << "t=" << t << " j=" << j << ": position not visible";
        ASSERT_FALSE(seen[g]) << "duplicate position " << g;
        seen[g] = true;
        // The j-th best score (f32 vs double may swap near-equal neighbours only).
        ASSERT_NEAR(s[g], s[order[j]], 1e-5) << "t=" << t << " j=" << j;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, IndexerTest,
                         ::testing::Combine(::testing::Values(1, 4, 16), ::testing::Values(16, 128),
                                            ::testing::Values(1, 7, 64, 2048)));

TEST(IndexerSemantics, TiesGoToLowerPositionAndPadWithMinusOne) {
  // Identical keys score identically: the lowest positions win, in order.
  std::vector<int> lq = {1}, prefix = {4};
  auto c = MakeCase(lq, prefix, 2, 8, 7);
  std::vector<float> key = testing::RandomVector(8, 9);
  for (int s = 0; s < 5; ++s) std::copy(key.begin(), key.end(), &c.k_cache[c.layout.Slot(0, s) * 8]);
  c.weights = {1.0f, 1.0f};
  // q = key keeps the scores positive (not all zero after relu).
  for (int h = 0; h < 2; ++h) std::copy(key.begin(), key.end(), &c.q[h * 8]);
  std::vector<int32_t> got;
  ASSERT_TRUE(Indexer(c.Params(3, got), KernelContext{}).ok());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  ASSERT_TRUE(Indexer(c.Params(7, got), KernelContext{}).ok());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3, 4, -1, -1}));
}

// The rule at a top-k cut inside a class of equal scores (docs/model.md, "DSA"): lower position
// first. With ReLU'd head scores the common tie is exact zero: a key whose dot product with
// every query head is negative scores 0 (+0 or -0, with negative head weights), whatever its
// position. Built here: query heads e0 and e1 with weights 1 and -0.5; key (a, 0, ...) scores
// a * scale, key (-1, -1, ...) scores 0, key (-1, 2, ...) scores -0.5 * 2 * scale < 0.
TEST(IndexerSemantics, ReluZeroTiesAtTheCutGoToLowerPositions) {
  std::vector<int> lq = {1}, prefix = {15};  // 16 visible positions
  auto c = MakeCase(lq, prefix, 2, 8, 11);
  c.q.assign(2 * 8, 0.0f);
  c.q[0] = 1.0f;      // head 0: e0
  c.q[8 + 1] = 1.0f;  // head 1: e1
  c.weights = {1.0f, -0.5f};
  auto set_key = [&](int pos, float x0, float x1) {
    float* k = &c.k_cache[c.layout.Slot(0, pos) * 8];
    std::fill(k, k + 8, 0.0f);
    k[0] = x0;
    k[1] = x1;
  };
  for (int s = 0; s < 16; ++s) set_key(s, -1.0f, -1.0f);  // score 0
  set_key(11, 3.0f, 0.0f);
  set_key(4, 2.0f, 0.0f);
  set_key(13, 2.0f, 0.0f);  // ties with 4: 4 first
  set_key(7, 1.0f, 0.0f);
  set_key(1, -1.0f, 2.0f);  // negative: after every zero
  EXPECT_EQ(c.Score(0, 0, 1), -0.5 * 2 * c.scale);
  std::vector<int32_t> got;
  ASSERT_TRUE(Indexer(c.Params(7, got), KernelContext{}).ok());
  EXPECT_EQ(got, (std::vector<int32_t>{11, 4, 13, 7, 0, 2, 3}));
  ASSERT_TRUE(Indexer(c.Params(18, got), KernelContext{}).ok());
  EXPECT_EQ(got, (std::vector<int32_t>{11, 4, 13, 7, 0, 2, 3, 5, 6, 8, 9, 10, 12, 14, 15, 1, -1, -1}));
}

TEST(IndexerValidation, NamesBadValues) {
  std::vector<int> lq = {1}, prefix = {0};
  auto c = MakeCase(lq, prefix, 1, 8, 1);
  std::vector<int32_t> got;
  IndexerParams p = c.Params(4, got);
  p.top_k = 0;
  auto st = Indexer(p, KernelContext{});
  EXPECT_NE(st.message().find("top_k=0"), std::string::npos) << st.message();
  p.top_k = 4; p.num_heads = 0;
  st = Indexer(p, KernelContext{});
  EXPECT_NE(st.message().find("num_heads=0"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
