#include <algorithm>
#include <ctime>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/testing/paged.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

struct MhaShape {
  int num_heads, num_kv_heads, dqk, dv;
};

// Naive double attention for the whole ragged batch (materialises each row's scores).
void NaiveMha(const MhaPrefillParams& p, std::vector<float>& out, std::vector<float>& lse) {
  const auto* q = static_cast<const float*>(p.q);
  const auto* k = static_cast<const float*>(p.k);
  const auto* v = static_cast<const float*>(p.v);
  const int group = p.num_heads / p.num_kv_heads;
  for (int b = 0; b < p.batch; ++b) {
    const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const int lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    for (int i = 0; i < lq; ++i) {
      const int t = p.cu_seqlens_q[b] + i;
      for (int h = 0; h < p.num_heads; ++h) {
        const int kvh = h / group;
        const int visible = p.causal ? std::max(0, std::min(lk, i + lk - lq + 1)) : lk;
        std::vector<double> s(visible);
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < visible; ++j) {
          double dot = 0;
          for (int d = 0; d < p.head_dim_qk; ++d)
            dot += static_cast<double>(q[t * p.q_token_stride + h * p.q_head_stride + d]) *
                   k[(p.cu_seqlens_k[b] + j) * p.k_token_stride + kvh * p.k_head_stride + d];
          s[j] = dot * p.softmax_scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        std::vector<double> acc(p.head_dim_v, 0.0);
        for (int j = 0; j < visible; ++j) {
          const double w = std::exp(s[j] - m);
          l += w;
          for (int d = 0; d < p.head_dim_v; ++d)
            acc[d] += w * v[(p.cu_seqlens_k[b] + j) * p.v_token_stride + kvh * p.v_head_stride + d];
        }
        for (int d = 0; d < p.head_dim_v; ++d)
          out[(static_cast<size_t>(t) * p.num_heads + h) * p.head_dim_v + d] =
              visible > 0 ? static_cast<float>(acc[d] / l) : 0.0f;
        lse[t * p.num_heads + h] = visible > 0 ? static_cast<float>(m + std::log(l))
                                               : -std::numeric_limits<float>::infinity();
      }
    }
  }
}

// (shape, causal, with_prefix)
class MhaPrefillTest : public ::testing::TestWithParam<std::tuple<MhaShape, bool, bool>> {};

