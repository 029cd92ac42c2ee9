// kSm90 variant 13 (moe_cuda.h): our grouped GEMM for Hopper with the operands swapped, so an
// expert's tokens are wgmma's N and its weight rows wgmma's M, and the N of each product is cut
// to the expert's token count at an 8-token grain.
//
// Why: at a few hundred rows an expert (V2-Lite at 2048 tokens: 192 rows on average, ragged), a
// row tile of 128 computes 256 rows for 192 (two tiles, the second half empty), and a row tile
// of 64 reads each weight tile three times from L2 and is bound by L2 -> SM traffic (40 KB per
// 64 x 256 x 64 step). Here a CTA tile is 128 weight rows (features) x up to 256 tokens: the
// weights are read once per expert (for up to 256 tokens), and the products cover the tokens
// that exist, rounded up to 8.
//
// Shape: persistent, one CTA of 384 threads per SM, 4 stages of (128 x 64 weights + 256 x 64
// tokens) bf16, 128-byte swizzled, K-major (48 KiB each). Warp group 0 produces: one thread
// loads the weight box by TMA (one 3-D descriptor [E][N][K], the expert a coordinate) and the
// tokens in boxes of 64 rows (one 2-D descriptor over a's rows, the tile's first row an offset;
// ceil(tokens / 64) boxes). Warp groups 1 and 2 each own 64 of the 128 features and issue, per
// 16-wide k step, at most two wgmmas whose N together is the tile's token count rounded up to
// 16 (Split, below); the second reads the token stage from a runtime row. Tiles are numbered
// expert by expert, feature tile, then token tile (fastest), and a CTA takes every gridDim-th
// tile.
//
// The epilogue writes D[token, feature]: the accumulators are transposed into shared memory with
// stmatrix .trans (8 features of one token = 16 bytes a row; with SiLU * up, interleaved gate/up
// weights put a feature's gate and up rows 8 apart in one warp's 16, so a thread holds both and
// writes silu(gate) * up, the same bits as the unfused product + SiLU pass) and copied out with
// 16-byte stores, 64 tokens a pass per warp group.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/bfloat16.h"
#include "kernels/common/device_arch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_silu.cuh"
#include "kernels/moe/moe_silu_exact.cuh"

namespace mlaserve::kernels::moe_cuda {
namespace swap_gemm {

using namespace cute;

using Element = cutlass::bfloat16_t;
constexpr int kTileF = 128;   // features (weight rows) a tile
constexpr int kTileT = 256;   // tokens a tile, at most
constexpr int kTileK = 64;
constexpr int kBoxRows = 64;  // token rows a TMA box
constexpr int kStages = 4;
constexpr int kProducerThreads = 128, kConsumerThreads = 256;
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kWgThreads = 128;
constexpr int kPassTokens = 64;  // tokens a warp group stages per epilogue pass
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;

using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
using SmemLayoutW = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<kTileF>{}, Int<kTileK>{}, Int<kStages>{})));
using SmemLayoutXBox = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<kBoxRows>{}, Int<kTileK>{})));
constexpr int kXStageElems = kTileT * kTileK;
constexpr int kBoxElems = kBoxRows * kTileK;

// The products over kN tokens: the two consumer warp groups along the features.
template <int kN>
struct Chunk {  // (the products over kN tokens)
  using Mma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kN>, Int<kTileK>>, GMMA::Major::K,
                           GMMA::Major::K>(),
      Layout<Shape<_2, _1, _1>>{}));
  using SmemLayout = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<kN>{}, Int<kTileK>{})));
  static_assert(size(Mma{}) == kConsumerThreads, "two consumer warp groups");
};

// W: the weights [E][N][K] as one (N, K, E) tensor.
using GmemLayoutW = Layout<Shape<int, int, int>, Stride<int64_t, _1, int64_t>>;
inline auto MakeTmaW(const Element* w, int n, int k, int e) {
  Tensor g = make_tensor(make_gmem_ptr(w), GmemLayoutW(make_shape(n, k, e), make_stride(int64_t{k}, _1{}, int64_t{n} * k)));
  return make_tma_copy(SM90_TMA_LOAD{}, g, SmemLayoutW{}(_, _, Int<0>{}), make_shape(Int<kTileF>{}, Int<kTileK>{}),
                       Int<1>{});
}
// X: a's rows [rows, K] (row stride lda).
using GmemLayoutX = Layout<Shape<int, int>, Stride<int64_t, _1>>;
inline auto MakeTmaX(const Element* a, int rows, int k, int64_t lda) {
  Tensor g = make_tensor(make_gmem_ptr(a), GmemLayoutX(make_shape(rows, k), make_stride(lda, _1{})));
  return make_tma_copy(SM90_TMA_LOAD{}, g, SmemLayoutXBox{}, make_shape(Int<kBoxRows>{}, Int<kTileK>{}), Int<1>{});
}
using TmaW = decltype(MakeTmaW(nullptr, 1, 1, 1));
using TmaX = decltype(MakeTmaX(nullptr, 1, 1, 1));

