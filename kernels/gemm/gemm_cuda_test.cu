// gemm CUDA (cuBLASLt) vs the CPU reference: bf16 operands rounded on the host so both sides
// multiply the same values; bf16 out within 1e-2, f32 out (c_f32, dtype f32) much tighter.
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// (m, n, k, batch, b_transposed, bias, beta, c_f32)
using Case = std::tuple<int, int, int, int, bool, bool, float, bool>;
class GemmCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmCudaTest, MatchesCpu) {
  const auto [m, n, k, batch, bt, with_bias, beta, c_f32] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int64_t lda = k + 8, ldb = bt ? k + 16 : n + 8, ldc = n + 8;
  const int64_t sa = m * lda, sb = (bt ? n : k) * ldb, sc = m * ldc;
  auto a = testing::RandomVector(batch * sa, seed);
  auto b = testing::RandomVector(batch * sb, seed + 1);
  auto c0 = testing::RandomVector(batch * sc, seed + 2);
  auto bias = testing::RandomVector(n, seed + 3);
  testing::RoundToBf16(a); testing::RoundToBf16(b); testing::RoundToBf16(bias);
  if (!c_f32) testing::RoundToBf16(c0);
  GemmParams p;
  p.dtype = DType::kF32; p.m = m; p.n = n; p.k = k; p.batch = batch;
  p.lda = lda; p.stride_a = sa; p.ldb = ldb; p.stride_b = sb; p.b_transposed = bt;
  p.ldc = ldc; p.stride_c = sc; p.alpha = 0.75f; p.beta = beta;
  std::vector<float> want = c0;
  p.a = a.data(); p.b = b.data(); p.c = want.data(); p.bias = with_bias ? bias.data() : nullptr;
  ASSERT_TRUE(Gemm(p, KernelContext{}).ok());

