#include "model/weight_loader.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace mlaserve::model {
namespace {

int64_t Numel(const WeightLoader::Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> WeightLoader::Bytes(const std::string& name,
                                                         const Shape& shape, kernels::DType dtype,
                                                         const TensorSlice& slice) const {
  std::vector<uint8_t> bytes;
  if (dtype == kernels::DType::kF32) {
    ASSIGN_OR_RETURN(std::vector<float> v, store_.LoadF32(name, shape, slice));
    bytes.resize(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
  } else {
    ASSIGN_OR_RETURN(std::vector<uint16_t> v, store_.LoadBf16(name, shape, slice));
    bytes.resize(v.size() * sizeof(uint16_t));
    std::memcpy(bytes.data(), v.data(), bytes.size());
  }
  return bytes;
}

absl::StatusOr<WeightTensor> WeightLoader::Upload(const std::vector<uint8_t>& bytes,
                                                  kernels::DType dtype, int64_t numel) const {
  WeightTensor t;
  t.dtype = dtype;
  t.numel = numel;
  ASSIGN_OR_RETURN(t.buffer, DeviceBuffer::FromHost(backend_, bytes.data(), bytes.size()));
  return t;
}

absl::StatusOr<WeightTensor> WeightLoader::Tensor(const std::string& name,
                                                  const Shape& shape) const {
  return Tensor(name, shape, dtype_);
}

absl::StatusOr<WeightTensor> WeightLoader::Tensor(const std::string& name, const Shape& shape,
                                                  kernels::DType dtype) const {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Bytes(name, shape, dtype));
  return Upload(bytes, dtype, Numel(shape));
}

absl::StatusOr<LinearWeight> WeightLoader::Linear(const std::string& name, int out, int in,
                                                  bool bias) const {
  LinearWeight w;
  w.out = out;
  w.in = in;
  ASSIGN_OR_RETURN(w.weight, Tensor(name + ".weight", {out, in}));
  if (bias) {
    ASSIGN_OR_RETURN(w.bias, Tensor(name + ".bias", {out}));
  }
  return w;
}

absl::StatusOr<std::vector<uint8_t>> WeightLoader::PaddedBytes(const std::string& name,
                                                               const Shape& shape,
                                                               const TensorSlice& slice,
                                                               const PaddedAxis& rows,
                                                               const PaddedAxis& cols) const {
  const size_t es = kernels::DTypeSize(dtype_);
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Bytes(name, shape, dtype_, slice));
  if (bytes.size() != static_cast<size_t>(rows.real()) * cols.real() * es) {
    return absl::InternalError(absl::StrCat(name, ": the slice holds ", bytes.size() / es,
                                            " values, the padding expects ",
                                            int64_t{rows.real()} * cols.real()));
  }
  if (!rows.padded() && !cols.padded()) return bytes;
  return PadMatrix(bytes, es, rows, cols);
}

absl::StatusOr<WeightTensor> WeightLoader::PaddedVector(const std::string& name,
                                                        const PaddedAxis& axis) const {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                   PaddedBytes(name, {axis.real()}, TensorSlice{}, PaddedAxis::Plain(1), axis));
  return Upload(bytes, dtype_, axis.stored());
}

absl::StatusOr<LinearWeight> WeightLoader::PaddedLinear(const std::string& name, int out, int in,
                                                        const TensorSlice& slice,
                                                        const PaddedAxis& rows,
                                                        const PaddedAxis& cols, bool bias) const {
  if (slice.whole() && !rows.padded() && !cols.padded()) return Linear(name, out, in, bias);
  LinearWeight w;
  w.out = rows.stored();
  w.in = cols.stored();
  ASSIGN_OR_RETURN(std::vector<uint8_t> weight,
                   PaddedBytes(name + ".weight", {out, in}, slice, rows, cols));
  ASSIGN_OR_RETURN(w.weight, Upload(weight, dtype_, int64_t{w.out} * w.in));
  if (bias) {
    const TensorSlice bias_rows{slice.row_begin, slice.row_count, 0, -1};
    ASSIGN_OR_RETURN(std::vector<uint8_t> b,
                     PaddedBytes(name + ".bias", {out}, bias_rows, rows, PaddedAxis::Plain(1)));
    ASSIGN_OR_RETURN(w.bias, Upload(b, dtype_, w.out));
  }
  return w;
}

}  // namespace mlaserve::model
