#include "parallel/collective.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace mlaserve::parallel {

absl::Status CheckCollectiveDType(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kF32: case kernels::DType::kBF16: case kernels::DType::kI32:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "collective dtype ", kernels::DTypeName(dtype), " is not one of f32, bf16, i32"));
  }
}

absl::Status Collective::AllToAll(const void* send, void* recv, int64_t count,
                                  kernels::DType dtype, void* stream) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("AllToAll: count is ", count));
  const std::vector<int64_t> counts(size(), count);
  std::vector<int64_t> offsets(size());
  for (int p = 0; p < size(); ++p) offsets[p] = p * count;
  return AllToAllV(send, counts, offsets, recv, counts, offsets, dtype, stream);
}

}  // namespace mlaserve::parallel
