// The CUDA small-M GEMM (gemm_small_m.h) against the CPU reference: m = 1..16 tokens, odd n,
// k from one chunk to V3's 7168, bias, beta, f32 output, strided batches, the second output and
// the SiLU-and-mul epilogue. Operands are rounded to bf16 on the host so both sides multiply
// the same values; outputs are poisoned (NaN) first, and the padding between rows must keep
// its poison. Also: bitwise determinism, and the paths taken or refused.
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm/api.h"
#include "kernels/gemm/gemm_small_m.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr float kBf16Bound = 1e-2f;  // ||out - ref|| / ||ref|| of a bf16 output
constexpr float kF32Bound = 2e-3f;

bool SmallMRuns() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  return major >= 9;
}

struct Case {
  int m, n, k, batch;
  bool bias;
  float beta;
  bool c_f32;
};

// Values of C's rows [0, cols) of every (batch, row); the rest must keep `pad`'s bytes.
struct Written {
  std::vector<float> values;
  int64_t pad_changed = 0;
};

Written Gather(const std::vector<float>& c, const std::vector<float>& before, int batch, int m,
               int cols, int64_t ldc, int64_t stride_c) {
  Written w;
  for (int b = 0; b < batch; ++b) {
    for (int r = 0; r < m; ++r) {
      for (int64_t j = 0; j < ldc; ++j) {
        const int64_t at = b * stride_c + r * ldc + j;
        if (j < cols) {
          w.values.push_back(c[at]);
        } else if (std::memcmp(&c[at], &before[at], sizeof(float)) != 0) {
          ++w.pad_changed;
        }
      }
    }
  }
  return w;
}

class GemmSmallMTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmSmallMTest, MatchesCpu) {
  if (!SmallMRuns()) GTEST_SKIP() << "the small-M kernel needs sm_90";
  const Case cs = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " m=" << cs.m << " n=" << cs.n
                                    << " k=" << cs.k << " batch=" << cs.batch);
  const int64_t lda = cs.k + 8, ldb = cs.k + 16, ldc = cs.n + 3;
  const int64_t sa = cs.m * lda + 24, sb = cs.n * ldb + 8, sc = cs.m * ldc + 5;
  auto a = testing::RandomVector(cs.batch * sa, seed);
  auto b = testing::RandomVector(cs.batch * sb, seed + 1, -0.1f, 0.1f);
  auto bias = testing::RandomVector(cs.n, seed + 2);
  auto c0 = testing::RandomVector(cs.batch * sc, seed + 3);
  testing::RoundToBf16(a); testing::RoundToBf16(b); testing::RoundToBf16(bias);
  if (!cs.c_f32) testing::RoundToBf16(c0);
  GemmParams p;
  p.m = cs.m; p.n = cs.n; p.k = cs.k; p.batch = cs.batch;
  p.lda = lda; p.stride_a = sa; p.ldb = ldb; p.stride_b = sb; p.ldc = ldc; p.stride_c = sc;
  p.alpha = 0.75f; p.beta = cs.beta;
  std::vector<float> want = c0;
  p.a = a.data(); p.b = b.data(); p.c = want.data(); p.bias = cs.bias ? bias.data() : nullptr;
  ASSERT_TRUE(Gemm(p, KernelContext{}).ok());

  // beta = 0: every element poisoned (padding included); else C as it was, padding poisoned.
  std::vector<float> c_init = c0;
  for (int64_t i = 0; i < static_cast<int64_t>(c_init.size()); ++i) {
    const int64_t j = (i % sc) % ldc;
    if (cs.beta == 0.0f || j >= cs.n || i % sc >= cs.m * ldc) c_init[i] = testing::kPoison;
  }
  auto d_a = testing::ToDeviceBf16(a), d_b = testing::ToDeviceBf16(b);
  auto d_bias = cs.c_f32 ? testing::ToDevice(bias) : testing::ToDeviceBf16(bias);
  auto d_c = cs.c_f32 ? testing::ToDevice(c_init) : testing::ToDeviceBf16(c_init);
  GemmParams g = p;
  g.dtype = DType::kBF16; g.c_f32 = cs.c_f32; g.path = GemmPath::kSmallM;
  g.a = d_a.get(); g.b = d_b.get(); g.c = d_c.get(); g.bias = cs.bias ? d_bias.get() : nullptr;
  ASSERT_TRUE(GemmRunsSmallM(g, Backend::kCuda));
  const absl::Status st = Gemm(g, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st.message();
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got = cs.c_f32 ? testing::ToHost<float>(d_c, c_init.size())
                            : testing::ToHostBf16(d_c, c_init.size());
  const std::vector<float> before = cs.c_f32 ? c_init : testing::FromBf16(testing::ToBf16(c_init));
  const Written out = Gather(got, before, cs.batch, cs.m, cs.n, ldc, sc);
  const Written ref = Gather(want, want, cs.batch, cs.m, cs.n, ldc, sc);
  EXPECT_EQ(out.pad_changed, 0) << "elements outside C's columns were written";
  EXPECT_LE(testing::RelativeError(out.values, ref.values), cs.c_f32 ? kF32Bound : kBf16Bound);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmSmallMTest,
    ::testing::Values(Case{1, 1, 8, 1, false, 0.0f, false},        // one row, one 8-wide piece
                      Case{1, 17, 40, 1, true, 0.0f, false},       // K tail inside a chunk
                      Case{2, 200, 264, 1, false, 1.0f, false},    // accumulate
                      Case{3, 577, 2048, 1, true, 0.0f, true},     // f32 out + f32 bias
                      Case{4, 129, 7168, 1, false, 0.0f, false},   // K split over a cluster
                      Case{5, 4099, 512, 1, true, 0.5f, false},
                      Case{7, 64, 2048, 1, false, 0.0f, true},     // router-shaped
                      Case{8, 3072, 2048, 1, false, 0.0f, false},  // 8 tokens: one n8 tile
                      Case{9, 1000, 1536, 1, true, 0.0f, false},   // two n8 tiles
                      Case{13, 31, 96, 1, false, 1.0f, true},
                      Case{16, 2048, 1408, 1, false, 0.0f, false},
                      Case{16, 2500, 64, 1, true, 0.0f, false},
                      Case{1, 128, 512, 16, false, 0.0f, false},   // W_UV: per-head batches
                      Case{6, 72, 136, 3, true, 1.0f, false},
                      Case{16, 33, 256, 5, false, 0.0f, true}));

