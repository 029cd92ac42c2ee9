// sparse_fwd CUDA backend vs the CPU reference (bf16 and fp8 caches), fresh random inputs,
// outputs poisoned.
#include "gtest/gtest.h"
#include "kernels/sparse_fwd/sparse_cuda_case.h"

namespace mlaserve::kernels {
namespace {

absl::Status Fwd(const SparseMlaParams& p, const KernelContext& ctx) { return SparseFwd(p, ctx); }

TEST(SparseFwdCuda, Bf16DeepSeekWidths) {
  for (int heads : {16, 40, 128}) {
    testing::SparseCudaCase cs;
    cs.heads = heads; cs.top_k = 192; cs.lq = {37, 5, 80}; cs.prefix = {100, 0, 300};
    testing::ExpectSparseMatchesCpu(cs, Fwd);
  }
}

TEST(SparseFwdCuda, Bf16SmallWidthsAndRaggedTopK) {
  testing::SparseCudaCase cs;
  cs.heads = 24; cs.rank = 64; cs.rope = 32; cs.top_k = 100;  // top_k not a multiple of 64
  cs.lq = {20, 64}; cs.prefix = {10, 200};
  testing::ExpectSparseMatchesCpu(cs, Fwd);
}

// Widths as the engine stores a model with kv_lora_rank 36 and rope 6 (model/mla_dims.h).
TEST(SparseFwdCuda, Bf16PaddedOddWidths) {
  testing::SparseCudaCase cs;
  cs.heads = 6; cs.rank = 40; cs.rope = 8; cs.top_k = 48;
  cs.lq = {20, 33}; cs.prefix = {10, 200};
  testing::ExpectSparseMatchesCpu(cs, Fwd);
}

TEST(SparseFwdCuda, ContextShorterThanTopK) {
  testing::SparseCudaCase cs;
  cs.heads = 64; cs.top_k = 512; cs.lq = {30, 3}; cs.prefix = {10, 50};
  testing::ExpectSparseMatchesCpu(cs, Fwd);
}

TEST(SparseFwdCuda, Fp8Cache) {
  for (int heads : {32, 128}) {
    testing::SparseCudaCase cs;
    cs.fp8 = true; cs.heads = heads; cs.top_k = 256; cs.lq = {50, 9}; cs.prefix = {400, 30};
    testing::ExpectSparseMatchesCpu(cs, Fwd);
  }
}

TEST(SparseFwdCuda, RejectsMissingMaxSeqlenQ) {
  SparseMlaParams p;
  p.dtype = DType::kBF16; p.cache_dtype = DType::kBF16; p.batch = 1; p.num_heads = 16;
  p.kv_lora_rank = 512; p.rope_dim = 64; p.top_k = 64; p.max_seqlen_q = 0;
  EXPECT_EQ(SparseFwdCuda(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::kernels
