// moe experts CUDA backend (bf16): the dispatcher of the routed experts (moe_cuda.h describes
// the stages and the three product paths): the path and tile choice, the workspace carving,
// and the stages in order.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels {
namespace {

using moe_cuda::ExpertsStage;

char* Carve(char*& cursor, size_t bytes) {
  constexpr size_t kAlign = 256;
  char* at = cursor;
  cursor += (bytes + kAlign - 1) / kAlign * kAlign;
  return at;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Mean rows per expert: what decides between the paths (a decode batch of T tokens gives each
// expert about T * top_k / E rows).
double MeanRowsPerExpert(const MoeExpertsParams& p) {
  return static_cast<double>(p.num_tokens) * p.top_k / p.num_experts;
}

// The path kAuto takes, from mlaserve-moe-bench's sweep on H100 (docs/BENCHMARKS.md, "MoE
// experts"): the stream kernels while experts have few rows (they read each touched expert's
// weights once; at 12 rows per expert they still beat the grouped GEMMs), the Hopper grouped
// GEMM beyond, the portable tiled GEMM off Hopper.
MoeExpertsPath ChoosePath(const MoeExpertsParams& p) {
  if (p.path != MoeExpertsPath::kAuto) return p.path;
  if (p.num_tokens <= kMoeStreamMaxTokens || MeanRowsPerExpert(p) <= kMoeStreamMaxRowsPerExpert) {
    return MoeExpertsPath::kStream;
  }
  return moe_cuda::Sm90Available() ? MoeExpertsPath::kSm90 : MoeExpertsPath::kTiled;
}

// Tile configuration of the kSm90 products (moe_gemm_sm90.cuh), from the same sweep: the
// 128 x 256 cooperative tile once experts have hundreds of rows (V2-Lite prefill 4096: 1.09 ms
// vs 1.32 for 128 x 128), ping-pong 64 x 256 below (V3 prefill 4096 at 128 rows per expert:
// 9.57 ms vs 10.1).
int ChooseSm90Variant(const MoeExpertsParams& p) {
  constexpr double kLargeTileRows = 256;
  return MeanRowsPerExpert(p) >= kLargeTileRows ? 1 : 3;
}

// The workspace, carved in MoeExpertsWorkspaceBytes' order (moe.cc) plus the CUDA parts.
struct ExpertsWorkspace {
  int32_t* sorted;
  int32_t* offsets;
  __nv_bfloat16* xg;  // x rows in expert order (kSm90)
  __nv_bfloat16* hs;  // gate_up output [A, 2*inter] or activations [A, inter]
  __nv_bfloat16* ys;  // down output [A, hidden] (bf16 rows in the CPU layout's f32 part)
  int32_t* tile_offsets;
  int32_t* position;
  int32_t* active;
  void* sm90_args;
  void* sm90_ws;
  int32_t* chunk_counts;
};

ExpertsWorkspace CarveWorkspace(const MoeExpertsParams& p) {
  const size_t a = static_cast<size_t>(p.num_tokens) * p.top_k;
  const size_t H = p.hidden, I = p.inter, E1 = p.num_experts + 1;
  char* cursor = static_cast<char*>(p.workspace);
  ExpertsWorkspace w;
  w.sorted = reinterpret_cast<int32_t*>(Carve(cursor, a * sizeof(int32_t)));
  w.offsets = reinterpret_cast<int32_t*>(Carve(cursor, E1 * sizeof(int32_t)));
  w.xg = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, a * H * 2));
  w.hs = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, a * 2 * I * 2));
  w.ys = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, a * H * sizeof(float)));
  w.tile_offsets = reinterpret_cast<int32_t*>(Carve(cursor, E1 * sizeof(int32_t)));
  w.position = reinterpret_cast<int32_t*>(Carve(cursor, a * sizeof(int32_t)));
  w.active = reinterpret_cast<int32_t*>(Carve(cursor, E1 * sizeof(int32_t)));
  w.sm90_args = Carve(cursor, moe_cuda::Sm90ArgsBlockBytes(p.num_experts));
  w.sm90_ws = Carve(cursor, moe_cuda::Sm90WorkspaceBytes(p.num_experts));
  w.chunk_counts = reinterpret_cast<int32_t*>(
      Carve(cursor, moe_cuda::PermuteScratchBytes(static_cast<int>(a), p.num_experts)));
  return w;
}

absl::Status CheckCudaParams(const MoeExpertsParams& p) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  if (p.hidden % 8 != 0 || p.inter % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: hidden=", p.hidden, " and inter=",
                                                   p.inter, " must be multiples of 8 on CUDA (16-byte rows)"));
  }
  if (p.num_experts > moe_cuda::kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: num_experts=", p.num_experts,
                                                   " exceeds the CUDA backend's ", moe_cuda::kMaxExperts));
  }
  if (!Aligned16(p.x) || !Aligned16(p.gate_up) || !Aligned16(p.down) || !Aligned16(p.workspace) ||
      !Aligned16(p.out)) {
    return absl::InvalidArgumentError("moe_experts: x, gate_up, down, out and workspace must be 16-byte aligned on CUDA");
  }
  return absl::OkStatus();
}

}  // namespace

