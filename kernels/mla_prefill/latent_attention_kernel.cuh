// The latent-attention CUDA kernel (see latent_attention.h). Included only by the
// instantiation files latent_attention_r*_w*.cu, each compiling one configuration.
//
// A CTA of 8 warps holds kRows = 16 * kRowWarps query rows (Q tile in shared memory) and
// streams the request's cache pages (64 tokens = one page = one K tile, 576 wide) through two
// cp.async stages. V is the first kv_lora_rank columns of the same tile, so each page is read
// from memory once per CTA. The warps form a kRowWarps x kColWarps grid:
//   S = Q K^T  : warp (r, c) computes rows r*16.., keys c*kKeysPerWarp..   (mma.sync m16n8k16)
//   softmax    : row maxima combined across the column warps through shared memory; P (bf16)
//                goes to shared memory
//   O += P V   : warp (r, c) accumulates rows r*16.., latent dims c*kDimsPerWarp..
// so every warp keeps only its slice of O in registers (at most 16 x 256 f32).
// The per-warp steps (S, the softmax across column warps, P V, the row sums) are shared with
// sparse_fwd's kernel: kernels/common/latent_warp_tile.cuh.
// Widths are padded to kRank / kRope (multiples of 64; padding chunks zero-filled).
#pragma once

#include <cmath>

#include "kernels/common/cuda_util.cuh"
#include "kernels/common/latent_warp_tile.cuh"
#include "kernels/mla_prefill/latent_attention.h"
#include "kernels/mla_prefill/latent_cta_work.cuh"

namespace mlaserve::kernels::mla_cuda {

template <int kRank_, int kRope_, int kRowWarps_>
struct LatentTile {
  static constexpr int kRank = kRank_, kRope = kRope_, kRowWarps = kRowWarps_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * cuda::kWarpSize;
  static constexpr int kColWarps = kWarps / kRowWarps;
  static constexpr int kRows = 16 * kRowWarps;
  static constexpr int kBlockN = kPageSize;  // one page per tile
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
  static constexpr int kSmemBytes = kQBytes + 2 * kKBytes + kPBytes + kRedBytes;
  static_assert(kRank % 64 == 0 && kRope % 64 == 0, "padded widths are multiples of 64");
  static_assert(kKeysPerWarp % 8 == 0 && kDimsPerWarp % 8 == 0, "warp slices are n-tiles");
};

struct LatentArgs {
  MlaParams p;
  LatentSplit split;
};

// Shared-memory chunk c of a padded row -> element offset in the real row, or -1 (padding).
template <typename Tile>
__device__ __forceinline__ int RealColumn(int c, int rank, int rope) {
  const int col = c * cuda::kBf16PerChunk;
  if (c < Tile::kRankChunks) return col < rank ? col : -1;
  const int rc = col - Tile::kRank;
  return rc < rope ? rank + rc : -1;
}

template <typename Tile>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    LatentAttentionKernel(const __grid_constant__ LatentArgs args) {
  constexpr int kRows = Tile::kRows, kBlockN = Tile::kBlockN, kChunks = Tile::kChunks;
  using Warp = cuda::LatentWarpTile<Tile>;
  constexpr int kSTiles = Warp::kSTiles, kOTiles = Warp::kOTiles;
  const MlaParams& p = args.p;
  const LatentSplit& split = args.split;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t q_smem = cuda::SmemAddress(smem);
  const uint32_t k_smem = q_smem + Tile::kQBytes;
  const uint32_t p_smem = k_smem + 2 * Tile::kKBytes;
  float* red = reinterpret_cast<float*>(smem + Tile::kQBytes + 2 * Tile::kKBytes + Tile::kPBytes);

  const LatentCtaWork w = LatentCtaWork::Of(p, split, kRows);
  if (w.empty()) return;
  const int b = w.b, split_index = w.split_index, q_start = w.q_start;
  const int H = p.num_heads, rows_total = w.rows_total, r0 = w.r0, first_pos = w.first_pos;
  const int kv_begin = w.kv_begin, kv_end = w.kv_end, n_tiles = w.n_tiles;

  const auto* cache = static_cast<const __nv_bfloat16*>(p.kv_cache);
  const int entry = p.kv_lora_rank + p.rope_dim;
  const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;

  // Q tile: row r -> (token (r0 + r) / H, head (r0 + r) % H).
  {
    const auto* q = static_cast<const __nv_bfloat16*>(p.q);
    for (int i = threadIdx.x; i < kRows * kChunks; i += Tile::kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int row = r0 + r;
      const int col = RealColumn<Tile>(c, p.kv_lora_rank, p.rope_dim);
      const bool valid = row < rows_total && col >= 0;
      const __nv_bfloat16* src =
          valid ? q + static_cast<int64_t>(q_start + row / H) * p.q_token_stride +
                      static_cast<int64_t>(row % H) * p.q_head_stride + col
                : q;
      cuda::CpAsync16(q_smem + cuda::SwizzledOffset(r, c, kChunks), src, valid);
    }
  }
  auto load_page = [&](int tile, int stage) {
    const int pos0 = kv_begin + tile * kBlockN;  // a multiple of kPageSize
    const int64_t page = table[pos0 / kPageSize];
    const __nv_bfloat16* page_base = cache + page * kPageSize * entry;
    const uint32_t dst = k_smem + stage * Tile::kKBytes;
#pragma unroll 4
    for (int i = threadIdx.x; i < kBlockN * kChunks; i += Tile::kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int col = RealColumn<Tile>(c, p.kv_lora_rank, p.rope_dim);
      const bool valid = pos0 + r < kv_end && col >= 0;
      const __nv_bfloat16* src = valid ? page_base + r * entry + col : cache;
      cuda::CpAsync16(dst + cuda::SwizzledOffset(r, c, kChunks), src, valid);
    }
  };
  if (n_tiles > 0) load_page(0, 0);
  cuda::CpAsyncCommit();

  const Warp wt;
  const float scale_log2 = p.softmax_scale * cuda::kLog2e;
  // Positions of this thread's two accumulator rows (rows past the request reuse the last).
  int row_pos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = min(r0 + wt.Row(r), rows_total - 1);
    row_pos[r] = first_pos + row / H;
  }

