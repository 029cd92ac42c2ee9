// mha_prefill dispatcher: can-implement check, then the backend (on CUDA, the provider:
// mha_prefill_providers.cc). Checks that read the sequence offsets run in the CPU backend (on
// CUDA they are device pointers).
#include "kernels/mha_prefill/api.h"

#include <cmath>
#include <string>

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"
#if MLASERVE_KERNEL_HAS_CUDA
#include "kernels/mha_prefill/mha_prefill_sm90.h"
#endif

namespace mlaserve::kernels {
namespace {

// Heads of one token must not overlap: stride >= (count-1)*head_stride + width.
absl::Status CheckLayout(const char* name, const void* ptr, int64_t token_stride,
                         int64_t head_stride, int heads, int width) {
  RETURN_IF_ERROR(RequireNonNull(name, ptr));
  if (heads > 1 && head_stride < width) {
    return absl::InvalidArgumentError(absl::StrCat("mha_prefill: ", name, " head stride ",
                                                   head_stride, " < head width ", width));
  }
  const int64_t need = static_cast<int64_t>(heads - 1) * head_stride + width;
  if (token_stride < need) {
    return absl::InvalidArgumentError(absl::StrCat("mha_prefill: ", name, " token stride ",
                                                   token_stride, " < ", need,
                                                   " (heads*head_stride)"));
  }
  return absl::OkStatus();
}

}  // namespace

bool MhaPrefillSupportsHeadDims(Backend backend, int head_dim_qk, int head_dim_v) {
  if (head_dim_qk <= 0 || head_dim_v <= 0) return false;
  if (backend == Backend::kCpu) return true;
  auto fits = [](int d) {
    return d % kMhaPrefillCudaHeadDimAlign == 0 && d <= kMhaPrefillCudaMaxHeadDim;
  };
  return fits(head_dim_qk) && fits(head_dim_v);
}

const char* MhaPrefillProviderName(MhaPrefillProvider provider) {
  switch (provider) {
    case MhaPrefillProvider::kAuto: return "auto";
    case MhaPrefillProvider::kOurs: return "ours";
    case MhaPrefillProvider::kPreferCudnn: return "prefer-cudnn";
    case MhaPrefillProvider::kCudnn: return "cudnn";
  }
  return "?";
}

const char* MhaPrefillKernelName(MhaPrefillKernel kernel) {
  switch (kernel) {
    case MhaPrefillKernel::kAuto: return "auto";
    case MhaPrefillKernel::kMmaSync: return "mma.sync";
    case MhaPrefillKernel::kWgmma: return "wgmma";
  }
  return "?";
}

bool MhaPrefillWgmmaApplies(const MhaPrefillParams& p) {
#if MLASERVE_KERNEL_HAS_CUDA
  return mha_sm90::Refusal(p).empty() && mha_sm90::Available();
#else
  (void)p;
  return false;
#endif
}

bool MhaPrefillAutoPrefersOurs(const MhaPrefillParams& p) {
  return p.max_seqlen_k >= kMhaPrefillAutoOursMinSeqlenK && MhaPrefillWgmmaApplies(p);
}

bool MhaPrefillTakesSplitK(const MhaPrefillParams& p, Backend backend) {
  if (p.k_rope == nullptr || p.k_rope_dim <= 0) return false;
  if (backend == Backend::kCpu) return true;
  switch (p.provider) {
    case MhaPrefillProvider::kOurs:
      return p.kernel != MhaPrefillKernel::kMmaSync && MhaPrefillWgmmaApplies(p);
    case MhaPrefillProvider::kAuto:
      return MhaPrefillAutoPrefersOurs(p);
    case MhaPrefillProvider::kCudnn:
    case MhaPrefillProvider::kPreferCudnn:
      return false;
  }
  return false;
}

absl::StatusOr<MhaPrefillProvider> ParseMhaPrefillProvider(std::string_view flag) {
  for (auto p : {MhaPrefillProvider::kAuto, MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn,
                 MhaPrefillProvider::kPreferCudnn}) {
    if (flag == MhaPrefillProviderName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("--mha-provider ", std::string(flag),
                                                 " is not one of auto, ours, cudnn, prefer-cudnn"));
}

absl::Status CheckMhaPrefillProvider(MhaPrefillProvider provider, Backend backend) {
  if (provider != MhaPrefillProvider::kCudnn) return absl::OkStatus();
  if (backend != Backend::kCuda) {
    return absl::FailedPreconditionError(
        absl::StrCat("mha prefill provider cudnn needs the CUDA backend, not ", BackendName(backend)));
  }
  const auto version = MhaPrefillCudnnVersion();
  if (version.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("mha prefill provider cudnn: ", version.status().message()));
}

std::string DescribeMhaPrefillProvider(MhaPrefillProvider provider, Backend backend) {
  const std::string head = absl::StrCat("mha prefill provider ", MhaPrefillProviderName(provider), ": ");
  if (backend != Backend::kCuda) return head + "the CPU reference";
  if (provider == MhaPrefillProvider::kOurs) return head + "ours";
  const auto version = MhaPrefillCudnnVersion();
  if (!version.ok()) {
    return absl::StrCat(head, provider == MhaPrefillProvider::kCudnn ? "none" : "ours",
                        " (cuDNN unavailable: ", version.status().message(), ")");
  }
  if (provider == MhaPrefillProvider::kCudnn) return head + *version;
  if (provider == MhaPrefillProvider::kPreferCudnn) {
    return absl::StrCat(head, *version, " where it supports the shape, else ours");
  }
  return absl::StrCat(head, "ours (Hopper kernel) from ", kMhaPrefillAutoOursMinSeqlenK, " keys where it applies, else ",
                      *version, " where it supports the shape, else ours");
}

#if !defined(MLASERVE_KERNEL_HAS_CUDA) || !defined(MLASERVE_HAS_CUDNN)
// Builds without the cuDNN provider (mha_prefill_cudnn.cc defines it otherwise).
absl::StatusOr<std::string> MhaPrefillCudnnVersion() {
  return absl::UnavailableError(
      "this build has no cuDNN provider (it needs the CUDA backend and cudnn.h at configure time, "
      "MLASERVE_CUDNN)");
}
#endif

absl::Status MhaPrefill(const MhaPrefillParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequirePositive("num_heads", p.num_heads));
  RETURN_IF_ERROR(RequirePositive("num_kv_heads", p.num_kv_heads));
  RETURN_IF_ERROR(RequirePositive("head_dim_qk", p.head_dim_qk));
  RETURN_IF_ERROR(RequirePositive("head_dim_v", p.head_dim_v));
  if (p.num_heads % p.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mha_prefill: num_heads=", p.num_heads,
                                                   " is not a multiple of num_kv_heads=",
                                                   p.num_kv_heads));
  }
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("mha_prefill: softmax_scale=", p.softmax_scale, " must be finite and > 0"));
  }
  RETURN_IF_ERROR(RequireNonNegative("max_seqlen_q", p.max_seqlen_q));
  RETURN_IF_ERROR(RequireNonNegative("max_seqlen_k", p.max_seqlen_k));
  if (p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("cu_seqlens_q", p.cu_seqlens_q));
  RETURN_IF_ERROR(RequireNonNull("cu_seqlens_k", p.cu_seqlens_k));
  RETURN_IF_ERROR(CheckLayout("q", p.q, p.q_token_stride, p.q_head_stride, p.num_heads,
                              p.head_dim_qk));
  const bool split_k = p.k_rope != nullptr || p.k_rope_dim != 0;
  if (split_k) {
    RETURN_IF_ERROR(RequireNonNull("k_rope", p.k_rope));
    if (p.k_rope_dim <= 0 || p.k_rope_dim >= p.head_dim_qk) {
      return absl::InvalidArgumentError(absl::StrCat("mha_prefill: k_rope_dim=", p.k_rope_dim,
                                                     " must be in (0, head_dim_qk=", p.head_dim_qk, ")"));
    }
    RETURN_IF_ERROR(CheckLayout("k_rope", p.k_rope, p.k_rope_token_stride, 0, 1, p.k_rope_dim));
    if (!MhaPrefillTakesSplitK(p, ctx.backend)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mha_prefill: a split K (k_rope_dim=", p.k_rope_dim, ") runs on the CPU reference and our Hopper "
          "kernel only; provider=", MhaPrefillProviderName(p.provider), ", kernel=", MhaPrefillKernelName(p.kernel),
          ", head dims ", p.head_dim_qk, "/", p.head_dim_v, ", max_seqlen_k=", p.max_seqlen_k,
          " do not resolve to it (MhaPrefillTakesSplitK)"));
    }
  }
  RETURN_IF_ERROR(CheckLayout("k", p.k, p.k_token_stride, p.k_head_stride, p.num_kv_heads,
                              p.head_dim_qk - (split_k ? p.k_rope_dim : 0)));
  RETURN_IF_ERROR(CheckLayout("v", p.v, p.v_token_stride, p.v_head_stride, p.num_kv_heads,
                              p.head_dim_v));
  RETURN_IF_ERROR(CheckLayout("out", p.out, p.out_token_stride, p.out_head_stride, p.num_heads,
                              p.head_dim_v));
  if (ctx.backend == Backend::kCpu && p.provider == MhaPrefillProvider::kCudnn) {
    return absl::InvalidArgumentError("mha_prefill: provider=cudnn needs the CUDA backend");
  }
  MLASERVE_DISPATCH("mha_prefill", ctx, MhaPrefillCpu(p), MhaPrefillCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
