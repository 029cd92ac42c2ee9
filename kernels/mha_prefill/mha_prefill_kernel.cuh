// mha_prefill CUDA kernel: flash attention (online softmax) over a ragged batch, bf16 in/out,
// f32 accumulation and LSE. Included only by the per-head-dim instantiation files
// (mha_prefill_d*.cu), so each .cu compiles one tile configuration.
//
// Tiling (FlashAttention-2's forward): a CTA owns kBlockM = 128 query rows of one (sequence,
// head); each of its 8 warps owns 16 rows. K and V tiles of kBlockN = 64 keys stream through
// shared memory, double-buffered with cp.async, while the warps compute S = Q K^T and O += P V
// with mma.sync m16n8k16 (bf16 in, f32 accumulate). P never leaves registers: the S
// accumulators are re-packed as the A operand of the P V product.
//
// Head dims are template parameters padded to kDqk / kDv (multiples of 64, so that every shared
// memory row holds a multiple of 8 swizzled 16-byte chunks); the real dims are multiples of 8,
// and the padding chunks are zero-filled by cp.async, contributing nothing.
#pragma once

#include <cmath>

#include "kernels/common/cuda_util.cuh"
#include "kernels/mha_prefill/api.h"

namespace mlaserve::kernels::mha_cuda {

template <int kDqk_, int kDv_>
struct MhaTile {
  static constexpr int kDqk = kDqk_, kDv = kDv_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * cuda::kWarpSize;
  static constexpr int kRowsPerWarp = 16;
  static constexpr int kBlockM = kWarps * kRowsPerWarp;
  static constexpr int kBlockN = 64;
  static constexpr int kQkChunks = kDqk / cuda::kBf16PerChunk;
  static constexpr int kVChunks = kDv / cuda::kBf16PerChunk;
  static constexpr int kQBytes = kBlockM * kDqk * 2;
  static constexpr int kKBytes = kBlockN * kDqk * 2;
  static constexpr int kVBytes = kBlockN * kDv * 2;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kSmemBytes = kQBytes + 2 * kStageBytes;
  // Q fragments stay in registers when they fit next to the accumulators.
  static constexpr bool kQInRegs = kDqk <= 192;
  static_assert(kDqk % 64 == 0 && kDv % 64 == 0, "padded head dims are multiples of 64");
};

// Copies rows [row0, row0 + rows) of a [token, chunk] global tile into a swizzled shared tile;
// rows at or past `row_limit` and chunks at or past `valid_chunks` are zero-filled.
template <int kRows, int kChunks, int kThreads>
__device__ __forceinline__ void LoadTile(uint32_t smem, const __nv_bfloat16* base, int64_t stride,
                                         int row0, int row_limit, int valid_chunks) {
#pragma unroll 4
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < row_limit && c < valid_chunks;
    const __nv_bfloat16* src = valid ? base + (row0 + r) * stride + c * cuda::kBf16PerChunk : base;
    cuda::CpAsync16(smem + cuda::SwizzledOffset(r, c, kChunks), src, valid);
  }
}

