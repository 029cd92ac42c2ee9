// rope CUDA backend: one thread per rotated pair (token, head, i) over x's heads and then k's
// (one launch for MLA's q and k_pe), f32 math on the f32 cos/sin table, in place or into `out`;
// with the fused latent norm (k_norm_weight) one warp per token (bf16, aligned: RopeNormWarpKernel)
// or one block per token: RMSNorm of its k row's first k_norm_dim values (kernels/norm's bf16
// rounding), then its pairs, then (with `cache`) the finished row into its cache slot; with absorb_w, more blocks after the token blocks compute
// the absorbed query's latent part (q_nope . W_UK per head: AbsorbBlock, one (head, 64-row) unit
// a block, or AbsorbBlockStaged, several a block where one-unit blocks would take more than one
// wave). Launched with PDL
// (kernels/common/pdl.cuh). A position outside [0, max_position) cannot be
// reported without a host sync: that token is left unrotated (with `out`: its slice there is
// not written); callers validate, and the CPU backend refuses it.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/bf16_vec.cuh"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/rope/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

// Rotates pair i of head h of token t (x's heads, then k's).
template <typename T>
__device__ __forceinline__ void RotatePair(const RopeParams& p, int64_t t, int h, int i) {
  const int half = p.rot_dim / 2;
  const int pos = p.positions[t];
  if (pos < 0 || pos >= p.max_position) return;
  // Pair i is (x[2i], x[2i+1]) when interleaved, (x[i], x[i+half]) otherwise.
  const int first_step = p.interleaved ? 2 : 1;
  const int second_offset = p.interleaved ? 1 : half;
  const float* cs = p.cos_sin + static_cast<int64_t>(pos) * p.rot_dim;
  const float c = cs[i], s = cs[half + i];
  const T* src;
  T* dst;
  if (h < p.num_heads) {
    src = static_cast<const T*>(p.x) + t * p.token_stride + h * p.head_stride + p.offset;
    dst = p.out != nullptr ? static_cast<T*>(p.out) + t * p.out_token_stride +
                                 h * p.out_head_stride + p.out_offset
                           : static_cast<T*>(p.x) + t * p.token_stride + h * p.head_stride +
                                 p.offset;
  } else {
    dst = static_cast<T*>(p.k) + t * p.k_token_stride + (h - p.num_heads) * p.k_head_stride +
          p.k_offset;
    src = dst;
  }
  const int a = i * first_step, b = a + second_offset;
  const float x0 = cuda::ToF32(src[a]), x1 = cuda::ToF32(src[b]);
  dst[a] = cuda::FromF32<T>(x0 * c - x1 * s);
  dst[b] = cuda::FromF32<T>(x1 * c + x0 * s);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) RopeKernel(const __grid_constant__ RopeParams p) {
  const int half = p.rot_dim / 2;
  const int heads = p.num_heads + (p.k != nullptr ? p.k_heads : 0);
  const int64_t total = static_cast<int64_t>(p.num_tokens) * heads * half;
  cuda::PdlEnter();
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t th = idx / half;
    RotatePair<T>(p, th / heads, static_cast<int>(th % heads), static_cast<int>(idx % half));
  }
}

// The absorbed query's blocks. Block (h, chunk) owns rows [chunk * rows_per_block, +rows_per_block)
// of head h's [n, k] weight: it loads them into registers before the PDL wait (a weight:
// kernels/common/pdl.cuh, rule 3), so the load overlaps the kernel before, then runs every token
// over them. A row's k values are read by `lanes` lanes (k / 8 rounded up to a power of two), one
// 16-byte vector each, so a warp reads 32 / lanes whole rows per pass -- 512 contiguous bytes
// where k is a power of two times 8 -- and kAbsorbPasses passes.
constexpr int kAbsorbPasses = 4;
constexpr int kAbsorbTokenGroup = 4;  // tokens whose query vectors are loaded together

