// sparse_decode CUDA backend vs the CPU reference: 1-2 queries per request, bf16 and fp8
// caches, fresh random inputs, outputs poisoned.
#include "gtest/gtest.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/sparse_cuda_case.h"

namespace mlaserve::kernels {
namespace {

absl::Status Decode(const SparseMlaParams& p, const KernelContext& ctx) { return SparseDecode(p, ctx); }

TEST(SparseDecodeCuda, Bf16OneAndTwoQueries) {
  for (int heads : {16, 128}) {
    testing::SparseCudaCase cs;
    cs.heads = heads; cs.top_k = 256; cs.lq = {1, 2, 1, 2}; cs.prefix = {700, 90, 3, 300};
    testing::ExpectSparseMatchesCpu(cs, Decode);
  }
}

TEST(SparseDecodeCuda, Fp8OneAndTwoQueries) {
  for (int heads : {64, 128}) {
    testing::SparseCudaCase cs;
    cs.fp8 = true; cs.heads = heads; cs.top_k = 320; cs.lq = {2, 1, 2}; cs.prefix = {1000, 40, 500};
    testing::ExpectSparseMatchesCpu(cs, Decode);
  }
}

TEST(SparseDecodeCuda, Fp8NoEmptyRowsShortContexts) {
  testing::SparseCudaCase cs;
  cs.fp8 = true; cs.heads = 128; cs.top_k = 2048; cs.empty_row = false;
  cs.lq = {1, 1}; cs.prefix = {2500, 100};
  testing::ExpectSparseMatchesCpu(cs, Decode);
}

TEST(SparseDecodeCuda, RejectsThreeQueries) {
  SparseMlaParams p;
  p.max_seqlen_q = 3;
  EXPECT_EQ(SparseDecodeCuda(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::kernels
