#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/embedding/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::FreshSeed;

class EmbeddingTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(EmbeddingTest, CopiesRows) {
  const auto [num_tokens, dim] = GetParam();
  const int vocab = 97;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto table = testing::RandomVector(static_cast<size_t>(vocab) * dim, seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(num_tokens);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  std::vector<float> out(static_cast<size_t>(num_tokens) * dim);
  testing::Poison(out);
  EmbeddingParams p;
  p.num_tokens = num_tokens; p.dim = dim; p.vocab = vocab;
  p.ids = ids.data(); p.table = table.data(); p.out = out.data();
  ASSERT_TRUE(Embedding(p, KernelContext{}).ok());
  for (int t = 0; t < num_tokens; ++t)
    for (int d = 0; d < dim; ++d) ASSERT_EQ(out[t * dim + d], table[ids[t] * dim + d]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingTest,
                         ::testing::Combine(::testing::Values(1, 7, 300),
                                            ::testing::Values(1, 16, 130)));

TEST(EmbeddingValidation, RefusesOutOfRangeId) {
  std::vector<float> table(8 * 4, 1.0f), out(2 * 4);
  std::vector<int32_t> ids = {3, 8};
  EmbeddingParams p;
  p.num_tokens = 2; p.dim = 4; p.vocab = 8;
  p.ids = ids.data(); p.table = table.data(); p.out = out.data();
  auto st = Embedding(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ids[1]=8"), std::string::npos) << st.message();
  p.dim = 0;
  st = Embedding(p, KernelContext{});
  EXPECT_NE(st.message().find("dim=0"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
