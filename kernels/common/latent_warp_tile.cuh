// The per-warp steps of the mma.sync latent-attention tile, shared by mla_prefill's latent
// kernel (kernels/mla_prefill/latent_attention_kernel.cuh) and sparse_fwd's
// (kernels/sparse_fwd/sparse_attention_kernel.cuh). Both hold a Q tile of Tile::kRows rows in
// shared memory and stream 64-key K tiles (latent | rope, V = the first kRank columns) through
// it with 8 warps in a kRowWarps x kColWarps grid:
//   Scores       S[16 rows of warp row rw, keys of warp column cw] = Q K^T  (m16n8k16)
//   PublishMax   each warp's row maxima into `red` (one slot per column warp)
//   Softmax      the online softmax over the row maxima of all column warps (log2 domain):
//                P (bf16) into shared memory, O and the running sum rescaled
//   AccumulatePV O[16 rows, dims of warp column cw] += P V
//   PublishSum / RowSum  the final row sums across the column warps
// The kernels keep what differs: which keys are masked, how K tiles are loaded, the
// __syncthreads between the steps (every step that reads `red` or P follows one), and where
// the output goes. Accumulator element e of n-tile nt is row g + 8 * (e / 2), key or dim
// nt * 8 + 2 * t4 + (e % 2) of the warp's slice (g = lane / 4, t4 = lane % 4).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/cuda_util.cuh"

namespace mlaserve::kernels::cuda {

// Tile provides kRows, kColWarps, kKeysPerWarp, kDimsPerWarp, kBlockN, kWidth, kChunks and
// kPChunks (see LatentTile / SparseTile).
template <typename Tile>
struct LatentWarpTile {
  static constexpr int kSTiles = Tile::kKeysPerWarp / 8;
  static constexpr int kOTiles = Tile::kDimsPerWarp / 8;
  static constexpr int kQkSteps = Tile::kWidth / 16;

  int rw, cw, g, t4;
  int a_row, a_chunk, kb_row, kb_chunk, vb_row, vb_chunk, dim_chunk0;

  __device__ __forceinline__ LatentWarpTile() {
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    rw = warp / Tile::kColWarps;
    cw = warp % Tile::kColWarps;
    g = lane / 4;
    t4 = lane % 4;
    a_row = rw * 16 + (lane % 16);
    a_chunk = lane / 16;
    kb_row = cw * Tile::kKeysPerWarp + (lane % 8) + (lane / 16) * 8;
    kb_chunk = (lane / 8) % 2;
    vb_row = (lane % 8) + ((lane / 8) % 2) * 8;
    vb_chunk = lane / 16;
    dim_chunk0 = cw * Tile::kDimsPerWarp / kBf16PerChunk;
  }

  // Row r (0 or 1) of this thread within the CTA's tile.
  __device__ __forceinline__ int Row(int r) const { return rw * 16 + g + 8 * r; }
  // Key of accumulator element e of n-tile nt within the 64-key tile.
  __device__ __forceinline__ int Key(int nt, int e) const {
    return cw * Tile::kKeysPerWarp + nt * 8 + 2 * t4 + (e & 1);
  }
  // Latent dim of accumulator element 2 * r of n-tile nt (element 2 * r + 1 is the next dim).
  __device__ __forceinline__ int Dim(int nt) const { return cw * Tile::kDimsPerWarp + nt * 8 + 2 * t4; }

