// mla_decode's combine kernel (mla_combine.cuh). One CTA per (query row, request); its warps take
// the row's pieces in turn, each lane 4 float4 columns of the 512 latent dims, and add their sums
// in shared memory.
#include "kernels/mla_decode/mla_combine.cuh"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/status.h"
#include "kernels/common/bf16_vec.cuh"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/mla_prefill/latent_tiling.h"

namespace mlaserve::kernels::mla_decode_internal {
namespace {

constexpr int kCombineWarps = 4;
constexpr int kCombineThreads = 32 * kCombineWarps;
constexpr int kCombineMaxRank = 512;
constexpr int kCombineVecsPerLane = kCombineMaxRank / 4 / 32;

// With a value projection (MlaValueProjection) the grid has a third dimension: CTA z of a row
// projects the merged row onto output columns [z * kValueCols, (z + 1) * kValueCols), each warp
// kValueColsPerWarp of them. Per column a lane holds the same two 16-byte vectors of the latent
// dims (lane l: vectors l and l + 32 of a 512-wide row's 64), so a warp reads a W_UV row as 512
// contiguous bytes per load, and a column's dot product ends in one warp sum. 16 columns a CTA:
// at batch 1 and 16 heads the 16 rows x 8 slices of v_dim 128 spread W_UV's 2 MB over 128 CTAs,
// 16 KB each, whose loads are in flight before the PDL wait.
constexpr int kValueColsPerWarp = 4;
constexpr int kValueCols = kCombineWarps * kValueColsPerWarp;
constexpr int kBf16PerVec = 8;  // bf16 values per 16-byte vector
constexpr int kValueVecsPerLane = kCombineMaxRank / kBf16PerVec / 32;

// The 2 bf16 of a 32-bit word as floats, in memory order (PackBf16's inverse, exact).
__device__ __forceinline__ float2 UnpackBf16Word(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// The 8 bf16 of a vector as floats, in memory order.
__device__ __forceinline__ void UnpackBf16(const uint4& v, float (&f)[kBf16PerVec]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 pair = UnpackBf16Word(words[e]);
    f[2 * e] = pair.x;
    f[2 * e + 1] = pair.y;
  }
}

// This lane's W_UV vectors for its warp's columns of head h (zeros past v_dim and kv_lora_rank).
__device__ __forceinline__ void LoadValueRows(const CombineArgs& a, int h, int lane, int warp,
                                              uint4 (&w)[kValueColsPerWarp][kValueVecsPerLane]) {
  const int col0 = blockIdx.z * kValueCols + warp * kValueColsPerWarp;
  const __nv_bfloat16* head = a.value.w + h * a.value.head_stride;
#pragma unroll
  for (int k = 0; k < kValueColsPerWarp; ++k) {
#pragma unroll
    for (int j = 0; j < kValueVecsPerLane; ++j) {
      const int vec = lane + 32 * j;
      w[k][j] = make_uint4(0, 0, 0, 0);
      if (col0 + k < a.value.v_dim && vec * kBf16PerVec < a.rank) {
        w[k][j] = cuda::LoadStreamingVec(head + (col0 + k) * a.value.row_stride + vec * kBf16PerVec);
      }
    }
  }
}

// value.out[token, h, column] for the warp's columns: the latent row (bf16, shared memory, as
// written to out) times W_UV's rows, each lane's 16 products summed in order in f32, then the
// lanes' sums by a butterfly (every lane ends with the same bits; the same order every run).
__device__ __forceinline__ void ProjectRow(const CombineArgs& a, const uint4* latent,
                                           const uint4 (&w)[kValueColsPerWarp][kValueVecsPerLane], int64_t token,
                                           int h, int lane, int warp) {
  float x[kValueVecsPerLane][kBf16PerVec];
#pragma unroll
  for (int j = 0; j < kValueVecsPerLane; ++j) {
    const int vec = lane + 32 * j;
    UnpackBf16(vec * kBf16PerVec < a.rank ? latent[vec] : make_uint4(0, 0, 0, 0), x[j]);
  }
  const int col0 = blockIdx.z * kValueCols + warp * kValueColsPerWarp;
  __nv_bfloat16* out = a.value.out + token * a.value.out_token_stride + h * a.value.out_head_stride;
#pragma unroll
  for (int k = 0; k < kValueColsPerWarp; ++k) {
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kValueVecsPerLane; ++j) {
      float wf[kBf16PerVec];
      UnpackBf16(w[k][j], wf);
#pragma unroll
      for (int e = 0; e < kBf16PerVec; ++e) sum = fmaf(wf[e], x[j][e], sum);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == k && col0 + k < a.value.v_dim) out[col0 + k] = __float2bfloat16_rn(sum);
  }
}

// The merge's arithmetic, shared by both combine kernels so that they write the same bytes.
// One piece (its LSE and this lane's columns of its partial) into a running max, sum and
// weighted output: the online softmax.
// kVecs: this lane's float4 columns of the row (all of them, or the one the lean kernel's many-piece
// rows merge at a time). The roundings are spelled out (__fmaf_rn, __fmul_rn) so that every
// kernel and instantiation computes the same bits: left to the compiler, a * b + c * d may
// contract either way, and did differently in two instantiations (2026-12-06).
template <int kVecs = kCombineVecsPerLane>
__device__ __forceinline__ void AddPiece(float ls, const float4 (&x)[kVecs], float& m, float& l, float4 (&acc)[kVecs]) {
  const float m_new = fmaxf(m, ls);
  const float keep = expf(m - m_new), w = expf(ls - m_new);
  l = __fmaf_rn(l, keep, w);
  m = m_new;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    acc[j].x = __fmaf_rn(w, x[j].x, __fmul_rn(acc[j].x, keep));
    acc[j].y = __fmaf_rn(w, x[j].y, __fmul_rn(acc[j].y, keep));
    acc[j].z = __fmaf_rn(w, x[j].z, __fmul_rn(acc[j].z, keep));
    acc[j].w = __fmaf_rn(w, x[j].w, __fmul_rn(acc[j].w, keep));
  }
}

