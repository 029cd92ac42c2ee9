// moe dispatchers (routing, experts), the experts' workspace size, and their can-implement
// checks.
#include <cmath>

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"
#include "kernels/moe/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kInterleaveRows = 8;  // MoeGateUpLayout::kInterleaved8's block of rows

size_t AlignUp(size_t bytes) {
  constexpr size_t kAlign = 256;
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

namespace {

// MoeRouting's can-implement checks (also of MoeExpertsParams::routing).
absl::Status CheckRouting(const MoeRoutingParams& p) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("num_experts", p.num_experts));
  RETURN_IF_ERROR(RequirePositive("top_k", p.top_k));
  RETURN_IF_ERROR(RequireAtLeast("num_experts", p.num_experts, "top_k", p.top_k));
  RETURN_IF_ERROR(RequirePositive("n_group", p.n_group));
  if (p.num_experts % p.n_group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_routing: num_experts=", p.num_experts,
                                                   " is not divisible by n_group=", p.n_group));
  }
  if (p.method != MoeTopkMethod::kGreedy) {
    if (p.topk_group < 1 || p.topk_group > p.n_group) {
      return absl::InvalidArgumentError(absl::StrCat(
          "moe_routing: topk_group=", p.topk_group, " must be in [1, n_group=", p.n_group, "]"));
    }
  }
  if (p.method == MoeTopkMethod::kNoauxTc && p.num_experts / p.n_group < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_routing: noaux_tc scores a group by its top-2 experts; groups have ",
        p.num_experts / p.n_group, " expert(s) (num_experts=", p.num_experts,
        ", n_group=", p.n_group, ")"));
  }
  if (!std::isfinite(p.routed_scaling_factor)) {
    return absl::InvalidArgumentError(absl::StrCat("moe_routing: routed_scaling_factor=",
                                                   p.routed_scaling_factor, " is not finite"));
  }
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("logits", p.logits));
  RETURN_IF_ERROR(RequireNonNull("topk_ids", p.topk_ids));
  RETURN_IF_ERROR(RequireNonNull("topk_weights", p.topk_weights));
  return absl::OkStatus();
}

