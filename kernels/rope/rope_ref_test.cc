#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/rope/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::FreshSeed;
using testing::RandomVector;
using testing::RelativeError;

// (num_tokens, num_heads, rot_dim, interleaved)
class RopeTest : public ::testing::TestWithParam<std::tuple<int, int, int, bool>> {};

TEST_P(RopeTest, MatchesDirectFormula) {
  const auto [num_tokens, num_heads, rot_dim, interleaved] = GetParam();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int max_position = 512, offset = 5, head_dim = offset + rot_dim + 3;
  const int64_t head_stride = head_dim, token_stride = num_heads * head_dim + 2;
  const double base = 10000.0, attention_factor = 1.25;
  const int half = rot_dim / 2;
  std::vector<float> cos_sin(static_cast<size_t>(max_position) * rot_dim);
  for (int pos = 0; pos < max_position; ++pos)
    for (int i = 0; i < half; ++i) {
      const double angle = pos * std::pow(base, -2.0 * i / rot_dim);
      cos_sin[pos * rot_dim + i] = static_cast<float>(std::cos(angle) * attention_factor);
      cos_sin[pos * rot_dim + half + i] = static_cast<float>(std::sin(angle) * attention_factor);
    }
  auto x = RandomVector(num_tokens * token_stride, seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> positions(num_tokens);
  for (auto& pos : positions) pos = static_cast<int32_t>(rng() % max_position);
  std::vector<float> want = x;
  for (int t = 0; t < num_tokens; ++t)
    for (int h = 0; h < num_heads; ++h) {
      const int64_t base_idx = t * token_stride + h * head_stride + offset;
      for (int i = 0; i < half; ++i) {
        const double angle = positions[t] * std::pow(base, -2.0 * i / rot_dim);
        const double c = std::cos(angle) * attention_factor, s = std::sin(angle) * attention_factor;
        const int64_t ia = base_idx + (interleaved ? 2 * i : i);
        const int64_t ib = base_idx + (interleaved ? 2 * i + 1 : i + half);
        want[ia] = static_cast<float>(x[ia] * c - x[ib] * s);
        want[ib] = static_cast<float>(x[ib] * c + x[ia] * s);
      }
    }
  RopeParams p;
  p.num_tokens = num_tokens; p.num_heads = num_heads; p.rot_dim = rot_dim;
  p.x = x.data(); p.token_stride = token_stride; p.head_stride = head_stride; p.offset = offset;
  p.positions = positions.data(); p.cos_sin = cos_sin.data(); p.max_position = max_position;
  p.interleaved = interleaved;
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  // Untouched elements stay bit-identical; rotated ones match the formula.
  EXPECT_LT(RelativeError(x, want), 1e-6);
  for (int t = 0; t < num_tokens; ++t)
    for (int h = 0; h < num_heads; ++h)
      for (int d = 0; d < head_dim; ++d) {
        if (d >= offset && d < offset + rot_dim) continue;
        const int64_t i = t * token_stride + h * head_stride + d;
        ASSERT_EQ(x[i], want[i]);
      }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Combine(::testing::Values(1, 37), ::testing::Values(1, 4, 16),
                                            ::testing::Values(2, 16, 64), ::testing::Bool()));

TEST(RopeValidation, NamesBadValues) {
  std::vector<float> x(64), cs(64 * 4);
  std::vector<int32_t> pos = {70};
  RopeParams p;
  p.num_tokens = 1; p.num_heads = 1; p.rot_dim = 3; p.x = x.data(); p.positions = pos.data();
  p.cos_sin = cs.data(); p.max_position = 64;
  auto st = Rope(p, KernelContext{});
  EXPECT_NE(st.message().find("rot_dim=3"), std::string::npos) << st.message();
  p.rot_dim = 4;
  st = Rope(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("positions[0]=70"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
