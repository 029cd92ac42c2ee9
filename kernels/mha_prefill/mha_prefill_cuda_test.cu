// mha_prefill CUDA vs the CPU reference (MhaPrefillCpu on the same bf16-rounded inputs) over
// ragged batches: causal and not, with and without a key prefix, GQA, padded strides, the
// DeepSeek dims (192/128) with 16 and 128 heads, small fixture dims, and long sequences (8k).
#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/paged.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

struct MhaCase {
  int heads, kv_heads, dqk, dv;
  std::vector<int> lq;      // queries per sequence
  int max_prefix;           // keys = lq + prefix (causal) or random (non-causal, no prefix)
};

void RunCase(const MhaCase& c, bool causal, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << c.heads << " dqk=" << c.dqk
                                    << " dv=" << c.dv << " causal=" << causal);
  std::mt19937 rng(seed);
  const int batch = static_cast<int>(c.lq.size());
  std::vector<int> lk(batch);
  for (int b = 0; b < batch; ++b) {
    const int prefix = c.max_prefix > 0 ? static_cast<int>(rng() % (c.max_prefix + 1)) : 0;
    lk[b] = causal || c.max_prefix > 0 ? c.lq[b] + prefix : 1 + static_cast<int>(rng() % (2 * c.lq[b]));
  }
  const auto cu_q = testing::CumSum(c.lq), cu_k = testing::CumSum(lk);
  const int total_q = cu_q[batch], total_k = cu_k[batch];
  const int64_t q_head_stride = c.dqk + 8, q_token_stride = c.heads * q_head_stride + 8;
  const int64_t kv_head_stride = c.dqk + c.dv, kv_token_stride = c.kv_heads * kv_head_stride;
  auto q = testing::RandomVector(static_cast<size_t>(total_q) * q_token_stride, seed + 1, -2.0f, 2.0f);
  auto kv = testing::RandomVector(static_cast<size_t>(total_k) * kv_token_stride, seed + 2, -2.0f, 2.0f);
  testing::RoundToBf16(q);
  testing::RoundToBf16(kv);
  const size_t out_n = static_cast<size_t>(total_q) * c.heads * c.dv;
  const size_t lse_n = static_cast<size_t>(total_q) * c.heads;
  std::vector<float> want(out_n), want_lse(lse_n);
  MhaPrefillParams p;
  p.dtype = DType::kF32; p.batch = batch; p.num_heads = c.heads; p.num_kv_heads = c.kv_heads;
  p.head_dim_qk = c.dqk; p.head_dim_v = c.dv;
  p.q = q.data(); p.q_token_stride = q_token_stride; p.q_head_stride = q_head_stride;
  p.k = kv.data(); p.k_token_stride = kv_token_stride; p.k_head_stride = kv_head_stride;
  p.v = kv.data() + c.dqk; p.v_token_stride = kv_token_stride; p.v_head_stride = kv_head_stride;
  p.out = want.data(); p.out_token_stride = c.heads * c.dv; p.out_head_stride = c.dv;
  p.lse = want_lse.data(); p.cu_seqlens_q = cu_q.data(); p.cu_seqlens_k = cu_k.data();
  p.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end());
  p.max_seqlen_k = *std::max_element(lk.begin(), lk.end());
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.dqk));
  p.causal = causal;
  ASSERT_TRUE(MhaPrefill(p, KernelContext{}).ok());

  auto d_q = testing::ToDeviceBf16(q), d_kv = testing::ToDeviceBf16(kv);
  auto d_out = testing::PoisonedBf16(out_n);
  auto d_lse = testing::PoisonedF32(lse_n);
  auto d_cu_q = testing::ToDevice(cu_q), d_cu_k = testing::ToDevice(cu_k);
  MhaPrefillParams g = p;
  g.dtype = DType::kBF16; g.q = d_q.get(); g.k = d_kv.get();
  g.v = d_kv.as<uint16_t>() + c.dqk; g.out = d_out.get(); g.lse = d_lse.as<float>();
  g.cu_seqlens_q = d_cu_q.as<int32_t>(); g.cu_seqlens_k = d_cu_k.as<int32_t>();
  const auto st = MhaPrefill(g, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got = testing::ToHostBf16(d_out, out_n);
  const auto got_lse = testing::ToHost<float>(d_lse, lse_n);
  EXPECT_EQ(testing::CountNan(got), 0u);
  EXPECT_LE(testing::RelativeError(got, want), 1e-2);
  EXPECT_LE(testing::LseErrorOrInf(got_lse, want_lse), 1e-3);
}

// (case index, causal)
const std::vector<MhaCase>& Cases() {
  static const auto* cases = new std::vector<MhaCase>{
      {16, 16, 192, 128, {1, 17, 128, 129, 300}, 0},
      {16, 16, 192, 128, {5, 200, 64}, 300},          // chunk after a prefix
      {128, 128, 192, 128, {1, 77, 256}, 100},
      {16, 16, 192, 128, {8192}, 0},                  // one long sequence
      {16, 16, 192, 128, {3000, 1, 5000}, 0},
      {16, 4, 24, 16, {1, 50, 200}, 40},              // GQA, tiny fixture dims
      {16, 16, 64, 32, {33, 130}, 0},
      {4, 4, 128, 128, {100, 257}, 10},
      {4, 2, 256, 256, {70, 190}, 0},
      {2, 2, 40, 48, {9, 150}, 20},
      {6, 6, 32, 24, {1, 50, 260}, 30},               // deepseek_v2_odd as stored (model/mla_dims.h)
  };
  return *cases;
}

class MhaPrefillCudaTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MhaPrefillCudaTest, MatchesCpuReference) {
  const auto [index, causal] = GetParam();
  RunCase(Cases()[index], causal, testing::FreshSeed());
}

INSTANTIATE_TEST_SUITE_P(Sweep, MhaPrefillCudaTest,
                         ::testing::Combine(::testing::Range(0, 11), ::testing::Bool()));

TEST(MhaPrefillCudaValidation, NamesUnsupportedHeadDim) {
  MhaPrefillParams p;
  p.dtype = DType::kBF16; p.batch = 1; p.num_heads = 1; p.num_kv_heads = 1;
  p.head_dim_qk = 20; p.head_dim_v = 16; p.max_seqlen_q = 1; p.max_seqlen_k = 1;
  static uint16_t dummy[64] __attribute__((aligned(16)));
  static int32_t cu[2] = {0, 1};
  p.q = p.k = p.v = dummy; p.out = dummy;
  p.q_token_stride = p.k_token_stride = p.v_token_stride = p.out_token_stride = 32;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = 32;
  p.cu_seqlens_q = p.cu_seqlens_k = cu;
  const auto st = MhaPrefill(p, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head_dim_qk=20"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