  float o[kOTiles][4];
#pragma unroll
  for (int i = 0; i < kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int j = 0; j < n_tiles; ++j) {
    cuda::CpAsyncWait<0>();
    __syncthreads();  // page j landed; all warps are done with page j-1's stage and P
    if (j + 1 < n_tiles) load_page(j + 1, (j + 1) & 1);
    cuda::CpAsyncCommit();
    const uint32_t ks = k_smem + (j & 1) * Tile::kKBytes;

    float s[kSTiles][4];
    wt.Scores(q_smem, ks, s);

    const int key0 = kv_begin + j * kBlockN;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + wt.Key(nt, e);
        if (key >= kv_end || (p.causal && key > row_pos[e / 2])) s[nt][e] = -INFINITY;
      }
    }
    // Row maxima of this warp's keys -> shared memory, combined over the column warps.
    wt.PublishMax(s, red);
    __syncthreads();
    wt.Softmax(s, red, scale_log2, p_smem, o, m_run, l_run);
    __syncthreads();  // P complete
    // O[rows, this warp's dims] += P[rows, 64 keys] V[64 keys, dims].
    wt.AccumulatePV(p_smem, ks, o);
  }
  cuda::CpAsyncWait<0>();

  // Row sums: quad-reduce, then add the column warps' shares through shared memory.
  __syncthreads();  // everyone is past the last read of `red`
  wt.PublishSum(l_run, red);
  __syncthreads();
  const bool direct = split.num_splits == 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + wt.Row(r);
    if (row >= rows_total) continue;
    const float l = wt.RowSum(red, r);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float lse = l > 0.0f ? (m_run[r] + log2f(l)) * cuda::kLn2 : -INFINITY;
    const int token = row / H, head = row % H;
    if (direct) {
      const int64_t out_row = static_cast<int64_t>(q_start + token) * H + head;
      auto* orow = static_cast<__nv_bfloat16*>(p.out) + out_row * p.kv_lora_rank;
#pragma unroll
      for (int nt = 0; nt < kOTiles; ++nt) {
        const int d = wt.Dim(nt);
        if (d < p.kv_lora_rank)
          *reinterpret_cast<uint32_t*>(orow + d) = cuda::PackBf16(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
      }
      if (p.lse != nullptr && wt.t4 == 0 && wt.cw == 0) p.lse[out_row] = lse;
    } else {
      const int64_t cap = static_cast<int64_t>(p.batch) * split.max_q * H;
      const int64_t part_row = static_cast<int64_t>(split_index) * cap +
                               (static_cast<int64_t>(b) * split.max_q + token) * H + head;
      float* orow = split.part_out + part_row * p.kv_lora_rank;
#pragma unroll
      for (int nt = 0; nt < kOTiles; ++nt) {
        const int d = wt.Dim(nt);
        if (d < p.kv_lora_rank)
          *reinterpret_cast<float2*>(orow + d) = make_float2(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
      }
      if (wt.t4 == 0 && wt.cw == 0) split.part_lse[part_row] = lse;
    }
  }
}

template <int kRank, int kRope, int kRowWarps>
absl::Status LaunchLatentTile(const LatentArgs& args, int64_t max_rows, cudaStream_t stream);

template <int kRank, int kRope, int kRowWarps>
absl::Status LaunchLatentTileImpl(const LatentArgs& args, int64_t max_rows, cudaStream_t stream) {
  using Tile = LatentTile<kRank, kRope, kRowWarps>;
  auto kernel = LatentAttentionKernel<Tile>;
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      Tile::kSmemBytes);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, "latent attention: raising the shared-memory limit");
  }
  const dim3 grid(static_cast<unsigned>((max_rows + Tile::kRows - 1) / Tile::kRows),
                  static_cast<unsigned>(args.split.num_splits), static_cast<unsigned>(args.p.batch));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(args);
  return cuda::LaunchStatus("LatentAttentionKernel");
}

}  // namespace mlaserve::kernels::mla_cuda
