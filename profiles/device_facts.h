// Device facts of a CUDA device, queried at worker start (no measurement: that is the
// tuner's job). Bandwidth and matrix rate are nominal — the spec-sheet peaks from the clocks,
// bus width and a per-architecture matrix rate per SM and clock, derated (0.9 of the DRAM
// peak counted read + write as the tuner measures it, 0.8 of the matrix peak) — so the
// cost-model fallback has something to work from.
#pragma once

#include "absl/status/statusor.h"
#include "profiles/gpu_profile.h"

namespace mlaserve::profiles {

// FAILED_PRECONDITION when this build has no CUDA; UNAVAILABLE when the device can't be read.
absl::StatusOr<DeviceFacts> QueryCudaDeviceFacts(int device);

// Dense bf16 matrix FLOPs per SM per clock by compute capability (major*10 + minor): 4096 on
// Hopper (H100 SXM: 989 TFLOP/s = 132 SMs x 1.83 GHz x 4096), 2048 on A100, 8192 on
// Blackwell, 1024 otherwise.
int NominalMatrixFlopsPerSmClock(int cc);

// Nominal facts from raw attributes (kHz clocks, bus width in bits); pure, for tests.
DeviceFacts NominalDeviceFacts(const std::string& name, int cc_major, int cc_minor, int sms,
                               int64_t smem_optin, int64_t sm_clock_khz, int64_t mem_clock_khz,
                               int bus_width_bits);

}  // namespace mlaserve::profiles
