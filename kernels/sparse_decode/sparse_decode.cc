// sparse_decode dispatcher: the checks of sparse_fwd, then the backend.
#include "kernels/sparse_decode/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/sparse_fwd/sparse_cpu.h"

namespace mlaserve::kernels {

absl::Status SparseDecode(const SparseMlaParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(sparse_internal::CheckSparseShape(p, "sparse_decode"));
  if (p.batch == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("sparse_decode", ctx, SparseDecodeCpu(p), SparseDecodeCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
