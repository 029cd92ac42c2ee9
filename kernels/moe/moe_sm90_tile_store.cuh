// Storing a wgmma accumulator tile from registers (the kSm90 GEMMs' direct epilogues:
// moe_gemm_sm90_direct.cuh for CUTLASS's kernels, moe_gemm_sm90_own.cuh for ours): bf16 D,
// or silu(gate) * up of interleaved gate/up columns, with 16-byte stores.
//
// wgmma leaves each thread the accumulators of 2 adjacent columns in every group of 8 columns
// (PTX ISA, "wgmma register fragment D": thread t of a warp holds columns 2*(t%4) + {0, 1} of
// each 8-column group, rows t/4 and t/4 + 8 of its warp's 16). Plain: each pair is rounded to
// bf16 (4 bytes). SiLU * up: with MoeGateUpLayout::kInterleaved8 weights, output columns
// [16j, 16j+8) of the product are the gate of features [8j, 8j+8) and [16j+8, 16j+16) their up,
// so a thread holding gate columns (n, n+1) of group 2p also holds the up columns (n+8, n+9)
// of group 2p+1: the pairing is free. Each thread rounds gate and up to bf16 (the unfused
// path's D is bf16, and the SiLU pass reads it), computes silu(gate) * up in f32
// (SiluMulFast: SiluMul's bits, branch-free; moe_silu_exact.cuh) and packs the two features
// into 4 bytes. Either way the four threads of a quad then hold 4 x 4 words of 4 consecutive
// 8-column units (groups, or feature blocks); one 4 x 4 transpose through four quad shuffles
// gives each thread one whole unit (16 bytes), so rows are written with 16-byte stores, 64
// contiguous bytes per quad. The fused result is bit-identical to the unfused product
// followed by the SiLU pass. Rows past M and columns past N are not stored (N is a multiple
// of 8, of 16 with the SiLU, so a unit is in range or out whole).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cute/tensor.hpp"
#include "kernels/moe/moe_silu.cuh"
#include "kernels/moe/moe_silu_exact.cuh"

