// indexer CUDA backend: two launches.
//
// 1. IndexerScoreKernel: a CTA owns one query token and 8 consecutive key pages (512 keys).
//    Q (up to 64 heads x head_dim, bf16) stays in shared memory; each 64-key page streams in
//    through two cp.async stages (fp8 pages are converted to bf16 on the way, unscaled: the
//    per-token scale is positive, so it factors out of the ReLU and multiplies the final
//    score). 4 warps compute S = Q K^T (16 heads each, mma.sync m16n8k16), then
//    sum_h w[h] * relu(scale * S[h, key]) is reduced over the warp's heads with shuffles and
//    over the 4 warps through shared memory, and written as an f32 score row into the
//    workspace. Keys past the query's causal limit are neither loaded nor written.
// 2. IndexerTopKKernel: a CTA of 1024 threads per query row selects the top_k scores by radix
//    select (4 passes of 8 bits over order-preserving integer keys, histograms with
//    warp-aggregated shared-memory atomics), collects the keys above the threshold plus the
//    lowest positions equal to it (an ordered block scan), and bitonic-sorts the selection by
//    (score descending, position ascending) -- the CPU reference's order.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/indexer/api.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/kv_fp8/fp8_util.cuh"

namespace mlaserve::kernels {
namespace {

constexpr int kScoreWarps = 4;
constexpr int kScoreThreads = kScoreWarps * cuda::kWarpSize;
constexpr int kMaxHeads = 16 * kScoreWarps;  // 64
constexpr int kKeysPerTile = kPageSize;
constexpr int kTilesPerCta = 8;
constexpr int kKeysPerCta = kKeysPerTile * kTilesPerCta;
constexpr int kTopKThreads = 1024;
constexpr int kMaxTopK = 4096;

__host__ __device__ inline int64_t ScoreStride(int max_seqlen_k) { return (static_cast<int64_t>(max_seqlen_k) + 3) / 4 * 4; }

template <int kD, bool kFp8>
struct ScoreSmem {
  static constexpr int kChunks = kD / cuda::kBf16PerChunk;
  static constexpr int kQBytes = kMaxHeads * kD * 2;
  static constexpr int kKBytes = kKeysPerTile * kD * 2;
  static constexpr int kBytes = kQBytes + 2 * kKBytes;
};

template <int kD, bool kFp8>
__global__ void __launch_bounds__(kScoreThreads) IndexerScoreKernel(const __grid_constant__ IndexerParams p,
                                                                    float* scores) {
  using Smem = ScoreSmem<kD, kFp8>;
  constexpr int kChunks = Smem::kChunks;
  extern __shared__ __align__(128) uint8_t smem[];  // Smem::kBytes (over 48 KiB at kD = 128)
  __shared__ float red[kScoreWarps][kKeysPerTile];
  __shared__ float weights[kMaxHeads];
  __shared__ float kscale[2][kKeysPerTile];
  const uint32_t q_smem = cuda::SmemAddress(smem);
  const uint32_t k_smem = q_smem + Smem::kQBytes;

  const int b = blockIdx.z, i = blockIdx.y;
  const int q_start = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q_start;
  if (i >= lq) return;
  const int visible = p.seqlens_k[b] - lq + i + 1;
  const int key_begin = blockIdx.x * kKeysPerCta;
  if (key_begin >= visible) return;
  const int key_end = min(visible, key_begin + kKeysPerCta);
  const int n_tiles = (key_end - key_begin + kKeysPerTile - 1) / kKeysPerTile;
  const int token = q_start + i;
  const int H = p.num_heads;
  const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;

  {
    const auto* q = static_cast<const __nv_bfloat16*>(p.q) + static_cast<int64_t>(token) * H * kD;
    for (int x = threadIdx.x; x < kMaxHeads * kChunks; x += kScoreThreads) {
      const int r = x / kChunks, c = x % kChunks;
      const bool valid = r < H;
      cuda::CpAsync16(q_smem + cuda::SwizzledOffset(r, c, kChunks), valid ? q + r * kD + c * 8 : q, valid);
    }
    if (threadIdx.x < kMaxHeads)
      weights[threadIdx.x] = threadIdx.x < H ? p.weights[static_cast<int64_t>(token) * H + threadIdx.x] : 0.0f;
  }
  // Tiles start on page boundaries (key_begin is a multiple of the page size).
  auto load_tile = [&](int tile, int stage) {
    const int pos0 = key_begin + tile * kKeysPerTile;
    const int64_t page = table[pos0 / kPageSize];
    const uint32_t dst = k_smem + stage * Smem::kKBytes;
    if constexpr (kFp8) {
      const auto* base = static_cast<const uint8_t*>(p.k_cache) + page * IndexKFp8PageBytes(kD);
      // All of this thread's loads first (independent, in flight together), then convert.
      constexpr int kItems = kKeysPerTile * kChunks / kScoreThreads;
      uint2 raw[kItems];
#pragma unroll
      for (int u = 0; u < kItems; ++u) {
        const int x = threadIdx.x + u * kScoreThreads, r = x / kChunks, c = x % kChunks;
        raw[u] = pos0 + r < key_end ? *reinterpret_cast<const uint2*>(base + r * kD + c * 8) : make_uint2(0, 0);
      }
#pragma unroll
      for (int u = 0; u < kItems; ++u) {
        const int x = threadIdx.x + u * kScoreThreads, r = x / kChunks, c = x % kChunks;
        const uint4 v = fp8::E4M3x8ToBf16x8(raw[u], 1.0f);
        asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst + cuda::SwizzledOffset(r, c, kChunks)),
                     "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
      }
      if (threadIdx.x < kKeysPerTile)
        kscale[stage][threadIdx.x] = reinterpret_cast<const float*>(base + kKeysPerTile * kD)[threadIdx.x];
    } else {
      const auto* base = static_cast<const __nv_bfloat16*>(p.k_cache) + page * kPageSize * kD;
      for (int x = threadIdx.x; x < kKeysPerTile * kChunks; x += kScoreThreads) {
        const int r = x / kChunks, c = x % kChunks;
        const bool valid = pos0 + r < key_end;
        cuda::CpAsync16(dst + cuda::SwizzledOffset(r, c, kChunks), valid ? base + r * kD + c * 8 : base, valid);
      }
    }
  };
  load_tile(0, 0);
  cuda::CpAsyncCommit();

  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const int g = lane / 4, t4 = lane % 4;
  const int a_row = warp * 16 + (lane % 16), a_chunk = lane / 16;
  const int kb_row = (lane % 8) + (lane / 16) * 8, kb_chunk = (lane / 8) % 2;
  float* row_scores = scores + (static_cast<int64_t>(b) * p.max_seqlen_q + i) * ScoreStride(p.max_seqlen_k);

