// mla_prefill dispatcher: can-implement check, then the backend.
#include "kernels/mla_prefill/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/mla_prefill/mla_check.h"
#if MLASERVE_KERNEL_HAS_CUDA
#include "kernels/mla_prefill/latent_attention_sm90.h"
#endif

namespace mlaserve::kernels {

bool LatentAttentionSupportsDims(Backend backend, int kv_lora_rank, int rope_dim) {
  if (kv_lora_rank <= 0 || rope_dim <= 0) return false;
  if (backend == Backend::kCpu) return true;
  return kv_lora_rank % kLatentCudaDimAlign == 0 && kv_lora_rank <= kLatentCudaMaxRank &&
         rope_dim % kLatentCudaDimAlign == 0 && rope_dim <= kLatentCudaMaxRopeDim;
}

bool LatentWgmmaApplies(const MlaParams& p) {
#if MLASERVE_KERNEL_HAS_CUDA
  return mla_cuda::LatentSm90Takes(p) && mla_cuda::LatentSm90Available();
#else
  (void)p;
  return false;
#endif
}

absl::Status MlaPrefill(const MlaParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(mla_internal::CheckMlaShape(
      {"mla_prefill", p.batch, p.num_heads, p.kv_lora_rank, p.rope_dim, p.q, p.q_token_stride,
       p.q_head_stride, p.kv_cache, p.num_pages, p.block_table, p.max_pages_per_seq,
       p.cu_seqlens_q, p.seqlens_k, p.out, p.softmax_scale}));
  if (p.batch == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("mla_prefill", ctx, MlaPrefillCpu(p), MlaPrefillCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
