#include "parallel/collective.h"

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

}  // namespace mlaserve::parallel