TEST_P(MhaPrefillTest, MatchesNaiveDouble) {
  const auto [shape, causal, with_prefix] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  // Ragged lengths 1..300; fewer tokens for the wide shapes keep the naive reference fast.
  const int max_len = shape.num_heads * (shape.dqk + shape.dv) > 2000 ? 120 : 300;
  const int batch = 3;
  std::vector<int> lq(batch), lk(batch);
  for (int b = 0; b < batch; ++b) {
    lq[b] = 1 + static_cast<int>(rng() % max_len);
    // Non-causal sequences may also have fewer keys than queries.
    const int prefix = with_prefix ? static_cast<int>(rng() % 100) : 0;
    lk[b] = causal || with_prefix ? lq[b] + prefix : 1 + static_cast<int>(rng() % max_len);
  }
  const auto cu_q = testing::CumSum(lq), cu_k = testing::CumSum(lk);
  const int total_q = cu_q[batch], total_k = cu_k[batch];
  // q has padded heads and tokens; k and v are packed like a [t, kv_head, dqk+dv] buffer.
  const int64_t q_head_stride = shape.dqk + 2;
  const int64_t q_token_stride = shape.num_heads * q_head_stride + 1;
  const int64_t kv_head_stride = shape.dqk + shape.dv;
  const int64_t kv_token_stride = shape.num_kv_heads * kv_head_stride;
  auto q = testing::RandomVector(total_q * q_token_stride, seed + 1, -2.0f, 2.0f);
  auto kv = testing::RandomVector(total_k * kv_token_stride, seed + 2, -2.0f, 2.0f);
  std::vector<float> out(static_cast<size_t>(total_q) * shape.num_heads * shape.dv);
  std::vector<float> lse(static_cast<size_t>(total_q) * shape.num_heads);
  testing::Poison(out);
  testing::Poison(lse);
  MhaPrefillParams p;
  p.batch = batch; p.num_heads = shape.num_heads; p.num_kv_heads = shape.num_kv_heads;
  p.head_dim_qk = shape.dqk; p.head_dim_v = shape.dv;
  p.q = q.data(); p.q_token_stride = q_token_stride; p.q_head_stride = q_head_stride;
  p.k = kv.data(); p.k_token_stride = kv_token_stride; p.k_head_stride = kv_head_stride;
  p.v = kv.data() + shape.dqk; p.v_token_stride = kv_token_stride; p.v_head_stride = kv_head_stride;
  p.out = out.data(); p.out_token_stride = shape.num_heads * shape.dv; p.out_head_stride = shape.dv;
  p.lse = lse.data();
  p.cu_seqlens_q = cu_q.data(); p.cu_seqlens_k = cu_k.data();
  p.max_seqlen_q = *std::max_element(lq.begin(), lq.end());
  p.max_seqlen_k = *std::max_element(lk.begin(), lk.end());
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(shape.dqk));
  p.causal = causal;
  ASSERT_TRUE(MhaPrefill(p, KernelContext{}).ok());
  std::vector<float> want_out(out.size()), want_lse(lse.size());
  NaiveMha(p, want_out, want_lse);
  EXPECT_LT(testing::RelativeError(out, want_out), 1e-5);
  // Rows that see nothing must be exactly -inf; compare the rest.
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(want_lse[i])) {
      ASSERT_EQ(lse[i], want_lse[i]) << i;
      lse[i] = want_lse[i] = 0;
    }
  }
  EXPECT_LT(testing::RelativeError(lse, want_lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MhaPrefillTest,
    ::testing::Combine(::testing::Values(MhaShape{1, 1, 192, 128}, MhaShape{4, 4, 192, 128},
                                         MhaShape{16, 16, 24, 16}, MhaShape{16, 4, 24, 16},
                                         MhaShape{4, 1, 16, 24}),
                       ::testing::Bool(), ::testing::Bool()));

// A split K (api.h's k_rope): the reference reads each head's first dims from k and the rest
// from the shared row, and gives the packed form's result (the two dot products' partial sums
// differ only in their order); k's own tail dims are NaN there, so reading them would show.
TEST(MhaPrefillSplitK, EqualsPackedK) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const bool causal : {false, true}) {
    const int heads = 4, kv_heads = 2, dqk = 40, dv = 16, rope = 8;
    const std::vector<int> lq = {1, 37, 90}, lk = {5, 37, 130};
    const auto cu_q = testing::CumSum(lq), cu_k = testing::CumSum(lk);
    const int total_q = cu_q[3], total_k = cu_k[3];
    const int64_t kv_head_stride = dqk + dv, kv_token_stride = kv_heads * kv_head_stride;
    const int64_t rope_stride = rope + 5;
    auto q = testing::RandomVector(static_cast<size_t>(total_q) * heads * dqk, seed + 1, -2.0f, 2.0f);
    auto kv = testing::RandomVector(static_cast<size_t>(total_k) * kv_token_stride, seed + 2, -2.0f, 2.0f);
    const auto k_rope = testing::RandomVector(static_cast<size_t>(total_k) * rope_stride, seed + 3, -2.0f, 2.0f);
    for (int t = 0; t < total_k; ++t) {
      for (int h = 0; h < kv_heads; ++h) {
        std::copy_n(k_rope.begin() + t * rope_stride + 3, rope, kv.begin() + t * kv_token_stride + h * kv_head_stride + dqk - rope);
      }
    }
    MhaPrefillParams p;
    p.batch = 3; p.num_heads = heads; p.num_kv_heads = kv_heads; p.head_dim_qk = dqk; p.head_dim_v = dv;
    p.q = q.data(); p.q_token_stride = heads * dqk; p.q_head_stride = dqk;
    p.k = kv.data(); p.k_token_stride = kv_token_stride; p.k_head_stride = kv_head_stride;
    p.v = kv.data() + dqk; p.v_token_stride = kv_token_stride; p.v_head_stride = kv_head_stride;
    p.out_token_stride = heads * dv; p.out_head_stride = dv;
    p.cu_seqlens_q = cu_q.data(); p.cu_seqlens_k = cu_k.data();
    p.max_seqlen_q = 90; p.max_seqlen_k = 130;
    p.softmax_scale = 0.2f;
    p.causal = causal;
    std::vector<float> packed(static_cast<size_t>(total_q) * heads * dv), split(packed.size());
    std::vector<float> packed_lse(static_cast<size_t>(total_q) * heads), split_lse(packed_lse.size());
    p.out = packed.data();
    p.lse = packed_lse.data();
    ASSERT_TRUE(MhaPrefill(p, KernelContext{}).ok());
    std::vector<float> kv_split = kv;
    for (int t = 0; t < total_k; ++t) {
      for (int h = 0; h < kv_heads; ++h) {
        std::fill_n(kv_split.begin() + t * kv_token_stride + h * kv_head_stride + dqk - rope, rope,
                    std::numeric_limits<float>::quiet_NaN());
      }
    }
    MhaPrefillParams s = p;
    s.k = kv_split.data();
    s.v = kv_split.data() + dqk;
    s.k_rope = k_rope.data() + 3;
    s.k_rope_token_stride = rope_stride;
    s.k_rope_dim = rope;
    s.out = split.data();
    s.lse = split_lse.data();
    testing::Poison(split);
    EXPECT_TRUE(MhaPrefillTakesSplitK(s, Backend::kCpu));
    ASSERT_TRUE(MhaPrefill(s, KernelContext{}).ok());
    EXPECT_LT(testing::RelativeError(split, packed), 1e-5) << "causal=" << causal;
    for (size_t i = 0; i < split_lse.size(); ++i) {
      ASSERT_NEAR(split_lse[i], packed_lse[i], 1e-4) << i;
    }

    // Bad split parameters are named.
    MhaPrefillParams bad = s;
    bad.k_rope_dim = dqk;
    auto st = MhaPrefill(bad, KernelContext{});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("k_rope_dim=40"), std::string::npos) << st.message();
    bad = s;
    bad.k_rope = nullptr;
    st = MhaPrefill(bad, KernelContext{});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("k_rope"), std::string::npos) << st.message();
    bad = s;
    bad.k_rope_token_stride = rope - 1;
    st = MhaPrefill(bad, KernelContext{});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("k_rope token stride 7"), std::string::npos) << st.message();
    // No packed K tail and no k_rope: nothing asks for a split.
    EXPECT_FALSE(MhaPrefillTakesSplitK(p, Backend::kCpu));
    // cuDNN never takes it.
    bad = s;
    bad.provider = MhaPrefillProvider::kCudnn;
    EXPECT_FALSE(MhaPrefillTakesSplitK(bad, Backend::kCuda));
  }
}

