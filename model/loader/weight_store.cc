#include "model/loader/weight_store.h"

#include <array>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/numeric.h"

namespace mlaserve::model {
namespace {

using kernels::DType;

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Every fp8 e4m3 byte decoded once.
const std::array<float, 256>& Fp8Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = kernels::Fp8E4M3ToFloat(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Converts a floating-point (non-fp8) tensor to f32.
void ToF32(const TensorView& t, float* out) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out, t.data, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = kernels::Bf16ToFloat(Load16(t.data + 2 * i));
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = kernels::Fp16ToFloat(Load16(t.data + 2 * i));
      break;
    default:
      break;  // callers reject other dtypes first
  }
}

bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kFP8E4M3;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightStore>> WeightStore::Open(const std::string& model_dir,
                                                               Fp8BlockSize block) {
  if (block.n <= 0 || block.k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 block size must be positive, got [", block.n, ", ", block.k, "]"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> checkpoint,
                   SafetensorsCheckpoint::Open(model_dir));
  return std::unique_ptr<WeightStore>(new WeightStore(std::move(checkpoint), block));
}

absl::StatusOr<std::unique_ptr<WeightStore>> WeightStore::Open(const std::string& model_dir,
                                                               const ModelConfig& config) {
  return Open(model_dir, Fp8BlockSize{config.weight_block_n, config.weight_block_k});
}

std::string WeightStore::ScaleName(std::string_view weight_name) {
  return absl::StrCat(std::string(weight_name), "_scale_inv");
}

absl::StatusOr<TensorView> WeightStore::Checked(std::string_view name,
                                                std::span<const int64_t> expected_shape) const {
  ASSIGN_OR_RETURN(TensorView t, checkpoint_->Get(name));
  const std::vector<int64_t> expected(expected_shape.begin(), expected_shape.end());
  if (t.shape != expected) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", std::string(name), "' has shape ",
                                                   ShapeString(t.shape), "; the model expects ",
                                                   ShapeString(expected)));
  }
  if (!IsFloat(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", std::string(name), "' has dtype ",
                                                   kernels::DTypeName(t.dtype),
                                                   "; weights must be bf16, f16, f32 or fp8_e4m3"));
  }
  return t;
}

absl::StatusOr<std::vector<float>> WeightStore::Fp8Scales(const TensorView& weight) const {
  if (weight.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 tensor '", weight.name, "' has shape ", ShapeString(weight.shape),
                     "; block-scaled fp8 weights must be 2-D [out, in]"));
  }
  const int64_t rows = weight.shape[0], cols = weight.shape[1];
  const std::string scale_name = ScaleName(weight.name);
  absl::StatusOr<TensorView> scale = checkpoint_->Get(scale_name);
  if (!scale.ok()) {
    return absl::Status(scale.status().code(),
                        absl::StrCat("fp8 weight '", weight.name,
                                     "' needs its block scales: ", scale.status().message()));
  }
  const std::vector<int64_t> scale_shape = {CeilDiv(rows, block_.n), CeilDiv(cols, block_.k)};
  if (scale->shape != scale_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale '", scale_name, "' has shape ", ShapeString(scale->shape), "; fp8 weight '",
        weight.name, "' of shape ", ShapeString(weight.shape), " with ", block_.n, "x", block_.k,
        " blocks needs ", ShapeString(scale_shape)));
  }
  if (scale->dtype != DType::kF32 && scale->dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("scale '", scale_name, "' has dtype ",
                                                   kernels::DTypeName(scale->dtype),
                                                   "; expected f32 or bf16"));
  }
  std::vector<float> scales(static_cast<size_t>(scale->numel()));
  ToF32(*scale, scales.data());
  for (size_t i = 0; i < scales.size(); ++i) {
    if (std::isfinite(scales[i]) && scales[i] >= 0) continue;  // 0: an all-zero block
    const int64_t at = static_cast<int64_t>(i);
    return absl::InvalidArgumentError(absl::StrCat(
        "scale '", scale_name, "' holds ", scales[i], " at [", at / scale_shape[1], ", ",
        at % scale_shape[1], "]; the block scales of fp8 weight '", weight.name,
        "' must be finite and not negative"));
  }
  return scales;
}

absl::Status WeightStore::Check(std::string_view name,
                                std::span<const int64_t> expected_shape) const {
  ASSIGN_OR_RETURN(TensorView t, Checked(name, expected_shape));
  if (t.dtype == DType::kFP8E4M3) return Fp8Scales(t).status();
  return absl::OkStatus();
}

