// The one place where the latent-attention kernel's runtime shape (latent and rope widths,
// rows per CTA) becomes a template configuration, plus the checks the kernel adds to
// CheckMlaShape.
#include "common/status.h"
#include "kernels/mla_prefill/latent_attention_kernel.cuh"
#include "kernels/mla_prefill/latent_attention_sm90.h"

namespace mlaserve::kernels::mla_cuda {
namespace {

// Padded widths with instantiations (latent_attention_r*_w*.cu).
constexpr int kDeepSeekRank = 512, kSmallRank = 64, kPaddedRope = 64;
static_assert(kDeepSeekRank == kLatentCudaMaxRank && kPaddedRope == kLatentCudaMaxRopeDim &&
              cuda::kBf16PerChunk == kLatentCudaDimAlign);

template <int kRank>
absl::Status LaunchRows(const LatentArgs& args, int rows_per_cta, int64_t max_rows, cudaStream_t s) {
  switch (rows_per_cta) {
    case 16: return LaunchLatentTile<kRank, kPaddedRope, 1>(args, max_rows, s);
    case 32: return LaunchLatentTile<kRank, kPaddedRope, 2>(args, max_rows, s);
    default: return LaunchLatentTile<kRank, kPaddedRope, 4>(args, max_rows, s);
  }
}

// Which other kernel runs, where LatentRunsSm90WideKernel says no (for the refusals below).
const char* OtherKernelRuns(const MlaParams& p) {
  return p.kernel != LatentKernel::kMmaSync && LatentWgmmaApplies(p) ? "the few-rows kernel runs"
                                                                     : "the mma.sync kernel runs";
}

}  // namespace

bool LatentRunsSm90WideKernel(const MlaParams& p, int64_t max_rows_per_request) {
  return p.kernel != LatentKernel::kMmaSync && LatentWgmmaApplies(p) &&
         !LatentSm90FewRowsTakes(p, max_rows_per_request);
}

absl::Status LaunchLatentAttention(const MlaParams& p, const LatentSplit& split,
                                   int64_t max_rows_per_request, cudaStream_t stream) {
  constexpr const char* kFamily = "mla";
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  const bool small = p.kv_lora_rank <= kSmallRank;
  if (p.kv_lora_rank % cuda::kBf16PerChunk != 0 || p.kv_lora_rank > kDeepSeekRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla: kv_lora_rank=", p.kv_lora_rank, " is not supported on CUDA (multiples of 8 up to ",
        kDeepSeekRank, ")"));
  }
  if (p.rope_dim % cuda::kBf16PerChunk != 0 || p.rope_dim > kPaddedRope) {
    return absl::InvalidArgumentError(absl::StrCat("mla: rope_dim=", p.rope_dim,
                                                   " is not supported on CUDA (multiples of 8 up to ",
                                                   kPaddedRope, ")"));
  }
  RETURN_IF_ERROR(cuda::RequireVectorAligned(kFamily, "q", p.q));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(kFamily, "kv_cache", p.kv_cache));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(kFamily, "out", p.out));
  RETURN_IF_ERROR(cuda::RequireStrideMultiple8(kFamily, "q_token_stride", p.q_token_stride));
  RETURN_IF_ERROR(cuda::RequireStrideMultiple8(kFamily, "q_head_stride", p.q_head_stride));
  if (max_rows_per_request <= 0 || p.batch == 0) return absl::OkStatus();
  // What only the 64-row Hopper kernel writes (checked only where asked: the check reads the
  // environment).
  if (split.part_bf16 || split.single_chunk_direct) {
    const bool wide = LatentRunsSm90WideKernel(p, max_rows_per_request);
    if (split.part_bf16 && (split.segments == nullptr || !wide)) {
      const char* why = split.segments == nullptr ? "the split has chunks" : OtherKernelRuns(p);
      return absl::InvalidArgumentError(absl::StrCat(
          "mla: bf16 partials (LatentSplit::part_bf16) need the balanced schedule on the 64-row Hopper kernel; ",
          why, " (max_rows_per_request=", max_rows_per_request, ")"));
    }
    if (split.single_chunk_direct && (split.segments != nullptr || split.num_splits <= 1 || !wide)) {
      const char* why = split.segments != nullptr ? "the split is a balanced schedule"
                        : split.num_splits <= 1   ? "the split has one chunk"
                                                  : OtherKernelRuns(p);
      return absl::InvalidArgumentError(absl::StrCat(
          "mla: direct single-chunk rows (LatentSplit::single_chunk_direct) need chunks on the 64-row Hopper "
          "kernel; ", why, " (num_splits=", split.num_splits, ", max_rows_per_request=", max_rows_per_request, ")"));
    }
  }
  const bool wgmma_fits = LatentWgmmaApplies(p);
  if ((p.kernel == LatentKernel::kWgmma || p.kernel == LatentKernel::kWgmma64) && !wgmma_fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla: kernel=", p.kernel == LatentKernel::kWgmma ? "wgmma" : "wgmma64", " needs an sm_90a build on a Hopper GPU, bf16, kv_lora_rank=512 and "
        "rope_dim=64; got ", DTypeName(p.dtype), ", ", p.kv_lora_rank, ", ", p.rope_dim,
        LatentSm90Available() ? "" : " (no sm_90a kernel for this device)"));
  }
  if (wgmma_fits && p.kernel != LatentKernel::kMmaSync) {
    return LaunchLatentAttentionSm90(p, split, max_rows_per_request, stream);
  }
  const int rows_per_cta = LatentRowsPerCta(max_rows_per_request);
  const LatentArgs args{p, split};
  return small ? LaunchRows<kSmallRank>(args, rows_per_cta, max_rows_per_request, stream)
               : LaunchRows<kDeepSeekRank>(args, rows_per_cta, max_rows_per_request, stream);
}

}  // namespace mlaserve::kernels::mla_cuda