// The routing inside an experts call (MoeExpertsParams::routing) routes exactly that call's
// assignments.
absl::Status CheckRoutingOfExperts(const MoeExpertsParams& p) {
  const MoeRoutingParams& r = *p.routing;
  RETURN_IF_ERROR(CheckRouting(r));
  if (r.num_tokens != p.num_tokens || r.num_experts != p.num_experts || r.top_k != p.top_k ||
      r.topk_ids != p.topk_ids || r.topk_weights != p.topk_weights) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: routing (num_tokens=", r.num_tokens, " num_experts=", r.num_experts,
        " top_k=", r.top_k, ") must route this call's assignments (num_tokens=", p.num_tokens,
        " num_experts=", p.num_experts, " top_k=", p.top_k,
        ") into its topk_ids and topk_weights"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeRouting(const MoeRoutingParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(CheckRouting(p));
  if (p.router.weight != nullptr) {
    return absl::InvalidArgumentError(
        "moe_routing: router.weight is set, but the router projection runs inside the routing "
        "only within an experts call (MoeExpertsFusesRouter); compute the logits first");
  }
  if (p.num_tokens == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("moe", ctx, MoeRoutingCpu(p), MoeRoutingCuda(p, ctx.stream));
}

bool MoeExpertsFusesRouter(const MoeExpertsParams& p, Backend backend) {
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return backend == Backend::kCuda && MoeExpertsCudaFusesRouter(p);
#else
  (void)p;
  (void)backend;
  return false;
#endif
}

bool MoeExpertsFoldsSharedAndNorm(const MoeExpertsParams& p, Backend backend) {
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return backend == Backend::kCuda && MoeExpertsCudaFoldsSharedAndNorm(p);
#else
  (void)p;
  (void)backend;
  return false;
#endif
}

bool MoeExpertsFoldsAddendAndNorm(const MoeExpertsParams& p, Backend backend) {
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return backend == Backend::kCuda && MoeExpertsCudaFoldsAddendAndNorm(p);
#else
  (void)p;
  (void)backend;
  return false;
#endif
}

// Layout (each part 256-byte aligned), for num_tokens * top_k expert assignments A:
//   int32 sorted assignment ids [A] | int32 expert offsets [num_experts + 1] |
//   x gathered by expert [A, hidden] (dtype) | gate_up output [A, 2*inter] (dtype) |
//   down output [A, hidden] (f32) |
//   (CUDA backend) int32 row-tile offsets [num_experts + 1] | int32 sorted position of each
//   assignment [A] | in CUDA builds, MoeExpertsCudaWorkspaceBytes more (active experts, the
//   grouped GEMM's arguments, the permutation's per-chunk counts). The CUDA paths use "x
//   gathered" (kSm90) or not (kStream, kTiled gather inside their loads); kStream and the
//   fused kSm90 gate_up keep their [A, inter] activations in the gate_up part.
size_t MoeExpertsWorkspaceBytes(const MoeExpertsParams& p) {
  if (p.num_tokens <= 0 || p.top_k <= 0) return 0;
  const size_t a = static_cast<size_t>(p.num_tokens) * p.top_k;
  const size_t es = DTypeSize(p.dtype);
  const size_t experts1 = AlignUp((static_cast<size_t>(p.num_experts) + 1) * sizeof(int32_t));
  size_t bytes = AlignUp(a * sizeof(int32_t)) + experts1 + AlignUp(a * p.hidden * es) +
                 AlignUp(a * 2 * static_cast<size_t>(p.inter) * es) +
                 AlignUp(a * p.hidden * sizeof(float)) + experts1 + AlignUp(a * sizeof(int32_t));
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  bytes += AlignUp(MoeExpertsCudaWorkspaceBytes(p));
#endif
  return bytes;
}

absl::Status MoeExperts(const MoeExpertsParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("hidden", p.hidden));
  RETURN_IF_ERROR(RequirePositive("inter", p.inter));
  RETURN_IF_ERROR(RequirePositive("num_experts", p.num_experts));
  RETURN_IF_ERROR(RequirePositive("top_k", p.top_k));
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("x", p.x));
  RETURN_IF_ERROR(RequireNonNull("topk_ids", p.topk_ids));
  RETURN_IF_ERROR(RequireNonNull("topk_weights", p.topk_weights));
  RETURN_IF_ERROR(RequireNonNull("gate_up", p.gate_up));
  RETURN_IF_ERROR(RequireNonNull("down", p.down));
  RETURN_IF_ERROR(RequireNonNull("out", p.out));
  RETURN_IF_ERROR(RequireNonNull("workspace", p.workspace));
  if (p.gate_up_layout == MoeGateUpLayout::kInterleaved8) {
    if (ctx.backend == Backend::kCpu) {
      return absl::InvalidArgumentError(
          "moe_experts: gate_up_layout=interleaved8 is the CUDA backend's prepared layout; the CPU "
          "backend takes the stacked (checkpoint) layout");
    }
    if (p.inter % kInterleaveRows != 0) {
      return absl::InvalidArgumentError(absl::StrCat("moe_experts: gate_up_layout=interleaved8 needs inter % ",
                                                     kInterleaveRows, " == 0, got inter=", p.inter));
    }
  }
  const size_t need = MoeExpertsWorkspaceBytes(p);
  if (p.workspace_bytes < need) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: workspace_bytes=",
                                                   p.workspace_bytes, " is less than the ", need,
                                                   " bytes MoeExpertsWorkspaceBytes asks for"));
  }
  if (p.routing != nullptr) RETURN_IF_ERROR(CheckRoutingOfExperts(p));
  if (p.routing != nullptr && p.routing->router.weight != nullptr &&
      !MoeExpertsFusesRouter(p, ctx.backend)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: routing.router.weight is set where the router projection is not fused (",
        BackendName(ctx.backend), ", num_tokens=", p.num_tokens, ", hidden=",
        p.routing->router.hidden, ", router dtype=", DTypeName(p.routing->router.dtype),
        "): MoeExpertsFusesRouter is false; compute the logits first"));
  }
  if ((p.shared.inter != 0 || p.addend != nullptr || p.norm.residual != nullptr) &&
      !MoeExpertsFoldsSharedAndNorm(p, ctx.backend) && !MoeExpertsFoldsAddendAndNorm(p, ctx.backend)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: shared.inter=", p.shared.inter, (p.addend != nullptr ? ", an addend" : ""),
        (p.norm.residual != nullptr ? " and a norm epilogue" : ""), " asked where they are not folded (",
        BackendName(ctx.backend), ", num_tokens=", p.num_tokens, ", inter=", p.inter, ", top_k=", p.top_k,
        "): MoeExpertsFoldsSharedAndNorm and MoeExpertsFoldsAddendAndNorm are false"));
  }
  if (p.shared.inter != 0) {
    RETURN_IF_ERROR(RequireNonNull("shared.gate_up", p.shared.gate_up));
    RETURN_IF_ERROR(RequireNonNull("shared.down", p.shared.down));
  }
  if (p.norm.residual != nullptr) {
    RETURN_IF_ERROR(RequireNonNull("norm.weight", p.norm.weight));
    RETURN_IF_ERROR(RequireNonNull("norm.y", p.norm.y));
    if (p.norm.real_dim < 0 || p.norm.real_dim > p.hidden) {
      return absl::InvalidArgumentError(absl::StrCat("moe_experts: norm.real_dim=", p.norm.real_dim,
                                                     " must be in [0, hidden=", p.hidden, "]"));
    }
  }
  if (ctx.backend == Backend::kCpu && p.routing != nullptr) RETURN_IF_ERROR(MoeRoutingCpu(*p.routing));
  MLASERVE_DISPATCH("moe", ctx, MoeExpertsCpu(p), MoeExpertsCuda(p, ctx.stream));
}

