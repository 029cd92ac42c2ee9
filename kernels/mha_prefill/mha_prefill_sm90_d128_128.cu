// One configuration of the Hopper mha_prefill kernel: head dims qk 128 / v 128.
#include "kernels/mha_prefill/mha_prefill_sm90_kernel.cuh"

namespace mlaserve::kernels::mha_sm90 {

template <>
absl::Status LaunchMhaPrefillSm90<128, 128>(const MhaPrefillParams& p, Schedule schedule, cudaStream_t stream) {
  return LaunchMhaPrefillSm90Impl<128, 128>(p, schedule, stream);
}

}  // namespace mlaserve::kernels::mha_sm90