  for (int j = 0; j < n_tiles; ++j) {
    cuda::CpAsyncWait<0>();
    __syncthreads();  // tile j and its scales landed; stage j-1 and `red` are free
    if (j + 1 < n_tiles) load_tile(j + 1, (j + 1) & 1);
    cuda::CpAsyncCommit();
    const uint32_t ks = k_smem + (j & 1) * Smem::kKBytes;
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[4];
      cuda::LdMatrixX4(q_smem + cuda::SwizzledOffset(a_row, kk * 2 + a_chunk, kChunks), a);
#pragma unroll
      for (int nn = 0; nn < 4; ++nn) {
        uint32_t bf[4];
        cuda::LdMatrixX4(ks + cuda::SwizzledOffset(kb_row + nn * 16, kk * 2 + kb_chunk, kChunks), bf);
        cuda::MmaBf16(s[2 * nn], a, bf[0], bf[1]);
        cuda::MmaBf16(s[2 * nn + 1], a, bf[2], bf[3]);
      }
    }
    const float w0 = weights[warp * 16 + g], w1 = weights[warp * 16 + g + 8];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = w0 * fmaxf(s[n][e] * p.softmax_scale, 0.0f) + w1 * fmaxf(s[n][e + 2] * p.softmax_scale, 0.0f);
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        if (g == 0) red[warp][n * 8 + 2 * t4 + e] = v;
      }
    }
    __syncthreads();
    if (threadIdx.x < kKeysPerTile) {
      const int key = key_begin + j * kKeysPerTile + threadIdx.x;
      if (key < key_end) {
        float v = red[0][threadIdx.x] + red[1][threadIdx.x] + red[2][threadIdx.x] + red[3][threadIdx.x];
        if constexpr (kFp8) v *= kscale[j & 1][threadIdx.x];
        row_scores[key] = v;
      }
    }
  }
  cuda::CpAsyncWait<0>();
}