// Every (m, n) of one K: the token and row tails in every combination.
class GemmSmallMRowsTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GemmSmallMRowsTest, EveryTokenCount) {
  if (!SmallMRuns()) GTEST_SKIP() << "the small-M kernel needs sm_90";
  const auto [m, n] = GetParam();
  const int k = 328;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " m=" << m << " n=" << n);
  auto a = testing::RandomVector(static_cast<size_t>(m) * k, seed);
  auto b = testing::RandomVector(static_cast<size_t>(n) * k, seed + 1);
  testing::RoundToBf16(a); testing::RoundToBf16(b);
  std::vector<float> want(static_cast<size_t>(m) * n);
  GemmParams p;
  p.m = m; p.n = n; p.k = k; p.lda = k; p.ldb = k; p.ldc = n;
  p.a = a.data(); p.b = b.data(); p.c = want.data();
  ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
  auto d_a = testing::ToDeviceBf16(a), d_b = testing::ToDeviceBf16(b);
  auto d_c = testing::PoisonedF32(want.size());
  GemmParams g = p;
  g.dtype = DType::kBF16; g.c_f32 = true; g.path = GemmPath::kSmallM;
  g.a = d_a.get(); g.b = d_b.get(); g.c = d_c.get();
  ASSERT_TRUE(Gemm(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_LE(testing::RelativeError(testing::ToHost<float>(d_c, want.size()), want), kF32Bound);
}

INSTANTIATE_TEST_SUITE_P(Tails, GemmSmallMRowsTest,
                         ::testing::Combine(::testing::Range(1, 17), ::testing::Values(5, 48)));

// q_proj | kv_a_proj_with_mqa as one GEMM: columns before c2_begin to c, the rest to c2, on
// the small-M kernel and (m = 40) on cuBLASLt's two calls.
class GemmSecondOutputTest : public ::testing::TestWithParam<int> {};

TEST_P(GemmSecondOutputTest, SplitsColumns) {
  const int m = GetParam(), n1 = 200, n2 = 72, n = n1 + n2, k = 256;
  if (m <= kGemmSmallMMaxRows && !SmallMRuns()) GTEST_SKIP() << "the small-M kernel needs sm_90";
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " m=" << m);
  auto a = testing::RandomVector(static_cast<size_t>(m) * k, seed);
  auto b = testing::RandomVector(static_cast<size_t>(n) * k, seed + 1);
  auto bias = testing::RandomVector(n, seed + 2);
  testing::RoundToBf16(a); testing::RoundToBf16(b); testing::RoundToBf16(bias);
  std::vector<float> want(static_cast<size_t>(m) * n);  // one [m, n] product, split below
  GemmParams p;
  p.m = m; p.n = n; p.k = k; p.lda = k; p.ldb = k; p.ldc = n;
  p.a = a.data(); p.b = b.data(); p.c = want.data(); p.bias = bias.data();
  ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
  auto d_a = testing::ToDeviceBf16(a), d_b = testing::ToDeviceBf16(b);
  auto d_bias = testing::ToDeviceBf16(bias);
  auto d_c1 = testing::PoisonedBf16(static_cast<size_t>(m) * n1);
  auto d_c2 = testing::PoisonedBf16(static_cast<size_t>(m) * n2);
  GemmParams g = p;
  g.dtype = DType::kBF16; g.a = d_a.get(); g.b = d_b.get(); g.bias = d_bias.get();
  g.c = d_c1.get(); g.ldc = n1; g.c2 = d_c2.get(); g.c2_begin = n1; g.ldc2 = n2;
  // kAuto takes the fused form on the small-M kernel up to kGemmSmallMAutoMaxRows tokens.
  EXPECT_EQ(GemmRunsSmallM(g, Backend::kCuda), m <= gemm_cuda::kGemmSmallMAutoMaxRows);
  const absl::Status st = Gemm(g, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st.message();
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got1 = testing::ToHostBf16(d_c1, static_cast<size_t>(m) * n1);
  const auto got2 = testing::ToHostBf16(d_c2, static_cast<size_t>(m) * n2);
  std::vector<float> got(want.size());
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      got[static_cast<size_t>(r) * n + j] =
          j < n1 ? got1[static_cast<size_t>(r) * n1 + j] : got2[static_cast<size_t>(r) * n2 + j - n1];
    }
  }
  EXPECT_LE(testing::RelativeError(got, want), kBf16Bound);
}

INSTANTIATE_TEST_SUITE_P(Rows, GemmSecondOutputTest, ::testing::Values(1, 4, 16, 40));