// Chunked prefill over a prefix: the causal result over [prefix | chunk] equals attending the
// chunk's queries to the same keys with a bottom-right aligned mask (the convention).
TEST(MhaPrefillSemantics, CausalIsBottomRightAligned) {
  const int dqk = 8, dv = 8;
  std::vector<float> q = testing::RandomVector(2 * dqk, 1), kv = testing::RandomVector(3 * 16, 2);
  std::vector<float> out(2 * dv, testing::kPoison), lse(2, testing::kPoison);
  std::vector<int32_t> cu_q = {0, 2}, cu_k = {0, 3};
  MhaPrefillParams p;
  p.batch = 1; p.num_heads = 1; p.num_kv_heads = 1; p.head_dim_qk = dqk; p.head_dim_v = dv;
  p.q = q.data(); p.q_token_stride = dqk; p.q_head_stride = dqk;
  p.k = kv.data(); p.k_token_stride = 16; p.k_head_stride = 16;
  p.v = kv.data() + 8; p.v_token_stride = 16; p.v_head_stride = 16;
  p.out = out.data(); p.out_token_stride = dv; p.out_head_stride = dv; p.lse = lse.data();
  p.cu_seqlens_q = cu_q.data(); p.cu_seqlens_k = cu_k.data(); p.max_seqlen_q = 2;
  p.max_seqlen_k = 3;
  ASSERT_TRUE(MhaPrefill(p, KernelContext{}).ok());
  // Query 0 sees keys 0..1: check against a hand softmax over two keys.
  double s[2], m, l = 0, o0 = 0;
  for (int j = 0; j < 2; ++j) {
    s[j] = 0;
    for (int d = 0; d < dqk; ++d) s[j] += q[d] * kv[j * 16 + d];
  }
  m = std::max(s[0], s[1]);
  for (int j = 0; j < 2; ++j) {
    l += std::exp(s[j] - m);
    o0 += std::exp(s[j] - m) * kv[j * 16 + 8];
  }
  EXPECT_NEAR(out[0], o0 / l, 1e-6);
  EXPECT_NEAR(lse[0], m + std::log(l), 1e-6);
}

