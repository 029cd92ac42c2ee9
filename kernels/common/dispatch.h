// Backend dispatch used by each family's <family>.cc (the one place a family chooses
// between its CPU reference and its CUDA implementation).
//
// A family target defines MLASERVE_KERNEL_HAS_CUDA=1 when its .cu is built; otherwise a
// request for the CUDA backend fails with FAILED_PRECONDITION naming the family.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

inline absl::Status NoCudaError(const char* family) {
  return absl::FailedPreconditionError(
      absl::StrCat("kernel family '", family, "' has no CUDA implementation in this build"));
}

}  // namespace mlaserve::kernels

#if defined(MLASERVE_KERNEL_HAS_CUDA)
#define MLASERVE_DISPATCH(family, ctx, cpu_call, cuda_call) \
  return ((ctx).backend == ::mlaserve::kernels::Backend::kCpu) ? (cpu_call) : (cuda_call)
#else
#define MLASERVE_DISPATCH(family, ctx, cpu_call, cuda_call)                   \
  return ((ctx).backend == ::mlaserve::kernels::Backend::kCpu) ? (cpu_call) \
                                                                : ::mlaserve::kernels::NoCudaError(family)
#endif
