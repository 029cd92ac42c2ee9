// The device side of kernels/moe/block_trace.h: a block's record in its launch's region (null:
// the launch is not traced). The block's thread 0 keeps its start and post-wait times in shared
// memory and writes the record once, after the PDL wait (pdl.cuh, rule 1): Record at the
// block's end, after a barrier the caller places (or where the block returns early).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::kernels::moe_trace {

// Words a block's record takes in a region: SM + 1 (0 = no record), start, after the wait, end.
inline constexpr int kRecordWords = 4;

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t SmId() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(s));
  return s;
}

// The times of a traced block, kept in shared memory by thread 0 until it writes them (in
// registers they would stay live through the kernel and cost the 64-register GEMVs a spill).
// Declare it `__shared__` in the kernel.
struct BlockClock {
  uint64_t start, wait;
  __device__ __forceinline__ void Begin(const uint64_t* region) {
    if (region != nullptr && threadIdx.x == 0) {
      start = GlobalTimerNs();
      wait = 0;
    }
  }
  __device__ __forceinline__ void Waited(const uint64_t* region) {
    if (region != nullptr && threadIdx.x == 0) wait = GlobalTimerNs();
  }
  // Thread 0 writes the block's record (after the PDL wait: rule 1).
  __device__ __forceinline__ void Record(uint64_t* region) const {
    if (region == nullptr || threadIdx.x != 0) return;
    uint64_t* r = region + kRecordWords * (static_cast<uint64_t>(blockIdx.y) * gridDim.x + blockIdx.x);
    r[0] = SmId() + 1u;
    r[1] = start;
    r[2] = wait;
    r[3] = GlobalTimerNs();
  }
};

}  // namespace mlaserve::kernels::moe_trace

namespace mlaserve::kernels::moe_cuda {
// The region of a launch about to be made (null while no trace is started, or past its caps):
// kernel "router", "gate_up" or "down", its grid, its shared slots.
uint64_t* BlockTraceRegion(const char* kernel, dim3 grid, int shared_slots);
}  // namespace mlaserve::kernels::moe_cuda
