#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activation/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

class SiluAndMulTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SiluAndMulTest, MatchesNaiveDouble) {
  const auto [rows, dim] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int64_t x_stride = 2 * dim + 1, out_stride = dim + 2;
  auto x = testing::RandomVector(rows * x_stride, seed, -8.0f, 8.0f);
  std::vector<float> out(rows * out_stride), got, want;
  testing::Poison(out);
  SiluAndMulParams p;
  p.rows = rows; p.dim = dim; p.x = x.data(); p.x_stride = x_stride;
  p.out = out.data(); p.out_stride = out_stride;
  ASSERT_TRUE(SiluAndMul(p, KernelContext{}).ok());
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < dim; ++j) {
      const double g = x[r * x_stride + j], u = x[r * x_stride + dim + j];
      want.push_back(static_cast<float>(g / (1.0 + std::exp(-g)) * u));
      got.push_back(out[r * out_stride + j]);
    }
  EXPECT_LT(testing::RelativeError(got, want), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SiluAndMulTest,
                         ::testing::Combine(::testing::Values(1, 13), ::testing::Values(1, 96)));

TEST(SiluAndMulValidation, NamesBadValues) {
  std::vector<float> buf(16);
  SiluAndMulParams p;
  p.rows = 1; p.dim = 4; p.x = buf.data(); p.x_stride = 4; p.out = buf.data(); p.out_stride = 4;
  auto st = SiluAndMul(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x_stride=4"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