// The kCombineWarps groups' (max, sum) merged: each group's weight c[g] (0 for a group without
// pieces), the row's total and its max.
__device__ __forceinline__ void GroupWeights(const float (&m)[kCombineWarps], const float (&l)[kCombineWarps],
                                             float (&c)[kCombineWarps], float& total, float& m_all) {
  m_all = -INFINITY;
#pragma unroll
  for (int g = 0; g < kCombineWarps; ++g) m_all = fmaxf(m_all, m[g]);
  float scale[kCombineWarps];
  total = 0.0f;
#pragma unroll
  for (int g = 0; g < kCombineWarps; ++g) {
    scale[g] = m[g] == -INFINITY ? 0.0f : expf(m[g] - m_all);
    total = __fmaf_rn(scale[g], l[g], total);
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
  for (int g = 0; g < kCombineWarps; ++g) c[g] = scale[g] * inv;
}

// sum += c x, rounded once per element (MergedColumn's step; the lean kernel's too).
__device__ __forceinline__ void AddWeighted(float c, const float4& x, float4& sum) {
  sum.x = __fmaf_rn(c, x.x, sum.x);
  sum.y = __fmaf_rn(c, x.y, sum.y);
  sum.z = __fmaf_rn(c, x.z, sum.z);
  sum.w = __fmaf_rn(c, x.w, sum.w);
}

// One float4 column of the merged row: the groups' outputs in group order, packed to bf16.
__device__ __forceinline__ uint2 MergedColumn(const float (&c)[kCombineWarps], const float4 (&v)[kCombineWarps]) {
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int g = 0; g < kCombineWarps; ++g) AddWeighted(c[g], v[g], sum);
  return make_uint2(cuda::PackBf16(sum.x, sum.y), cuda::PackBf16(sum.z, sum.w));
}

__device__ __forceinline__ float RowLse(float total, float m_all) {
  return total > 0.0f ? m_all + logf(total) : -INFINITY;
}