struct AbsorbLayout {
  int lanes = 1;           // lanes per weight row
  int rows_per_pass = 32;  // rows a warp reads per pass
  int rows_per_block = 0;
  int chunks = 0;          // blocks per head
};

__host__ __device__ inline AbsorbLayout AbsorbLayoutFor(int n, int k) {
  AbsorbLayout l;
  while (l.lanes * 8 < k) l.lanes *= 2;  // k <= 256: at most 32
  l.rows_per_pass = 32 / l.lanes;
  l.rows_per_block = (kThreads / 32) * kAbsorbPasses * l.rows_per_pass;
  l.chunks = (n + l.rows_per_block - 1) / l.rows_per_block;
  return l;
}

// One unit of the absorbed query: head h's rows [chunk * rows_per_block, +rows_per_block), as
// this thread reads them (its lane's 16-byte vector `seg` of kAbsorbPasses rows).
struct AbsorbUnit {
  int h = 0;
  int row0 = 0;  // this thread's first row
  int seg = 0;
  bool active = false;
  const __nv_bfloat16* w = nullptr;  // this thread's vector of the unit's first row
};

__device__ __forceinline__ AbsorbUnit AbsorbUnitOf(const RopeParams& p, const AbsorbLayout& l, int unit) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  AbsorbUnit u;
  u.h = unit / l.chunks;
  const int chunk = unit % l.chunks;
  u.seg = lane % l.lanes;
  u.active = u.seg * 8 < p.absorb_k;
  u.row0 = chunk * l.rows_per_block + warp * kAbsorbPasses * l.rows_per_pass + lane / l.lanes;
  u.w = static_cast<const __nv_bfloat16*>(p.absorb_w) + static_cast<int64_t>(u.h) * p.absorb_n * p.absorb_k + u.seg * 8;
  return u;
}

// This thread's 16-byte vector of pass s's weight row of unit u; null past the rows or the row's
// width (the vector is then zero).
__device__ __forceinline__ const uint4* AbsorbWeightVec(const RopeParams& p, const AbsorbLayout& l, const AbsorbUnit& u,
                                                        int s) {
  const int r = u.row0 + s * l.rows_per_pass;
  return u.active && r < p.absorb_n ? reinterpret_cast<const uint4*>(u.w + static_cast<int64_t>(r) * p.absorb_k)
                                    : nullptr;
}

