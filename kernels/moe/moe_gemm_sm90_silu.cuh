// The kSm90 gate_up product with SiLU * up in its epilogue (moe_cuda.h,
// LaunchSm90GroupedSiluMul), for gate_up weights in MoeGateUpLayout::kInterleaved8.
//
// With interleaved weights, output columns [16j, 16j+8) of the product are the gate of
// features [8j, 8j+8) and columns [16j+8, 16j+16) their up. wgmma leaves each thread the
// accumulators of 2 adjacent columns in every group of 8 columns (PTX ISA, "wgmma register
// fragment D": thread t of a warp holds columns 2*(t%4) + {0, 1} of each 8-column group, rows
// t/4 and t/4 + 8 of its warp's 16), so a thread holding gate columns (n, n+1) of group 2g also
// holds the up columns (n+8, n+9) of group 2g+1: the pairing is free, no shared memory, no
// shuffles. Each thread rounds gate and up to bf16 (the unfused path's D is bf16, and the SiLU
// pass reads it), computes silu(gate) * up in f32 and stores the two features as one 4-byte
// bf16x2 at column (n / 16) * 8 + n % 8 of the expert's [rows, N/2] output: four threads of a
// quad cover 16 contiguous bytes of a row. The result is bit-identical to the unfused product
// followed by the SiLU pass; the [A, 2*inter] buffer, its write and the pass's read go.
//
// The epilogue is a plain register-to-global CUTLASS "collective epilogue" (the shape of
// cutlass::epilogue::collective::DefaultEpilogueArray, wrapped in
// Sm90TmaWarpSpecializedAdapter, schedule PtrArrayNoSmemWarpSpecialized): no TMA store and no
// shared memory, so the mainloop keeps all of it for stages. Rows past the expert's count and
// columns past N are not stored (N = 2*inter is a multiple of 16, so gate and up columns of a
// feature are in range together).
#pragma once

#include <cuda_bf16.h>

#include "cute/tensor.hpp"
#include "cutlass/cuda_host_adapter.hpp"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "kernels/moe/moe_gemm_sm90.cuh"
#include "kernels/moe/moe_silu.cuh"

namespace mlaserve::kernels::moe_cuda {

inline constexpr int kGateUpBlock = 8;  // kInterleaved8: columns of gate, then of up, per block

template <class StrideD_>
class SiluMulEpilogueArray {
 public:
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementD = cutlass::bfloat16_t;
  using ElementOutput = ElementD;
  using ElementC = void;
  using StrideD = StrideD_;
  using StrideC = StrideD_;
  using InternalStrideD = cute::remove_pointer_t<StrideD>;
  using InternalStrideC = InternalStrideD;
  // Names the output type for GemmUniversalAdapter; the epilogue does not run it.
  using ThreadEpilogueOp = cutlass::epilogue::thread::LinearCombination<ElementD, 1, ElementAccumulator, ElementCompute>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  static_assert(cute::rank(InternalStrideD{}) == 3, "StrideD must be rank-3: [M, N, L]");

  struct SharedStorage {};
  using TensorMapStorage = SharedStorage;

  struct Arguments {
    ElementD** ptr_D = nullptr;  // per expert: its first output row
    StrideD dD{};                // per expert: (row stride, 1, 0)
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_D != nullptr && args.dD != nullptr;
  }

  CUTLASS_HOST_DEVICE explicit SiluMulEpilogueArray(Params const& params) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<FrgLayout>::value, "accumulator layout must be static");
    // (MMA, MMA_M, MMA_N); MMA = (2 adjacent columns, 2 rows 8 apart, groups of 8 columns).
    using ValueShape = decltype(shape<0>(FrgLayout{}));
    static_assert(rank(ValueShape{}) == 3, "expected wgmma's (2, 2, N/8) accumulator values");
    static_assert(size<0>(ValueShape{}) == 2 && size<1>(ValueShape{}) == 2,
                  "expected wgmma's (2, 2, N/8) accumulator values");
    constexpr int kColumnGroups = size<2>(ValueShape{});
    static_assert(kColumnGroups % 2 == 0, "a gate group needs its up group in the same fragment");
    constexpr int kMmaM = size<1>(FrgLayout{});
    constexpr int kMmaN = size<2>(FrgLayout{});

    const int M = get<0>(problem_shape_mnkl);
    const int N = get<1>(problem_shape_mnkl);
    const auto m_coord = get<0>(blk_coord_mnkl);
    const auto n_coord = get<1>(blk_coord_mnkl);
    const auto l_coord = get<3>(blk_coord_mnkl);
    Tensor cD = local_tile(make_identity_tensor(make_shape(M, N)), take<0, 2>(blk_shape_mnk),
                           make_coord(m_coord, n_coord));
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(cD);  // (MMA, MMA_M, MMA_N)
    auto* out = reinterpret_cast<__nv_bfloat16*>(params_.ptr_D[l_coord]);
    const int64_t ldd = get<0>(params_.dD[l_coord]);

    CUTLASS_PRAGMA_UNROLL
    for (int mi = 0; mi < kMmaM; ++mi) {
      CUTLASS_PRAGMA_UNROLL
      for (int ni = 0; ni < kMmaN; ++ni) {
        CUTLASS_PRAGMA_UNROLL
        for (int half = 0; half < 2; ++half) {
          CUTLASS_PRAGMA_UNROLL
          for (int group = 0; group < kColumnGroups; group += 2) {
            const auto gate0 = make_coord(make_coord(0, half, group), mi, ni);
            const auto gate1 = make_coord(make_coord(1, half, group), mi, ni);
            const auto up0 = make_coord(make_coord(0, half, group + 1), mi, ni);
            const auto up1 = make_coord(make_coord(1, half, group + 1), mi, ni);
            const int m = get<0>(tCcD(gate0));
            const int n = get<1>(tCcD(gate0));
            if (m >= M || n >= N) continue;
            const float g0 = RoundBf16(accumulators(gate0)), g1 = RoundBf16(accumulators(gate1));
            const float u0 = RoundBf16(accumulators(up0)), u1 = RoundBf16(accumulators(up1));
            const int feature = (n / (2 * kGateUpBlock)) * kGateUpBlock + n % kGateUpBlock;
            *reinterpret_cast<__nv_bfloat162*>(out + m * ldd + feature) =
                __floats2bfloat162_rn(SiluMul(g0, u0), SiluMul(g1, u1));
          }
        }
      }
    }
  }

 private:
  CUTLASS_DEVICE static float RoundBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

  Params params_;
};

// Defines LaunchSm90GroupedSiluMulV<N> and its sizes for tile configuration Config.
#define MLASERVE_MOE_SM90_SILU_VARIANT(N, Config)                                              \
  absl::Status LaunchSm90GroupedSiluMulV##N(const Sm90GroupedArgs& g, cudaStream_t s) {       \
    return LaunchSm90Grouped<Config, true>(g, s);                                              \
  }                                                                                            \
  size_t Sm90WorkspaceBytesSiluMulV##N(int num_experts) {                                      \
    return Sm90GemmWorkspaceBytes<Config, true>(num_experts);                                  \
  }                                                                                            \
  size_t Sm90ArgsBlockBytesSiluMulV##N(int num_experts) {                                      \
    return Sm90GroupedGemm<Config, true>::ArgsBlockBytes(num_experts);                         \
  }

}  // namespace mlaserve::kernels::moe_cuda
