// The kSm90 grouped GEMMs' register-to-global epilogues (Sm90Store kDirect and kSiluMul,
// moe_gemm_sm90.cuh): D = A * B in bf16, or, for gate_up weights in
// MoeGateUpLayout::kInterleaved8, silu(gate) * up (moe_cuda.h, LaunchSm90GroupedSiluMul),
// stored with 16-byte stores by StoreAccumulatorTile (moe_sm90_tile_store.cuh, which says how).
//
// The epilogue is a plain register-to-global CUTLASS "collective epilogue" (the shape of
// cutlass::epilogue::collective::DefaultEpilogueArray, wrapped in
// Sm90TmaWarpSpecializedAdapter, schedule PtrArrayNoSmemWarpSpecialized): no TMA store, no
// shared memory (the mainloop keeps all of it for stages) and no per-expert descriptor to
// rewrite between tiles.
#pragma once

#include <cuda_bf16.h>

#include "cute/tensor.hpp"
#include "cutlass/cuda_host_adapter.hpp"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "kernels/moe/moe_gemm_sm90.cuh"
#include "kernels/moe/moe_sm90_tile_store.cuh"

namespace mlaserve::kernels::moe_cuda {

template <class StrideD_, bool kSiluMul>
class DirectEpilogueArray {
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

  CUTLASS_HOST_DEVICE explicit DirectEpilogueArray(Params const& params) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
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

    StoreAccumulatorTile<kSiluMul>(accumulators, tCcD, M, N, out, ldd, thread_idx % 4);
  }

 private:
  Params params_;
};

// Defines the direct-store entry points of tile configuration Config: LaunchSm90GroupedSiluMulV<N>
// (kSiluMul) and LaunchSm90GroupedDirectV<N> (kDirect), with their sizes.
#define MLASERVE_MOE_SM90_DIRECT_VARIANTS(N, Config)                                           \
  absl::Status LaunchSm90GroupedSiluMulV##N(const Sm90GroupedArgs& g, cudaStream_t s) {       \
    return LaunchSm90Grouped<Config, Sm90Store::kSiluMul>(g, s);                               \
  }                                                                                            \
  size_t Sm90WorkspaceBytesSiluMulV##N(int num_experts) {                                      \
    return Sm90GemmWorkspaceBytes<Config, Sm90Store::kSiluMul>(num_experts);                   \
  }                                                                                            \
  size_t Sm90ArgsBlockBytesSiluMulV##N(int num_experts) {                                      \
    return Sm90GroupedGemm<Config, Sm90Store::kSiluMul>::ArgsBlockBytes(num_experts);          \
  }                                                                                            \
  absl::Status LaunchSm90GroupedDirectV##N(const Sm90GroupedArgs& g, cudaStream_t s) {        \
    return LaunchSm90Grouped<Config, Sm90Store::kDirect>(g, s);                                \
  }                                                                                            \
  size_t Sm90WorkspaceBytesDirectV##N(int num_experts) {                                       \
    return Sm90GemmWorkspaceBytes<Config, Sm90Store::kDirect>(num_experts);                    \
  }                                                                                            \
  size_t Sm90ArgsBlockBytesDirectV##N(int num_experts) {                                       \
    return Sm90GroupedGemm<Config, Sm90Store::kDirect>::ArgsBlockBytes(num_experts);           \
  }

}  // namespace mlaserve::kernels::moe_cuda