// The can-implement query the engine chooses its attention form by (model/mla_dims.h).
TEST(MhaPrefillValidation, SupportedHeadDimsPerBackend) {
  EXPECT_TRUE(MhaPrefillSupportsHeadDims(Backend::kCpu, 27, 20));
  EXPECT_TRUE(MhaPrefillSupportsHeadDims(Backend::kCuda, 192, 128));
  EXPECT_TRUE(MhaPrefillSupportsHeadDims(Backend::kCuda, 32, 24));
  EXPECT_TRUE(MhaPrefillSupportsHeadDims(Backend::kCuda, 256, 256));
  EXPECT_FALSE(MhaPrefillSupportsHeadDims(Backend::kCuda, 40, 20));   // v not a multiple of 8
  EXPECT_FALSE(MhaPrefillSupportsHeadDims(Backend::kCuda, 320, 128)); // qk past 256
  EXPECT_FALSE(MhaPrefillSupportsHeadDims(Backend::kCpu, 0, 8));
}

TEST(MhaPrefillValidation, NamesBadValues) {
  MhaPrefillParams p;
  p.batch = 1; p.num_heads = 6; p.num_kv_heads = 4; p.head_dim_qk = 8; p.head_dim_v = 8;
  auto st = MhaPrefill(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_heads=6"), std::string::npos) << st.message();
  p.num_heads = 4; p.head_dim_qk = 0;
  st = MhaPrefill(p, KernelContext{});
  EXPECT_NE(st.message().find("head_dim_qk=0"), std::string::npos) << st.message();
}

// The CPU backend serves demos: a 256-token prefill of a tiny model's attention layer
// (16 heads, 192/128) must take well under a second of CPU time.
TEST(MhaPrefillSpeed, TinyModelPrefillIsFast) {
  const int n = 256, h = 16, dqk = 192, dv = 128;
  auto q = testing::RandomVector(static_cast<size_t>(n) * h * dqk, 3);
  auto k = testing::RandomVector(static_cast<size_t>(n) * h * dqk, 4);
  auto v = testing::RandomVector(static_cast<size_t>(n) * h * dv, 5);
  std::vector<float> out(static_cast<size_t>(n) * h * dv);
  std::vector<int32_t> cu = {0, n};
  MhaPrefillParams p;
  p.batch = 1; p.num_heads = h; p.num_kv_heads = h; p.head_dim_qk = dqk; p.head_dim_v = dv;
  p.q = q.data(); p.q_token_stride = h * dqk; p.q_head_stride = dqk;
  p.k = k.data(); p.k_token_stride = h * dqk; p.k_head_stride = dqk;
  p.v = v.data(); p.v_token_stride = h * dv; p.v_head_stride = dv;
  p.out = out.data(); p.out_token_stride = h * dv; p.out_head_stride = dv;
  p.cu_seqlens_q = cu.data(); p.cu_seqlens_k = cu.data(); p.max_seqlen_q = n; p.max_seqlen_k = n;
  p.softmax_scale = 0.07f;
  // Process CPU time (all threads), so a loaded CI machine does not make this flaky.
  const std::clock_t c0 = std::clock();
  ASSERT_TRUE(MhaPrefill(p, KernelContext{}).ok());
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  RecordProperty("cpu_ms", std::to_string(cpu_ms));
  EXPECT_LT(cpu_ms, 1000.0);  // ~50 ms of CPU on one core of the CI machine
}

TEST(MhaPrefillProvider, ParsesAndNamesEveryProvider) {
  for (auto provider : {MhaPrefillProvider::kAuto, MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn,
                        MhaPrefillProvider::kPreferCudnn}) {
    const auto parsed = ParseMhaPrefillProvider(MhaPrefillProviderName(provider));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, provider);
  }
  const auto bad = ParseMhaPrefillProvider("flash");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--mha-provider flash"), std::string::npos) << bad.status();
}