// Gated MLP gate/up with SiLU-and-mul fused, against the CPU's epilogue (f32 products; the
// GPU rounds them to bf16 first, as an unfused GEMM would).
class GemmSiluMulTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GemmSiluMulTest, MatchesCpu) {
  if (!SmallMRuns()) GTEST_SKIP() << "the small-M kernel needs sm_90";
  const auto [m, inter] = GetParam();
  const int n = 2 * inter, k = 512;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " m=" << m << " inter=" << inter);
  auto a = testing::RandomVector(static_cast<size_t>(m) * k, seed);
  auto b = testing::RandomVector(static_cast<size_t>(n) * k, seed + 1, -0.2f, 0.2f);
  testing::RoundToBf16(a); testing::RoundToBf16(b);
  const int64_t ldc = inter + 4;
  std::vector<float> want(static_cast<size_t>(m) * ldc, 0.0f);
  GemmParams p;
  p.m = m; p.n = n; p.k = k; p.lda = k; p.ldb = k; p.ldc = ldc;
  p.a = a.data(); p.b = b.data(); p.c = want.data(); p.epilogue = GemmEpilogue::kSiluMul;
  ASSERT_TRUE(Gemm(p, KernelContext{}).ok());
  auto d_a = testing::ToDeviceBf16(a), d_b = testing::ToDeviceBf16(b);
  auto d_c = testing::PoisonedBf16(want.size());
  GemmParams g = p;
  g.dtype = DType::kBF16; g.a = d_a.get(); g.b = d_b.get(); g.c = d_c.get();
  g.path = GemmPath::kSmallM;
  ASSERT_TRUE(GemmRunsSmallM(g, Backend::kCuda));
  ASSERT_TRUE(Gemm(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got_all = testing::ToHostBf16(d_c, want.size());
  std::vector<float> got, ref;
  int64_t pad_written = 0;
  for (int r = 0; r < m; ++r) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float v = got_all[r * ldc + j];
      if (j >= inter) {
        pad_written += std::isnan(v) ? 0 : 1;
        continue;
      }
      got.push_back(v);
      ref.push_back(want[r * ldc + j]);
    }
  }
  EXPECT_EQ(pad_written, 0);
  EXPECT_LE(testing::RelativeError(got, ref), kBf16Bound);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmSiluMulTest,
                         ::testing::Combine(::testing::Values(1, 3, 8, 11, 16),
                                            ::testing::Values(4, 37, 1408)));

