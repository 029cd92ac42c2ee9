// The sparse latent-attention CUDA kernel (see sparse_attention.h). Included only by the
// instantiation files sparse_attention_*.cu, each compiling the configurations of one cache.
//
// Structure as mla_prefill's latent kernel (kernels/mla_prefill/latent_attention_kernel.cuh), with
// the per-warp steps shared (kernels/common/latent_warp_tile.cuh):
// 8 warps in a kRowWarps x kColWarps grid; S = Q K^T and O += P V on mma.sync m16n8k16; the
// online softmax in the log2 domain; P through shared memory. What differs:
// - rows are heads of one query token, and a K tile is 64 gathered cache rows, the entries
//   tile*64 .. tile*64+63 of the token's index list;
// - the physical slots of a tile (position -> page through the block table; -1 for padding
//   or out-of-range entries) are resolved into shared memory two tiles ahead, so the copy of
//   a tile never waits on index loads; masked keys are zero-filled and get s = -inf;
// - kFp8: the 512 latent values arrive as e4m3 with a f32 scale per 128 and are converted to
//   bf16 on the way into shared memory (plain loads, 4-8 in flight per thread); the bf16 rope
//   tail is a cp.async.
#pragma once

#include <cmath>

#include "kernels/common/cuda_util.cuh"
#include "kernels/common/latent_warp_tile.cuh"
#include "kernels/kv_fp8/api.h"
#include "kernels/kv_fp8/fp8_util.cuh"
#include "kernels/sparse_fwd/sparse_attention.h"