// MhaPrefillParams::kernel names; the CPU backend has no wgmma kernel and ignores the field.
TEST(MhaPrefillKernelChoice, NamedAndIgnoredOnCpu) {
  EXPECT_STREQ(MhaPrefillKernelName(MhaPrefillKernel::kAuto), "auto");
  EXPECT_STREQ(MhaPrefillKernelName(MhaPrefillKernel::kMmaSync), "mma.sync");
  EXPECT_STREQ(MhaPrefillKernelName(MhaPrefillKernel::kWgmma), "wgmma");
  std::vector<float> q(8, 1.0f), out(8);
  std::vector<int32_t> cu = {0, 1};
  MhaPrefillParams p;
  p.batch = 1; p.num_heads = 1; p.num_kv_heads = 1; p.head_dim_qk = 8; p.head_dim_v = 8;
  p.q = p.k = p.v = q.data(); p.out = out.data();
  p.q_token_stride = p.k_token_stride = p.v_token_stride = p.out_token_stride = 8;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = 8;
  p.cu_seqlens_q = p.cu_seqlens_k = cu.data(); p.max_seqlen_q = p.max_seqlen_k = 1;
  p.kernel = MhaPrefillKernel::kWgmma;
  EXPECT_FALSE(MhaPrefillWgmmaApplies(p));  // f32: never the wgmma kernel's dtype
  EXPECT_TRUE(MhaPrefill(p, KernelContext{}).ok());
  EXPECT_FLOAT_EQ(out[5], 1.0f);
}

// The CPU backend runs its reference for auto and ours, and refuses cudnn by name.
TEST(MhaPrefillProvider, CpuBackendRefusesCudnn) {
  std::vector<float> q(8, 1.0f), out(8);
  std::vector<int32_t> cu = {0, 1};
  MhaPrefillParams p;
  p.batch = 1; p.num_heads = 1; p.num_kv_heads = 1; p.head_dim_qk = 8; p.head_dim_v = 8;
  p.q = p.k = p.v = q.data(); p.out = out.data();
  p.q_token_stride = p.k_token_stride = p.v_token_stride = p.out_token_stride = 8;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = 8;
  p.cu_seqlens_q = p.cu_seqlens_k = cu.data(); p.max_seqlen_q = p.max_seqlen_k = 1;
  for (auto provider : {MhaPrefillProvider::kAuto, MhaPrefillProvider::kOurs}) {
    p.provider = provider;
    EXPECT_TRUE(MhaPrefill(p, KernelContext{}).ok());
    EXPECT_FLOAT_EQ(out[3], 1.0f);  // one key: out = v
  }
  p.provider = MhaPrefillProvider::kCudnn;
  const auto st = MhaPrefill(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("provider=cudnn"), std::string::npos) << st.message();

  const auto check = CheckMhaPrefillProvider(MhaPrefillProvider::kCudnn, Backend::kCpu);
  EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(check.message().find("CUDA backend"), std::string::npos) << check.message();
  EXPECT_TRUE(CheckMhaPrefillProvider(MhaPrefillProvider::kAuto, Backend::kCpu).ok());
  EXPECT_EQ(DescribeMhaPrefillProvider(MhaPrefillProvider::kAuto, Backend::kCpu),
            "mha prefill provider auto: the CPU reference");
}

// kAuto prefers our kernel only where the Hopper kernel applies, which never holds for the CPU
// backend's f32 calls, however long.
TEST(MhaPrefillProvider, AutoPrefersOursOnlyWhereTheHopperKernelApplies) {
  MhaPrefillParams p;
  p.dtype = DType::kF32;
  p.batch = 1;
  p.num_heads = p.num_kv_heads = 16;
  p.head_dim_qk = 192;
  p.head_dim_v = 128;
  p.max_seqlen_q = p.max_seqlen_k = 2 * kMhaPrefillAutoOursMinSeqlenK;
  EXPECT_FALSE(MhaPrefillAutoPrefersOurs(p));
  p.max_seqlen_k = kMhaPrefillAutoOursMinSeqlenK - 1;
  EXPECT_FALSE(MhaPrefillAutoPrefersOurs(p));
}

// Without a loadable cuDNN the version says why (UNAVAILABLE), and kCudnn is refused on CUDA
// with that reason while kAuto is not.
TEST(MhaPrefillProvider, CudnnAbsenceIsExplained) {
  const auto version = MhaPrefillCudnnVersion();
  if (version.ok()) GTEST_SKIP() << "this process has " << *version;
  EXPECT_EQ(version.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(version.status().message().empty());
  const auto check = CheckMhaPrefillProvider(MhaPrefillProvider::kCudnn, Backend::kCuda);
  EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(check.message().find(version.status().message()), std::string::npos) << check.message();
  EXPECT_TRUE(CheckMhaPrefillProvider(MhaPrefillProvider::kAuto, Backend::kCuda).ok());
  const std::string line = DescribeMhaPrefillProvider(MhaPrefillProvider::kAuto, Backend::kCuda);
  EXPECT_NE(line.find("auto: ours (cuDNN unavailable: "), std::string::npos) << line;
}

}  // namespace
}  // namespace mlaserve::kernels
