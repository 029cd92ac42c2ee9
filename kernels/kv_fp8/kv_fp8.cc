// kv_fp8 dispatcher: shape checks, then the backend.
#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/kv_fp8/kv_fp8_check.h"

namespace mlaserve::kernels {

absl::Status Fp8CacheWrite(const Fp8CacheWriteParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(kv_fp8_internal::CheckFp8(p.kind, p.head_dim, p.num_tokens, p.cache,
                                            p.slot_mapping, p.src, p.src_stride));
  if (p.num_tokens == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("kv_fp8", ctx, Fp8CacheWriteCpu(p), Fp8CacheWriteCuda(p, ctx.stream));
}

absl::Status Fp8CacheRead(const Fp8CacheReadParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(kv_fp8_internal::CheckFp8(p.kind, p.head_dim, p.num_tokens, p.cache,
                                            p.slot_mapping, p.dst, p.dst_stride));
  if (p.num_tokens == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("kv_fp8", ctx, Fp8CacheReadCpu(p), Fp8CacheReadCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
