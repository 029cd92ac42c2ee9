// Device facts and the dense reference rate, measured on the GPU for mlaserve-tune.
#pragma once

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "profiles/gpu_profile.h"

namespace mlaserve::profiles::tune {

// Name, SMs, opt-in shared memory (queried), copy bandwidth (a 1 GiB device copy, read +
// written bytes) and the bf16 matrix rate (an 8192^3 GEMM through kernels::Gemm).
absl::StatusOr<DeviceFacts> MeasureDeviceFacts(int device, const kernels::KernelContext& ctx);

// Microseconds of an m x 4096 x 4096 bf16 GEMM (median of 7): the dense reference of
// PrefillEstimate and the chunk-size choice.
absl::StatusOr<double> DenseGemmUs(int m, const kernels::KernelContext& ctx);

}  // namespace mlaserve::profiles::tune
