// kv_fp8: DeepSeek's fp8 cache layouts -- the writer (quantize rows into paged fp8 slots) and
// the dequantizer (paged fp8 slots -> rows), for the latent KV cache and the V3.2 indexer
// key cache.
//
// Latent cache (FlashMLA's V3.2 layout), kFp8LatentBytes = 656 bytes per token, per token:
//   [0, 512)    512 e4m3 values of the latent (kv_lora_rank must be 512)
//   [512, 528)  4 f32 scales, one per 128 latent values
//   [528, 656)  64 bf16 rope values (not quantized)
// A page is kPageSize such tokens back to back: [num_pages, kPageSize, 656] bytes.
// Indexer key cache, per page: kPageSize * head_dim e4m3 values, then kPageSize f32 scales
// (one per token), so IndexKFp8PageBytes(head_dim) = kPageSize * (head_dim + 4) bytes.
//
// Scales are powers of two: scale = 2^ceil(log2(max(amax, 1e-4) / 448)) over the block's
// values (the floor keeps an all-zero block finite), and the stored value is
// e4m3(x / scale), rounded to nearest even and saturated at +-448. Dividing by a power of two is
// exact, so the CPU and CUDA writers produce the same bytes for the same (bf16) inputs.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

inline constexpr int kFp8LatentRank = 512;
inline constexpr int kFp8RopeDim = 64;
inline constexpr int kFp8ScaleBlock = 128;
inline constexpr int kFp8LatentBytes = kFp8LatentRank + 4 * (kFp8LatentRank / kFp8ScaleBlock) + 2 * kFp8RopeDim;
static_assert(kFp8LatentBytes == 656);
inline constexpr int64_t IndexKFp8PageBytes(int head_dim) {
  return static_cast<int64_t>(kPageSize) * (head_dim + 4);
}

// Which cache a call addresses.
enum class Fp8CacheKind : uint8_t {
  kLatent,  // 656-byte entries; rows are [512 latent | 64 rope]
  kIndexK,  // per-page SOA; rows are [head_dim]
};

// Writer: cache[slot_mapping[t]] = quantize(src[t]) (slot < 0: skip, used for padding).
struct Fp8CacheWriteParams {
  Fp8CacheKind kind = Fp8CacheKind::kLatent;
  DType dtype = DType::kF32;  // of src: kF32 (CPU) or kBF16 (CUDA)
  int num_tokens = 0;
  int head_dim = 0;           // kIndexK only (a multiple of 16); kLatent rows are 576 wide
  const void* src = nullptr;  // [num_tokens, row width], row stride src_stride elements
  int64_t src_stride = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  void* cache = nullptr;                  // bytes, layout above
  int num_pages = 0;
};

// Dequantizer: dst[t] = dequantize(cache[slot_mapping[t]]) (slot < 0: row left untouched).
struct Fp8CacheReadParams {
  Fp8CacheKind kind = Fp8CacheKind::kLatent;
  DType dtype = DType::kF32;  // of dst: kF32 (CPU) or kBF16 (CUDA)
  int num_tokens = 0;
  int head_dim = 0;
  const void* cache = nullptr;
  int num_pages = 0;
  const int64_t* slot_mapping = nullptr;
  void* dst = nullptr;        // [num_tokens, row width], row stride dst_stride elements
  int64_t dst_stride = 0;
};

// Row width in elements of the rows a call reads or writes.
inline int Fp8RowWidth(Fp8CacheKind kind, int head_dim) {
  return kind == Fp8CacheKind::kLatent ? kFp8LatentRank + kFp8RopeDim : head_dim;
}

absl::Status Fp8CacheWrite(const Fp8CacheWriteParams& p, const KernelContext& ctx);
absl::Status Fp8CacheWriteCpu(const Fp8CacheWriteParams& p);
absl::Status Fp8CacheWriteCuda(const Fp8CacheWriteParams& p, void* stream);

absl::Status Fp8CacheRead(const Fp8CacheReadParams& p, const KernelContext& ctx);
absl::Status Fp8CacheReadCpu(const Fp8CacheReadParams& p);
absl::Status Fp8CacheReadCuda(const Fp8CacheReadParams& p, void* stream);

// Host helpers shared by the CPU reference and the tests.
uint8_t FloatToFp8E4M3(float x);        // round to nearest even, saturating (NaN -> 0x7f)
float Fp8PowerOfTwoScale(float amax);   // the scale rule above

}  // namespace mlaserve::kernels
