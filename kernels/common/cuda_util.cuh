// Device building blocks shared by the CUDA attention kernels (mha_prefill, mla_prefill,
// mla_decode, merge_state, kv_pack, kv_cache): launch-error checks, bf16 packing, cp.async,
// ldmatrix and the m16n8k16 bf16 tensor-core product (sm_80+ warp-level MMA).
//
// Shared-memory tiles are row-major with 16-byte chunks XOR-swizzled by the row's low 3 bits
// (chunk' = chunk ^ (row & 7)), so that ldmatrix's 8 rows at one column chunk hit 8 different
// bank groups. Every tile row therefore holds a multiple of 8 chunks (64 bf16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::kernels::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr int kWarpSize = 32;
inline constexpr int kChunkBytes = 16;         // one cp.async / ldmatrix row / vector access
inline constexpr int kBf16PerChunk = kChunkBytes / 2;

// Host: the status of the last launch (cudaGetLastError), naming the kernel.
inline absl::Status LaunchStatus(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(kernel, " launch failed: ", cudaGetErrorString(err)));
}

inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// Host: `ptr` and every stride must allow 16-byte vector accesses of bf16 rows.
inline absl::Status RequireVectorAligned(const char* family, const char* name, const void* ptr) {
  if (reinterpret_cast<uintptr_t>(ptr) % kChunkBytes == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(family, ": ", name, " is not 16-byte aligned (the CUDA kernels use 16-byte loads)"));
}
inline absl::Status RequireStrideMultiple8(const char* family, const char* name, int64_t v) {
  if (v % kBf16PerChunk == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(family, ": ", name, "=", v,
                                                 " must be a multiple of 8 on CUDA (16-byte rows)"));
}

// Byte offset of (row, chunk) in a swizzled tile whose rows hold `chunks_per_row` chunks.
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int chunk, int chunks_per_row) {
  return static_cast<uint32_t>((row * chunks_per_row + (chunk ^ (row & 7))) * kChunkBytes);
}

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 zero-fills the destination (rows past the end,
// padded head dims) without reading `src`.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? kChunkBytes : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX2Trans(uint32_t addr, uint32_t (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX2(uint32_t addr, uint32_t (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// d += a (16x16, row) * b (16x8, col); bf16 inputs, f32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Reductions over the 4 threads of a quad (the threads sharing an MMA accumulator row).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace mlaserve::kernels::cuda