// This lane's columns (float4 j: lane + 32 j) of the partial in row `row`; zeros past the rank.
// The partials and their LSEs are read once: both combine kernels load them evict-first
// (ld.global.cs, __ldcs). On the H200 that took the balanced rows at b 64 / 128 heads / 4k 1.6%
// less and batch 4 1-2.6% less, the others even; L2-only (__ldcg) or read-only (__ldg) loads
// made the skewed batch 4% slower (2026-12-01).
// Float4 column v (latent dims 4v .. 4v + 3) of the partial in row `row`, evict-first: four f32, or
// four bf16 (8 bytes) widened where kBf16Parts (a.part_bf16; each kernel is instantiated for both,
// so that neither carries the other's addressing: a runtime branch made the lean kernel spill).
template <bool kBf16Parts>
__device__ __forceinline__ float4 LoadPartialColumn(const CombineArgs& a, int64_t row, int v) {
  if constexpr (kBf16Parts) {
    const auto* row_bf16 = reinterpret_cast<const __nv_bfloat16*>(a.part_out) + row * a.rank;
    const uint2 u = __ldcs(reinterpret_cast<const uint2*>(row_bf16) + v);
    const float2 lo = UnpackBf16Word(u.x), hi = UnpackBf16Word(u.y);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
  return __ldcs(reinterpret_cast<const float4*>(a.part_out + row * a.rank) + v);
}
template <bool kBf16Parts>
__device__ __forceinline__ void LoadPartial(const CombineArgs& a, int64_t row, int lane,
                                            float4 (&x)[kCombineVecsPerLane]) {
#pragma unroll
  for (int j = 0; j < kCombineVecsPerLane; ++j) {
    x[j] = 4 * (lane + 32 * j) < a.rank ? LoadPartialColumn<kBf16Parts>(a, row, lane + 32 * j)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Where row i x heads + h of request b keeps its pieces: n of them, piece s at partial row
// first + s * stride. A balanced schedule's request in one piece (n <= 1) has none: the attention
// kernel wrote it (`written`). With chunks, only the chunks that hold keys of the request (lk of
// them); with single_chunk_direct, a request of one such chunk was written too.
// Readable before the PDL wait: the schedule (or order) kernel that wrote pieces and slot_base (or
// chunk_pages_at) ran at least two kernels back, and the attention kernel in between lets this one
// in only after its own wait (pdl.cuh, rule 3; read from L2).
struct RowPieces {
  int n = 0;
  int64_t first = 0, stride = 0;
  bool written = false;  // the attention kernel wrote the row's output and LSE: nothing to merge
};
__device__ __forceinline__ RowPieces PiecesOf(const CombineArgs& a, int b, int i, int h, int lk) {
  RowPieces r;
  if (a.pieces != nullptr) {
    r.n = __ldcg(a.pieces + b);
    r.stride = a.slot_rows;
    r.first = __ldcg(a.slot_base + b) * r.stride + static_cast<int64_t>(i) * a.num_heads + h;  // -1 where n <= 1
    r.written = r.n <= 1;
  } else {
    const int chunk_tokens = a.chunk_pages_at != nullptr ? __ldcg(a.chunk_pages_at) * kPageSize : a.chunk_tokens;
    r.n = mla_internal::LatentChunksWithKeys(lk, chunk_tokens, a.num_splits);
    r.first = (static_cast<int64_t>(b) * a.max_q + i) * a.num_heads + h;
    r.stride = static_cast<int64_t>(a.batch) * a.max_q * a.num_heads;
    r.written = a.single_chunk_direct && r.n == 1;
  }
  return r;
}

// This lane's columns of piece s of a row (LoadPartial), zeros past the row's n pieces: the
// warp-per-row kernels' loads, whose rounds run past n where a row has fewer pieces than groups.
template <bool kBf16Parts>
__device__ __forceinline__ void LoadPieceOrZeros(const CombineArgs& a, const RowPieces& pieces, int s, int lane,
                                                 float4 (&x)[kCombineVecsPerLane]) {
  if (s < pieces.n) {
    LoadPartial<kBf16Parts>(a, pieces.first + s * pieces.stride, lane, x);
    return;
  }
#pragma unroll
  for (int j = 0; j < kCombineVecsPerLane; ++j) x[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// out = sum_s w_s part_s with w_s = exp(lse_s - max) / sum_s' exp(lse_s' - max) over the row's
// pieces (an empty piece has lse = -inf and weight 0, and its partial is not added: it may hold
// anything). With chunks, only the chunks that hold keys of the request (LatentChunksWithKeys):
// a decode graph plans for a longer context than it runs, and the attention kernel skips the rest.
// Each warp reads its pieces' LSEs and partials in the same pass and keeps a running max, sum and
// weighted output (online softmax), so the call waits on memory once per two pieces of a warp
// rather than first for every LSE; the warps' results are merged in shared memory, in warp
// order (the same bits every run).
// kProject: the CTA also projects the row, rounded to bf16 as written to out, onto its slice of
// W_UV's columns (ValueArgs; loaded before the wait). A balanced schedule's row in one piece,
// which the attention kernel wrote, is read back from out for it. The CTAs of z > 0 compute the
// same merged row as z = 0 and leave out and lse to it.
template <bool kProject, bool kBf16Parts>
__global__ void __launch_bounds__(kCombineThreads) MlaCombineKernel(const __grid_constant__ CombineArgs a) {
  __shared__ float4 partial[kCombineWarps][kCombineMaxRank / 4];
  __shared__ float warp_max[kCombineWarps], warp_sum[kCombineWarps];
  __shared__ uint4 latent[kProject ? kCombineMaxRank / kBf16PerVec : 1];  // the merged row, bf16
  const int b = blockIdx.y;
  const int i = blockIdx.x / a.num_heads, h = blockIdx.x % a.num_heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  [[maybe_unused]] uint4 w_uv[kValueColsPerWarp][kValueVecsPerLane];  // this lane's W_UV vectors
  if constexpr (kProject) LoadValueRows(a, h, lane, warp, w_uv);
  // The lengths are the step's inputs, written before the attention kernel ran; that kernel lets
  // this one in only after its own PDL wait (latent_attention_sm90.cu), so they are readable
  // before this grid's wait. The partials and the balanced schedule's pieces are read after it.
  const int q_start = a.cu_seqlens_q[b];
  const int lq = a.cu_seqlens_q[b + 1] - q_start;
  const int lk = a.pieces == nullptr ? a.seqlens_k[b] : 0;
  cuda::PdlWaitForPrerequisites();
  cuda::PdlReleaseDependents();
  if (i >= lq) return;
  const int64_t out_row = static_cast<int64_t>(q_start + i) * a.num_heads + h;
  const int v = threadIdx.x;  // float4 column: latent dims 4v .. 4v + 3
  auto* latent_words = reinterpret_cast<uint2*>(latent);
  const RowPieces pieces = PiecesOf(a, b, i, h, lk);
  const int n = pieces.n;
  const int64_t first = pieces.first, stride = pieces.stride;
  if (pieces.written) {  // written directly by the attention kernel
    if constexpr (kProject) {
      if (4 * v < a.rank) latent_words[v] = *reinterpret_cast<const uint2*>(a.out + out_row * a.rank + 4 * v);
      __syncthreads();
      ProjectRow(a, latent, w_uv, q_start + i, h, lane, warp);
    }
    return;
  }
  float m = -INFINITY, l = 0.0f;
  float4 acc[kCombineVecsPerLane];
#pragma unroll
  for (int j = 0; j < kCombineVecsPerLane; ++j) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 2
  for (int s = warp; s < n; s += kCombineWarps) {
    const int64_t row = first + s * stride;
    const float ls = __ldcs(a.part_lse + row);
    float4 x[kCombineVecsPerLane];
    LoadPartial<kBf16Parts>(a, row, lane, x);
    if (ls == -INFINITY) continue;  // empty piece (the whole warp: one row)
    AddPiece(ls, x, m, l, acc);
  }
#pragma unroll
  for (int j = 0; j < kCombineVecsPerLane; ++j) partial[warp][lane + 32 * j] = acc[j];
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = l;
  }
  __syncthreads();
  float c[kCombineWarps], total, m_all;
  GroupWeights(warp_max, warp_sum, c, total, m_all);
  const bool writes_out = !kProject || blockIdx.z == 0;
  if (4 * v < a.rank) {
    float4 col[kCombineWarps];
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) col[w] = partial[w][v];
    const uint2 packed = MergedColumn(c, col);
    if (writes_out) *reinterpret_cast<uint2*>(a.out + out_row * a.rank + 4 * v) = packed;
    if constexpr (kProject) latent_words[v] = packed;
  }
  if (a.lse != nullptr && threadIdx.x == 0 && writes_out) a.lse[out_row] = RowLse(total, m_all);
  if constexpr (kProject) {
    __syncthreads();
    ProjectRow(a, latent, w_uv, q_start + i, h, lane, warp);
  }
}

// Where every row has few pieces (chunk plans of at most 2 x kCombineFewPieces splits, balanced
// plans whose max_pieces is at most kCombineFewPieces) and no projection: a warp per row,
// kRowsWarps rows a CTA.
// MlaCombineKernel's CTA of 4 warps per row is one memory round for up to 4 pieces, but a CTA is
// short-lived and its rows are one request's heads: at 128 heads and batch 64, 8192 CTAs of a
// few KB each, which the GPU starts at a rate that sets the kernel's time (21 us at base clock,
// 31% of DRAM bandwidth; H200, 2026-11-30). Here a CTA has eight rows of loads in flight.
// The arithmetic is MlaCombineKernel's, piece for piece: piece s belongs to group s % 4 (that
// kernel's warp s % 4), each group runs the same online softmax over its pieces in order, and the
// groups merge in group order as that kernel's warps do in shared memory -- so the bytes written
// are the same. The groups' first pieces are loaded in one round; later pieces group by group.
constexpr int kRowsWarps = 8;
constexpr int kRowsThreads = 32 * kRowsWarps;

// A warp-per-row kernel's row: its request's row r (query i, head h), the pieces to merge and
// where it writes. kBatchMajor: the requests along the grid's x, the row blocks along y.
struct CombineRow {
  int64_t out_row = 0;
  RowPieces pieces;
};
// The two warp-per-row kernels' start, this warp's row in `row`; false where it has nothing to
// merge (past the request's queries, or written whole by the attention kernel). Includes the PDL
// wait: the lengths are readable before it (as in MlaCombineKernel) and the pieces too (PiecesOf),
// so their loads go first. A request that the attention kernel wrote whole (a balanced schedule's
// in one piece, or a chunk plan's in one chunk with single_chunk_direct): its CTAs (a request's
// rows, all alike) leave before the wait, while the attention
// kernel's last CTAs still run, not after it completed (at b 128, s_q 2, 16k, three quarters of
// 4096 CTAs). CTA (0, 0) always waits, so that the grid completes only after the attention kernel
// did: a kernel after this one may read what it wrote.
template <bool kBatchMajor>
__device__ __forceinline__ bool StartCombineRow(const CombineArgs& a, CombineRow& row) {
  const int b = kBatchMajor ? blockIdx.x : blockIdx.y;
  const int r = (kBatchMajor ? blockIdx.y : blockIdx.x) * kRowsWarps + threadIdx.x / 32;
  const int q_start = a.cu_seqlens_q[b];
  const int lq = a.cu_seqlens_q[b + 1] - q_start;
  const int lk = a.pieces == nullptr ? a.seqlens_k[b] : 0;
  const int i = r / a.num_heads, h = r % a.num_heads;
  row.pieces = PiecesOf(a, b, i, h, lk);
  if (row.pieces.written && (blockIdx.x | blockIdx.y) != 0) return false;
  cuda::PdlWaitForPrerequisites();
  cuda::PdlReleaseDependents();
  if (i >= lq) return false;
  row.out_row = static_cast<int64_t>(q_start + i) * a.num_heads + h;
  return !row.pieces.written;
}

template <bool kBatchMajor, bool kBf16Parts>
__global__ void __launch_bounds__(kRowsThreads, 2) MlaCombineRowsKernel(const __grid_constant__ CombineArgs a) {
  const int lane = threadIdx.x % 32;
  CombineRow row;
  if (!StartCombineRow<kBatchMajor>(a, row)) return;
  const int64_t out_row = row.out_row;
  const int n = row.pieces.n;
  const int64_t first = row.pieces.first, stride = row.pieces.stride;
  constexpr int kGroups = kCombineWarps;
  auto load = [&](int s, float4 (&x)[kCombineVecsPerLane]) { LoadPieceOrZeros<kBf16Parts>(a, row.pieces, s, lane, x); };
  // Round 0, every group's first piece in one memory round. The online update of a first piece
  // (m = -inf: keep = 0, w = 1) gives m = lse, l = 1 and acc = the partial exactly, so the partial
  // is loaded into acc; an empty piece leaves the group as it was (m = -inf, l = 0, acc = 0).
  float m[kGroups], l[kGroups];
  float4 acc[kGroups][kCombineVecsPerLane];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    m[g] = g < n ? __ldcs(a.part_lse + first + g * stride) : -INFINITY;
    load(g, acc[g]);
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    l[g] = m[g] == -INFINITY ? 0.0f : 1.0f;
    if (m[g] == -INFINITY) {
#pragma unroll
      for (int j = 0; j < kCombineVecsPerLane; ++j) acc[g][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  // Later rounds (more than kGroups pieces): the online update as MlaCombineKernel's warps run it.
  for (int s0 = kGroups; s0 < n; s0 += kGroups) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int s = s0 + g;
      const float ls = s < n ? __ldcs(a.part_lse + first + s * stride) : -INFINITY;
      float4 x[kCombineVecsPerLane];
      load(s, x);
      if (ls == -INFINITY) continue;  // past n, or an empty piece
      AddPiece(ls, x, m[g], l[g], acc[g]);
    }
  }
  float c[kGroups], total, m_all;
  GroupWeights(m, l, c, total, m_all);
#pragma unroll
  for (int j = 0; j < kCombineVecsPerLane; ++j) {
    const int v = lane + 32 * j;  // float4 column: latent dims 4v .. 4v + 3
    if (4 * v >= a.rank) break;
    float4 col[kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) col[g] = acc[g][j];
    *reinterpret_cast<uint2*>(a.out + out_row * a.rank + 4 * v) = MergedColumn(c, col);
  }
  if (a.lse != nullptr && lane == 0) a.lse[out_row] = RowLse(total, m_all);
}

// The warp-per-row combine for rows of at most 4 pieces, in fewer registers
// (MLASERVE_MLA_COMBINE_LEAN). MlaCombineRowsKernel holds every group's first piece in its own
// accumulator and the later rounds' loads beside them (118 registers), so two of its CTAs fit an
// SM: 16 warps. FlashMLA's combine (48 registers, 40 warps an SM) took 14.8 us where ours took
// 17.5 (H100, ncu, b 64 4k, balanced, 2026-12-06). Where a row has at most 4 pieces each group
// holds at most one, whose online update is exact (m = its LSE, l = 1 or 0, acc = its partial),
// so the merge is GroupWeights over the LSEs and then sum += c[g] x_g over the groups in order
// (MergedColumn's steps; an empty or absent group adds c = 0 times 0). This kernel runs exactly
// that with one sum: the LSEs (a lane each) and pieces 0 and 1 in one round, pieces 2 and 3 into
// the same registers once 0 and 1 are added -- the same bytes as the other two kernels. A row of
// more pieces (a graph planned for a longer context than it runs can cut a request more often
// than its plan's max_pieces) runs the groups' online updates one float4 column at a time from
// global memory: slow, but the same bytes. On the H100 (2026-12-06) it doubled the combine's
// active warps without shortening it much (ncu 17.3 against 17.5 us), and with the request-major
// grid the balanced 128-head rows ran 0.2-0.7% faster (b 64 4k / 8k / 16k +0.6 / +0.7 / +0.4%).
template <bool kBatchMajor, bool kBf16Parts>
__global__ void __launch_bounds__(kRowsThreads, 4) MlaCombineRowsLeanKernel(const __grid_constant__ CombineArgs a) {
  const int lane = threadIdx.x % 32;
  CombineRow row;
  if (!StartCombineRow<kBatchMajor>(a, row)) return;
  const int64_t out_row = row.out_row;
  const int n = row.pieces.n;
  const int64_t first = row.pieces.first, stride = row.pieces.stride;
  constexpr int kGroups = kCombineWarps;
  float m[kGroups], l[kGroups], c[kGroups], total, m_all;
  if (n <= kGroups) {  // one round for the LSEs and pieces 0-1, one more for pieces 2-3
    auto load = [&](int s, float4 (&x)[kCombineVecsPerLane]) {
      LoadPieceOrZeros<kBf16Parts>(a, row.pieces, s, lane, x);
    };
    const float my_lse = lane < n ? __ldcs(a.part_lse + first + lane * stride) : -INFINITY;
    float4 x0[kCombineVecsPerLane], x1[kCombineVecsPerLane];
    load(0, x0);
    load(1, x1);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      m[g] = __shfl_sync(0xffffffffu, my_lse, g);
      l[g] = m[g] == -INFINITY ? 0.0f : 1.0f;
    }
    GroupWeights(m, l, c, total, m_all);
    if (a.lse != nullptr && lane == 0) a.lse[out_row] = RowLse(total, m_all);
    unsigned live_groups = 0;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) live_groups |= m[g] != -INFINITY ? 1u << g : 0u;
    float4 sum[kCombineVecsPerLane];
    auto add = [&](int g, const float4 (&x)[kCombineVecsPerLane]) {  // an empty piece adds c[g] = 0 times 0
      const bool live = (live_groups >> g) & 1u;
#pragma unroll
      for (int j = 0; j < kCombineVecsPerLane; ++j) {
        AddWeighted(c[g], live ? x[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f), sum[j]);
      }
    };
#pragma unroll
    for (int j = 0; j < kCombineVecsPerLane; ++j) sum[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    add(0, x0);
    load(2, x0);
    add(1, x1);
    load(3, x1);
    add(2, x0);
    add(3, x1);
#pragma unroll
    for (int j = 0; j < kCombineVecsPerLane; ++j) {
      const int v = lane + 32 * j;  // float4 column: latent dims 4v .. 4v + 3
      if (4 * v >= a.rank) break;
      *reinterpret_cast<uint2*>(a.out + out_row * a.rank + 4 * v) =
          make_uint2(cuda::PackBf16(sum[j].x, sum[j].y), cuda::PackBf16(sum[j].z, sum[j].w));
    }
  } else {
#pragma unroll 1
    for (int j = 0; j < kCombineVecsPerLane; ++j) {
      const int v = lane + 32 * j;
      if (4 * v >= a.rank) break;
      float4 acc[kGroups][1];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        acc[g][0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      for (int s0 = 0; s0 < n; s0 += kGroups) {
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          const int64_t part_row = first + (s0 + g) * stride;
          const float ls = s0 + g < n ? __ldcs(a.part_lse + part_row) : -INFINITY;
          if (ls == -INFINITY) continue;  // past n, or an empty piece
          const float4 x[1] = {LoadPartialColumn<kBf16Parts>(a, part_row, v)};
          AddPiece<1>(ls, x, m[g], l[g], acc[g]);
        }
      }
      GroupWeights(m, l, c, total, m_all);
      float4 col[kGroups];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) col[g] = acc[g][0];
      *reinterpret_cast<uint2*>(a.out + out_row * a.rank + 4 * v) = MergedColumn(c, col);
      if (j == 0 && a.lse != nullptr && lane == 0) a.lse[out_row] = RowLse(total, m_all);
    }
  }
}

}  // namespace

