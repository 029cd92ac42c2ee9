// Programmatic dependent launch (PDL, sm_90+) for the small kernels of a decode step.
//
// A decode step at batch 1 is ~500 kernels of a few microseconds each; between two of them
// the GPU drains the first grid, then launches and ramps up the second. A kernel launched
// through LaunchPdl carries cudaLaunchAttributeProgrammaticStreamSerialization: its CTAs may
// be scheduled as soon as every CTA of the previous kernel in the stream has called
// PdlReleaseDependents (or exited), so its launch and prologue overlap the previous kernel's
// tail. In exchange it must call PdlWaitForPrerequisites before it touches global memory:
// that wait returns once the previous grid has completed and its writes are visible. The
// contract of every kernel launched here:
//   1. PdlWaitForPrerequisites() before the first global read or write. Writes count too:
//      the previous kernel may still be reading a buffer this one overwrites. Only reading
//      kernel parameters and computing indices may come before it.
//   2. PdlReleaseDependents() anywhere (early is fine: it only lets the next kernel's CTAs be
//      scheduled; that kernel waits for this grid's completion before touching memory, by
//      rule 1, and a kernel that does not use PDL waits for it as before).
// Rule 1 must hold even for a kernel that reads nothing of its predecessor: the kernel after it
// waits only for it, so if it completed before its own predecessor, the ordering would break.
//   3. The exception to rule 1: memory that no kernel writes while the stream runs -- weights,
//      loaded before any step -- may be read or prefetched (PrefetchL2) before the wait. That
//      is how a GEMM streams its weight while the previous kernel still runs
//      (kernels/gemm/gemm_small_m_kernel.cu). Likewise memory whose last writer is at least two
//      kernels back, when the kernel in between waits before it releases its dependents
//      (PdlEnter): that writer has completed before this kernel could launch. Read such memory
//      with ld.global.cg (__ldcg: from L2, where completed kernels' writes are), not through L1.
//      A kernel that releases before its wait (rule 2's early release) breaks that chain for the
//      kernel right after it, which may then run beside this kernel's predecessor: the stream
//      path's combine + norm does so (kernels/moe/moe_rows.cu, CombineArgs::release_early), so
//      the kernel after it reads only weights before its wait.
// Kernels not launched through LaunchPdl (cuBLAS, cuDNN, mha_prefill) keep plain stream
// order; the waits are no-ops where no programmatic dependency exists.
//
// Works under stream capture: the dependency becomes a programmatic edge of the CUDA graph
// (decode graphs, model/step/decode_graph_runner.cc). MLASERVE_PDL=0 in the environment
// launches without the attribute (same results; for timing comparisons).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/env_switch.h"

namespace mlaserve::kernels::cuda {

// Device: blocks until the previous kernel of the stream has completed and its memory
// operations are visible (returns at once when the launch had no programmatic dependency).
__device__ __forceinline__ void PdlWaitForPrerequisites() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Device: lets the next kernel of the stream (if launched with PDL) be scheduled before this
// one has finished.
__device__ __forceinline__ void PdlReleaseDependents() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Device: asks L2 to fetch `bytes` of global memory at `p` without waiting for it (sm_90's bulk
// prefetch; a no-op elsewhere). `p` 16-byte aligned, `bytes` a multiple of 16. For weights a
// kernel is about to stream, issued before the wait (rule 3).
__device__ __forceinline__ void PrefetchL2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Device: the usual prologue: wait, then let the next kernel in.
__device__ __forceinline__ void PdlEnter() {
  PdlWaitForPrerequisites();
  PdlReleaseDependents();
}

// Host: whether launches on the current device carry the PDL attribute (compute capability
// 9.0 or newer, and MLASERVE_PDL is not "0"). Cached per device.
inline bool PdlEnabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_PDL");
  if (disabled) return false;
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};  // 0 unknown, 1 yes, 2 no
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return false;
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      return false;
    }
    v = major >= 9 ? 1 : 2;
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// Host: a launch's shape. cluster: thread-block cluster dimensions (sm_90); {1, 1, 1} = none.
struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem_bytes = 0;
  cudaStream_t stream = nullptr;
  dim3 cluster = dim3(1, 1, 1);
};

// Host: launches `kernel` with PDL (where PdlEnabled) and the cluster shape, returning the
// launch's status naming `name`. The kernel must follow the contract above.
template <typename... KernelArgs, typename... Args>
absl::Status LaunchPdl(const char* name, const LaunchShape& shape, void (*kernel)(KernelArgs...),
                       Args&&... args) {
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (PdlEnabled()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (shape.cluster.x * shape.cluster.y * shape.cluster.z > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = shape.cluster.x;
    attrs[n].val.clusterDim.y = shape.cluster.y;
    attrs[n].val.clusterDim.z = shape.cluster.z;
    ++n;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.smem_bytes;
  config.stream = shape.stream;
  config.attrs = n > 0 ? attrs : nullptr;
  config.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();  // the launch failed; do not leave it to the next check
  return absl::InternalError(absl::StrCat(name, " launch failed: ", cudaGetErrorString(err)));
}

}  // namespace mlaserve::kernels::cuda
