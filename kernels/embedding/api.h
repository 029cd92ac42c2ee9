// embedding: out[t, :] = table[ids[t], :]. Ids are validated by the caller (0 <= id < vocab);
// the kernel still refuses out-of-range ids on the CPU path with INVALID_ARGUMENT.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct EmbeddingParams {
  DType dtype = DType::kF32;  // of table and out
  int num_tokens = 0;
  int dim = 0;
  int vocab = 0;
  const int32_t* ids = nullptr;  // [num_tokens]
  const void* table = nullptr;   // [vocab, dim]
  void* out = nullptr;           // [num_tokens, dim]
};

absl::Status Embedding(const EmbeddingParams& p, const KernelContext& ctx);
absl::Status EmbeddingCpu(const EmbeddingParams& p);
absl::Status EmbeddingCuda(const EmbeddingParams& p, void* stream);

}  // namespace mlaserve::kernels
