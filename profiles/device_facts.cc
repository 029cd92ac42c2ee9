// Device facts: nominal rates, and the CUDA query when this build has the CUDA runtime.
#include "profiles/device_facts.h"

#include "absl/strings/str_cat.h"

#if defined(MLASERVE_PROFILES_HAS_CUDA)
#include <cuda_runtime.h>
#endif

namespace mlaserve::profiles {

int NominalMatrixFlopsPerSmClock(int cc) {
  if (cc >= 100) return 8192;
  if (cc >= 90) return 4096;
  if (cc == 80) return 2048;
  return 1024;
}

DeviceFacts NominalDeviceFacts(const std::string& name, int cc_major, int cc_minor, int sms,
                               int64_t smem_optin, int64_t sm_clock_khz, int64_t mem_clock_khz,
                               int bus_width_bits) {
  DeviceFacts d;
  d.name = name;
  d.compute_capability = absl::StrCat(cc_major, ".", cc_minor);
  d.sm_count = sms;
  d.smem_optin_bytes = smem_optin;
  // DRAM peak = 2 transfers per clock x bus width (H100: 2 x 2.619 GHz x 640 B = 3.35 TB/s).
  // A device copy counted as bytes read + written reaches about 0.9 of it (3.0 TB/s measured).
  const double peak_gbs = 2.0 * static_cast<double>(mem_clock_khz) * 1e3 * (bus_width_bits / 8.0) / 1e9;
  d.copy_gbs = 0.9 * peak_gbs;
  const double peak_tflops = static_cast<double>(sms) * static_cast<double>(sm_clock_khz) * 1e3 *
                             NominalMatrixFlopsPerSmClock(cc_major * 10 + cc_minor) / 1e12;
  d.matrix_tflops = 0.8 * peak_tflops;
  return d;
}

#if defined(MLASERVE_PROFILES_HAS_CUDA)
absl::StatusOr<DeviceFacts> QueryCudaDeviceFacts(int device) {
  cudaDeviceProp prop;
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cannot read CUDA device ", device, ": ",
                                               cudaGetErrorString(e)));
  }
  int smem = 0, clock = 0, mem_clock = 0, bus = 0;
  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, device);
  cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, device);
  return NominalDeviceFacts(prop.name, prop.major, prop.minor, prop.multiProcessorCount, smem,
                            clock, mem_clock, bus);
}
#else
absl::StatusOr<DeviceFacts> QueryCudaDeviceFacts(int device) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot query CUDA device ", device, ": this build has no CUDA runtime"));
}
#endif

}  // namespace mlaserve::profiles
