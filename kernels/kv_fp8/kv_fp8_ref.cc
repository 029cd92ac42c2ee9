// kv_fp8 CPU reference (also the CPU backend): quantize / dequantize one row per token with the
// scale rule of api.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/numeric.h"
#include "kernels/common/param_check.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/kv_fp8/kv_fp8_check.h"

namespace mlaserve::kernels {

uint8_t FloatToFp8E4M3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  int code;
  if (a < 0.015625f) {  // below the smallest normal (2^-6): subnormal steps of 2^-9
    code = static_cast<int>(std::nearbyint(a * 512.0f));  // 8 lands on the first normal code
  } else {
    int e2;
    std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1) => a in [2^(e2-1), 2^e2)
    const int e = e2 - 1;
    const float q = std::nearbyint(std::ldexp(a, 3 - e));  // mantissa steps of 2^(e-3), in [8, 16]
    code = ((e + 7) << 3) + static_cast<int>(q) - 8;
  }
  return static_cast<uint8_t>(sign | std::min(code, 0x7e));  // saturate at 448
}

float Fp8PowerOfTwoScale(float amax) {
  const float s = std::max(amax, 1e-4f) / 448.0f;
  int e;
  const float m = std::frexp(s, &e);
  return m == 0.5f ? std::ldexp(1.0f, e - 1) : std::ldexp(1.0f, e);
}

namespace {

// Byte pointers of one token's values and scales in either layout.
struct SlotView {
  uint8_t* values;
  float* scales;
  uint16_t* rope;  // latent only
};

SlotView Slot(Fp8CacheKind kind, int head_dim, void* cache, int64_t slot) {
  auto* base = static_cast<uint8_t*>(cache);
  if (kind == Fp8CacheKind::kLatent) {
    uint8_t* e = base + slot * kFp8LatentBytes;
    return {e, reinterpret_cast<float*>(e + kFp8LatentRank),
            reinterpret_cast<uint16_t*>(e + kFp8LatentRank + 4 * (kFp8LatentRank / kFp8ScaleBlock))};
  }
  uint8_t* page = base + (slot / kPageSize) * IndexKFp8PageBytes(head_dim);
  const int64_t i = slot % kPageSize;
  return {page + i * head_dim, reinterpret_cast<float*>(page + static_cast<int64_t>(kPageSize) * head_dim) + i,
          nullptr};
}

absl::Status CheckSlot(int64_t slot, int num_pages, int t) {
  if (slot >= static_cast<int64_t>(num_pages) * kPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("kv_fp8: slot_mapping[", t, "]=", slot,
                                                   " is past the cache's ", num_pages, " pages"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Fp8CacheWriteCpu(const Fp8CacheWriteParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("kv_fp8", "dtype", p.dtype));
  RETURN_IF_ERROR(kv_fp8_internal::CheckFp8(p.kind, p.head_dim, p.num_tokens, p.cache, p.slot_mapping, p.src, p.src_stride));
  const int block = p.kind == Fp8CacheKind::kLatent ? kFp8ScaleBlock : p.head_dim;
  const int quantized = p.kind == Fp8CacheKind::kLatent ? kFp8LatentRank : p.head_dim;
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    RETURN_IF_ERROR(CheckSlot(slot, p.num_pages, t));
    const float* row = static_cast<const float*>(p.src) + t * p.src_stride;
    const SlotView v = Slot(p.kind, p.head_dim, p.cache, slot);
    for (int b0 = 0; b0 < quantized; b0 += block) {
      float amax = 0.0f;
      for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(row[b0 + i]));
      const float scale = Fp8PowerOfTwoScale(amax);
      v.scales[b0 / block] = scale;
      for (int i = 0; i < block; ++i) v.values[b0 + i] = FloatToFp8E4M3(row[b0 + i] / scale);
    }
    if (v.rope != nullptr) {
      for (int i = 0; i < kFp8RopeDim; ++i) v.rope[i] = FloatToBf16(row[kFp8LatentRank + i]);
    }
  }
  return absl::OkStatus();
}

absl::Status Fp8CacheReadCpu(const Fp8CacheReadParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("kv_fp8", "dtype", p.dtype));
  RETURN_IF_ERROR(kv_fp8_internal::CheckFp8(p.kind, p.head_dim, p.num_tokens, p.cache, p.slot_mapping, p.dst, p.dst_stride));
  const int block = p.kind == Fp8CacheKind::kLatent ? kFp8ScaleBlock : p.head_dim;
  const int quantized = p.kind == Fp8CacheKind::kLatent ? kFp8LatentRank : p.head_dim;
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    RETURN_IF_ERROR(CheckSlot(slot, p.num_pages, t));
    float* row = static_cast<float*>(p.dst) + t * p.dst_stride;
    const SlotView v = Slot(p.kind, p.head_dim, const_cast<void*>(p.cache), slot);
    for (int i = 0; i < quantized; ++i) row[i] = Fp8E4M3ToFloat(v.values[i]) * v.scales[i / block];
    if (v.rope != nullptr) {
      for (int i = 0; i < kFp8RopeDim; ++i) row[kFp8LatentRank + i] = Bf16ToFloat(v.rope[i]);
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
