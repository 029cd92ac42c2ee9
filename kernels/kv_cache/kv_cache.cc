// kv_cache dispatchers (CacheWrite, CacheGather): can-implement checks, then the backend.
// Checks that need the index arrays themselves (slots, block tables) run in the CPU backend,
// since on CUDA those arrays live on the device.
#include "kernels/kv_cache/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {

absl::Status CacheWrite(const CacheWriteParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("entry_dim", p.entry_dim));
  RETURN_IF_ERROR(RequirePositive("num_pages", p.num_pages));
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("src", p.src));
  RETURN_IF_ERROR(RequireNonNull("slot_mapping", p.slot_mapping));
  RETURN_IF_ERROR(RequireNonNull("cache", p.cache));
  RETURN_IF_ERROR(RequireAtLeast("src_stride", p.src_stride, "entry_dim", p.entry_dim));
  MLASERVE_DISPATCH("kv_cache", ctx, CacheWriteCpu(p), CacheWriteCuda(p, ctx.stream));
}

absl::Status CacheGather(const CacheGatherParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequirePositive("entry_dim", p.entry_dim));
  RETURN_IF_ERROR(RequirePositive("num_pages", p.num_pages));
  RETURN_IF_ERROR(RequirePositive("max_pages_per_seq", p.max_pages_per_seq));
  if (p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("cache", p.cache));
  RETURN_IF_ERROR(RequireNonNull("block_table", p.block_table));
  RETURN_IF_ERROR(RequireNonNull("start", p.start));
  RETURN_IF_ERROR(RequireNonNull("len", p.len));
  RETURN_IF_ERROR(RequireNonNull("cu_dst", p.cu_dst));
  RETURN_IF_ERROR(RequireNonNull("dst", p.dst));
  MLASERVE_DISPATCH("kv_cache", ctx, CacheGatherCpu(p), CacheGatherCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