namespace mlaserve::kernels::sparse_cuda {

template <int kRank_, int kRope_, int kRowWarps_, bool kFp8_>
struct SparseTile {
  static constexpr int kRank = kRank_, kRope = kRope_, kRowWarps = kRowWarps_;
  static constexpr bool kFp8 = kFp8_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * cuda::kWarpSize;
  static constexpr int kColWarps = kWarps / kRowWarps;
  static constexpr int kRows = 16 * kRowWarps;
  static constexpr int kBlockN = 64;
  static constexpr int kWidth = kRank + kRope;
  static constexpr int kChunks = kWidth / cuda::kBf16PerChunk;
  static constexpr int kRankChunks = kRank / cuda::kBf16PerChunk;
  static constexpr int kKeysPerWarp = kBlockN / kColWarps;
  static constexpr int kDimsPerWarp = kRank / kColWarps;
  static constexpr int kPChunks = kBlockN / cuda::kBf16PerChunk;
  static constexpr int kQBytes = kRows * kWidth * 2;
  static constexpr int kKBytes = kBlockN * kWidth * 2;
  static constexpr int kPBytes = kRows * kBlockN * 2;
  static constexpr int kRedBytes = kColWarps * kRows * 4;
  static constexpr int kSlotBytes = 2 * kBlockN * 4;
  static constexpr int kSmemBytes = kQBytes + 2 * kKBytes + kPBytes + kRedBytes + kSlotBytes;
  static_assert(kRank % 64 == 0 && kRope % 64 == 0, "padded widths are multiples of 64");
  static_assert(!kFp8 || (kRank == kFp8LatentRank && kRope == kFp8RopeDim), "fp8 layout is 512+64");
};

template <typename Tile>
__device__ __forceinline__ int SparseRealColumn(int c, int rank, int rope) {
  const int col = c * cuda::kBf16PerChunk;
  if (c < Tile::kRankChunks) return col < rank ? col : -1;
  const int rc = col - Tile::kRank;
  return rc < rope ? rank + rc : -1;
}

template <typename Tile>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    SparseAttentionKernel(const __grid_constant__ SparseMlaParams p) {
  constexpr int kRows = Tile::kRows, kBlockN = Tile::kBlockN, kChunks = Tile::kChunks;
  using Warp = cuda::LatentWarpTile<Tile>;
  constexpr int kSTiles = Warp::kSTiles, kOTiles = Warp::kOTiles;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t q_smem = cuda::SmemAddress(smem);
  const uint32_t k_smem = q_smem + Tile::kQBytes;
  const uint32_t p_smem = k_smem + 2 * Tile::kKBytes;
  float* red = reinterpret_cast<float*>(smem + Tile::kQBytes + 2 * Tile::kKBytes + Tile::kPBytes);
  int* slots = reinterpret_cast<int*>(smem + Tile::kQBytes + 2 * Tile::kKBytes + Tile::kPBytes + Tile::kRedBytes);

  const int b = blockIdx.z;
  const int q_start = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q_start;
  if (static_cast<int>(blockIdx.y) >= lq) return;
  const int token = q_start + blockIdx.y;
  const int H = p.num_heads;
  const int h0 = blockIdx.x * kRows;
  if (h0 >= H) return;
  const int lk = p.seqlens_k[b];
  const int32_t* idx = p.indices + static_cast<int64_t>(token) * p.top_k;
  const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
  const int n_tiles = (p.top_k + kBlockN - 1) / kBlockN;

  // Slot of each entry of tile `tile` into slots[buf * 64 ..]; -1 = masked.
  auto resolve = [&](int tile, int buf) {
    if (threadIdx.x < kBlockN) {
      const int j = tile * kBlockN + threadIdx.x;
      const int pos = j < p.top_k ? idx[j] : -1;
      int slot = -1;
      if (pos >= 0 && pos < lk) slot = table[pos / kPageSize] * kPageSize + pos % kPageSize;
      slots[buf * kBlockN + threadIdx.x] = slot;
    }
  };

  {  // Q tile: row r -> head h0 + r of `token`.
    const auto* q = static_cast<const __nv_bfloat16*>(p.q);
    for (int i = threadIdx.x; i < kRows * kChunks; i += Tile::kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int col = SparseRealColumn<Tile>(c, p.kv_lora_rank, p.rope_dim);
      const bool valid = h0 + r < H && col >= 0;
      const __nv_bfloat16* src =
          valid ? q + static_cast<int64_t>(token) * p.q_token_stride + static_cast<int64_t>(h0 + r) * p.q_head_stride + col
                : q;
      cuda::CpAsync16(q_smem + cuda::SwizzledOffset(r, c, kChunks), src, valid);
    }
  }
  resolve(0, 0);
  if (n_tiles > 1) resolve(1, 1);
  __syncthreads();

  auto load_tile = [&](int tile, int stage) {
    const uint32_t dst = k_smem + stage * Tile::kKBytes;
    const int* tslots = slots + (tile & 1) * kBlockN;
    if constexpr (Tile::kFp8) {
      // Latent chunks (8 e4m3 bytes -> 8 bf16): each thread issues a batch of 8 independent
      // loads before converting any, so the gather's latency overlaps (a warp reads 256
      // contiguous bytes of one row per batch step). Rope chunks are bf16: cp.async.
      const auto* cache = static_cast<const uint8_t*>(p.kv_cache);
      constexpr int kLatentItems = kBlockN * Tile::kRankChunks / Tile::kThreads;
      constexpr int kBatch = Tile::kRowWarps == 4 ? 4 : 8;  // 64 heads: O holds 128 f32 registers
      static_assert(kLatentItems % kBatch == 0, "latent chunks split into full batches");
#pragma unroll
      for (int b0 = 0; b0 < kLatentItems; b0 += kBatch) {
        uint2 raw[kBatch];
        float sc[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = threadIdx.x + (b0 + u) * Tile::kThreads;
          const int slot = tslots[i / Tile::kRankChunks], c = i % Tile::kRankChunks;
          raw[u] = make_uint2(0, 0);
          sc[u] = 0.0f;
          if (slot >= 0) {
            const uint8_t* e = cache + static_cast<int64_t>(slot) * kFp8LatentBytes;
            raw[u] = *reinterpret_cast<const uint2*>(e + c * 8);
            sc[u] = reinterpret_cast<const float*>(e + kFp8LatentRank)[c / (kFp8ScaleBlock / 8)];
          }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = threadIdx.x + (b0 + u) * Tile::kThreads;
          const int r = i / Tile::kRankChunks, c = i % Tile::kRankChunks;
          const uint4 v = fp8::E4M3x8ToBf16x8(raw[u], sc[u]);
          asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst + cuda::SwizzledOffset(r, c, kChunks)),
                       "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
        }
      }
      constexpr int kRopeChunks = kChunks - Tile::kRankChunks;
      for (int i = threadIdx.x; i < kBlockN * kRopeChunks; i += Tile::kThreads) {
        const int r = i / kRopeChunks, c = Tile::kRankChunks + i % kRopeChunks;
        const int slot = tslots[r];
        const uint8_t* e = cache + static_cast<int64_t>(max(slot, 0)) * kFp8LatentBytes;
        cuda::CpAsync16(dst + cuda::SwizzledOffset(r, c, kChunks),
                        e + kFp8LatentRank + 16 + (c - Tile::kRankChunks) * cuda::kChunkBytes, slot >= 0);
      }
    } else {
      const auto* cache = static_cast<const __nv_bfloat16*>(p.kv_cache);
      const int entry = p.kv_lora_rank + p.rope_dim;
#pragma unroll 4
      for (int i = threadIdx.x; i < kBlockN * kChunks; i += Tile::kThreads) {
        const int r = i / kChunks, c = i % kChunks;
        const int slot = tslots[r];
        const int col = SparseRealColumn<Tile>(c, p.kv_lora_rank, p.rope_dim);
        const bool valid = slot >= 0 && col >= 0;
        const __nv_bfloat16* src = valid ? cache + static_cast<int64_t>(slot) * entry + col : cache;
        cuda::CpAsync16(dst + cuda::SwizzledOffset(r, c, kChunks), src, valid);
      }
    }
  };
  load_tile(0, 0);
  cuda::CpAsyncCommit();