// Every token over one unit's weight vectors (in registers): the rows' dot products with the
// head's q_nope, summed over the row's lanes, rounded once into out.
__device__ __forceinline__ void AbsorbTokens(const RopeParams& p, const AbsorbLayout& l, const AbsorbUnit& u,
                                             const uint4 (&wv)[kAbsorbPasses]) {
  const auto* x = static_cast<const __nv_bfloat16*>(p.x) + u.h * p.head_stride + u.seg * 8;
  auto* out = static_cast<__nv_bfloat16*>(p.out) + u.h * p.out_head_stride;
  for (int t0 = 0; t0 < p.num_tokens; t0 += kAbsorbTokenGroup) {
    uint4 xv[kAbsorbTokenGroup];
#pragma unroll
    for (int k = 0; k < kAbsorbTokenGroup; ++k) {
      const int t = t0 + k;
      xv[k] = u.active && t < p.num_tokens ? *reinterpret_cast<const uint4*>(x + t * p.token_stride)
                                           : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kAbsorbTokenGroup; ++k) {
      const int t = t0 + k;
      if (t >= p.num_tokens) break;  // the same for the whole block
#pragma unroll
      for (int s = 0; s < kAbsorbPasses; ++s) {
        float sum = cuda::Dot8(wv[s], xv[k], 0.0f);
        for (int o = l.lanes / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const int r = u.row0 + s * l.rows_per_pass;
        if (u.seg == 0 && r < p.absorb_n) out[t * p.out_token_stride + r] = __float2bfloat16(sum);
      }
    }
  }
}

// A block of one unit: its weight vectors in registers before the PDL wait.
__device__ void AbsorbBlock(const RopeParams& p, int block) {
  const AbsorbLayout l = AbsorbLayoutFor(p.absorb_n, p.absorb_k);
  const AbsorbUnit u = AbsorbUnitOf(p, l, block);
  uint4 wv[kAbsorbPasses];
#pragma unroll
  for (int s = 0; s < kAbsorbPasses; ++s) {
    const uint4* v = AbsorbWeightVec(p, l, u, s);
    wv[s] = v != nullptr ? __ldg(v) : make_uint4(0, 0, 0, 0);
  }
  cuda::PdlEnter();
  AbsorbTokens(p, l, u, wv);
}

// A block of `units` units (heads x chunks beyond one wave of one-unit blocks: V3's 128 heads
// are 1024 units): every unit's weight vectors go to shared memory by cp.async before the PDL
// wait, so the whole weight is in flight while the kernel before runs, where one-unit blocks
// would load theirs a wave at a time after it. Each thread reads back only the vectors it
// copied (its own cp.async group: no block barrier), then runs the tokens unit by unit; the
// arithmetic is AbsorbBlock's, so the bits are too.
constexpr int kAbsorbMaxUnits = 8;
constexpr int kAbsorbUnitSmem = kAbsorbPasses * kThreads * static_cast<int>(sizeof(uint4));  // 16 KiB

__device__ void AbsorbBlockStaged(const RopeParams& p, int block, int units) {
  extern __shared__ uint4 absorb_stage[];  // [units][kAbsorbPasses][kThreads]
  const AbsorbLayout l = AbsorbLayoutFor(p.absorb_n, p.absorb_k);
  const int first = block * units;
  const int n = min(units, p.num_heads * l.chunks - first);
  for (int k = 0; k < n; ++k) {
    const AbsorbUnit u = AbsorbUnitOf(p, l, first + k);
#pragma unroll
    for (int s = 0; s < kAbsorbPasses; ++s) {
      const uint4* v = AbsorbWeightVec(p, l, u, s);
      cuda::CpAsync16(cuda::SmemAddress(&absorb_stage[(k * kAbsorbPasses + s) * kThreads + threadIdx.x]),
                      v != nullptr ? static_cast<const void*>(v) : p.absorb_w, v != nullptr);
    }
  }
  cuda::CpAsyncCommit();
  cuda::PdlEnter();
  cuda::CpAsyncWait<0>();
  for (int k = 0; k < n; ++k) {
    const AbsorbUnit u = AbsorbUnitOf(p, l, first + k);
    uint4 wv[kAbsorbPasses];
#pragma unroll
    for (int s = 0; s < kAbsorbPasses; ++s) wv[s] = absorb_stage[(k * kAbsorbPasses + s) * kThreads + threadIdx.x];
    AbsorbTokens(p, l, u, wv);
  }
}

// One block per token: the k row's latent norm, then every pair of the token; with kAbsorb the
// absorbed query's blocks follow the token blocks. (A kernel of its own: the absorbed query's
// registers cost the token blocks occupancy, which a prefill of thousands of them pays.)
template <typename T, bool kAbsorb>
__global__ void __launch_bounds__(kThreads) RopeNormKernel(const __grid_constant__ RopeParams p) {
  if constexpr (kAbsorb) {
    if (blockIdx.x >= static_cast<unsigned>(p.num_tokens)) {
      AbsorbBlock(p, static_cast<int>(blockIdx.x) - p.num_tokens);
      return;
    }
  }
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const int half = p.rot_dim / 2;
  const int heads = p.num_heads + p.k_heads;
  T* row = static_cast<T*>(p.k) + t * p.k_token_stride;
  const T* w = static_cast<const T*>(p.k_norm_weight);
  cuda::PdlEnter();
  float ss = 0.0f;
  for (int j = threadIdx.x; j < p.k_norm_dim; j += kThreads) {
    const float v = cuda::ToF32(row[j]);
    ss += v * v;
  }
  ss = cuda::BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / p.k_norm_dim + p.k_norm_eps);
  for (int j = threadIdx.x; j < p.k_norm_dim; j += kThreads) {
    // As RmsNormKernel: normalise in f32, round, then scale.
    const float n = cuda::ToF32(cuda::FromF32<T>(cuda::ToF32(row[j]) * inv));
    row[j] = cuda::FromF32<T>(cuda::ToF32(w[j]) * n);
  }
  for (int idx = threadIdx.x; idx < heads * half; idx += kThreads) {
    RotatePair<T>(p, t, idx / half, idx % half);
  }
  if (p.cache == nullptr) return;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.cache_slots) return;  // the same for the whole block
  __syncthreads();  // the row's normed and rotated values, written by every thread above
  T* dst = static_cast<T*>(p.cache) + slot * p.cache_entry_dim;
  const bool vec = p.cache_entry_dim * sizeof(T) % sizeof(uint4) == 0 &&
                   (reinterpret_cast<uintptr_t>(row) | reinterpret_cast<uintptr_t>(dst)) % sizeof(uint4) == 0;
  if (vec) {
    const int n = static_cast<int>(p.cache_entry_dim * sizeof(T) / sizeof(uint4));
    for (int j = threadIdx.x; j < n; j += kThreads) {
      reinterpret_cast<uint4*>(dst)[j] = reinterpret_cast<const uint4*>(row)[j];
    }
  } else {
    for (int j = threadIdx.x; j < p.cache_entry_dim; j += kThreads) dst[j] = row[j];
  }
}

