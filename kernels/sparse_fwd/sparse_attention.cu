// The one place where the sparse kernel's runtime shape (cache dtype, widths, heads per CTA)
// becomes a template configuration, plus the checks the kernel adds to CheckSparseShape.
#include "common/status.h"
#include "kernels/sparse_fwd/sparse_attention_kernel.cuh"

namespace mlaserve::kernels::sparse_cuda {
namespace {

template <int kRank, bool kFp8>
absl::Status LaunchRows(const SparseMlaParams& p, int max_q, cudaStream_t s) {
  // The fewest 16-head tiles that hold the heads, up to 64 (the shared-memory limit).
  if (p.num_heads <= 16) return LaunchSparseTile<kRank, 64, 1, kFp8>(p, max_q, s);
  if (p.num_heads <= 32) return LaunchSparseTile<kRank, 64, 2, kFp8>(p, max_q, s);
  return LaunchSparseTile<kRank, 64, 4, kFp8>(p, max_q, s);
}

}  // namespace

absl::Status LaunchSparseAttention(const SparseMlaParams& p, int max_q, const char* family,
                                   cudaStream_t stream) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        family, ": the CUDA backend takes bf16 q/out, got dtype=", DTypeName(p.dtype)));
  }
  const bool fp8 = p.cache_dtype == DType::kFP8E4M3;
  if (!fp8 && p.cache_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        family, ": the CUDA backend takes cache_dtype bf16 or fp8_e4m3 (656-byte layout), got ",
        DTypeName(p.cache_dtype)));
  }
  if (fp8 && (p.kv_lora_rank != kFp8LatentRank || p.rope_dim != kFp8RopeDim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        family, ": the fp8 cache layout holds kv_lora_rank=512 and rope_dim=64, got ",
        p.kv_lora_rank, " and ", p.rope_dim));
  }
  if (p.kv_lora_rank % cuda::kBf16PerChunk != 0 || p.kv_lora_rank > 512 ||
      p.rope_dim % cuda::kBf16PerChunk != 0 || p.rope_dim > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        family, ": kv_lora_rank=", p.kv_lora_rank, " / rope_dim=", p.rope_dim,
        " are not supported on CUDA (multiples of 8 up to 512 / 64)"));
  }
  if (max_q <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        family, ": max_seqlen_q=", max_q, " must bound every request's query count on CUDA"));
  }
  RETURN_IF_ERROR(cuda::RequireVectorAligned(family, "q", p.q));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(family, "kv_cache", p.kv_cache));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(family, "out", p.out));
  RETURN_IF_ERROR(cuda::RequireStrideMultiple8(family, "q_token_stride", p.q_token_stride));
  RETURN_IF_ERROR(cuda::RequireStrideMultiple8(family, "q_head_stride", p.q_head_stride));
  if (p.batch == 0) return absl::OkStatus();
  if (fp8) return LaunchRows<512, true>(p, max_q, stream);
  return p.kv_lora_rank <= 64 ? LaunchRows<64, false>(p, max_q, stream)
                              : LaunchRows<512, false>(p, max_q, stream);
}

}  // namespace mlaserve::kernels::sparse_cuda
