// embedding CPU backend: a row copy per token; out-of-range ids are refused before any write.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/embedding/api.h"

namespace mlaserve::kernels {

absl::Status EmbeddingCpu(const EmbeddingParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("embedding", "dtype", p.dtype));
  for (int t = 0; t < p.num_tokens; ++t) {
    if (p.ids[t] < 0 || p.ids[t] >= p.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("embedding: ids[", t, "]=", p.ids[t],
                                                     " is outside the vocabulary [0, ", p.vocab,
                                                     ")"));
    }
  }
  const auto* table = static_cast<const float*>(p.table);
  auto* out = static_cast<float*>(p.out);
  for (int t = 0; t < p.num_tokens; ++t) {
    std::memcpy(out + static_cast<int64_t>(t) * p.dim,
                table + static_cast<int64_t>(p.ids[t]) * p.dim, sizeof(float) * p.dim);
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
