#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/testing/sparse_case.h"

namespace mlaserve::kernels {
namespace {

// (batch, heads, rank/rope, q_per_request)
class SparseDecodeTest
    : public ::testing::TestWithParam<std::tuple<int, int, std::pair<int, int>, int>> {};

TEST_P(SparseDecodeTest, EqualsSparseFwdAndNaive) {
  const auto [batch, heads, dims, qpr] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> lq(batch, qpr), prefix(batch);
  for (auto& x : prefix) x = static_cast<int>(rng() % 300);
  const auto c = testing::MakeLatentBatch(lq, prefix, heads, dims.first, dims.second, seed);
  const int top_k = 128;
  const auto idx = testing::RandomIndices(c, top_k, /*allow_repeats=*/false, seed + 3);
  std::vector<float> out, lse, fwd_out, fwd_lse;
  ASSERT_TRUE(SparseDecode(testing::SparseParamsFor(c, idx, top_k, out, lse), KernelContext{}).ok());
  ASSERT_TRUE(SparseFwd(testing::SparseParamsFor(c, idx, top_k, fwd_out, fwd_lse), KernelContext{}).ok());
  EXPECT_EQ(testing::RelativeError(out, fwd_out), 0.0);
  EXPECT_EQ(testing::LseError(lse, fwd_lse), 0.0);
  std::vector<float> want_out, want_lse;
  testing::NaiveLatentAttention(
      c, [&](int t) { return std::vector<int>(idx.begin() + t * top_k, idx.begin() + (t + 1) * top_k); },
      want_out, want_lse);
  EXPECT_LT(testing::RelativeError(out, want_out), 1e-5);
  EXPECT_LT(testing::LseError(lse, want_lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SparseDecodeTest,
                         ::testing::Combine(::testing::Values(1, 6), ::testing::Values(1, 16),
                                            ::testing::Values(std::pair{512, 64}, std::pair{32, 16}),
                                            ::testing::Values(1, 2)));

TEST(SparseDecodeValidation, RefusesThreeQueries) {
  std::vector<int> lq = {3}, prefix = {4};
  const auto c = testing::MakeLatentBatch(lq, prefix, 1, 8, 4, 2);
  std::vector<int32_t> idx(3 * 2, 0);
  std::vector<float> out, lse;
  auto st = SparseDecode(testing::SparseParamsFor(c, idx, 2, out, lse), KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("3 queries"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