absl::StatusOr<MoeGateUpLayout> MoePrepareExpertWeights(const MoePrepareParams& p,
                                                        const KernelContext& ctx) {
  RETURN_IF_ERROR(RequirePositive("num_experts", p.num_experts));
  RETURN_IF_ERROR(RequirePositive("hidden", p.hidden));
  RETURN_IF_ERROR(RequirePositive("inter", p.inter));
  RETURN_IF_ERROR(RequireNonNull("gate_up", p.gate_up));
  if (p.layout == MoeGateUpLayout::kInterleaved8 && p.inter % kInterleaveRows != 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_prepare: layout=interleaved8 needs inter % ",
                                                   kInterleaveRows, " == 0, got inter=", p.inter));
  }
  if (ctx.backend == Backend::kCpu) {
    if (p.layout == MoeGateUpLayout::kInterleaved8) {
      return absl::InvalidArgumentError(
          "moe_prepare: layout=interleaved8 is for the CUDA backend; the CPU backend keeps the "
          "stacked layout");
    }
    return MoeGateUpLayout::kStacked;
  }
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return MoePrepareExpertWeightsCuda(p, ctx.stream);
#else
  return NoCudaError("moe");
#endif
}

bool MoeSharedGateUpRuns(const MoeSharedGateUpParams& p, Backend backend) {
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return backend == Backend::kCuda && MoeSharedGateUpRunsCuda(p);
#else
  (void)p;
  (void)backend;
  return false;
#endif
}

size_t MoeSharedGateUpWorkspaceBytes() {
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return MoeSharedGateUpWorkspaceBytesCuda();
#else
  return 0;
#endif
}

absl::Status MoeSharedGateUp(const MoeSharedGateUpParams& p, const KernelContext& ctx) {
  if (!MoeSharedGateUpRuns(p, ctx.backend)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_shared_gate_up: this backend, device or shape does not take the fused product (rows=", p.rows,
        " hidden=", p.hidden, " inter=", p.inter, ", dtype=", DTypeName(p.dtype),
        "); MoeSharedGateUpRuns says where it does"));
  }
  RETURN_IF_ERROR(RequireNonNull("workspace", p.workspace));
  if (p.workspace_bytes < MoeSharedGateUpWorkspaceBytes()) {
    return absl::InvalidArgumentError(absl::StrCat("moe_shared_gate_up: workspace_bytes=", p.workspace_bytes,
                                                   " is less than the ", MoeSharedGateUpWorkspaceBytes(),
                                                   " bytes MoeSharedGateUpWorkspaceBytes asks for"));
  }
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return MoeSharedGateUpCuda(p, ctx.stream);
#else
  return NoCudaError("moe");
#endif
}

}  // namespace mlaserve::kernels
