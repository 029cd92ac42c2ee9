// kSm90 variant 0: cooperative 128 x 128 x 64 tiles, no cluster; and the host helpers.
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

int Sm90SmCount() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 1;
  constexpr int kMaxDevices = 64;
  static int cached[kMaxDevices] = {};
  if (device >= 0 && device < kMaxDevices && cached[device] > 0) return cached[device];
  int sms = 1;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (device >= 0 && device < kMaxDevices) cached[device] = sms;
  return sms;
}

bool Sm90Available() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;  // built for sm_90a: wgmma/TMA code runs on Hopper only
}

MLASERVE_MOE_SM90_VARIANT(0, Sm90Coop128x128)

}  // namespace mlaserve::kernels::moe_cuda