// Same inputs, same bits: twice on one stream, once on another.
TEST(GemmSmallMDeterminism, RunsAreBitwiseEqual) {
  if (!SmallMRuns()) GTEST_SKIP() << "the small-M kernel needs sm_90";
  const int m = 3, n = 2048, k = 7168;  // a cluster-split K (the reduction order is fixed)
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto d_a = testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(m) * k, seed));
  auto d_b = testing::ToDeviceBf16(
      testing::RandomVector(static_cast<size_t>(n) * k, seed + 1, -0.05f, 0.05f));
  testing::DeviceBuffer d_c(static_cast<size_t>(m) * n * 2);
  GemmParams g;
  g.dtype = DType::kBF16; g.m = m; g.n = n; g.k = k; g.a = d_a.get(); g.lda = k;
  g.b = d_b.get(); g.ldb = k; g.c = d_c.get(); g.ldc = n; g.path = GemmPath::kSmallM;
  cudaStream_t other = nullptr;
  MLASERVE_CUDA_ASSERT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  std::vector<uint16_t> got[3];
  for (int run = 0; run < 3; ++run) {
    MLASERVE_CUDA_ASSERT(cudaMemset(d_c.get(), 0xff, d_c.bytes()));
    ASSERT_TRUE(Gemm(g, KernelContext{Backend::kCuda, run == 2 ? other : nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    got[run] = testing::ToHost<uint16_t>(d_c, static_cast<size_t>(m) * n);
  }
  MLASERVE_CUDA_ASSERT(cudaStreamDestroy(other));
  EXPECT_TRUE(got[0] == got[1]);
  EXPECT_TRUE(got[0] == got[2]);
}

// The launch choices (SmallMOptions): the weight prefetch and the early weight loads before the
// PDL wait change no bit (they only move loads earlier); capping the K split changes the summation order only (bf16 bound against
// the default plan). Shapes: o_proj (cluster split), the SiLU epilogue, a strided batch (W_UV),
// a weight past the prefetch budget (only the first chunks of each CTA are prefetched), and long
// K slices (many groups of loads a warp).
TEST(GemmSmallMOptions, PrefetchChangesNoBitAndSplitCapsAgree) {
  if (!SmallMRuns()) GTEST_SKIP() << "the small-M kernel needs sm_90";
  struct Shape { int m, n, k, batch; GemmEpilogue epilogue; };
  const Shape shapes[] = {{1, 2048, 2048, 1, GemmEpilogue::kNone},
                          {5, 5632, 2048, 1, GemmEpilogue::kSiluMul},
                          {3, 128, 512, 16, GemmEpilogue::kNone},
                          {2, 12288, 2048, 1, GemmEpilogue::kNone},
                          {1, 1024, 16384, 1, GemmEpilogue::kNone},  // long K: many groups a warp
                          {11, 512, 8200, 1, GemmEpilogue::kNone}};  // 2 token tiles, a K tail
  for (const Shape& sh : shapes) {
    const uint64_t seed = testing::FreshSeed();
    SCOPED_TRACE(::testing::Message() << "seed=" << seed << " m=" << sh.m << " n=" << sh.n
                                      << " k=" << sh.k << " batch=" << sh.batch);
    const bool silu = sh.epilogue == GemmEpilogue::kSiluMul;
    const int cols = silu ? sh.n / 2 : sh.n;
    const size_t out_n = static_cast<size_t>(sh.batch) * sh.m * cols;
    auto d_a = testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(sh.batch) * sh.m * sh.k, seed));
    auto d_b = testing::ToDeviceBf16(
        testing::RandomVector(static_cast<size_t>(sh.batch) * sh.n * sh.k, seed + 1, -0.05f, 0.05f));
    GemmParams g;
    g.dtype = DType::kBF16; g.m = sh.m; g.n = sh.n; g.k = sh.k; g.batch = sh.batch;
    g.a = d_a.get(); g.lda = sh.k; g.stride_a = static_cast<int64_t>(sh.m) * sh.k;
    g.b = d_b.get(); g.ldb = sh.k; g.stride_b = static_cast<int64_t>(sh.n) * sh.k;
    g.ldc = cols; g.stride_c = static_cast<int64_t>(sh.m) * cols; g.epilogue = sh.epilogue;
    ASSERT_EQ(gemm_cuda::SmallMRefusal(g), nullptr);
    const gemm_cuda::SmallMOptions all{8, true, int64_t{1} << 40};  // prefetch whatever the size
    EXPECT_GT(gemm_cuda::SmallMLaunchShape(g, all).prefetch_chunks, 0);
    EXPECT_EQ(gemm_cuda::SmallMLaunchShape(g, {8, false}).prefetch_chunks, 0);
    auto run = [&](const gemm_cuda::SmallMOptions& o) {
      auto d_c = testing::PoisonedBf16(out_n);
      GemmParams q = g;
      q.c = d_c.get();
      EXPECT_TRUE(gemm_cuda::LaunchSmallM(q, nullptr, o).ok());
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return testing::ToHost<uint16_t>(d_c, out_n);
    };
    const std::vector<uint16_t> base = run(all);
    EXPECT_EQ(testing::CountNan(testing::FromBf16(base)), 0u);
    EXPECT_TRUE(run({8, false}) == base) << "the prefetch changed the result";
    EXPECT_TRUE(run({8, false, 0, false}) == base) << "the early weight loads changed the result";
    EXPECT_TRUE(run({}) == base) << "the default prefetch changed the result";
    for (const int cap : {1, 2, 4}) {
      EXPECT_LE(testing::RelativeError(testing::FromBf16(run({cap, true})), testing::FromBf16(base)),
                kBf16Bound) << "max_splits " << cap;
    }
  }
}

