// L2Prefetch (api.h): the checks, then the backend; the CPU has no cache to warm.
#include "kernels/prefetch/api.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/common/dispatch.h"

namespace mlaserve::kernels {

absl::Status L2PrefetchCuda(const L2PrefetchParams& p, void* stream);
bool L2PrefetchCudaLaunches();
size_t L2PrefetchCudaCacheBytes();

absl::Status L2Prefetch(const L2PrefetchParams& p, const KernelContext& ctx) {
  if (p.num_ranges < 0 || p.num_ranges > kL2PrefetchMaxRanges) {
    return absl::InvalidArgumentError(
        absl::StrCat("l2_prefetch: num_ranges=", p.num_ranges, " (0..", kL2PrefetchMaxRanges, ")"));
  }
  if (p.ctas < 0) return absl::InvalidArgumentError(absl::StrCat("l2_prefetch: ctas=", p.ctas, " (>= 0)"));
  for (int i = 0; i < p.num_ranges; ++i) {
    const L2PrefetchRange& r = p.ranges[i];
    if (r.bytes == 0) continue;
    if (r.data == nullptr) return absl::InvalidArgumentError(absl::StrCat("l2_prefetch: range ", i, " is null"));
    if (reinterpret_cast<uintptr_t>(r.data) % 16 != 0 || r.bytes % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("l2_prefetch: range ", i, " (", r.bytes,
                                                     " bytes) is not 16-byte aligned in start and size"));
    }
  }
  MLASERVE_DISPATCH("prefetch", ctx, absl::OkStatus(), L2PrefetchCuda(p, ctx.stream));
}

bool L2PrefetchLaunches(const KernelContext& ctx) {
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return ctx.backend == Backend::kCuda && L2PrefetchCudaLaunches();
#else
  (void)ctx;
  return false;
#endif
}

size_t L2PrefetchCacheBytes(const KernelContext& ctx) {
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return L2PrefetchLaunches(ctx) ? L2PrefetchCudaCacheBytes() : 0;
#else
  (void)ctx;
  return 0;
#endif
}

size_t FitL2PrefetchRanges(L2PrefetchParams* p, size_t budget) {
  size_t kept = 0;
  int n = 0;
  for (int i = 0; i < p->num_ranges; ++i) {
    const L2PrefetchRange r = p->ranges[i];
    if (r.bytes == 0 || r.bytes > budget - kept) continue;
    kept += r.bytes;
    p->ranges[n++] = r;
  }
  for (int i = n; i < p->num_ranges; ++i) p->ranges[i] = L2PrefetchRange{};
  p->num_ranges = n;
  return kept;
}

}  // namespace mlaserve::kernels