// The fused-norm form with one warp per token (bf16, WarpTokensApply): eight tokens a block,
// no block barriers (the block form's two for a token's few hundred bytes left SMs waiting:
// 27 us a layer for a 4096-token prefill on an H200). Vectors of 8 values: the norm's row in
// 16-byte loads kept in registers, a warp-shuffle sum; the pairs four at a time (8-byte halves
// or one 16-byte interleaved run, float4 cos and sin); then, after a __syncwarp, the finished
// row into its cache slot. Each value's arithmetic is the block form's; only the order of the
// norm's sum of squares differs.
constexpr int kWarpTokens = kThreads / 32;
constexpr int kWarpNormVecs = 8;  // 16-byte vectors per lane: k_norm_dim <= 2048

__device__ __forceinline__ void RotateFour(float4 c, float4 s, float (&a)[4], float (&b)[4]) {
  const float cv[4] = {c.x, c.y, c.z, c.w}, sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float x0 = a[i], x1 = b[i];
    a[i] = x0 * cv[i] - x1 * sv[i];
    b[i] = x1 * cv[i] + x0 * sv[i];
  }
}

// Pairs [4g, 4g + 4) of one head at src (rotated into dst) for position pos.
__device__ __forceinline__ void RotateGroup(const RopeParams& p, const __nv_bfloat16* src, __nv_bfloat16* dst,
                                            const float* cs, int g) {
  const int half = p.rot_dim / 2;
  const float4 c = *reinterpret_cast<const float4*>(cs + 4 * g);
  const float4 sn = *reinterpret_cast<const float4*>(cs + half + 4 * g);
  float a[4], b[4];
  if (p.interleaved) {  // (x[2i], x[2i+1]): one run of 8 values
    const uint4 v = *reinterpret_cast<const uint4*>(src + 8 * g);
    const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(v2[i]);
      a[i] = f.x;
      b[i] = f.y;
    }
    RotateFour(c, sn, a, b);
    uint4 o;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) o2[i] = __floats2bfloat162_rn(a[i], b[i]);
    *reinterpret_cast<uint4*>(dst + 8 * g) = o;
  } else {  // (x[i], x[i + half]): two runs of 4 values
    const uint2 va = *reinterpret_cast<const uint2*>(src + 4 * g);
    const uint2 vb = *reinterpret_cast<const uint2*>(src + half + 4 * g);
    const auto* a2 = reinterpret_cast<const __nv_bfloat162*>(&va);
    const auto* b2 = reinterpret_cast<const __nv_bfloat162*>(&vb);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 fa = __bfloat1622float2(a2[i]), fb = __bfloat1622float2(b2[i]);
      a[2 * i] = fa.x;
      a[2 * i + 1] = fa.y;
      b[2 * i] = fb.x;
      b[2 * i + 1] = fb.y;
    }
    RotateFour(c, sn, a, b);
    uint2 oa, ob;
    auto* oa2 = reinterpret_cast<__nv_bfloat162*>(&oa);
    auto* ob2 = reinterpret_cast<__nv_bfloat162*>(&ob);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      oa2[i] = __floats2bfloat162_rn(a[2 * i], a[2 * i + 1]);
      ob2[i] = __floats2bfloat162_rn(b[2 * i], b[2 * i + 1]);
    }
    *reinterpret_cast<uint2*>(dst + 4 * g) = oa;
    *reinterpret_cast<uint2*>(dst + half + 4 * g) = ob;
  }
}