  const Warp wt;
  const float scale_log2 = p.softmax_scale * cuda::kLog2e;

  float o[kOTiles][4];
#pragma unroll
  for (int i = 0; i < kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int j = 0; j < n_tiles; ++j) {
    cuda::CpAsyncWait<0>();
    __syncthreads();  // tile j landed (plain fp8 stores too); stage j-1 and P are free
    if (j + 1 < n_tiles) load_tile(j + 1, (j + 1) & 1);
    cuda::CpAsyncCommit();
    const uint32_t ks = k_smem + (j & 1) * Tile::kKBytes;

    float s[kSTiles][4];
    wt.Scores(q_smem, ks, s);

    const int* tslots = slots + (j & 1) * kBlockN;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (tslots[wt.Key(nt, e)] < 0) s[nt][e] = -INFINITY;
      }
    }
    wt.PublishMax(s, red);
    __syncthreads();  // maxima in `red`; every warp is done reading tile j's slots
    if (j + 2 < n_tiles) resolve(j + 2, j & 1);
    wt.Softmax(s, red, scale_log2, p_smem, o, m_run, l_run);
    __syncthreads();  // P complete
    wt.AccumulatePV(p_smem, ks, o);
  }
  cuda::CpAsyncWait<0>();

  __syncthreads();
  wt.PublishSum(l_run, red);
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = h0 + wt.Row(r);
    if (head >= H) continue;
    const float l = wt.RowSum(red, r);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float lse = l > 0.0f ? (m_run[r] + log2f(l)) * cuda::kLn2 : -INFINITY;
    const int64_t out_row = static_cast<int64_t>(token) * H + head;
    auto* orow = static_cast<__nv_bfloat16*>(p.out) + out_row * p.kv_lora_rank;
#pragma unroll
    for (int nt = 0; nt < kOTiles; ++nt) {
      const int d = wt.Dim(nt);
      if (d < p.kv_lora_rank)
        *reinterpret_cast<uint32_t*>(orow + d) = cuda::PackBf16(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
    }
    if (p.lse != nullptr && wt.t4 == 0 && wt.cw == 0) p.lse[out_row] = lse;
  }
}

template <int kRank, int kRope, int kRowWarps, bool kFp8>
absl::Status LaunchSparseTile(const SparseMlaParams& p, int max_q, cudaStream_t stream);

template <int kRank, int kRope, int kRowWarps, bool kFp8>
absl::Status LaunchSparseTileImpl(const SparseMlaParams& p, int max_q, cudaStream_t stream) {
  using Tile = SparseTile<kRank, kRope, kRowWarps, kFp8>;
  auto kernel = SparseAttentionKernel<Tile>;
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, "sparse attention: raising the shared-memory limit");
  }
  const dim3 grid(static_cast<unsigned>((p.num_heads + Tile::kRows - 1) / Tile::kRows),
                  static_cast<unsigned>(max_q), static_cast<unsigned>(p.batch));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  return cuda::LaunchStatus("SparseAttentionKernel");
}

}  // namespace mlaserve::kernels::sparse_cuda
