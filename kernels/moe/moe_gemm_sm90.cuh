// kSm90 path of the routed experts: CUTLASS 3's grouped GEMM for Hopper (TMA loads, wgmma,
// a warp-specialized persistent kernel whose tile scheduler walks (expert, tile) work), one
// group per expert, bf16 in and out, f32 accumulation. Included by exactly one .cu per tile
// configuration (moe_gemm_sm90_v<N>.cu) so no file compiles two of them.
//
// The per-expert row counts live on the device, so the group arguments are built there too:
// SetupGroupsKernel writes each expert's problem shape (rows_e, N, K) and its A/B/D pointers
// from `offsets`; experts with no rows get M = 0 and produce no tiles. CUTLASS is told that no
// host copy of the shapes exists, so it launches one persistent CTA per SM and reads the
// shapes on the device: nothing on the host depends on the routing, and the launch can be
// captured in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "kernels/common/device_arch.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels::moe_cuda {

// Tile configurations (moe_cuda.h's kSm90Variants; mlaserve-moe-bench sweeps them).
struct Sm90Coop128x128 {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct Sm90Coop128x256 {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct Sm90Coop128x256Cluster2 {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct Sm90Pingpong64x256 {
  using TileShape = cute::Shape<cute::_64, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
// Half the columns of 64 x 256: twice the tiles, for the weight-bound sizes (tens of rows an
// expert), where 704 tiles of 64 x 256 (V2-Lite at <= 512 tokens) leave a third of the SMs a
// tile more than the rest in the last round (configuration 7: direct stores only).
struct Sm90Pingpong64x128 {
  using TileShape = cute::Shape<cute::_64, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
// Each consumer warp group owns a whole 128 x 128 tile (two m64n128 products per k step), so
// one group's epilogue runs under the other's products, at the 128-row granularity of v1.
struct Sm90Pingpong128x128 {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
// Clusters of 2 along N: the two CTAs load the same A (token) tile once, multicast, and
// neighbouring weight tiles (N = 2048 and 2 * 1408 are even numbers of 128- and 256-column
// tiles, except 2 * 1408 / 256 = 11, where the cluster rounds up to 12).
struct Sm90Coop128x256ClusterN2 {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct Sm90Pingpong128x128ClusterN2 {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

// How a grouped GEMM stores its tiles:
//   kTma      CUTLASS's TMA epilogue (registers -> shared memory -> TMA store): D = A * B, bf16;
//             in grouped mode it rewrites D's TMA descriptor whenever a CTA's next tile is
//             another expert's, on the consumer warps' path;
//   kDirect   DirectEpilogueArray (moe_gemm_sm90_direct.cuh): D = A * B from registers with
//             16-byte stores, no shared memory, no descriptor;
//   kSiluMul  the same with silu(gate) * up of interleaved gate/up columns (N/2 columns).
enum class Sm90Store { kTma, kDirect, kSiluMul };

// The register-to-global epilogue (moe_gemm_sm90_direct.cuh, included by the TUs that
// instantiate it): declared here so that Sm90GroupedGemm can name it.
template <class StrideD, bool kSiluMul>
class DirectEpilogueArray;

// The epilogue of a grouped GEMM for Sm90Store kStore, with its arguments: the direct
// epilogues, and (specialized below) CUTLASS's TMA one.
template <typename Config, typename ElementD, typename LayoutD, int kAlignD, Sm90Store kStore>
struct Sm90EpilogueOf {
  using Op = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      DirectEpilogueArray<cutlass::detail::TagToStrideC_t<LayoutD*>, kStore == Sm90Store::kSiluMul>>;
  template <typename Arguments, typename StrideD>
  static Arguments MakeArguments(ElementD** d, StrideD* stride_d) {
    Arguments args{};
    args.ptr_D = d;
    args.dD = stride_d;
    return args;
  }
};

template <typename Config, typename ElementD, typename LayoutD, int kAlignD>
struct Sm90EpilogueOf<Config, ElementD, LayoutD, kAlignD, Sm90Store::kTma> {
  using Op = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape,
      typename Config::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD*, kAlignD,  // no C operand: D = A * B
      ElementD, LayoutD*, kAlignD, typename Config::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void>>::CollectiveOp;
  template <typename Arguments, typename StrideD>
  static Arguments MakeArguments(ElementD** d, StrideD* stride_d) {
    Arguments args{};
    auto& fusion = args.thread;
    fusion.alpha = 1.0f;
    fusion.beta = 0.0f;
    fusion.alpha_ptr = nullptr;
    fusion.beta_ptr = nullptr;
    fusion.alpha_ptr_array = nullptr;
    fusion.beta_ptr_array = nullptr;
    fusion.dAlpha = {cute::_0{}, cute::_0{}, 0};
    fusion.dBeta = {cute::_0{}, cute::_0{}, 0};
    args.ptr_C = nullptr;
    args.dC = stride_d;
    args.ptr_D = d;
    args.dD = stride_d;
    return args;
  }
};
// One grouped-GEMM configuration: bf16 A (row-major rows of one expert) times bf16 W_e^T
// (W_e row-major [N, K], i.e. a column-major K x N operand), f32 accumulation, bf16 D (or,
// kSiluMul, silu(gate) * up of interleaved gate/up columns: moe_gemm_sm90_direct.cuh).
template <typename Config, Sm90Store kStore = Sm90Store::kTma>
struct Sm90GroupedGemm {
  using ElementD = cutlass::bfloat16_t;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignA = 8, kAlignB = 8;
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  using KernelSchedule = typename Config::KernelSchedule;
  using EpilogueSchedule = typename Config::EpilogueSchedule;