__device__ void WarpToken(const RopeParams& p, int64_t t, int lane) {
  auto* row = static_cast<__nv_bfloat16*>(p.k) + t * p.k_token_stride;
  const auto* w = static_cast<const __nv_bfloat16*>(p.k_norm_weight);
  const int vecs = p.k_norm_dim / 8;
  uint4 v[kWarpNormVecs];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarpNormVecs; ++i) {
    const int at = lane + 32 * i;
    if (at >= vecs) break;
    v[i] = reinterpret_cast<const uint4*>(row)[at];
    const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&v[i]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(v2[k]);
      ss += f.x * f.x;
      ss += f.y * f.y;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / p.k_norm_dim + p.k_norm_eps);
#pragma unroll
  for (int i = 0; i < kWarpNormVecs; ++i) {
    const int at = lane + 32 * i;
    if (at >= vecs) break;
    const uint4 wv = reinterpret_cast<const uint4*>(w)[at];
    const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&v[i]);
    const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
    uint4 o;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // As RmsNormKernel: normalise in f32, round, then scale.
      const float2 f = __bfloat1622float2(v2[k]), wf = __bfloat1622float2(w2[k]);
      const float2 n = __bfloat1622float2(__floats2bfloat162_rn(f.x * inv, f.y * inv));
      o2[k] = __floats2bfloat162_rn(wf.x * n.x, wf.y * n.y);
    }
    reinterpret_cast<uint4*>(row)[at] = o;
  }
  const int pos = p.positions[t];
  if (pos >= 0 && pos < p.max_position) {
    const float* cs = p.cos_sin + static_cast<int64_t>(pos) * p.rot_dim;
    const int groups = p.rot_dim / 8;  // of 4 pairs
    const int heads = p.num_heads + p.k_heads;
    for (int idx = lane; idx < heads * groups; idx += 32) {
      const int h = idx / groups, g = idx - h * groups;
      const __nv_bfloat16* src;
      __nv_bfloat16* dst;
      if (h < p.num_heads) {
        src = static_cast<const __nv_bfloat16*>(p.x) + t * p.token_stride + h * p.head_stride + p.offset;
        dst = p.out != nullptr ? static_cast<__nv_bfloat16*>(p.out) + t * p.out_token_stride +
                                     h * p.out_head_stride + p.out_offset
                               : const_cast<__nv_bfloat16*>(src);
      } else {
        dst = row + (h - p.num_heads) * p.k_head_stride + p.k_offset;
        src = dst;
      }
      RotateGroup(p, src, dst, cs, g);
    }
  }
  if (p.cache == nullptr) return;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.cache_slots) return;  // the same for the whole warp
  __syncwarp();  // the row's normed and rotated values, written by every lane above
  auto* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.cache) + slot * p.cache_entry_dim);
  const auto* src = reinterpret_cast<const uint4*>(row);
  for (int j = lane; j < p.cache_entry_dim / 8; j += 32) dst[j] = src[j];
}

