#include <cmath>
#include <tuple>
#include <vector>

#if defined(MLASERVE_KERNEL_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "gtest/gtest.h"
#include "kernels/gemm/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::FreshSeed;
using testing::RandomVector;

// (m, n, k, batch, b_transposed, with_bias, beta)
using GemmCase = std::tuple<int, int, int, int, bool, bool, float>;

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesNaiveDouble) {
  const auto [m, n, k, batch, b_transposed, with_bias, beta] = GetParam();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  // Padded leading dimensions exercise lda/ldb/ldc.
  const int64_t lda = k + 3, ldb = (b_transposed ? k : n) + 2, ldc = n + 5;
  const int64_t b_rows = b_transposed ? n : k;
  const int64_t stride_a = m * lda + 7, stride_b = b_rows * ldb + 1, stride_c = m * ldc + 4;
  const float alpha = 0.75f;
  auto a = RandomVector(batch * stride_a, seed);
  auto b = RandomVector(batch * stride_b, seed + 1);
  auto bias = RandomVector(n, seed + 2);
  auto c = RandomVector(batch * stride_c, seed + 3);
  std::vector<float> c_in = c;
  if (beta == 0.0f) testing::Poison(c);  // beta = 0 must not read C

  std::vector<float> ref(c.size());
  // Per-element magnitude sum(|a*b|) + |beta*c| + |bias|: f32 rounding error is bounded
  // relative to it, not to |result| (which can cancel to ~0 for tiny outputs).
  std::vector<double> mag(c.size(), 0.0);
  for (int bi = 0; bi < batch; ++bi) {
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double acc = 0, abs_acc = 0;
        for (int x = 0; x < k; ++x) {
          const double bv = b_transposed ? b[bi * stride_b + j * ldb + x]
                                         : b[bi * stride_b + x * ldb + j];
          acc += static_cast<double>(a[bi * stride_a + i * lda + x]) * bv;
          abs_acc += std::abs(static_cast<double>(a[bi * stride_a + i * lda + x]) * bv);
        }
        const int64_t ci = bi * stride_c + i * ldc + j;
        double r = alpha * acc + (beta != 0.0f ? beta * static_cast<double>(c_in[ci]) : 0.0);
        mag[ci] = alpha * abs_acc + (beta != 0.0f ? std::abs(beta * c_in[ci]) : 0.0);
        if (with_bias) {
          r += bias[j];
          mag[ci] += std::abs(bias[j]);
        }
        ref[ci] = static_cast<float>(r);
      }
    }
  }
  GemmParams p;
  p.m = m; p.n = n; p.k = k; p.batch = batch;
  p.a = a.data(); p.lda = lda; p.stride_a = stride_a;
  p.b = b.data(); p.ldb = ldb; p.stride_b = stride_b; p.b_transposed = b_transposed;
  p.c = c.data(); p.ldc = ldc; p.stride_c = stride_c;
  p.bias = with_bias ? bias.data() : nullptr;
  p.alpha = alpha; p.beta = beta;
  ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
  // Written elements match; padding between rows and batches is left as it was.
  for (int bi = 0; bi < batch; ++bi)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < ldc; ++j) {
        const int64_t ci = bi * stride_c + i * ldc + j;
        if (j >= n) {
          if (beta != 0.0f) ASSERT_EQ(c[ci], c_in[ci]) << "padding overwritten";
          continue;
        }
        ASSERT_LE(std::abs(c[ci] - ref[ci]), 5e-6 * mag[ci] + 1e-30)
            << "batch " << bi << " (" << i << ", " << j << ")";
      }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest,
                         ::testing::Combine(::testing::Values(1, 17), ::testing::Values(1, 64, 33),
                                            ::testing::Values(1, 48), ::testing::Values(1, 3),
                                            ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(0.0f, 0.5f)));