  using EpilogueOf = Sm90EpilogueOf<Config, ElementD, LayoutD, kAlignD, kStore>;
  using Epilogue = typename EpilogueOf::Op;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, kAlignA, ElementB,
      LayoutB*, kAlignB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;

  // The device-built argument block, carved from Sm90GroupedArgs::args_block.
  struct Groups {
    Shape3* shapes;
    const ElementA** a;
    const ElementB** b;
    ElementD** d;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideD* stride_d;
  };

  static size_t Align(size_t n) { return (n + 255) / 256 * 256; }
  static size_t ArgsBlockBytes(int e) {
    return Align(e * sizeof(Shape3)) + 3 * Align(e * sizeof(void*)) + Align(e * sizeof(StrideA)) +
           Align(e * sizeof(StrideB)) + Align(e * sizeof(StrideD));
  }
  static Groups Carve(void* block, int e) {
    char* p = static_cast<char*>(block);
    auto take = [&](size_t bytes) { char* at = p; p += Align(bytes); return at; };
    Groups g;
    g.shapes = reinterpret_cast<Shape3*>(take(e * sizeof(Shape3)));
    g.a = reinterpret_cast<const ElementA**>(take(e * sizeof(void*)));
    g.b = reinterpret_cast<const ElementB**>(take(e * sizeof(void*)));
    g.d = reinterpret_cast<ElementD**>(take(e * sizeof(void*)));
    g.stride_a = reinterpret_cast<StrideA*>(take(e * sizeof(StrideA)));
    g.stride_b = reinterpret_cast<StrideB*>(take(e * sizeof(StrideB)));
    g.stride_d = reinterpret_cast<StrideD*>(take(e * sizeof(StrideD)));
    return g;
  }

