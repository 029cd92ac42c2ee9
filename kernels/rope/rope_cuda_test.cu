// rope CUDA vs the CPU reference: both layouts, strided heads with an offset (the q_pe slice
// of q), bf16 within 1e-2 and f32 within 1e-6. Values outside the rotated slice stay as they were.
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/rope/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// (tokens, heads, rot_dim, interleaved, bf16)
class RopeCudaTest : public ::testing::TestWithParam<std::tuple<int, int, int, bool, bool>> {};

TEST_P(RopeCudaTest, MatchesCpu) {
  const auto [tokens, heads, rot, interleaved, bf16] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int offset = 128, head_stride = offset + rot, max_pos = 4096;
  const int64_t token_stride = static_cast<int64_t>(heads) * head_stride;
  auto x = testing::RandomVector(tokens * token_stride, seed);
  testing::RoundToBf16(x);
  std::vector<float> cos_sin(static_cast<size_t>(max_pos) * rot);
  for (int pos = 0; pos < max_pos; ++pos)
    for (int i = 0; i < rot / 2; ++i) {
      const double f = pos * std::pow(10000.0, -2.0 * i / rot);
      cos_sin[pos * rot + i] = static_cast<float>(std::cos(f) * 1.2);
      cos_sin[pos * rot + rot / 2 + i] = static_cast<float>(std::sin(f) * 1.2);
    }
  std::mt19937 rng(seed);
  std::vector<int32_t> pos(tokens);
  for (auto& v : pos) v = std::uniform_int_distribution<int>(0, max_pos - 1)(rng);
  std::vector<float> want = x;
  RopeParams p;
  p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = want.data();
  p.token_stride = token_stride; p.head_stride = head_stride; p.offset = offset;
  p.positions = pos.data(); p.cos_sin = cos_sin.data(); p.max_position = max_pos;
  p.interleaved = interleaved;
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  auto d_x = bf16 ? testing::ToDeviceBf16(x) : testing::ToDevice(x);
  auto d_pos = testing::ToDevice(pos);
  auto d_cs = testing::ToDevice(cos_sin);
  RopeParams g = p;
  g.dtype = bf16 ? DType::kBF16 : DType::kF32; g.x = d_x.get(); g.positions = d_pos.as<int32_t>();
  g.cos_sin = d_cs.as<float>();
  ASSERT_TRUE(Rope(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  auto got = bf16 ? testing::ToHostBf16(d_x, x.size()) : testing::ToHost<float>(d_x, x.size());
  EXPECT_LE(testing::RelativeError(got, want), bf16 ? 1e-2 : 1e-6);
  for (int t = 0; t < tokens; ++t)  // the nope part is untouched
    for (int j = 0; j < offset; ++j) ASSERT_EQ(got[t * token_stride + j], x[t * token_stride + j]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeCudaTest,
                         ::testing::Combine(::testing::Values(1, 300), ::testing::Values(1, 16),
                                            ::testing::Values(64, 32), ::testing::Bool(), ::testing::Bool()));

}  // namespace
}  // namespace mlaserve::kernels