namespace mlaserve::kernels::moe_cuda {

inline constexpr int kQuadLanes = 4;

// word[i] of lane q (of the 4 lanes of a quad) is element (q, i); returns elements (0..3, q),
// in two exchanges of two elements: lanes q and q^2 swap the halves the other needs, then
// lanes q and q^1 swap single elements.
__device__ __forceinline__ uint4 QuadTranspose(const uint32_t (&word)[kQuadLanes], int lane) {
  const bool hi = lane & 2, odd = lane & 1;
  // Exchange 1: keep elements (q, 2h), (q, 2h+1) [h = lane's bit 1]; get (q^2, 2h), (q^2, 2h+1).
  const uint32_t send0 = hi ? word[0] : word[2], send1 = hi ? word[1] : word[3];
  const uint32_t keep0 = hi ? word[2] : word[0], keep1 = hi ? word[3] : word[1];
  const uint32_t got0 = __shfl_xor_sync(0xffffffffu, send0, 2);
  const uint32_t got1 = __shfl_xor_sync(0xffffffffu, send1, 2);
  // Now lane q holds columns 2h and 2h+1 of rows q (keep) and q^2 (got); it needs column
  // 2h + odd of every row, and lane q^1 holds rows q^1 and q^3 of the same two columns.
  const uint32_t send_a = odd ? keep0 : keep1, send_b = odd ? got0 : got1;
  const uint32_t mine_a = odd ? keep1 : keep0, mine_b = odd ? got1 : got0;
  const uint32_t from_a = __shfl_xor_sync(0xffffffffu, send_a, 1);  // row q^1
  const uint32_t from_b = __shfl_xor_sync(0xffffffffu, send_b, 1);  // row q^3
  // Element j of the result is row j: rows q, q^1, q^2, q^3 are mine_a, from_a, mine_b, from_b.
  // (Selects, not a lane-indexed array, which would live in local memory.)
  auto row = [&](int j) {
    const int x = j ^ lane;
    return x == 0 ? mine_a : x == 1 ? from_a : x == 2 ? mine_b : from_b;
  };
  return make_uint4(row(0), row(1), row(2), row(3));
}

__device__ __forceinline__ void StoreGlobal16(void* at, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(at), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// Stores a thread's accumulators (MMA, MMA_M, MMA_N) of one tile; tCcD holds their (row,
// column) in the product [M, N] (an identity tensor partitioned like the accumulators). out
// is row 0 of D (row stride ldd; N columns, or N/2 with kSiluMul). `lane`: the thread's place
// in its quad. Every lane of the warp must call it (the transpose shuffles), in range or not.
template <bool kSiluMul, class FrgEngine, class FrgLayout, class CoordTensor>
__device__ __forceinline__ void StoreAccumulatorTile(const cute::Tensor<FrgEngine, FrgLayout>& accumulators,
                                                     const CoordTensor& tCcD, int M, int N,
                                                     __nv_bfloat16* out, int64_t ldd, int lane) {
  using namespace cute;
  static_assert(is_static<FrgLayout>::value, "accumulator layout must be static");
  // (MMA, MMA_M, MMA_N); MMA = (2 adjacent columns, 2 rows 8 apart, groups of 8 columns).
  using ValueShape = decltype(shape<0>(FrgLayout{}));
  static_assert(rank(ValueShape{}) == 3, "expected wgmma's (2, 2, N/8) accumulator values");
  static_assert(size<0>(ValueShape{}) == 2 && size<1>(ValueShape{}) == 2,
                "expected wgmma's (2, 2, N/8) accumulator values");
  constexpr int kColumnGroups = size<2>(ValueShape{});
  // 8-column units a thread stores: groups, or feature blocks of a gate group and its up group.
  constexpr int kUnits = kSiluMul ? kColumnGroups / 2 : kColumnGroups;
  constexpr int kUnitColumns = kSiluMul ? 16 : 8;  // product columns per unit
  static_assert(kUnits % kQuadLanes == 0, "a quad transposes 4 units at a time");

  // Stores every (row, unit) in range with SiluMulFast or (kExact) SiluMul; returns whether
  // SiluMulFast covered every gate it saw, in range or not (a row past M is another
  // expert's, or zeros).
  auto store = [&](auto exact) -> bool {
    [[maybe_unused]] constexpr bool kExact = decltype(exact)::value;
    float min_gate = 0.0f, max_gate = 0.0f;
    CUTE_UNROLL
    for (int mi = 0; mi < size<1>(FrgLayout{}); ++mi) {
      CUTE_UNROLL
      for (int ni = 0; ni < size<2>(FrgLayout{}); ++ni) {
        CUTE_UNROLL
        for (int half = 0; half < 2; ++half) {
          // Row and first column of this fragment row (group g's columns are 8g further).
          const auto first = tCcD(make_coord(make_coord(0, half, 0), mi, ni));
          const int m = get<0>(first);
          const int n_base = get<1>(first) - 2 * lane;
          CUTE_UNROLL
          for (int u0 = 0; u0 < kUnits; u0 += kQuadLanes) {
            uint32_t word[kQuadLanes];  // word[i]: this lane's 2 columns of unit u0 + i
            CUTE_UNROLL
            for (int i = 0; i < kQuadLanes; ++i) {
              const int group = kSiluMul ? 2 * (u0 + i) : u0 + i;
              const __nv_bfloat162 v =
                  __floats2bfloat162_rn(accumulators(make_coord(make_coord(0, half, group), mi, ni)),
                                        accumulators(make_coord(make_coord(1, half, group), mi, ni)));
              __nv_bfloat162 packed = v;
              if constexpr (kSiluMul) {
                const __nv_bfloat162 up =
                    __floats2bfloat162_rn(accumulators(make_coord(make_coord(0, half, group + 1), mi, ni)),
                                          accumulators(make_coord(make_coord(1, half, group + 1), mi, ni)));
                const float2 g = __bfloat1622float2(v), u = __bfloat1622float2(up);
                float2 act;
                if constexpr (kExact) {
                  act = make_float2(SiluMul(g.x, u.x), SiluMul(g.y, u.y));
                } else {
                  act = make_float2(SiluMulFast(g.x, u.x), SiluMulFast(g.y, u.y));
                  min_gate = fminf(min_gate, fminf(g.x, g.y));
                  max_gate = fmaxf(max_gate, fmaxf(g.x, g.y));
                }
                packed = __floats2bfloat162_rn(act.x, act.y);
              }
              word[i] = *reinterpret_cast<const uint32_t*>(&packed);
            }
            const uint4 unit = QuadTranspose(word, lane);  // unit u0 + lane, all 8 columns
            const int unit_col = n_base + kUnitColumns * (u0 + lane);  // its first product column
            if (m < M && unit_col < N) {
              // unit_col is a multiple of kUnitColumns: the unit's first output column.
              StoreGlobal16(out + m * ldd + unit_col / (kUnitColumns / 8), unit);
            }
          }
        }
      }
    }
    return !kSiluMul || SiluFastCovers(min_gate, max_gate);
  };
  if (!__all_sync(0xffffffffu, store(cute::false_type{}))) {
    if constexpr (kSiluMul) store(cute::true_type{});  // (never taken without the SiLU)
  }
}

}  // namespace mlaserve::kernels::moe_cuda