struct Params {
  TmaW tma_w;
  TmaX tma_x;
  const int32_t* offsets;  // [E + 1]; null: one group of `rows` rows
  int rows;
  int x_rows;              // rows of a (the X descriptor's extent)
  __nv_bfloat16* d;        // [A, N] (or [A, N/2] with the SiLU), row stride ldd
  int64_t ldd;
  int n, k, num_experts;
};

struct SharedStorage {
  alignas(1024) Element w[cosize_v<SmemLayoutW>];
  alignas(1024) Element x[kStages * kXStageElems];
  alignas(128) uint8_t staging[2][kPassTokens * 128];  // per consumer warp group
  alignas(8) uint64_t full[kStages];
  alignas(8) uint64_t empty[kStages];
  int tile_prefix[kMaxExperts + 1];  // tiles before expert e
};
constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "shared memory");

__device__ __forceinline__ int RowsOf(const Params& p, int e) {
  return p.offsets != nullptr ? p.offsets[e + 1] - p.offsets[e] : p.rows;
}
__device__ __forceinline__ int FirstRowOf(const Params& p, int e) { return p.offsets != nullptr ? p.offsets[e] : 0; }

struct Tile {
  int expert, f, t, row0, tokens;  // feature tile, token tile, first row of a, tokens (1..256)
};

__device__ __forceinline__ Tile DecodeTile(const Params& p, const int* prefix, int t) {
  int lo = 0, hi = p.num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int rows = RowsOf(p, lo);
  const int t_tiles = (rows + kTileT - 1) / kTileT;
  const int local = t - prefix[lo];
  Tile tile;
  tile.expert = lo;
  tile.t = local % t_tiles;
  tile.f = local / t_tiles;
  tile.row0 = FirstRowOf(p, lo) + tile.t * kTileT;
  tile.tokens = min(kTileT, rows - tile.t * kTileT);
  return tile;
}

// A tile of T tokens runs N = T rounded up to 16 as two products a k step: tokens [0, a) with
// a = 0, 64, 128 or 192 into the accumulators' first a / 2 registers, tokens [a, a + b) with
// b = 16, 32, 48 or 64 into its last 32 (the columns 192..255 of wgmma's 256-column fragment,
// whose first columns are the fragment of fewer columns). So each product's registers are fixed
// whatever T is, and a k step issues at most two wgmmas.
constexpr int kNStep = 16;
constexpr int kBRegs = 96;  // the first register of part b (column 192 of the fragment)
struct Split {
  int a, b;
  __device__ __forceinline__ explicit Split(int tokens) {
    const int steps = (tokens + kNStep - 1) / kNStep;  // 1..16
    a = 64 * ((steps - 1) / 4);
    b = kNStep * ((steps - 1) % 4 + 1);
  }
};

__device__ __forceinline__ void NamedBarrier(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(kWgThreads) : "memory");
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Staging rows hold one token's features of this warp group in 16-byte units, unit u of row r
// at slot u ^ swizzle(r), so the 8 rows an stmatrix writes hit distinct banks.
template <bool kSiluMul>
struct Staging {
  static constexpr int kUnits = kSiluMul ? 4 : 8;  // 8-feature units a row (32 or 64 features)
  static constexpr int kRowBytes = kUnits * 16;
  __device__ __forceinline__ static uint32_t Offset(int row, int unit) {
    const int swz = kSiluMul ? (row >> 1) & 3 : row & 7;
    return row * kRowBytes + 16 * (unit ^ swz);
  }
};

