// sparse_decode CPU backend: sparse_fwd's computation with 1-2 queries per request.
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/sparse_cpu.h"

namespace mlaserve::kernels {

absl::Status SparseDecodeCpu(const SparseMlaParams& p) {
  return sparse_internal::SparseMlaCpu(p, "sparse_decode", /*max_lq=*/2);
}

}  // namespace mlaserve::kernels