// Order-preserving key of a float (larger float -> larger key); -0 is folded into +0, as the
// CPU reference treats them as equal.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kTopKThreads) IndexerTopKKernel(const __grid_constant__ IndexerParams p,
                                                                  const float* scores) {
  __shared__ unsigned long long sel[kMaxTopK];
  __shared__ int hist[256];
  __shared__ int warp_counts[kTopKThreads / cuda::kWarpSize];
  __shared__ int shared_sel, shared_remaining, count_gt_slot, eq_base;
  const int b = blockIdx.y, i = blockIdx.x;
  const int q_start = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q_start;
  if (i >= lq) return;
  const int n = p.seqlens_k[b] - lq + i + 1;
  const int k = p.top_k;
  const int tid = threadIdx.x, lane = tid % cuda::kWarpSize, warp = tid / cuda::kWarpSize;
  const float* row = scores + (static_cast<int64_t>(b) * p.max_seqlen_q + i) * ScoreStride(p.max_seqlen_k);
  // Sort key: ascending order = score descending, then position ascending.
  auto pack = [](uint32_t key, int pos) {
    return (static_cast<unsigned long long>(~key) << 32) | static_cast<uint32_t>(pos);
  };
  int count;
  if (n <= k) {
    for (int s = tid; s < n; s += kTopKThreads) sel[s] = pack(OrderKey(row[s]), s);
    count = n;
  } else {
    uint32_t prefix = 0, mask = 0;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int x = tid; x < 256; x += kTopKThreads) hist[x] = 0;
      __syncthreads();
      for (int base = 0; base < n; base += kTopKThreads) {
        const int s = base + tid;
        const uint32_t u = s < n ? OrderKey(row[s]) : 0u;
        const bool in = s < n && (u & mask) == prefix;
        const int bin = in ? static_cast<int>((u >> shift) & 255u) : -1;
        // Warp-aggregated increments: scores share their top bits, so bins are hot.
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (in && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
      }
      __syncthreads();
      if (tid == 0) {
        int cum = 0, chosen = 0;
        for (int x = 255; x >= 0; --x) {
          if (cum + hist[x] >= remaining) { chosen = x; break; }
          cum += hist[x];
        }
        shared_sel = chosen;
        shared_remaining = remaining - cum;
      }
      __syncthreads();
      prefix |= static_cast<uint32_t>(shared_sel) << shift;
      mask |= 255u << shift;
      remaining = shared_remaining;
      __syncthreads();
    }
    // prefix is the k-th largest key; take every key above it and the `remaining` lowest
    // positions equal to it.
    const int need_eq = remaining, count_gt = k - need_eq;
    if (tid == 0) { count_gt_slot = 0; eq_base = 0; }
    __syncthreads();
    for (int base = 0; base < n; base += kTopKThreads) {
      const int s = base + tid;
      const uint32_t u = s < n ? OrderKey(row[s]) : 0u;
      const bool gt = s < n && u > prefix, eq = s < n && u == prefix;
      if (gt) sel[atomicAdd(&count_gt_slot, 1)] = pack(u, s);
      const unsigned ballot = __ballot_sync(0xffffffffu, eq);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int before = eq_base;
      for (int w = 0; w < warp; ++w) before += warp_counts[w];
      const int rank = before + __popc(ballot & ((1u << lane) - 1u));
      if (eq && rank < need_eq) sel[count_gt + rank] = pack(u, s);
      __syncthreads();
      if (tid == 0) {
        int total = 0;
        for (int w = 0; w < kTopKThreads / cuda::kWarpSize; ++w) total += warp_counts[w];
        eq_base += total;
      }
      __syncthreads();
    }
    count = k;
  }
  int size = 1;
  while (size < count) size <<= 1;
  for (int s = count + tid; s < size; s += kTopKThreads) sel[s] = ~0ull;
  __syncthreads();
  for (int k2 = 2; k2 <= size; k2 <<= 1) {
    for (int j = k2 >> 1; j > 0; j >>= 1) {
      for (int t = tid; t < size / 2; t += kTopKThreads) {
        const int a = (t / j) * 2 * j + (t % j), c = a + j;
        const bool ascending = (a & k2) == 0;
        const unsigned long long x = sel[a], y = sel[c];
        if ((x > y) == ascending) { sel[a] = y; sel[c] = x; }
      }
      __syncthreads();
    }
  }
  int32_t* out = p.topk_indices + static_cast<int64_t>(q_start + i) * k;
  for (int s = tid; s < k; s += kTopKThreads) out[s] = s < count ? static_cast<int32_t>(sel[s] & 0xffffffffu) : -1;
}

