// kv_fp8 CUDA backend. The writer gives each scale block (128 latent values, or one indexer key
// row) to one warp: lanes load their values, reduce the block's amax with shuffles, and store
// e4m3 bytes and the scale; the rope tail of a latent row is copied by the warp of block 0.
// The reader is one thread per 8 output values. Both are memory-bound and small next to the
// attention that reads the cache, so they stay simple.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/kv_fp8/api.h"
#include "kernels/kv_fp8/fp8_util.cuh"
#include "kernels/kv_fp8/kv_fp8_check.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / cuda::kWarpSize;
constexpr int kLatentScales = kFp8LatentRank / kFp8ScaleBlock;
constexpr int kScaleOffset = kFp8LatentRank;
constexpr int kRopeOffset = kFp8LatentRank + 4 * kLatentScales;

__device__ __forceinline__ int64_t NumSlots(int num_pages) {
  return static_cast<int64_t>(num_pages) * kPageSize;
}

__global__ void __launch_bounds__(kThreads) Fp8WriteKernel(const __grid_constant__ Fp8CacheWriteParams p) {
  const bool latent = p.kind == Fp8CacheKind::kLatent;
  const int blocks_per_token = latent ? kLatentScales : 1;
  const int block = latent ? kFp8ScaleBlock : p.head_dim;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / cuda::kWarpSize;
  const int lane = threadIdx.x % cuda::kWarpSize;
  if (item >= static_cast<int64_t>(p.num_tokens) * blocks_per_token) return;
  const int t = static_cast<int>(item / blocks_per_token), blk = static_cast<int>(item % blocks_per_token);
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= NumSlots(p.num_pages)) return;
  const auto* row = static_cast<const __nv_bfloat16*>(p.src) + t * p.src_stride + blk * block;
  float amax = 0.0f;
  for (int i = lane; i < block; i += cuda::kWarpSize) amax = fmaxf(amax, fabsf(__bfloat162float(row[i])));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = fp8::PowerOfTwoScale(amax);
  auto* cache = static_cast<uint8_t*>(p.cache);
  uint8_t* values;
  float* scale_slot;
  if (latent) {
    uint8_t* e = cache + slot * kFp8LatentBytes;
    values = e + blk * kFp8ScaleBlock;
    scale_slot = reinterpret_cast<float*>(e + kScaleOffset) + blk;
    if (blk == 0) {
      const auto* rope = reinterpret_cast<const uint32_t*>(
          static_cast<const __nv_bfloat16*>(p.src) + t * p.src_stride + kFp8LatentRank);
      reinterpret_cast<uint32_t*>(e + kRopeOffset)[lane] = rope[lane];  // 32 x 2 bf16
    }
  } else {
    uint8_t* page = cache + (slot / kPageSize) * IndexKFp8PageBytes(p.head_dim);
    values = page + (slot % kPageSize) * p.head_dim;
    scale_slot = reinterpret_cast<float*>(page + static_cast<int64_t>(kPageSize) * p.head_dim) + slot % kPageSize;
  }
  for (int i = lane; i < block; i += cuda::kWarpSize)
    values[i] = fp8::ToE4M3(__fdiv_rn(__bfloat162float(row[i]), scale));
  if (lane == 0) *scale_slot = scale;
}

// One thread per 8 output values of a row (the row width is a multiple of 8).
__global__ void __launch_bounds__(kThreads) Fp8ReadKernel(const __grid_constant__ Fp8CacheReadParams p) {
  const bool latent = p.kind == Fp8CacheKind::kLatent;
  const int width = latent ? kFp8LatentRank + kFp8RopeDim : p.head_dim;
  const int vecs = width / 8;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= static_cast<int64_t>(p.num_tokens) * vecs) return;
  const int t = static_cast<int>(item / vecs), v = static_cast<int>(item % vecs);
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= NumSlots(p.num_pages)) return;
  const auto* cache = static_cast<const uint8_t*>(p.cache);
  auto* dst = static_cast<__nv_bfloat16*>(p.dst) + t * p.dst_stride + v * 8;
  uint4 out;
  if (latent) {
    const uint8_t* e = cache + slot * kFp8LatentBytes;
    if (v * 8 < kFp8LatentRank) {
      const float scale = reinterpret_cast<const float*>(e + kScaleOffset)[v * 8 / kFp8ScaleBlock];
      out = fp8::E4M3x8ToBf16x8(*reinterpret_cast<const uint2*>(e + v * 8), scale);
    } else {
      out = reinterpret_cast<const uint4*>(e + kRopeOffset)[v - kFp8LatentRank / 8];
    }
  } else {
    const uint8_t* page = cache + (slot / kPageSize) * IndexKFp8PageBytes(p.head_dim);
    const float scale =
        reinterpret_cast<const float*>(page + static_cast<int64_t>(kPageSize) * p.head_dim)[slot % kPageSize];
    out = fp8::E4M3x8ToBf16x8(*reinterpret_cast<const uint2*>(page + (slot % kPageSize) * p.head_dim + v * 8), scale);
  }
  // dst rows need not be 16-byte aligned: store as four 4-byte words.
  auto* d32 = reinterpret_cast<uint32_t*>(dst);
  d32[0] = out.x; d32[1] = out.y; d32[2] = out.z; d32[3] = out.w;
}

absl::Status RequireBf16(DType t) {
  if (t == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("kv_fp8: the CUDA backend takes bf16 rows, got dtype=", DTypeName(t)));
}

}  // namespace

absl::Status Fp8CacheWriteCuda(const Fp8CacheWriteParams& p, void* stream) {
  RETURN_IF_ERROR(RequireBf16(p.dtype));
  RETURN_IF_ERROR(kv_fp8_internal::CheckFp8(p.kind, p.head_dim, p.num_tokens, p.cache,
                                            p.slot_mapping, p.src, p.src_stride));
  if (p.kind == Fp8CacheKind::kLatent && (reinterpret_cast<uintptr_t>(p.src) % 4 != 0 || p.src_stride % 2 != 0)) {
    return absl::InvalidArgumentError("kv_fp8: latent src rows must be 4-byte aligned (even stride)");
  }
  if (p.num_tokens == 0) return absl::OkStatus();
  const int64_t items = static_cast<int64_t>(p.num_tokens) * (p.kind == Fp8CacheKind::kLatent ? kLatentScales : 1);
  const auto blocks = static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
  Fp8WriteKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return cuda::LaunchStatus("Fp8WriteKernel");
}

absl::Status Fp8CacheReadCuda(const Fp8CacheReadParams& p, void* stream) {
  RETURN_IF_ERROR(RequireBf16(p.dtype));
  RETURN_IF_ERROR(kv_fp8_internal::CheckFp8(p.kind, p.head_dim, p.num_tokens, p.cache,
                                            p.slot_mapping, p.dst, p.dst_stride));
  if (reinterpret_cast<uintptr_t>(p.dst) % 4 != 0 || p.dst_stride % 2 != 0) {
    return absl::InvalidArgumentError("kv_fp8: dst rows must be 4-byte aligned (even stride)");
  }
  if (p.num_tokens == 0) return absl::OkStatus();
  const int64_t items = static_cast<int64_t>(p.num_tokens) * (Fp8RowWidth(p.kind, p.head_dim) / 8);
  const auto blocks = static_cast<unsigned>((items + kThreads - 1) / kThreads);
  Fp8ReadKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return cuda::LaunchStatus("Fp8ReadKernel");
}

}  // namespace mlaserve::kernels