// What the dispatcher does with shapes the kernel does not take: kAuto falls back to
// cuBLASLt, kSmallM and the SiLU epilogue (which has no fallback) are refused by name; and
// kAuto's measured cuts (gemm_small_m.h): V2-Lite's o_proj, router and W_UV per head run on the
// small-M kernel; V3's W_UK^T per head (many waves of 4-chunk CTAs) and plain products of weights
// above 128 MiB (LM heads) on cuBLASLt.
TEST(GemmSmallMPaths, FallBackOrRefuse) {
  std::vector<uint16_t> host(64 * 64, 0x3f80);  // 1.0
  auto buf = testing::ToDevice(host);
  auto out = testing::PoisonedF32(64 * 64);
  GemmParams g;
  g.dtype = DType::kBF16; g.c_f32 = true; g.n = 16; g.k = 64; g.lda = 64; g.ldb = 64;
  g.ldc = 64; g.a = buf.get(); g.b = buf.get(); g.c = out.get();
  g.m = kGemmSmallMMaxRows + 1;  // too many tokens
  EXPECT_FALSE(GemmRunsSmallM(g, Backend::kCuda));
  EXPECT_FALSE(GemmRunsSmallM(g, Backend::kCpu));
  EXPECT_TRUE(Gemm(g, KernelContext{Backend::kCuda, nullptr}).ok());  // cuBLASLt
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(testing::ToHost<float>(out, 1)[0], 64.0f);
  g.path = GemmPath::kSmallM;
  absl::Status st = Gemm(g, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("m=17"), std::string::npos) << st.message();
  g.path = GemmPath::kAuto;
  g.epilogue = GemmEpilogue::kSiluMul;
  st = Gemm(g, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("SiLU"), std::string::npos) << st.message();
  g.m = 2;
  g.epilogue = GemmEpilogue::kNone;
  g.k = 56;
  g.ldb = 60;  // rows not 16-byte aligned: kAuto falls back
  EXPECT_FALSE(GemmRunsSmallM(g, Backend::kCuda));
  EXPECT_TRUE(Gemm(g, KernelContext{Backend::kCuda, nullptr}).ok());
  g.path = GemmPath::kCublasLt;
  g.k = 64;
  g.ldb = 64;
  EXPECT_FALSE(GemmRunsSmallM(g, Backend::kCuda));
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  if (!SmallMRuns()) return;
  g.path = GemmPath::kAuto;
  g.k = 2048; g.lda = 2048; g.ldb = 2048; g.c_f32 = false;
  g.n = 2048;  // o_proj
  EXPECT_TRUE(GemmRunsSmallM(g, Backend::kCuda));
  g.n = 64;  // router
  EXPECT_TRUE(GemmRunsSmallM(g, Backend::kCuda));
  g.n = 65536;  // 65536 x 2048 bf16 = 256 MiB, over kAutoMaxWeightMiB (128): cuBLASLt
  EXPECT_FALSE(GemmRunsSmallM(g, Backend::kCuda));
  g.n = 102400;  // V2-Lite's LM head, 400 MiB
  EXPECT_FALSE(GemmRunsSmallM(g, Backend::kCuda));
  g.epilogue = GemmEpilogue::kSiluMul;  // a fused form cuBLASLt has not: stays, whatever its size
  EXPECT_TRUE(GemmRunsSmallM(g, Backend::kCuda));
  g.epilogue = GemmEpilogue::kNone;
  g.n = 32768;  // 128 MiB, at the cut: stays
  EXPECT_TRUE(GemmRunsSmallM(g, Backend::kCuda));
  GemmParams heads = g;  // per-head strided batches
  heads.n = 128; heads.k = 512; heads.lda = heads.ldb = 512; heads.batch = 16;
  heads.stride_a = 512; heads.stride_b = int64_t{128} * 512; heads.stride_c = 128;
  EXPECT_TRUE(GemmRunsSmallM(heads, Backend::kCuda));  // V2-Lite W_UV
  heads.n = 512; heads.k = 128; heads.lda = heads.ldb = 128; heads.batch = 128;
  heads.stride_a = 128; heads.stride_b = int64_t{512} * 128; heads.stride_c = 512;
  EXPECT_FALSE(GemmRunsSmallM(heads, Backend::kCuda));  // V3 W_UK^T
  g.m = 9;  // more tokens than kAuto sends
  EXPECT_FALSE(GemmRunsSmallM(g, Backend::kCuda));
}

}  // namespace
}  // namespace mlaserve::kernels