// Which absorbed-query blocks follow the token blocks: none, one unit each (AbsorbBlock) or
// `absorb_units` each (AbsorbBlockStaged, with that many 16 KiB stages of dynamic shared memory).
enum class AbsorbForm { kNone, kOneUnit, kStaged };

template <AbsorbForm kForm>
__global__ void __launch_bounds__(kThreads) RopeNormWarpKernel(const __grid_constant__ RopeParams p, int absorb_units) {
  const int token_blocks = (p.num_tokens + kWarpTokens - 1) / kWarpTokens;
  if constexpr (kForm != AbsorbForm::kNone) {
    if (blockIdx.x >= static_cast<unsigned>(token_blocks)) {
      const int block = static_cast<int>(blockIdx.x) - token_blocks;
      if constexpr (kForm == AbsorbForm::kStaged) {
        AbsorbBlockStaged(p, block, absorb_units);
      } else {
        AbsorbBlock(p, block);
      }
      return;
    }
  }
  cuda::PdlEnter();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpTokens + threadIdx.x / 32;
  if (t < p.num_tokens) WarpToken(p, t, threadIdx.x % 32);
}

// Whether RopeNormWarpKernel takes p (the fused norm given): bf16, one k head, 16-byte aligned
// rows and runs (every base, stride and offset a multiple of 8 values), a rot_dim of whole
// 4-pair groups, a norm row of at most kWarpNormVecs vectors a lane and a whole-vector cache
// entry. MLASERVE_ROPE_WARP=0: never (the block form, for timing comparisons).
template <typename T>
bool WarpTokensApply(const RopeParams& p) {
  static const bool off = EnvSwitchedOff("MLASERVE_ROPE_WARP");
  if (off || !std::is_same_v<T, __nv_bfloat16> || p.k_heads != 1) return false;
  const auto a16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const auto m8 = [](int64_t v) { return v % 8 == 0; };
  if (!a16(p.x) || !a16(p.k) || !a16(p.k_norm_weight) || (p.out != nullptr && !a16(p.out)) ||
      (p.cache != nullptr && !a16(p.cache)) || !a16(p.cos_sin)) {
    return false;
  }
  const bool strides = m8(p.token_stride) && m8(p.head_stride) && m8(p.offset) && m8(p.k_token_stride) &&
                       m8(p.k_head_stride) && m8(p.k_offset) &&
                       (p.out == nullptr || (m8(p.out_token_stride) && m8(p.out_head_stride) && m8(p.out_offset))) &&
                       (p.cache == nullptr || m8(p.cache_entry_dim));
  return strides && p.rot_dim % 8 == 0 && m8(p.k_norm_dim) && p.k_norm_dim <= 32 * 8 * kWarpNormVecs;
}

// Units (head, 64-row chunk) per absorbed-query block: 1 while the one-unit blocks and the token
// blocks fit one wave of the GPU (V2-Lite's 16 heads: 128 units), else the fewest units a block
// that make the staged blocks one wave (V3's 128 heads, 1024 units: 4 a block on an H200), at
// most kAbsorbMaxUnits. MLASERVE_ROPE_ABSORB_UNITS=n (1-8) takes n for A/B timing.
int AbsorbUnitsPerBlock(int units, int token_blocks) {
  if (const int forced = EnvIntInRange("MLASERVE_ROPE_ABSORB_UNITS", 1, kAbsorbMaxUnits, 0); forced > 0) return forced;
  const int64_t sms = cuda::CurrentDeviceSmCount();
  // Blocks an SM holds (one where the query fails: a small grid, never an oversized one).
  const auto per_sm = [](auto* kernel, size_t smem) {
    return std::max(1, cuda::CurrentDeviceBlocksPerSm(reinterpret_cast<const void*>(kernel), kThreads, smem));
  };
  if (units + token_blocks <= sms * per_sm(RopeNormWarpKernel<AbsorbForm::kOneUnit>, 0)) return 1;
  for (int u = 2; u < kAbsorbMaxUnits; ++u) {
    const int64_t blocks = (units + u - 1) / u + token_blocks;
    if (blocks <= sms * per_sm(RopeNormWarpKernel<AbsorbForm::kStaged>, static_cast<size_t>(u) * kAbsorbUnitSmem)) return u;
  }
  return kAbsorbMaxUnits;
}

