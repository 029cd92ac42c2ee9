// Whether a GPU's DRAM is lean for its compute, the line on which some of kAuto's choices differ
// between the H100 and the H200 (the same SMs and clocks; 71% of the H200's copy bandwidth).
// Host code: the caller reads the value off its device (cuda::CurrentDeviceDramBytesPerSmClock,
// kernels/common/device_arch.h) and passes it to the planners, which stay pure functions.
#pragma once

namespace mlaserve::kernels {

// Nominal DRAM bytes per multiprocessor clock below which a GPU is lean: the H100 SXM's 12.8
// is, the H200's HBM3e is not.
inline constexpr double kLeanDramBytesPerSmClock = 14.0;

// 0 (not known, or a CPU) is not lean: the planners keep the choices measured on the H200.
constexpr bool IsLeanDram(double dram_bytes_per_sm_clock) {
  return dram_bytes_per_sm_clock > 0 && dram_bytes_per_sm_clock < kLeanDramBytesPerSmClock;
}

}  // namespace mlaserve::kernels