TEST(GemmValidation, NamesBadValues) {
  std::vector<float> buf(64);
  GemmParams p;
  p.m = 2; p.n = 4; p.k = 0; p.a = buf.data(); p.b = buf.data(); p.c = buf.data();
  p.lda = 4; p.ldb = 4; p.ldc = 4;
  auto st = Gemm(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("k=0"), std::string::npos) << st.message();
  p.k = 4; p.lda = 3;
  st = Gemm(p, KernelContext{});
  EXPECT_NE(st.message().find("lda=3"), std::string::npos) << st.message();
  p.lda = 4; p.dtype = DType::kBF16;
  st = Gemm(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bf16"), std::string::npos) << st.message();
  p.dtype = DType::kF32;
  // The CUDA backend on host pointers: a CPU-only build has no CUDA GEMM, and a CUDA build on a
  // machine without a GPU (this suite's CI) has no device; both are FAILED_PRECONDITION.
  bool has_device = false;
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  int devices = 0;
  has_device = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
#endif
  if (!has_device) {
    st = Gemm(p, KernelContext{Backend::kCuda});
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st.message();
  }
}

// A second output is exactly the two GEMMs over B's row blocks (the same sgemm calls).
TEST(GemmSecondOutput, EqualsTwoGemms) {
  const int m = 5, n1 = 12, n2 = 7, k = 9;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const bool bt : {true, false}) {
    const int n = n1 + n2;
    auto a = RandomVector(m * k, seed);
    auto b = RandomVector(n * k, seed + 1);
    auto bias = RandomVector(n, seed + 2);
    std::vector<float> c1(m * n1), c2(m * n2), want1(m * n1), want2(m * n2);
    GemmParams p;
    p.m = m; p.n = n; p.k = k; p.a = a.data(); p.lda = k; p.b = b.data();
    p.ldb = bt ? k : n; p.b_transposed = bt; p.bias = bias.data();
    p.c = c1.data(); p.ldc = n1; p.c2 = c2.data(); p.c2_begin = n1; p.ldc2 = n2;
    ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
    GemmParams first = p;
    first.n = n1; first.c = want1.data(); first.c2 = nullptr;
    ASSERT_TRUE(Gemm(first, KernelContext{}).ok());
    GemmParams second = first;
    second.n = n2; second.c = want2.data(); second.ldc = n2; second.bias = bias.data() + n1;
    second.b = b.data() + (bt ? n1 * k : n1);
    ASSERT_TRUE(Gemm(second, KernelContext{}).ok());
    EXPECT_EQ(c1, want1);
    EXPECT_EQ(c2, want2);
  }
}

// SiLU-and-mul over the stacked gate|up rows, against the naive formula in double.
TEST(GemmSiluMul, MatchesNaive) {
  const int inter = 6, n = 2 * inter, k = 11;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const int m : {1, 70}) {  // 70 rows: two of the reference's row blocks
    auto a = RandomVector(m * k, seed);
    auto b = RandomVector(n * k, seed + 1);
    const int64_t ldc = inter + 2;
    std::vector<float> c(m * ldc, 7.0f);
    GemmParams p;
    p.m = m; p.n = n; p.k = k; p.a = a.data(); p.lda = k; p.b = b.data(); p.ldb = k;
    p.c = c.data(); p.ldc = ldc; p.alpha = 0.5f; p.epilogue = GemmEpilogue::kSiluMul;
    ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
    for (int r = 0; r < m; ++r) {
      for (int j = 0; j < ldc; ++j) {
        if (j >= inter) {
          ASSERT_EQ(c[r * ldc + j], 7.0f) << "padding written";
          continue;
        }
        double g = 0, u = 0;
        for (int x = 0; x < k; ++x) {
          g += static_cast<double>(a[r * k + x]) * b[j * k + x];
          u += static_cast<double>(a[r * k + x]) * b[(inter + j) * k + x];
        }
        g *= 0.5;
        u *= 0.5;
        const double want = g / (1.0 + std::exp(-g)) * u;
        ASSERT_NEAR(c[r * ldc + j], want, 1e-5 * (1.0 + std::abs(want))) << r << ", " << j;
      }
    }
  }
}

TEST(GemmValidation, NamesBadForms) {
  std::vector<float> buf(256);
  GemmParams p;
  p.m = 2; p.n = 8; p.k = 4; p.a = buf.data(); p.b = buf.data(); p.c = buf.data();
  p.lda = 4; p.ldb = 4; p.ldc = 8;
  p.c2 = buf.data(); p.c2_begin = 8; p.ldc2 = 4;
  auto st = Gemm(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("c2_begin=8"), std::string::npos) << st.message();
  p.c2_begin = 5; p.ldc2 = 2;
  st = Gemm(p, KernelContext{});
  EXPECT_NE(st.message().find("ldc2=2"), std::string::npos) << st.message();
  p.c2 = nullptr; p.epilogue = GemmEpilogue::kSiluMul; p.beta = 1.0f;
  st = Gemm(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("SiLU"), std::string::npos) << st.message();
  p.beta = 0.0f;
  EXPECT_TRUE(Gemm(p, KernelContext{}).ok());  // ldc = 8 >= n / 2
  EXPECT_FALSE(GemmRunsSmallM(p, Backend::kCpu));
}

}  // namespace
}  // namespace mlaserve::kernels