template <typename Tile>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    MhaPrefillKernel(const __grid_constant__ MhaPrefillParams p) {
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN;
  constexpr int kQkChunks = Tile::kQkChunks, kVChunks = Tile::kVChunks;
  constexpr int kSTiles = kBlockN / 8;        // n-tiles of S per warp
  constexpr int kOTiles = Tile::kDv / 8;      // n-tiles of O per warp
  constexpr int kQkSteps = Tile::kDqk / 16;   // k-steps of Q K^T
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t q_smem = cuda::SmemAddress(smem);
  const uint32_t kv_smem = q_smem + Tile::kQBytes;

  const int b = blockIdx.z, h = blockIdx.y;
  // Causal: the longest rows (most keys) start first.
  const int m_block = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int q_start = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q_start;
  const int k_start = p.cu_seqlens_k[b], lk = p.cu_seqlens_k[b + 1] - k_start;
  const int m0 = m_block * kBlockM;
  if (m0 >= lq) return;
  const int kvh = h / (p.num_heads / p.num_kv_heads);
  const int causal_shift = lk - lq;  // query i sees keys j <= i + causal_shift
  int n_end = lk;
  if (p.causal) n_end = min(lk, m0 + kBlockM + causal_shift);
  const int n_tiles = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;

  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + static_cast<int64_t>(q_start) * p.q_token_stride +
                  static_cast<int64_t>(h) * p.q_head_stride;
  const auto* k = static_cast<const __nv_bfloat16*>(p.k) + static_cast<int64_t>(k_start) * p.k_token_stride +
                  static_cast<int64_t>(kvh) * p.k_head_stride;
  const auto* v = static_cast<const __nv_bfloat16*>(p.v) + static_cast<int64_t>(k_start) * p.v_token_stride +
                  static_cast<int64_t>(kvh) * p.v_head_stride;
  const int qk_valid_chunks = p.head_dim_qk / cuda::kBf16PerChunk;
  const int v_valid_chunks = p.head_dim_v / cuda::kBf16PerChunk;

  auto load_kv = [&](int tile, int stage) {
    const uint32_t ks = kv_smem + stage * Tile::kStageBytes;
    LoadTile<kBlockN, kQkChunks, Tile::kThreads>(ks, k, p.k_token_stride, tile * kBlockN, lk, qk_valid_chunks);
    LoadTile<kBlockN, kVChunks, Tile::kThreads>(ks + Tile::kKBytes, v, p.v_token_stride, tile * kBlockN, lk,
                                                v_valid_chunks);
  };
  LoadTile<kBlockM, kQkChunks, Tile::kThreads>(q_smem, q, p.q_token_stride, m0, lq, qk_valid_chunks);
  if (n_tiles > 0) load_kv(0, 0);
  cuda::CpAsyncCommit();

  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const int g = lane / 4, t4 = lane % 4;
  const int warp_row0 = m0 + warp * Tile::kRowsPerWarp;  // first query row of this warp
  const float scale_log2 = p.softmax_scale * cuda::kLog2e;

  float o[kOTiles][4];
#pragma unroll
  for (int i = 0; i < kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  uint32_t qf[Tile::kQInRegs ? kQkSteps : 1][4];

  // ldmatrix lane addressing (see cuda_util.cuh for the fragment layouts).
  const int a_row = warp * Tile::kRowsPerWarp + (lane % 16), a_chunk = lane / 16;
  const int kb_row = (lane % 8) + (lane / 16) * 8, kb_chunk = (lane / 8) % 2;
  const int vb_row = (lane % 8) + ((lane / 8) % 2) * 8, vb_chunk = lane / 16;

  for (int j = 0; j < n_tiles; ++j) {
    cuda::CpAsyncWait<0>();
    __syncthreads();  // tile j (and Q) landed; every warp is done with tile j-1's stage
    if (j + 1 < n_tiles) load_kv(j + 1, (j + 1) & 1);
    cuda::CpAsyncCommit();
    if constexpr (Tile::kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int kk = 0; kk < kQkSteps; ++kk)
          cuda::LdMatrixX4(q_smem + cuda::SwizzledOffset(a_row, kk * 2 + a_chunk, kQkChunks), qf[kk]);
      }
    }
    const uint32_t ks = kv_smem + (j & 1) * Tile::kStageBytes;
    const uint32_t vs = ks + Tile::kKBytes;

    float s[kSTiles][4];
#pragma unroll
    for (int i = 0; i < kSTiles; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk) {
      uint32_t a[4];
      if constexpr (Tile::kQInRegs) {
        a[0] = qf[kk][0], a[1] = qf[kk][1], a[2] = qf[kk][2], a[3] = qf[kk][3];
      } else {
        cuda::LdMatrixX4(q_smem + cuda::SwizzledOffset(a_row, kk * 2 + a_chunk, kQkChunks), a);
      }
#pragma unroll
      for (int nn = 0; nn < kSTiles / 2; ++nn) {
        uint32_t bf[4];
        cuda::LdMatrixX4(ks + cuda::SwizzledOffset(nn * 16 + kb_row, kk * 2 + kb_chunk, kQkChunks), bf);
        cuda::MmaBf16(s[2 * nn], a, bf[0], bf[1]);
        cuda::MmaBf16(s[2 * nn + 1], a, bf[2], bf[3]);
      }
    }

    // Mask keys past the sequence and, when causal, past each row's diagonal.
    const int key0 = j * kBlockN;
    const bool tail = key0 + kBlockN > lk;
    const bool diag = p.causal && key0 + kBlockN - 1 > warp_row0 + causal_shift;
    if (tail || diag) {
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + nt * 8 + 2 * t4 + (e & 1);
          const int row = warp_row0 + g + (e >= 2 ? 8 : 0);
          if (key >= lk || (p.causal && key > row + causal_shift)) s[nt][e] = -INFINITY;
        }
      }
    }

    // Online softmax in the log2 domain; thread-partial row sums, reduced at the end.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = cuda::QuadMax(mx);
      const float m_new = fmaxf(m_run[r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = cuda::FastExp2(m_run[r] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        s[nt][2 * r] = cuda::FastExp2(fmaf(s[nt][2 * r], scale_log2, -m_use));
        s[nt][2 * r + 1] = cuda::FastExp2(fmaf(s[nt][2 * r + 1], scale_log2, -m_use));
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l_run[r] = l_run[r] * alpha + sum;
      m_run[r] = m_new;
#pragma unroll
      for (int nt = 0; nt < kOTiles; ++nt) {
        o[nt][2 * r] *= alpha;
        o[nt][2 * r + 1] *= alpha;
      }
    }

    // O += P V, P re-packed from the S accumulators as the A operand.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {cuda::PackBf16(s[2 * kk][0], s[2 * kk][1]),
                             cuda::PackBf16(s[2 * kk][2], s[2 * kk][3]),
                             cuda::PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             cuda::PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nn = 0; nn < kOTiles / 2; ++nn) {
        uint32_t bf[4];
        cuda::LdMatrixX4Trans(vs + cuda::SwizzledOffset(kk * 16 + vb_row, nn * 2 + vb_chunk, kVChunks), bf);
        cuda::MmaBf16(o[2 * nn], a, bf[0], bf[1]);
        cuda::MmaBf16(o[2 * nn + 1], a, bf[2], bf[3]);
      }
    }
  }
  cuda::CpAsyncWait<0>();

  // Normalise and write rows of this warp that exist; a row that saw no key gets 0 and -inf.
  auto* out = static_cast<__nv_bfloat16*>(p.out) + static_cast<int64_t>(q_start) * p.out_token_stride +
              static_cast<int64_t>(h) * p.out_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp_row0 + g + 8 * r;
    const float l = cuda::QuadSum(l_run[r]);
    if (row >= lq) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    __nv_bfloat16* orow = out + static_cast<int64_t>(row) * p.out_token_stride;
