// The CUDA providers of mha_prefill behind MhaPrefillCuda (mha_prefill_providers.cc), each with
// the MhaPrefillParams contract of api.h and the dispatcher's checks already passed.
#pragma once

#include "absl/status/status.h"
#include "kernels/mha_prefill/api.h"

namespace mlaserve::kernels {

// This family's kernel (mha_prefill.cu): INVALID_ARGUMENT naming what it cannot run.
absl::Status MhaPrefillOursCuda(const MhaPrefillParams& p, void* stream);

// cuDNN SDPA (mha_prefill_cudnn.cc). Codes say whether ours may run the call instead:
//   UNAVAILABLE          no cuDNN in this build or process (nothing was enqueued);
//   INVALID_ARGUMENT     cuDNN cannot run this combination, naming it (nothing was enqueued);
//   FAILED_PRECONDITION  the stream is being captured and the call's graph was not planned
//                        before the capture (nothing was enqueued);
//   RESOURCE_EXHAUSTED   no device memory for the provider's arena (nothing was enqueued);
//   INTERNAL             cuDNN or CUDA failed while enqueuing.
absl::Status MhaPrefillCudnn(const MhaPrefillParams& p, void* stream);

}  // namespace mlaserve::kernels