namespace moe_cuda {

absl::Status LaunchSm90Grouped(int variant, const Sm90GroupedArgs& g, cudaStream_t s) {
  switch (variant) {
    case 0: return LaunchSm90GroupedV0(g, s);
    case 1: return LaunchSm90GroupedV1(g, s);
    case 2: return LaunchSm90GroupedV2(g, s);
    case 3: return LaunchSm90GroupedV3(g, s);
  }
  return absl::InvalidArgumentError(absl::StrCat("moe_experts: sm90_variant=", variant,
                                                 " is outside [0, ", kSm90Variants, ")"));
}

bool Sm90HasFusedSiluMul(int variant) { return variant == 1 || variant == 3; }

absl::Status LaunchSm90GroupedSiluMul(int variant, const Sm90GroupedArgs& g, cudaStream_t s) {
  switch (variant) {
    case 1: return LaunchSm90GroupedSiluMulV1(g, s);
    case 3: return LaunchSm90GroupedSiluMulV3(g, s);
  }
  return absl::InvalidArgumentError(absl::StrCat("moe_experts: sm90_variant=", variant,
                                                 " has no fused SiLU epilogue (variants 1 and 3 do)"));
}

size_t Sm90ArgsBlockBytes(int e) {
  return std::max({Sm90ArgsBlockBytesV0(e), Sm90ArgsBlockBytesV1(e), Sm90ArgsBlockBytesV2(e),
                   Sm90ArgsBlockBytesV3(e), Sm90ArgsBlockBytesSiluMulV1(e), Sm90ArgsBlockBytesSiluMulV3(e)});
}

size_t Sm90WorkspaceBytes(int e) {
  return std::max({Sm90WorkspaceBytesV0(e), Sm90WorkspaceBytesV1(e), Sm90WorkspaceBytesV2(e),
                   Sm90WorkspaceBytesV3(e), Sm90WorkspaceBytesSiluMulV1(e), Sm90WorkspaceBytesSiluMulV3(e)});
}

const char* ExpertsStageName(ExpertsStage stage) {
  switch (stage) {
    case ExpertsStage::kPermute: return "permute";
    case ExpertsStage::kGather: return "gather";
    case ExpertsStage::kGateUp: return "gate_up";
    case ExpertsStage::kSiluMul: return "silu_mul";
    case ExpertsStage::kDown: return "down";
    case ExpertsStage::kCombine: return "combine";
  }
  return "?";
}

ExpertsPlan PlanExperts(const MoeExpertsParams& p) {
  ExpertsPlan plan{ChoosePath(p), -1, false};
  if (plan.path == MoeExpertsPath::kSm90) {
    plan.sm90_variant = p.sm90_variant >= 0 ? p.sm90_variant : ChooseSm90Variant(p);
    plan.fused_silu = p.gate_up_layout == MoeGateUpLayout::kInterleaved8 && !p.baseline.silu &&
                      Sm90HasFusedSiluMul(plan.sm90_variant);
  }
  return plan;
}

absl::Status RunExperts(const MoeExpertsParams& p, cudaStream_t s, ExpertsStageObserver* observer) {
  RETURN_IF_ERROR(CheckCudaParams(p));
  const ExpertsPlan plan = PlanExperts(p);
  if (plan.path == MoeExpertsPath::kSm90 && !Sm90Available()) {
    return absl::InvalidArgumentError("moe_experts: path=sm90 needs a Hopper (sm_90) GPU");
  }
  auto done = [&](ExpertsStage stage) {
    if (observer != nullptr) observer->AfterStage(stage, s);
  };
  const int num_assign = p.num_tokens * p.top_k;
  const int H = p.hidden, I = p.inter, E = p.num_experts;
  const bool interleaved = p.gate_up_layout == MoeGateUpLayout::kInterleaved8;
  const ExpertsWorkspace w = CarveWorkspace(p);
  // The decode path, whole (moe_stream.cu: routing + permutation, products, combine).
  if (plan.path == MoeExpertsPath::kStream) {
    return RunStreamExperts(p, {w.sorted, w.offsets, w.tile_offsets, w.position, w.active,
                                w.chunk_counts, w.hs, w.ys}, s, observer);
  }
  if (p.shared.inter != 0 || p.norm.residual != nullptr) {
    return absl::InvalidArgumentError(
        "moe_experts: shared experts and the norm epilogue are folded on the stream path only "
        "(MoeExpertsFoldsSharedAndNorm)");
  }
  const auto* x = static_cast<const __nv_bfloat16*>(p.x);
  const auto* gate_up = static_cast<const __nv_bfloat16*>(p.gate_up);
  const auto* down = static_cast<const __nv_bfloat16*>(p.down);

  // 1. Permutation; x rows gathered into expert order for the TMA-fed grouped GEMM only (the
  // other paths gather inside their loads).
  const bool gather = plan.path == MoeExpertsPath::kSm90;
  PermuteArgs pa{p.topk_ids, num_assign, E, p.top_k, x, H, gather ? w.xg : nullptr,
                 w.sorted, w.offsets, w.tile_offsets, w.position, w.active, w.chunk_counts};
  pa.routing = p.routing;  // routed first, when asked
  if (p.baseline.permute) {
    RETURN_IF_ERROR(LaunchBaselineSort(pa, s));
    done(ExpertsStage::kPermute);
    if (gather) {
      RETURN_IF_ERROR(LaunchBaselineGather(pa, s));
      done(ExpertsStage::kGather);
    }
  } else {
    RETURN_IF_ERROR(LaunchPermute(pa, s));
    done(ExpertsStage::kPermute);
  }

  // 2-3. The products.
  switch (plan.path) {
    case MoeExpertsPath::kStream:  // RunStreamExperts, above
      return absl::InternalError("moe_experts: the stream path runs in RunStreamExperts");
    case MoeExpertsPath::kSm90: {
      // Fused: hs holds [A, inter] activations; unfused: [A, 2*inter] products, SiLU * up
      // compacted into each row's first inter columns.
      const int64_t act_ld = plan.fused_silu ? I : 2 * I;
      const Sm90GroupedArgs up{w.xg, H, gate_up, w.hs, act_ld, 2 * I, H, E, w.offsets, w.sm90_args, w.sm90_ws};
      if (plan.fused_silu) {
        RETURN_IF_ERROR(LaunchSm90GroupedSiluMul(plan.sm90_variant, up, s));
        done(ExpertsStage::kGateUp);
      } else {
        RETURN_IF_ERROR(LaunchSm90Grouped(plan.sm90_variant, up, s));
        done(ExpertsStage::kGateUp);
        RETURN_IF_ERROR(LaunchSiluMul(w.hs, w.offsets, E, I, num_assign, interleaved, s));
        done(ExpertsStage::kSiluMul);
      }
      const Sm90GroupedArgs dn{w.hs, act_ld, down, w.ys, H, H, I, E, w.offsets, w.sm90_args, w.sm90_ws};
      RETURN_IF_ERROR(LaunchSm90Grouped(plan.sm90_variant, dn, s));
      done(ExpertsStage::kDown);
      break;
    }
    case MoeExpertsPath::kTiled:
    case MoeExpertsPath::kAuto: {
      const int max_tiles = (num_assign + kTiledRows - 1) / kTiledRows + std::min(E, num_assign);
      GroupedGemmArgs up{};
      up.a = x;
      up.lda = H;
      up.sorted = w.sorted;
      up.top_k = p.top_k;
      up.w = gate_up;
      up.w_expert_stride = int64_t{2} * I * H;
      up.n = 2 * I;
      up.k = H;
      up.c = w.hs;
      up.ldc = 2 * I;
      up.offsets = w.offsets;
      up.tile_offsets = w.tile_offsets;
      up.num_experts = E;
      RETURN_IF_ERROR(LaunchTiledGemm(up, max_tiles, s));
      done(ExpertsStage::kGateUp);
      RETURN_IF_ERROR(LaunchSiluMul(w.hs, w.offsets, E, I, num_assign, interleaved, s));
      done(ExpertsStage::kSiluMul);
      GroupedGemmArgs dn = up;
      dn.a = w.hs;
      dn.lda = 2 * I;
      dn.sorted = nullptr;
      dn.w = down;
      dn.w_expert_stride = int64_t{H} * I;
      dn.n = H;
      dn.k = I;
      dn.c = w.ys;
      dn.ldc = H;
      RETURN_IF_ERROR(LaunchTiledGemm(dn, max_tiles, s));
      done(ExpertsStage::kDown);
      break;
    }
  }

  // 4. Combine in token order.
  const CombineArgs ca{w.ys, w.position, p.topk_weights, static_cast<__nv_bfloat16*>(p.out),
                       p.num_tokens, p.top_k, H};
  RETURN_IF_ERROR(p.baseline.combine ? LaunchBaselineCombine(ca, s) : LaunchCombine(ca, s));
  done(ExpertsStage::kCombine);
  return absl::OkStatus();
}

}  // namespace moe_cuda

size_t MoeExpertsCudaWorkspaceBytes(const MoeExpertsParams& p) {
  constexpr size_t kAlign = 256;
  auto align = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  const int num_assign = p.num_tokens * p.top_k;
  return align((static_cast<size_t>(p.num_experts) + 1) * sizeof(int32_t)) +
         align(moe_cuda::Sm90ArgsBlockBytes(p.num_experts)) +
         align(moe_cuda::Sm90WorkspaceBytes(p.num_experts)) +
         align(moe_cuda::PermuteScratchBytes(num_assign, p.num_experts));
}

absl::Status MoeExpertsCuda(const MoeExpertsParams& p, void* stream) {
  return moe_cuda::RunExperts(p, static_cast<cudaStream_t>(stream), nullptr);
}

}  // namespace mlaserve::kernels
