// merge_state CUDA vs the CPU reference on the same (bf16-rounded) inputs, including rows
// where one or both sides saw no key (lse = -inf), strided tokens, and the in-place form.
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/merge_state/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// (num_tokens, num_heads, head_dim, token_pad, in_place)
class MergeStateCudaTest : public ::testing::TestWithParam<std::tuple<int, int, int, int, bool>> {};

TEST_P(MergeStateCudaTest, MatchesCpuReference) {
  const auto [tokens, heads, dim, pad, in_place] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const int64_t stride = static_cast<int64_t>(heads) * dim + pad;
  const size_t n = static_cast<size_t>(tokens) * stride, rows = static_cast<size_t>(tokens) * heads;
  auto a = testing::RandomVector(n, seed + 1), b = testing::RandomVector(n, seed + 2);
  testing::RoundToBf16(a);
  testing::RoundToBf16(b);
  auto lse_a = testing::RandomVector(rows, seed + 3, -4.0f, 8.0f);
  auto lse_b = testing::RandomVector(rows, seed + 4, -4.0f, 8.0f);
  for (size_t i = 0; i < rows; ++i) {  // about 1 row in 8 without keys on one side, 1 in 64 both
    if (rng() % 8 == 0) lse_a[i] = -INFINITY;
    if (rng() % 8 == 0) lse_b[i] = -INFINITY;
  }
  // CPU reference.
  std::vector<float> want(n, 0.0f), want_lse(rows);
  MergeStateParams c;
  c.dtype = DType::kF32; c.num_tokens = tokens; c.num_heads = heads; c.head_dim = dim;
  c.out_a = a.data(); c.out_b = b.data(); c.out = want.data(); c.token_stride = stride;
  c.lse_a = lse_a.data(); c.lse_b = lse_b.data(); c.lse = want_lse.data();
  ASSERT_TRUE(MergeState(c, KernelContext{}).ok());
  // GPU: out and lse poisoned, or in place over out_a / lse_a.
  auto d_a = testing::ToDeviceBf16(a), d_b = testing::ToDeviceBf16(b);
  auto d_la = testing::ToDevice(lse_a), d_lb = testing::ToDevice(lse_b);
  auto d_out = testing::PoisonedBf16(n);
  auto d_lse = testing::PoisonedF32(rows);
  MergeStateParams g = c;
  g.dtype = DType::kBF16;
  g.out_a = d_a.get(); g.out_b = d_b.get(); g.lse_a = d_la.as<float>(); g.lse_b = d_lb.as<float>();
  g.out = in_place ? d_a.get() : d_out.get();
  g.lse = in_place ? d_la.as<float>() : d_lse.as<float>();
  ASSERT_TRUE(MergeState(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  auto got = testing::ToHostBf16(in_place ? d_a : d_out, n);
  auto got_lse = testing::ToHost<float>(in_place ? d_la : d_lse, rows);
  // Compare the row payloads (padding between tokens is not part of the output).
  std::vector<float> got_rows, want_rows;
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < heads * dim; ++i) {
      got_rows.push_back(got[t * stride + i]);
      want_rows.push_back(want[t * stride + i]);
    }
  EXPECT_EQ(testing::CountNan(got_rows), 0u);
  EXPECT_LE(testing::RelativeError(got_rows, want_rows), 1e-2);
  EXPECT_LE(testing::LseErrorOrInf(got_lse, want_lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MergeStateCudaTest,
                         ::testing::Combine(::testing::Values(1, 37, 1000), ::testing::Values(16, 128),
                                            ::testing::Values(128, 24, 512), ::testing::Values(0, 8, 3),
                                            ::testing::Bool()));

}  // namespace
}  // namespace mlaserve::kernels