#pragma unroll
    for (int nt = 0; nt < kOTiles; ++nt) {
      const int d = nt * 8 + 2 * t4;
      if (nt * 8 < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(orow + d) = cuda::PackBf16(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
    }
    if (p.lse != nullptr && t4 == 0) {
      p.lse[static_cast<int64_t>(q_start + row) * p.num_heads + h] =
          l > 0.0f ? (m_run[r] + log2f(l)) * cuda::kLn2 : -INFINITY;
    }
  }
}

// Launches one configuration (defined in its instantiation file).
template <int kDqk, int kDv>
absl::Status LaunchMhaPrefill(const MhaPrefillParams& p, cudaStream_t stream);

template <int kDqk, int kDv>
absl::Status LaunchMhaPrefillImpl(const MhaPrefillParams& p, cudaStream_t stream) {
  using Tile = MhaTile<kDqk, kDv>;
  auto kernel = MhaPrefillKernel<Tile>;
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      Tile::kSmemBytes);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, "mha_prefill: raising the shared-memory limit");
  }
  const dim3 grid((p.max_seqlen_q + Tile::kBlockM - 1) / Tile::kBlockM, p.num_heads, p.batch);
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  return cuda::LaunchStatus("MhaPrefillKernel");
}

}  // namespace mlaserve::kernels::mha_cuda
