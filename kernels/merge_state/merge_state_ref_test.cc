#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/merge_state/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Naive double attention of one query row over keys [begin, end): out (head_dim) and lse.
void Attend(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
            int dim, int begin, int end, float* out, float* lse) {
  double m = kNegInf;
  std::vector<double> s(end - begin);
  for (int j = begin; j < end; ++j) {
    double dot = 0;
    for (int d = 0; d < dim; ++d) dot += static_cast<double>(q[d]) * k[j * dim + d];
    s[j - begin] = dot * 0.3;
    m = std::max(m, s[j - begin]);
  }
  if (end <= begin) {
    for (int d = 0; d < dim; ++d) out[d] = 0.0f;
    *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  double l = 0;
  std::vector<double> acc(dim, 0.0);
  for (int j = begin; j < end; ++j) {
    const double p = std::exp(s[j - begin] - m);
    l += p;
    for (int d = 0; d < dim; ++d) acc[d] += p * v[j * dim + d];
  }
  for (int d = 0; d < dim; ++d) out[d] = static_cast<float>(acc[d] / l);
  *lse = static_cast<float>(m + std::log(l));
}

// (num_tokens, num_heads, head_dim, in_place)
class MergeStateTest : public ::testing::TestWithParam<std::tuple<int, int, int, bool>> {};

// Attention over all keys equals the merge of attention over the two halves of a split,
// including splits where one side is empty (lse = -inf).
TEST_P(MergeStateTest, SplitKeysMergeToWhole) {
  const auto [num_tokens, num_heads, dim, in_place] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const int num_keys = 40;
  const int64_t token_stride = static_cast<int64_t>(num_heads) * dim + 3;
  std::vector<float> out_a(num_tokens * token_stride), out_b(out_a.size()), want(out_a.size());
  std::vector<float> lse_a(num_tokens * num_heads), lse_b(lse_a.size()), lse_want(lse_a.size());
  for (int t = 0; t < num_tokens; ++t)
    for (int h = 0; h < num_heads; ++h) {
      const uint64_t s = seed + 17 * (t * num_heads + h);
      auto q = testing::RandomVector(dim, s, -2.0f, 2.0f);
      auto k = testing::RandomVector(num_keys * dim, s + 1, -2.0f, 2.0f);
      auto v = testing::RandomVector(num_keys * dim, s + 2);
      // Split point 0 or num_keys leaves one side empty.
      const int split = static_cast<int>(rng() % (num_keys + 1));
      const int64_t off = t * token_stride + h * dim;
      const int li = t * num_heads + h;
      Attend(q, k, v, dim, 0, split, &out_a[off], &lse_a[li]);
      Attend(q, k, v, dim, split, num_keys, &out_b[off], &lse_b[li]);
      Attend(q, k, v, dim, 0, num_keys, &want[off], &lse_want[li]);
    }
  std::vector<float> out(out_a.size()), lse(lse_a.size());
  testing::Poison(out);
  testing::Poison(lse);
  MergeStateParams p;
  p.num_tokens = num_tokens; p.num_heads = num_heads; p.head_dim = dim;
  p.out_a = out_a.data(); p.out_b = out_b.data(); p.token_stride = token_stride;
  p.lse_a = lse_a.data(); p.lse_b = lse_b.data();
  p.out = in_place ? out_a.data() : out.data();
  p.lse = in_place ? lse_a.data() : lse.data();
  ASSERT_TRUE(MergeState(p, KernelContext{}).ok());
  const auto& got = in_place ? out_a : out;
  const auto& got_lse = in_place ? lse_a : lse;
  std::vector<float> g, w;
  for (int t = 0; t < num_tokens; ++t)
    for (int i = 0; i < num_heads * dim; ++i) {
      g.push_back(got[t * token_stride + i]);
      w.push_back(want[t * token_stride + i]);
    }
  EXPECT_LT(testing::RelativeError(g, w), 1e-6);
  EXPECT_LT(testing::RelativeError(got_lse, lse_want), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MergeStateTest,
                         ::testing::Combine(::testing::Values(1, 23), ::testing::Values(1, 4, 16),
                                            ::testing::Values(16, 128), ::testing::Bool()));

TEST(MergeStateTest, BothSidesEmptyGivesZeroAndNegInf) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> a = {1, 2}, b = {3, 4}, out(2, testing::kPoison);
  std::vector<float> la = {-inf}, lb = {-inf}, lse = {testing::kPoison};
  MergeStateParams p;
  p.num_tokens = 1; p.num_heads = 1; p.head_dim = 2; p.token_stride = 2;
  p.out_a = a.data(); p.out_b = b.data(); p.out = out.data();
  p.lse_a = la.data(); p.lse_b = lb.data(); p.lse = lse.data();
  ASSERT_TRUE(MergeState(p, KernelContext{}).ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(lse[0], -inf);
}

}  // namespace
}  // namespace mlaserve::kernels
