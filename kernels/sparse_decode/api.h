// sparse_decode: absorbed MLA decode over the indexer's selected positions (1-2 queries per
// request), same semantics as sparse_fwd; on the GPU the fp8 cache is dequantized on the fly.
#pragma once

#include "absl/status/status.h"
#include "kernels/common/types.h"
#include "kernels/sparse_fwd/api.h"

namespace mlaserve::kernels {

absl::Status SparseDecode(const SparseMlaParams& p, const KernelContext& ctx);
absl::Status SparseDecodeCpu(const SparseMlaParams& p);
absl::Status SparseDecodeCuda(const SparseMlaParams& p, void* stream);

}  // namespace mlaserve::kernels
