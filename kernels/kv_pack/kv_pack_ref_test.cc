#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_pack/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// (num_tokens, num_heads, nope_dim, rope_dim, v_dim, with_v)
class KvPackTest : public ::testing::TestWithParam<std::tuple<int, int, int, int, int, bool>> {};

TEST_P(KvPackTest, SplitsAndConcatenates) {
  const auto [num_tokens, num_heads, nope, rope, vd, with_v] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int64_t pe_stride = rope + 4;
  auto kv = testing::RandomVector(static_cast<size_t>(num_tokens) * num_heads * (nope + vd), seed);
  auto k_pe = testing::RandomVector(num_tokens * pe_stride, seed + 1);
  std::vector<float> k(static_cast<size_t>(num_tokens) * num_heads * (nope + rope));
  std::vector<float> v(static_cast<size_t>(num_tokens) * num_heads * vd);
  testing::Poison(k);
  testing::Poison(v);
  KvPackParams p;
  p.num_tokens = num_tokens; p.num_heads = num_heads; p.nope_dim = nope; p.rope_dim = rope;
  p.v_dim = vd; p.kv = kv.data(); p.k_pe = k_pe.data(); p.k_pe_stride = pe_stride;
  p.k = k.data(); p.v = with_v ? v.data() : nullptr;
  ASSERT_TRUE(KvPack(p, KernelContext{}).ok());
  for (int t = 0; t < num_tokens; ++t)
    for (int h = 0; h < num_heads; ++h) {
      const float* src = &kv[(t * num_heads + h) * (nope + vd)];
      const float* kd = &k[(t * num_heads + h) * (nope + rope)];
      for (int d = 0; d < nope; ++d) ASSERT_EQ(kd[d], src[d]);
      for (int d = 0; d < rope; ++d) ASSERT_EQ(kd[nope + d], k_pe[t * pe_stride + d]);
      for (int d = 0; d < vd; ++d) {
        const float got = v[(t * num_heads + h) * vd + d];
        if (with_v) {
          ASSERT_EQ(got, src[nope + d]);
        } else {
          ASSERT_TRUE(std::isnan(got)) << "V written although v = null";
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvPackTest,
                         ::testing::Combine(::testing::Values(1, 29), ::testing::Values(1, 16),
                                            ::testing::Values(16, 128), ::testing::Values(8, 64),
                                            ::testing::Values(16, 128), ::testing::Bool()));

}  // namespace
}  // namespace mlaserve::kernels
