// mla_decode CPU backend: the dense latent attention of mla_prefill, restricted to 1-2 query
// tokens per request. Each row reads its context once (no recomputation across steps).
#include "kernels/mla_decode/api.h"
#include "kernels/mla_prefill/mla_cpu.h"

namespace mlaserve::kernels {

absl::Status MlaDecodeCpu(const MlaParams& p) {
  return mla_internal::DenseMlaCpu(p, "mla_decode", /*max_lq=*/2);
}

}  // namespace mlaserve::kernels