  auto d_a = testing::ToDeviceBf16(a), d_b = testing::ToDeviceBf16(b);
  auto d_bias = c_f32 ? testing::ToDevice(bias) : testing::ToDeviceBf16(bias);
  // Poison every element beta does not read (between rows), keep C where it does.
  std::vector<float> c_init = c0;
  if (beta == 0.0f) testing::Poison(c_init);
  auto d_c = c_f32 ? testing::ToDevice(c_init) : testing::ToDeviceBf16(c_init);
  GemmParams g = p;
  g.dtype = DType::kBF16; g.c_f32 = c_f32; g.a = d_a.get(); g.b = d_b.get(); g.c = d_c.get();
  g.bias = with_bias ? d_bias.get() : nullptr;
  ASSERT_TRUE(Gemm(g, KernelContext{Backend::kCuda, nullptr}).ok());
  ASSERT_TRUE(Gemm(g, KernelContext{Backend::kCuda, nullptr}).ok());  // again: the cached plan
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  if (beta != 0.0f) {  // the second call accumulated again: so does the expectation
    std::vector<float> twice = want;
    p.c = twice.data();
    ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
    want = twice;
  }
  const auto got = c_f32 ? testing::ToHost<float>(d_c, c_init.size()) : testing::ToHostBf16(d_c, c_init.size());
  std::vector<float> got_v, want_v;
  for (int i = 0; i < batch; ++i)
    for (int r = 0; r < m; ++r)
      for (int j = 0; j < n; ++j) {
        const int64_t at = i * sc + r * ldc + j;
        got_v.push_back(got[at]);
        want_v.push_back(want[at]);
      }
  EXPECT_LE(testing::RelativeError(got_v, want_v), c_f32 ? 2e-3 : 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmCudaTest,
    ::testing::Values(Case{1, 64, 64, 1, true, false, 0.0f, false},
                      Case{7, 200, 96, 1, true, true, 0.0f, false},
                      Case{128, 512, 1024, 1, true, true, 0.0f, true},
                      Case{33, 129, 72, 3, false, false, 0.0f, false},
                      Case{64, 128, 64, 16, true, false, 0.0f, false},
                      Case{5, 96, 160, 4, false, true, 1.0f, false},
                      Case{300, 1536, 512, 1, true, false, 0.5f, true},
                      Case{2, 32000, 256, 1, true, false, 0.0f, true}));

TEST(GemmCudaF32Test, F32OperandsMatchTightly) {
  const int m = 37, n = 91, k = 130;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto a = testing::RandomVector(m * k, seed), b = testing::RandomVector(n * k, seed + 1);
  std::vector<float> want(m * n);
  GemmParams p;
  p.m = m; p.n = n; p.k = k; p.lda = k; p.ldb = k; p.ldc = n; p.a = a.data(); p.b = b.data();
  p.c = want.data();
  ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
  auto d_a = testing::ToDevice(a), d_b = testing::ToDevice(b);
  auto d_c = testing::PoisonedF32(m * n);
  p.a = d_a.get(); p.b = d_b.get(); p.c = d_c.get();
  ASSERT_TRUE(Gemm(p, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_LE(testing::RelativeError(testing::ToHost<float>(d_c, m * n), want), 1e-5);
}

// Determinism: cuBLASLt's heuristic picks one algorithm per (shape, alignment) and every
// reduction scheme it may pick for split-K is ordered (in-place with ordering counters, or a
// separate reduction pass), so results are run-to-run reproducible (cuBLAS guide, "Results
// reproducibility": same toolkit, same GPU model and SM count, one stream per workspace).
// Decode shapes (small m, large k) are where split-K gets picked. Each shape runs twice on
// the default stream and once on a fresh stream, whose new handle queries the heuristic again
// (as a second process would): all three results must be the same bytes.
// (m, n, k, beta, c_f32)
using DetCase = std::tuple<int, int, int, float, bool>;
class GemmCudaDeterminismTest : public ::testing::TestWithParam<DetCase> {};

TEST_P(GemmCudaDeterminismTest, RunsAndFreshHandlesAreBitwiseEqual) {
  const auto [m, n, k, beta, c_f32] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto a = testing::RandomVector(static_cast<size_t>(m) * k, seed);
  auto b = testing::RandomVector(static_cast<size_t>(n) * k, seed + 1, -0.05f, 0.05f);
  auto c0 = testing::RandomVector(static_cast<size_t>(m) * n, seed + 2);
  auto d_a = testing::ToDeviceBf16(a), d_b = testing::ToDeviceBf16(b);
  const size_t c_bytes = static_cast<size_t>(m) * n * (c_f32 ? 4 : 2);
  testing::DeviceBuffer d_c(c_bytes);
  GemmParams g;
  g.dtype = DType::kBF16; g.c_f32 = c_f32; g.m = m; g.n = n; g.k = k;
  g.a = d_a.get(); g.lda = k; g.b = d_b.get(); g.ldb = k; g.b_transposed = true;
  g.c = d_c.get(); g.ldc = n; g.beta = beta;
  const auto c_init = c_f32 ? testing::ToDevice(c0) : testing::ToDeviceBf16(c0);
  cudaStream_t fresh = nullptr;
  MLASERVE_CUDA_ASSERT(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking));
  std::vector<uint8_t> got[3];
  for (int run = 0; run < 3; ++run) {
    void* stream = run == 2 ? fresh : nullptr;
    MLASERVE_CUDA_ASSERT(cudaMemcpy(d_c.get(), c_init.get(), c_bytes, cudaMemcpyDeviceToDevice));
    ASSERT_TRUE(Gemm(g, KernelContext{Backend::kCuda, stream}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    got[run] = testing::ToHost<uint8_t>(d_c, c_bytes);
  }
  MLASERVE_CUDA_ASSERT(cudaStreamDestroy(fresh));
  EXPECT_TRUE(got[0] == got[1]) << "two runs on one stream differ";
  EXPECT_TRUE(got[0] == got[2]) << "a fresh handle (new heuristic query) gives different bytes";
}

INSTANTIATE_TEST_SUITE_P(DecodeShapes, GemmCudaDeterminismTest,
                         ::testing::Values(DetCase{1, 2048, 16384, 0.0f, false},
                                           DetCase{4, 7168, 2048, 0.0f, false},
                                           DetCase{2, 1536, 7168, 1.0f, false},  // accumulate
                                           DetCase{3, 32000, 1024, 0.0f, true},  // LM head
                                           DetCase{16, 256, 7168, 0.0f, true}));  // router

}  // namespace
}  // namespace mlaserve::kernels