absl::Status WeightStore::DequantFp8(const TensorView& weight, int64_t r0, int64_t nr,
                                     int64_t c0, int64_t nc, float* out) const {
  ASSIGN_OR_RETURN(const std::vector<float> scales, Fp8Scales(weight));
  const int64_t rows = weight.shape[0], cols = weight.shape[1];
  if (nr < 0) nr = rows;  // the whole tensor
  if (nc < 0) nc = cols;
  const std::array<float, 256>& table = Fp8Table();
  const int64_t scale_cols = CeilDiv(cols, block_.k);
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* src = weight.data + (r0 + r) * cols;
    const float* scale_row = scales.data() + ((r0 + r) / block_.n) * scale_cols;
    float* dst = out + r * nc;
    for (int64_t c = 0; c < nc; ++c) dst[c] = table[src[c0 + c]] * scale_row[(c0 + c) / block_.k];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> WeightStore::SliceF32(const TensorView& t,
                                                         const TensorSlice& s) const {
  const int64_t cols = t.shape.size() >= 2 ? t.shape.back() : 1;
  const int64_t rows = cols > 0 ? t.numel() / cols : 0;
  const int64_t nr = s.row_count < 0 ? rows - s.row_begin : s.row_count;
  const int64_t nc = s.col_count < 0 ? cols - s.col_begin : s.col_count;
  if (s.row_begin < 0 || s.col_begin < 0 || nr < 0 || nc < 0 || s.row_begin + nr > rows ||
      s.col_begin + nc > cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", t.name, "' (", rows, " x ", cols, " as 2-D) has no slice rows [",
        s.row_begin, ", ", s.row_begin + nr, ") x cols [", s.col_begin, ", ", s.col_begin + nc,
        ")"));
  }
  std::vector<float> out(static_cast<size_t>(nr * nc));
  if (t.dtype == DType::kFP8E4M3) {
    RETURN_IF_ERROR(DequantFp8(t, s.row_begin, nr, s.col_begin, nc, out.data()));
    return out;
  }
  const int64_t es = static_cast<int64_t>(kernels::DTypeSize(t.dtype));
  for (int64_t r = 0; r < nr; ++r) {
    TensorView row = t;
    row.data = t.data + ((s.row_begin + r) * cols + s.col_begin) * es;
    row.shape = {nc};
    row.bytes = static_cast<size_t>(nc * es);
    ToF32(row, out.data() + r * nc);
  }
  return out;
}

absl::StatusOr<std::vector<float>> WeightStore::LoadF32(std::string_view name,
                                                        std::span<const int64_t> expected_shape,
                                                        const TensorSlice& slice) const {
  if (slice.whole()) return LoadF32(name, expected_shape);
  ASSIGN_OR_RETURN(TensorView t, Checked(name, expected_shape));
  return SliceF32(t, slice);
}

absl::StatusOr<std::vector<uint16_t>> WeightStore::LoadBf16(
    std::string_view name, std::span<const int64_t> expected_shape,
    const TensorSlice& slice) const {
  if (slice.whole()) return LoadBf16(name, expected_shape);
  // bf16 is copied exactly through f32 (a bf16 value is an f32 with a zero low half).
  ASSIGN_OR_RETURN(std::vector<float> f32, LoadF32(name, expected_shape, slice));
  std::vector<uint16_t> out(f32.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = kernels::FloatToBf16(f32[i]);
  return out;
}

absl::StatusOr<std::vector<float>> WeightStore::LoadF32(
    std::string_view name, std::span<const int64_t> expected_shape) const {
  ASSIGN_OR_RETURN(TensorView t, Checked(name, expected_shape));
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kFP8E4M3) {
    RETURN_IF_ERROR(DequantFp8(t, 0, -1, 0, -1, out.data()));
  } else {
    ToF32(t, out.data());
  }
  return out;
}

absl::StatusOr<std::vector<uint16_t>> WeightStore::LoadBf16(
    std::string_view name, std::span<const int64_t> expected_shape) const {
  ASSIGN_OR_RETURN(TensorView t, Checked(name, expected_shape));
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kBF16) {
    if (!out.empty()) std::memcpy(out.data(), t.data, t.bytes);
    return out;
  }
  std::vector<float> f32(out.size());
  if (t.dtype == DType::kFP8E4M3) {
    RETURN_IF_ERROR(DequantFp8(t, 0, -1, 0, -1, f32.data()));
  } else {
    ToF32(t, f32.data());
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = kernels::FloatToBf16(f32[i]);
  return out;
}

}  // namespace mlaserve::model
