// MhaPrefillCuda: the provider a call asks for (api.h). kAuto runs our Hopper kernel on long
// calls it applies to (MhaPrefillAutoPrefersOurs); kPreferCudnn (and kAuto on the others) runs
// cuDNN where it can run the call and ours otherwise: when cuDNN is absent, cannot run the combination, was not planned before a
// CUDA-graph capture or has no memory for its arena (nothing was enqueued in each case). A
// failure while cuDNN enqueues (INTERNAL) is returned as it is.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mha_prefill/mha_prefill_providers.h"

namespace mlaserve::kernels {

#if !defined(MLASERVE_HAS_CUDNN)
absl::Status MhaPrefillCudnn(const MhaPrefillParams&, void*) { return MhaPrefillCudnnVersion().status(); }
#endif

absl::Status MhaPrefillCuda(const MhaPrefillParams& p, void* stream) {
  if (p.k_rope != nullptr && !MhaPrefillTakesSplitK(p, Backend::kCuda)) {
    return absl::InvalidArgumentError(absl::StrCat("mha_prefill: provider=", MhaPrefillProviderName(p.provider),
                                                   " does not take a split K (MhaPrefillTakesSplitK)"));
  }
  switch (p.provider) {
    case MhaPrefillProvider::kOurs:
      return MhaPrefillOursCuda(p, stream);
    case MhaPrefillProvider::kCudnn: {
      absl::Status s = MhaPrefillCudnn(p, stream);
      if (absl::IsUnavailable(s)) {
        return absl::FailedPreconditionError(absl::StrCat("mha_prefill: provider=cudnn: ", s.message()));
      }
      return s;
    }
    case MhaPrefillProvider::kAuto:
    case MhaPrefillProvider::kPreferCudnn: {
      if (p.provider == MhaPrefillProvider::kAuto && MhaPrefillAutoPrefersOurs(p)) {
        return MhaPrefillOursCuda(p, stream);
      }
      absl::Status s = MhaPrefillCudnn(p, stream);
      if (s.ok() || absl::IsInternal(s)) return s;
      return MhaPrefillOursCuda(p, stream);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("mha_prefill: provider=", static_cast<int>(p.provider), " is not a provider"));
}

}  // namespace mlaserve::kernels