template <int kD, bool kFp8>
void LaunchScores(const IndexerParams& p, float* scores, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.max_seqlen_k + kKeysPerCta - 1) / kKeysPerCta),
                  static_cast<unsigned>(p.max_seqlen_q), static_cast<unsigned>(p.batch));
  IndexerScoreKernel<kD, kFp8><<<grid, kScoreThreads, ScoreSmem<kD, kFp8>::kBytes, s>>>(p, scores);
}

template <int kD, bool kFp8>
cudaError_t RaiseScoreSmem() {
  return cudaFuncSetAttribute(IndexerScoreKernel<kD, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              ScoreSmem<kD, kFp8>::kBytes);
}

}  // namespace

absl::Status IndexerCuda(const IndexerParams& p, void* stream) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("indexer: the CUDA backend takes bf16 q, got dtype=", DTypeName(p.dtype)));
  }
  const bool fp8 = p.k_cache_dtype == DType::kFP8E4M3;
  if (p.head_dim != 64 && p.head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("indexer: head_dim=", p.head_dim, " is not supported on CUDA (64 or 128)"));
  }
  if (p.num_heads > kMaxHeads) {
    return absl::InvalidArgumentError(
        absl::StrCat("indexer: num_heads=", p.num_heads, " exceeds the CUDA kernel's ", kMaxHeads));
  }
  if (p.top_k > kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("indexer: top_k=", p.top_k, " exceeds the CUDA kernel's ", kMaxTopK));
  }
  if (p.max_seqlen_q <= 0 || p.max_seqlen_k <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "indexer: max_seqlen_q=", p.max_seqlen_q, " and max_seqlen_k=", p.max_seqlen_k,
        " must bound every request on CUDA"));
  }
  if (p.workspace == nullptr) {
    return absl::InvalidArgumentError("indexer: the CUDA backend needs IndexerWorkspaceBytes(p) of workspace");
  }
  RETURN_IF_ERROR(cuda::RequireVectorAligned("indexer", "q", p.q));
  RETURN_IF_ERROR(cuda::RequireVectorAligned("indexer", "k_cache", p.k_cache));
  if (p.batch == 0) return absl::OkStatus();
  const cudaError_t raised = p.head_dim == 128 ? (fp8 ? RaiseScoreSmem<128, true>() : RaiseScoreSmem<128, false>())
                                                : (fp8 ? RaiseScoreSmem<64, true>() : RaiseScoreSmem<64, false>());
  RETURN_IF_ERROR(cuda::CudaStatus(raised, "indexer: raising the shared-memory limit"));
  auto s = static_cast<cudaStream_t>(stream);
  auto* scores = static_cast<float*>(p.workspace);
  if (p.head_dim == 128) {
    fp8 ? LaunchScores<128, true>(p, scores, s) : LaunchScores<128, false>(p, scores, s);
  } else {
    fp8 ? LaunchScores<64, true>(p, scores, s) : LaunchScores<64, false>(p, scores, s);
  }
  RETURN_IF_ERROR(cuda::LaunchStatus("IndexerScoreKernel"));
  IndexerTopKKernel<<<dim3(static_cast<unsigned>(p.max_seqlen_q), static_cast<unsigned>(p.batch)), kTopKThreads, 0, s>>>(
      p, scores);
  return cuda::LaunchStatus("IndexerTopKKernel");
}

}  // namespace mlaserve::kernels
