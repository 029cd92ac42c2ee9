// mha_prefill, our CUDA kernels (provider kOurs): the can-implement checks they add to the
// dispatcher's, the choice between the Hopper kernel (mha_prefill_sm90.h) and the mma.sync
// kernel (MhaPrefillParams::kernel), and the one place where runtime head dims become an
// mma.sync tile configuration (template parameters).
#include <string>
#include <utility>

#include "common/status.h"
#include "kernels/mha_prefill/mha_prefill_kernel.cuh"
#include "kernels/mha_prefill/mha_prefill_providers.h"
#include "kernels/mha_prefill/mha_prefill_sm90.h"

namespace mlaserve::kernels {
namespace {

constexpr int kMaxHeadDim = kMhaPrefillCudaMaxHeadDim;
static_assert(kMhaPrefillCudaHeadDimAlign == cuda::kBf16PerChunk);

struct Config {
  int dqk, dv;
};
// Padded (qk, v) head dims with an instantiation (mha_prefill_d*.cu); the first that holds
// the request is used (kept in the same order as the launches below).
constexpr Config kConfigs[] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};

absl::Status CheckHeadDim(const char* name, int d) {
  if (d % cuda::kBf16PerChunk == 0 && d <= kMaxHeadDim) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("mha_prefill: ", name, "=", d,
                                                 " is not supported on CUDA (multiples of 8 up to ",
                                                 kMaxHeadDim, ")"));
}

}  // namespace

absl::Status MhaPrefillOursCuda(const MhaPrefillParams& p, void* stream) {
  constexpr const char* kFamily = "mha_prefill";
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("mha_prefill: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  RETURN_IF_ERROR(CheckHeadDim("head_dim_qk", p.head_dim_qk));
  RETURN_IF_ERROR(CheckHeadDim("head_dim_v", p.head_dim_v));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(kFamily, "q", p.q));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(kFamily, "k", p.k));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(kFamily, "v", p.v));
  RETURN_IF_ERROR(cuda::RequireVectorAligned(kFamily, "out", p.out));
  for (const auto& [name, stride] :
       {std::pair{"q_token_stride", p.q_token_stride}, {"q_head_stride", p.q_head_stride},
        {"k_token_stride", p.k_token_stride}, {"k_head_stride", p.k_head_stride},
        {"v_token_stride", p.v_token_stride}, {"v_head_stride", p.v_head_stride},
        {"out_token_stride", p.out_token_stride}, {"out_head_stride", p.out_head_stride}}) {
    RETURN_IF_ERROR(cuda::RequireStrideMultiple8(kFamily, name, stride));
  }
  // The grid is sized by max_seqlen_q (a host value): it must bound every sequence's queries.
  if (p.max_seqlen_q == 0) return absl::OkStatus();
  const bool wgmma = p.kernel != MhaPrefillKernel::kMmaSync && MhaPrefillWgmmaApplies(p);
  if (p.kernel == MhaPrefillKernel::kWgmma && !wgmma) {
    const std::string why = mha_sm90::Refusal(p);
    return absl::InvalidArgumentError(absl::StrCat(
        "mha_prefill: kernel=wgmma does not run this call: ",
        why.empty() ? "no sm_90a kernel for this build and device" : why));
  }
  if (wgmma) return mha_sm90::Launch(p, mha_sm90::DefaultSchedule(p.head_dim_qk), stream);
  if (p.k_rope != nullptr) {
    return absl::InvalidArgumentError("mha_prefill: the mma.sync kernel does not take a split K (k_rope)");
  }
  auto s = static_cast<cudaStream_t>(stream);
  const auto fits = [&](const Config& c) { return p.head_dim_qk <= c.dqk && p.head_dim_v <= c.dv; };
  if (fits(kConfigs[0])) return mha_cuda::LaunchMhaPrefill<64, 64>(p, s);
  if (fits(kConfigs[1])) return mha_cuda::LaunchMhaPrefill<128, 128>(p, s);
  if (fits(kConfigs[2])) return mha_cuda::LaunchMhaPrefill<192, 128>(p, s);
  return mha_cuda::LaunchMhaPrefill<256, 256>(p, s);  // CheckHeadDim bounds both by 256
}

}  // namespace mlaserve::kernels
