// kv_pack CUDA vs the CPU reference: a pure data movement, so results must match exactly;
// covers the vectorised path (widths multiples of 8) and the element path (odd widths).
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_pack/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// (num_tokens, num_heads, nope_dim, rope_dim, v_dim, with_v)
class KvPackCudaTest : public ::testing::TestWithParam<std::tuple<int, int, int, int, int, bool>> {};

TEST_P(KvPackCudaTest, MatchesCpuExactly) {
  const auto [tokens, heads, nope, rope, vd, with_v] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int64_t pe_stride = rope + (rope % 8 == 0 ? 8 : 3);
  auto kv = testing::RandomVector(static_cast<size_t>(tokens) * heads * (nope + vd), seed);
  auto k_pe = testing::RandomVector(static_cast<size_t>(tokens) * pe_stride, seed + 1);
  testing::RoundToBf16(kv);
  testing::RoundToBf16(k_pe);
  const size_t nk = static_cast<size_t>(tokens) * heads * (nope + rope);
  const size_t nv = static_cast<size_t>(tokens) * heads * vd;
  std::vector<float> want_k(nk), want_v(nv);
  KvPackParams c;
  c.dtype = DType::kF32; c.num_tokens = tokens; c.num_heads = heads; c.nope_dim = nope;
  c.rope_dim = rope; c.v_dim = vd; c.kv = kv.data(); c.k_pe = k_pe.data(); c.k_pe_stride = pe_stride;
  c.k = want_k.data(); c.v = want_v.data();
  ASSERT_TRUE(KvPack(c, KernelContext{}).ok());
  auto d_kv = testing::ToDeviceBf16(kv), d_pe = testing::ToDeviceBf16(k_pe);
  auto d_k = testing::PoisonedBf16(nk), d_v = testing::PoisonedBf16(nv);
  KvPackParams g = c;
  g.dtype = DType::kBF16; g.kv = d_kv.get(); g.k_pe = d_pe.get(); g.k = d_k.get();
  g.v = with_v ? d_v.get() : nullptr;
  ASSERT_TRUE(KvPack(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(testing::ToHostBf16(d_k, nk), want_k);
  auto got_v = testing::ToHostBf16(d_v, nv);
  if (with_v) {
    EXPECT_EQ(got_v, want_v);
  } else {
    EXPECT_EQ(testing::CountNan(got_v), nv) << "v must be left untouched when null";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KvPackCudaTest,
    ::testing::Values(std::tuple{1, 1, 128, 64, 128, true}, std::tuple{333, 16, 128, 64, 128, true},
                      std::tuple{2048, 128, 128, 64, 128, true}, std::tuple{77, 16, 128, 64, 128, false},
                      std::tuple{50, 4, 32, 16, 24, true}, std::tuple{19, 3, 12, 6, 10, true}));

}  // namespace
}  // namespace mlaserve::kernels
