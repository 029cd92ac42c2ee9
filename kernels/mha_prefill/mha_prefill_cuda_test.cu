// mha_prefill CUDA, our kernel (provider kOurs), vs the CPU reference (MhaPrefillCpu on the same
// bf16-rounded inputs) over ragged batches: causal and not, with and without a key prefix, GQA,
// padded strides, the DeepSeek dims (192/128) with 16 and 128 heads, small fixture dims, and
// long sequences (8k). The cuDNN provider's tests are in mha_prefill_cudnn_test.cu.
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mha_prefill/mha_prefill_cuda_case.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::MhaCase;

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
  testing::RunMhaCase(Cases()[index], causal, testing::FreshSeed(), MhaPrefillProvider::kOurs);
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
  p.provider = MhaPrefillProvider::kOurs;
  const auto st = MhaPrefill(p, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head_dim_qk=20"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