// The schedule, order and combine kernels run next to the attention kernel, which takes all of an
// SM's shared memory: asking for the same carveout spares an SM the L1 / shared reconfiguration
// between them (a hint; the driver may still choose).
absl::Status PreferSharedCarveout(const void* kernel, const char* name) {
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, name);
  }
  return absl::OkStatus();
}

namespace {

// LaunchCombine for partials of one type (kBf16Parts: args.part_bf16).
template <bool kBf16Parts>
absl::Status LaunchCombineOf(const CombineArgs& args, int64_t max_rows, bool few_pieces, int max_pieces,
                             cudaStream_t s) {
  const bool project = args.value.w != nullptr;
  // MLASERVE_MLA_COMBINE_ROWS (read per call; tests, A/B timing): 0 = never the rows kernel,
  // 1 = wherever there is no projection, unset = where the caller expects few pieces.
  const char* rows_env = std::getenv("MLASERVE_MLA_COMBINE_ROWS");
  const bool rows = !project && (rows_env != nullptr ? std::strcmp(rows_env, "0") != 0 : few_pieces);
  // The rows kernels' grid has the requests along x (consecutive CTAs: one row block of each
  // request in turn, as FlashMLA's combine), where the row blocks fit the grid's y (65535);
  // MLASERVE_MLA_COMBINE_BATCH_MAJOR=0 (read per call; tests, A/B timing) puts the row blocks
  // along x. With the lean kernel it measured 0-0.5% faster on the H100, even with the other
  // (2026-12-06, seventy-third session).
  const auto row_blocks = static_cast<unsigned>((max_rows + kRowsWarps - 1) / kRowsWarps);
  const bool batch_major = row_blocks <= 65535 && !EnvSwitchedOff("MLASERVE_MLA_COMBINE_BATCH_MAJOR");
  if (rows) {
    // MLASERVE_MLA_COMBINE_LEAN (read per call): 0 = never the lean rows kernel, 1 = wherever the
    // rows kernel runs, unset = where the plan bounds the pieces a row at kCombineFewPieces.
    const char* lean_env = std::getenv("MLASERVE_MLA_COMBINE_LEAN");
    const bool lean = lean_env != nullptr ? std::strcmp(lean_env, "0") != 0
                                          : max_pieces > 0 && max_pieces <= kCombineFewPieces;
    const auto kernel = lean ? (batch_major ? MlaCombineRowsLeanKernel<true, kBf16Parts>
                                            : MlaCombineRowsLeanKernel<false, kBf16Parts>)
                             : (batch_major ? MlaCombineRowsKernel<true, kBf16Parts>
                                            : MlaCombineRowsKernel<false, kBf16Parts>);
    const char* name = lean ? "MlaCombineRowsLeanKernel" : "MlaCombineRowsKernel";
    RETURN_IF_ERROR(PreferSharedCarveout(reinterpret_cast<const void*>(kernel), name));
    cuda::LaunchShape shape;
    shape.grid = batch_major ? dim3(static_cast<unsigned>(args.batch), row_blocks)
                             : dim3(row_blocks, static_cast<unsigned>(args.batch));
    shape.block = dim3(kRowsThreads);
    shape.stream = s;
    return cuda::LaunchPdl(name, shape, kernel, args);
  }
  const auto kernel = project ? MlaCombineKernel<true, kBf16Parts> : MlaCombineKernel<false, kBf16Parts>;
  RETURN_IF_ERROR(PreferSharedCarveout(reinterpret_cast<const void*>(kernel), "MlaCombineKernel carveout"));
  cuda::LaunchShape shape;
  const int slices = project ? (args.value.v_dim + kValueCols - 1) / kValueCols : 1;
  shape.grid = dim3(static_cast<unsigned>(max_rows), static_cast<unsigned>(args.batch), static_cast<unsigned>(slices));
  shape.block = dim3(kCombineThreads);
  shape.stream = s;
  return cuda::LaunchPdl("MlaCombineKernel", shape, kernel, args);
}

}  // namespace

absl::Status LaunchCombine(const CombineArgs& args, int64_t max_rows, bool few_pieces, int max_pieces,
                           cudaStream_t s) {
  return args.part_bf16 ? LaunchCombineOf<true>(args, max_rows, few_pieces, max_pieces, s)
                        : LaunchCombineOf<false>(args, max_rows, few_pieces, max_pieces, s);
}

ValueArgs MakeValueArgs(const MlaValueProjection* v) {
  ValueArgs args;
  if (v == nullptr) return args;
  args.w = static_cast<const __nv_bfloat16*>(v->w);
  args.row_stride = v->row_stride;
  args.head_stride = v->head_stride;
  args.v_dim = v->v_dim;
  args.out = static_cast<__nv_bfloat16*>(v->out);
  args.out_token_stride = v->out_token_stride;
  args.out_head_stride = v->out_head_stride;
  return args;
}

}  // namespace mlaserve::kernels::mla_decode_internal