template <typename T>
absl::Status LaunchRope(const RopeParams& p, cudaStream_t s) {
  cuda::LaunchShape shape;
  shape.block = dim3(kThreads);
  shape.stream = s;
  if (p.k_norm_weight != nullptr) {
    const bool warp = WarpTokensApply<T>(p);
    int blocks = warp ? (p.num_tokens + kWarpTokens - 1) / kWarpTokens : p.num_tokens;
    if (p.absorb_w != nullptr) {
      // Rope's dispatcher checked the widths and RopeAbsorbSupported; the 16-byte loads need
      // 16-byte aligned rows.
      const bool aligned = std::is_same_v<T, __nv_bfloat16> &&
                           (reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.absorb_w)) % 16 == 0 &&
                           p.token_stride % 8 == 0 && p.head_stride % 8 == 0;
      if (!aligned) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rope: the fused absorbed query reads x and absorb_w in 16-byte vectors: bf16, both "
            "16-byte aligned and token_stride / head_stride multiples of 8 (got token_stride=",
            p.token_stride, ", head_stride=", p.head_stride, ")"));
      }
      const int units = p.num_heads * AbsorbLayoutFor(p.absorb_n, p.absorb_k).chunks;
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        if (warp) {
          const int per_block = AbsorbUnitsPerBlock(units, blocks);
          if (per_block > 1) {
            auto* kernel = RopeNormWarpKernel<AbsorbForm::kStaged>;
            shape.smem_bytes = static_cast<size_t>(per_block) * kAbsorbUnitSmem;
            RETURN_IF_ERROR(cuda::CudaStatus(
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(shape.smem_bytes)),
                "rope+norm+absorb: cudaFuncSetAttribute"));
            shape.grid = dim3(static_cast<unsigned>(blocks + (units + per_block - 1) / per_block));
            return cuda::LaunchPdl("rope+norm+absorb (staged)", shape, kernel, p, per_block);
          }
          shape.grid = dim3(static_cast<unsigned>(blocks + units));
          return cuda::LaunchPdl("rope+norm+absorb", shape, RopeNormWarpKernel<AbsorbForm::kOneUnit>, p, 1);
        }
      }
      blocks += units;
    }
    shape.grid = dim3(static_cast<unsigned>(blocks));
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      if (warp) return cuda::LaunchPdl("rope+norm", shape, RopeNormWarpKernel<AbsorbForm::kNone>, p, 0);
      if (p.absorb_w != nullptr) return cuda::LaunchPdl("rope+norm+absorb", shape, RopeNormKernel<T, true>, p);
    }
    return cuda::LaunchPdl("rope+norm", shape, RopeNormKernel<T, false>, p);
  }
  const int heads = p.num_heads + (p.k != nullptr ? p.k_heads : 0);
  shape.grid = dim3(cuda::GridFor(static_cast<int64_t>(p.num_tokens) * heads * (p.rot_dim / 2), kThreads));
  return cuda::LaunchPdl("rope", shape, RopeKernel<T>, p);
}

}  // namespace

absl::Status RopeCuda(const RopeParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBF16) return LaunchRope<__nv_bfloat16>(p, s);
  if (p.dtype == DType::kF32) return LaunchRope<float>(p, s);
  return absl::InvalidArgumentError(
      absl::StrCat("rope: the CUDA backend supports dtype=bf16 or f32, got ", DTypeName(p.dtype)));
}

}  // namespace mlaserve::kernels
