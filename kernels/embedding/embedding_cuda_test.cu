// embedding CUDA vs the CPU reference: a gather, so results must match exactly (vector and
// element paths).
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/embedding/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

class EmbeddingCudaTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(EmbeddingCudaTest, MatchesCpuExactly) {
  const auto [tokens, dim, vocab] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto table = testing::RandomVector(static_cast<size_t>(vocab) * dim, seed);
  testing::RoundToBf16(table);
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(tokens);
  for (auto& id : ids) id = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  std::vector<float> want(static_cast<size_t>(tokens) * dim);
  EmbeddingParams p;
  p.num_tokens = tokens; p.dim = dim; p.vocab = vocab; p.ids = ids.data(); p.table = table.data();
  p.out = want.data();
  ASSERT_TRUE(Embedding(p, KernelContext{}).ok());
  for (const bool bf16 : {true, false}) {
    auto d_ids = testing::ToDevice(ids);
    auto d_table = bf16 ? testing::ToDeviceBf16(table) : testing::ToDevice(table);
    auto d_out = bf16 ? testing::PoisonedBf16(want.size()) : testing::PoisonedF32(want.size());
    EmbeddingParams g = p;
    g.dtype = bf16 ? DType::kBF16 : DType::kF32;
    g.ids = d_ids.as<int32_t>(); g.table = d_table.get(); g.out = d_out.get();
    ASSERT_TRUE(Embedding(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(bf16 ? testing::ToHostBf16(d_out, want.size()) : testing::ToHost<float>(d_out, want.size()), want);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingCudaTest,
                         ::testing::Values(std::tuple{1, 64, 100}, std::tuple{37, 7168, 1000},
                                           std::tuple{513, 2048, 102400}, std::tuple{9, 13, 50}));

}  // namespace
}  // namespace mlaserve::kernels