  static typename Gemm::Arguments MakeArguments(const Groups& g, int num_experts, int sm_count) {
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = sm_count;
    using EpilogueArguments = typename Gemm::GemmKernel::EpilogueArguments;
    return typename Gemm::Arguments{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {num_experts, g.shapes, nullptr},  // shapes on the device only
        {g.a, g.stride_a, g.b, g.stride_b},
        EpilogueOf::template MakeArguments<EpilogueArguments>(g.d, g.stride_d),
        hw};
  }
};


// Defines the entry points of variant N (moe_cuda.h) for tile configuration Config.
#define MLASERVE_MOE_SM90_VARIANT(N, Config)                                                    \
  absl::Status LaunchSm90GroupedV##N(const Sm90GroupedArgs& g, cudaStream_t s) {              \
    return LaunchSm90Grouped<Config>(g, s);                                                    \
  }                                                                                            \
  size_t Sm90WorkspaceBytesV##N(int num_experts) { return Sm90GemmWorkspaceBytes<Config>(num_experts); } \
  size_t Sm90ArgsBlockBytesV##N(int num_experts) {                                             \
    return Sm90GroupedGemm<Config>::ArgsBlockBytes(num_experts);                              \
  }

template <typename Cfg>
__global__ void SetupGroupsKernel(typename Cfg::Groups g, const cutlass::bfloat16_t* a,
                                  int64_t lda, const cutlass::bfloat16_t* w, void* d, int64_t ldd,
                                  int n, int k, int num_experts, const int32_t* offsets,
                                  int dense_rows, typename Cfg::StrideA sa,
                                  typename Cfg::StrideB sb, typename Cfg::StrideD sd) {
  using ElementD = typename Cfg::ElementD;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < num_experts; e += gridDim.x * blockDim.x) {
    const int row0 = offsets != nullptr ? offsets[e] : 0;
    const int rows = offsets != nullptr ? offsets[e + 1] - row0 : dense_rows;
    g.shapes[e] = typename Cfg::Shape3(rows, n, k);
    g.a[e] = a + static_cast<int64_t>(row0) * lda;
    g.b[e] = w + static_cast<int64_t>(e) * n * k;
    g.d[e] = static_cast<ElementD*>(d) + static_cast<int64_t>(row0) * ldd;
    g.stride_a[e] = sa;
    g.stride_b[e] = sb;
    g.stride_d[e] = sd;
  }
}

template <typename Config, Sm90Store kStore = Sm90Store::kTma>
absl::Status LaunchSm90Grouped(const Sm90GroupedArgs& in, cudaStream_t s) {
  using Cfg = Sm90GroupedGemm<Config, kStore>;
  const auto groups = Cfg::Carve(in.args_block, in.num_experts);
  typename Cfg::StrideA sa{};
  typename Cfg::StrideB sb{};
  typename Cfg::StrideD sd{};
  cute::get<0>(sa) = in.lda;  // row-major A: M-mode stride
  cute::get<0>(sb) = in.k;    // W_e [N, K]: N-mode stride
  cute::get<0>(sd) = in.ldd;  // row-major D: M-mode stride
  constexpr int kThreads = 128;
  SetupGroupsKernel<Cfg><<<(in.num_experts + kThreads - 1) / kThreads, kThreads, 0, s>>>(
      groups, reinterpret_cast<const cutlass::bfloat16_t*>(in.a), in.lda,
      reinterpret_cast<const cutlass::bfloat16_t*>(in.w), in.d, in.ldd, in.n, in.k, in.num_experts,
      in.offsets, in.rows, sa, sb, sd);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 setup launch failed: ", cudaGetErrorString(e)));
  }
  typename Cfg::Gemm gemm;
  const auto args = Cfg::MakeArguments(groups, in.num_experts, cuda::CurrentDeviceSmCount());
  if (const auto st = gemm.can_implement(args); st != cutlass::Status::kSuccess) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts sm90 grouped GEMM cannot run N=", in.n,
                                                   " K=", in.k, ": ", cutlassGetStatusString(st)));
  }
  if (const auto st = gemm.initialize(args, in.workspace, s); st != cutlass::Status::kSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 initialize: ", cutlassGetStatusString(st)));
  }
  if (const auto st = gemm.run(s); st != cutlass::Status::kSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 run: ", cutlassGetStatusString(st)));
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

template <typename Config, Sm90Store kStore = Sm90Store::kTma>
size_t Sm90GemmWorkspaceBytes(int num_experts) {
  using Cfg = Sm90GroupedGemm<Config, kStore>;
  typename Cfg::Groups none{};
  return Cfg::Gemm::get_workspace_size(Cfg::MakeArguments(none, num_experts, cuda::CurrentDeviceSmCount()));
}

}  // namespace mlaserve::kernels::moe_cuda