// Groups [kG0, min(kG1, g_end)) of the accumulators, group g holding tokens at + 8g + [0, 8) of
// the tile, into the staging rows token - base. With kSiluMul, SiluMulFast unless `exact`; returns whether
// SiluMulFast covered every gate seen.
template <bool kSiluMul, int kG0, int kG1, class Acc>
__device__ __forceinline__ bool StageGroups(const Acc& acc, int g_end, int at, int base, uint32_t staging, int warp,
                                            int lane, bool exact) {
  using S = Staging<kSiluMul>;
  float min_gate = 0.0f, max_gate = 0.0f;
  const int j = lane % 8;
  CUTE_UNROLL
  for (int g = kG0; g < kG1; ++g) {
    if (g >= g_end) break;
    const int row = at + 8 * g + j - base;  // the staging row whose address this lane gives
    if constexpr (kSiluMul) {
      uint32_t r = 0;
      float act[2];
      CUTE_UNROLL
      for (int e = 0; e < 2; ++e) {
        const float gate = __bfloat162float(__float2bfloat16_rn(acc(make_coord(make_coord(e, 0, g), 0, 0))));
        const float up = __bfloat162float(__float2bfloat16_rn(acc(make_coord(make_coord(e, 1, g), 0, 0))));
        if (exact) {
          act[e] = SiluMul(gate, up);
        } else {
          act[e] = SiluMulFast(gate, up);
          min_gate = fminf(min_gate, gate);
          max_gate = fmaxf(max_gate, gate);
        }
      }
      r = PackBf16(act[0], act[1]);
      // One 8 x 8 matrix: features 8 * warp + lane / 4 (unit `warp` of 4), tokens 8g + 0..7.
      const uint32_t addr = staging + S::Offset(row, warp);
      asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};\n" ::"r"(addr), "r"(r) : "memory");
    } else {
      const uint32_t r0 = PackBf16(acc(make_coord(make_coord(0, 0, g), 0, 0)), acc(make_coord(make_coord(1, 0, g), 0, 0)));
      const uint32_t r1 = PackBf16(acc(make_coord(make_coord(0, 1, g), 0, 0)), acc(make_coord(make_coord(1, 1, g), 0, 0)));
      // Two 8 x 8 matrices: features 16 * warp + {0, 8} + lane / 4 (units 2 * warp + {0, 1});
      // lanes 0-7 give the first one's rows, 8-15 the second's.
      const uint32_t addr = staging + S::Offset(row, 2 * warp + (lane / 8) % 2);
      asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(addr), "r"(r0), "r"(r1)
                   : "memory");
    }
  }
  return !kSiluMul || SiluFastCovers(min_gate, max_gate);
}

// Copies staging rows [0, count) (tokens base + row of the tile) to D with 16-byte stores.
template <bool kSiluMul>
__device__ __forceinline__ void CopyOut(const Params& p, const Tile& tile, const uint8_t* staging, int base, int count,
                                        int col0, int t) {
  using S = Staging<kSiluMul>;
  const int out_cols = kSiluMul ? p.n / 2 : p.n;
  for (int i = t; i < count * S::kUnits; i += kWgThreads) {
    const int row = i / S::kUnits, unit = i % S::kUnits;
    const int col = col0 + 8 * unit;
    if (col >= out_cols) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(staging + S::Offset(row, unit));
    __nv_bfloat16* dst = p.d + static_cast<int64_t>(tile.row0 + base + row) * p.ldd + col;
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  }
}