  __device__ __forceinline__ void Scores(uint32_t q_smem, uint32_t ks, float (&s)[kSTiles][4]) const {
#pragma unroll
    for (int i = 0; i < kSTiles; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll 4
    for (int kk = 0; kk < kQkSteps; ++kk) {
      uint32_t a[4];
      LdMatrixX4(q_smem + SwizzledOffset(a_row, kk * 2 + a_chunk, Tile::kChunks), a);
      if constexpr (kSTiles == 1) {
        uint32_t bf[2];
        LdMatrixX2(ks + SwizzledOffset(kb_row, kk * 2 + kb_chunk, Tile::kChunks), bf);
        MmaBf16(s[0], a, bf[0], bf[1]);
      } else {
#pragma unroll
        for (int nn = 0; nn < kSTiles / 2; ++nn) {
          uint32_t bf[4];
          LdMatrixX4(ks + SwizzledOffset(kb_row + nn * 16, kk * 2 + kb_chunk, Tile::kChunks), bf);
          MmaBf16(s[2 * nn], a, bf[0], bf[1]);
          MmaBf16(s[2 * nn + 1], a, bf[2], bf[3]);
        }
      }
    }
  }

  // This warp's row maxima (masked scores are -inf) into red[cw * kRows + row].
  __device__ __forceinline__ void PublishMax(const float (&s)[kSTiles][4], float* red) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = QuadMax(mx);
      if (t4 == 0) red[cw * Tile::kRows + Row(r)] = mx;
    }
  }

  // After the maxima of every column warp are in `red`: P = exp2(S * scale - m) into p_smem,
  // and the running max / sum and O rescaled to the new max.
  __device__ __forceinline__ void Softmax(const float (&s)[kSTiles][4], const float* red, float scale_log2,
                                          uint32_t p_smem, float (&o)[kOTiles][4], float (&m_run)[2],
                                          float (&l_run)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < Tile::kColWarps; ++c) mx = fmaxf(mx, red[c * Tile::kRows + Row(r)]);
      const float m_new = fmaxf(m_run[r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = FastExp2(m_run[r] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        const float p0 = FastExp2(fmaf(s[nt][2 * r], scale_log2, -m_use));
        const float p1 = FastExp2(fmaf(s[nt][2 * r + 1], scale_log2, -m_use));
        sum += p0 + p1;
        const int key = Key(nt, 0);
        const uint32_t addr = p_smem + SwizzledOffset(Row(r), key / 8, Tile::kPChunks) + (key % 8) * 2;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(PackBf16(p0, p1)));
      }
      l_run[r] = l_run[r] * alpha + sum;
      m_run[r] = m_new;
#pragma unroll
      for (int nt = 0; nt < kOTiles; ++nt) {
        o[nt][2 * r] *= alpha;
        o[nt][2 * r + 1] *= alpha;
      }
    }
  }

  // O[rows, this warp's dims] += P[rows, 64 keys] V[64 keys, dims]; V = the first columns of ks.
  __device__ __forceinline__ void AccumulatePV(uint32_t p_smem, uint32_t ks, float (&o)[kOTiles][4]) const {
#pragma unroll
    for (int kk = 0; kk < Tile::kBlockN / 16; ++kk) {
      uint32_t a[4];
      LdMatrixX4(p_smem + SwizzledOffset(a_row, kk * 2 + a_chunk, Tile::kPChunks), a);
      if constexpr (kOTiles == 1) {
        uint32_t bf[2];
        LdMatrixX2Trans(ks + SwizzledOffset(kk * 16 + vb_row, dim_chunk0, Tile::kChunks), bf);
        MmaBf16(o[0], a, bf[0], bf[1]);
      } else {
#pragma unroll
        for (int nn = 0; nn < kOTiles / 2; ++nn) {
          uint32_t bf[4];
          LdMatrixX4Trans(ks + SwizzledOffset(kk * 16 + vb_row, dim_chunk0 + nn * 2 + vb_chunk, Tile::kChunks),
                          bf);
          MmaBf16(o[2 * nn], a, bf[0], bf[1]);
          MmaBf16(o[2 * nn + 1], a, bf[2], bf[3]);
        }
      }
    }
  }

  // This warp's share of the row sums into red (after every warp's last read of `red`).
  __device__ __forceinline__ void PublishSum(const float (&l_run)[2], float* red) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = QuadSum(l_run[r]);
      if (t4 == 0) red[cw * Tile::kRows + Row(r)] = l;
    }
  }

  // The row sum of row r over every column warp (after PublishSum and a __syncthreads).
  __device__ __forceinline__ float RowSum(const float* red, int r) const {
    float l = 0.0f;
#pragma unroll
    for (int c = 0; c < Tile::kColWarps; ++c) l += red[c * Tile::kRows + Row(r)];
    return l;
  }
};

}  // namespace mlaserve::kernels::cuda