template <bool kSiluMul>
__global__ void __launch_bounds__(kThreads, 1) SwapGemmKernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem_raw[];
  auto& ss = *reinterpret_cast<SharedStorage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) / 1024 * 1024);
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int f_tiles = (p.n + kTileF - 1) / kTileF;
  const int k_tiles = (p.k + kTileK - 1) / kTileK;

  // Each expert's tile count, scanned by warp 0 in chunks of 32 experts.
  if (tid < 32) {
    int carry = 0;
    for (int e0 = 0; e0 < p.num_experts; e0 += 32) {
      const int e = e0 + lane;
      int tiles = 0;
      if (e < p.num_experts) tiles = (RowsOf(p, e) + kTileT - 1) / kTileT * f_tiles;
      int incl = tiles;
      for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      if (e < p.num_experts) ss.tile_prefix[e + 1] = carry + incl;
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) ss.tile_prefix[0] = 0;
  }
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      cutlass::arch::ClusterTransactionBarrier::init(&ss.full[s], 1);
      cutlass::arch::ClusterBarrier::init(&ss.empty[s], kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const int total_tiles = ss.tile_prefix[p.num_experts];

  if (tid < kProducerThreads) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (tid != 0) return;
    Tensor mW = p.tma_w.get_tma_tensor(make_shape(p.n, p.k, p.num_experts));
    Tensor mX = p.tma_x.get_tma_tensor(make_shape(p.x_rows, p.k));
    Tensor sW = make_tensor(make_smem_ptr(ss.w), SmemLayoutW{});
    int it = 0;  // k steps issued so far, over all tiles
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const Tile tile = DecodeTile(p, ss.tile_prefix, t);
      const int boxes = (tile.tokens + kBoxRows - 1) / kBoxRows;
      const uint32_t bytes = (kTileF + boxes * kBoxRows) * kTileK * sizeof(Element);
      Tensor gW = local_tile(mW(_, _, tile.expert), make_shape(Int<kTileF>{}, Int<kTileK>{}), make_coord(tile.f, _));
      auto [tWgW, tWsW] = tma_partition(p.tma_w, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sW), group_modes<0, 2>(gW));
      // The tile's token rows from row0 on, in boxes of 64 (rows past the tile's tokens are
      // another expert's, or past a's end: zeros; their products are never stored).
      Tensor gX = local_tile(domain_offset(make_coord(tile.row0, 0), mX), make_shape(Int<kBoxRows>{}, Int<kTileK>{}),
                             make_coord(_, _));  // (64, 64, box, k tile)
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % kStages;
        if (it >= kStages) cutlass::arch::ClusterBarrier::wait(&ss.empty[s], (it / kStages - 1) & 1);
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.full[s], bytes);
        copy(p.tma_w.with(ss.full[s]), tWgW(_, kt), tWsW(_, s));
        for (int b = 0; b < boxes; ++b) {
          Tensor sXb = make_tensor(make_smem_ptr(ss.x + s * kXStageElems + b * kBoxElems), SmemLayoutXBox{});
          auto [tXgX, tXsX] = tma_partition(p.tma_x, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sXb),
                                            group_modes<0, 2>(gX(_, _, b, _)));
          copy(p.tma_x.with(ss.full[s]), tXgX(_, kt), tXsX);
        }
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    const int mma_tid = tid - kProducerThreads;
    const int wg = mma_tid / kWgThreads, t_in_wg = mma_tid % kWgThreads, warp = t_in_wg / 32;
    Tensor sW = make_tensor(make_smem_ptr(ss.w), SmemLayoutW{});
    typename Chunk<kTileT>::Mma mma_full;
    auto thr_full = mma_full.get_slice(mma_tid);
    Tensor tCrW = thr_full.make_fragment_A(thr_full.partition_A(sW));  // (MMA, 1, 4, stage) descriptors
    Tensor acc = partition_fragment_C(mma_full, make_shape(Int<kTileF>{}, Int<kTileT>{}));  // 128 f32
    const uint32_t staging = cast_smem_ptr_to_uint(ss.staging[wg]);
    // One part's products of a k step (stage s): kN tokens from token row `row` of the stage into
    // the accumulators from register `reg`.
    auto product = [&](auto n_const, auto reg_const, int row, int s, bool first) {
      constexpr int kN = decltype(n_const)::value, kReg = decltype(reg_const)::value;
      typename Chunk<kN>::Mma mma;
      auto thr = mma.get_slice(mma_tid);
      Tensor part = make_tensor(acc.data() + kReg, partition_fragment_C(mma, make_shape(Int<kTileF>{}, Int<kN>{})).layout());
      Tensor sX = make_tensor(make_smem_ptr(ss.x + s * kXStageElems + row * kTileK), typename Chunk<kN>::SmemLayout{});
      Tensor tCrX = thr.make_fragment_B(thr.partition_B(sX));  // (MMA, 1, 4)
      mma.accumulate_ = first ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      CUTE_UNROLL
      for (int kb = 0; kb < size<2>(tCrX); ++kb) {
        cute::gemm(mma, tCrW(_, _, kb, s), tCrX(_, _, kb), part);
        mma.accumulate_ = GMMA::ScaleOut::One;
      }
    };
    int it = 0;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const Tile tile = DecodeTile(p, ss.tile_prefix, t);
      // The same value in every lane, visibly to the compiler: the wgmmas under the tests below
      // are then not in divergent code (ptxas would serialize them).
      const Split split(__shfl_sync(0xffffffffu, tile.tokens, 0));
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % kStages;
        cutlass::arch::ClusterBarrier::wait(&ss.full[s], (it / kStages) & 1);
        warpgroup_fence_operand(acc);
        warpgroup_arrive();
        const bool first = kt == 0;
        if (split.a == 64) product(Int<64>{}, Int<0>{}, 0, s, first);
        else if (split.a == 128) product(Int<128>{}, Int<0>{}, 0, s, first);
        else if (split.a == 192) product(Int<192>{}, Int<0>{}, 0, s, first);
        if (split.b == 16) product(Int<16>{}, Int<kBRegs>{}, split.a, s, first);
        else if (split.b == 32) product(Int<32>{}, Int<kBRegs>{}, split.a, s, first);
        else if (split.b == 48) product(Int<48>{}, Int<kBRegs>{}, split.a, s, first);
        else product(Int<64>{}, Int<kBRegs>{}, split.a, s, first);
        warpgroup_commit_batch();
        warpgroup_wait<1>();  // the previous step's products are done with their stage
        warpgroup_fence_operand(acc);
        if (kt > 0) cutlass::arch::ClusterBarrier::arrive(&ss.empty[(it - 1) % kStages]);
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc);
      cutlass::arch::ClusterBarrier::arrive(&ss.empty[(it - 1) % kStages]);

      // Epilogue: passes of at most 64 tokens through this warp group's staging rows: part a in
      // whole passes, then part b (groups 24.. hold tokens a..).
      const int col0 = kSiluMul ? tile.f * (kTileF / 2) + wg * (kTileF / 4) : tile.f * kTileF + wg * (kTileF / 2);
      auto pass = [&](int base, int count, auto&& stage) {
        if (!__all_sync(0xffffffffu, stage(false))) stage(true);
        NamedBarrier(1 + wg);
        CopyOut<kSiluMul>(p, tile, ss.staging[wg], base, min(count, tile.tokens - base), col0, t_in_wg);
        NamedBarrier(1 + wg);
      };
      constexpr int kPassGroups = kPassTokens / 8, kBGroup = 2 * kBRegs / 8;
      const int a_groups = split.a / 8;
      if (split.a >= 64) {
        pass(0, 64, [&](bool exact) {
          return StageGroups<kSiluMul, 0, kPassGroups>(acc, a_groups, 0, 0, staging, warp, lane, exact);
        });
      }
      if (split.a >= 128) {
        pass(64, 64, [&](bool exact) {
          return StageGroups<kSiluMul, kPassGroups, 2 * kPassGroups>(acc, a_groups, 0, 64, staging, warp, lane, exact);
        });
      }
      if (split.a >= 192) {
        pass(128, 64, [&](bool exact) {
          return StageGroups<kSiluMul, 2 * kPassGroups, 3 * kPassGroups>(acc, a_groups, 0, 128, staging, warp, lane,
                                                                          exact);
        });
      }
      pass(split.a, split.b, [&](bool exact) {
        return StageGroups<kSiluMul, kBGroup, kBGroup + kPassGroups>(acc, kBGroup + split.b / 8, split.a - 8 * kBGroup,
                                                                    split.a, staging, warp, lane, exact);
      });
    }
  }
#endif
}

template <bool kSiluMul>
absl::Status Launch(const Sm90GroupedArgs& g, cudaStream_t s) {
  const int x_rows = g.offsets != nullptr ? g.a_rows : g.rows;
  if (g.k % 8 != 0 || g.lda % 8 != 0 || g.ldd % 8 != 0 || g.n % (kSiluMul ? 16 : 8) != 0 ||
      g.num_experts > kMaxExperts || g.sorted != nullptr || x_rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts sm90 swap-AB GEMM: N=", g.n, " K=", g.k, " lda=", g.lda, " ldd=", g.ldd, " experts=",
        g.num_experts, " a rows=", x_rows, g.sorted != nullptr ? " with gathered rows" : "",
        " (K, lda and ldd must be multiples of 8, N of ", kSiluMul ? 16 : 8, ", experts at most ", kMaxExperts,
        ", a's rows known (Sm90GroupedArgs::a_rows) and not gathered)"));
  }
  const auto* a = reinterpret_cast<const Element*>(g.a);
  Params p{MakeTmaW(reinterpret_cast<const Element*>(g.w), g.n, g.k, g.num_experts),
           MakeTmaX(a, x_rows, g.k, g.lda),
           g.offsets,
           g.rows,
           x_rows,
           static_cast<__nv_bfloat16*>(g.d),
           g.ldd,
           g.n,
           g.k,
           g.num_experts};
  auto kernel = SwapGemmKernel<kSiluMul>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  if (attr != cudaSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 swap-AB GEMM: shared memory attribute: ",
                                            cudaGetErrorString(attr)));
  }
  kernel<<<cuda::CurrentDeviceSmCount(), kThreads, kSmemBytes, s>>>(p);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 swap-AB GEMM launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace swap_gemm

absl::Status LaunchSm90GroupedSwapV13(const Sm90GroupedArgs& g, cudaStream_t s) {
  return swap_gemm::Launch<false>(g, s);
}
absl::Status LaunchSm90GroupedSwapSiluMulV13(const Sm90GroupedArgs& g, cudaStream_t s) {
  return swap_gemm::Launch<true>(g, s);
}

}  // namespace mlaserve::kernels::moe_cuda
