// WeightStore: a model directory's tensors by name, converted to what the runtime computes in.
//
// The store maps the checkpoint (SafetensorsCheckpoint) and converts on request, so tensors
// are read once, when the engine loads them, and only the mapping stays resident.
//
// fp8 weights (DeepSeek-V3's native format): a 2-D F8_E4M3 tensor `<prefix>.weight` of shape
// [out, in] comes with `<prefix>.weight_scale_inv`, f32 (bf16 is accepted too) of shape
// [ceil(out / block_n), ceil(in / block_k)]; element (r, c) dequantizes to
//   fp8(r, c) * scale_inv(r / block_n, c / block_k),
// edge blocks being partial when out or in is not a multiple of the block. The block size is
// the config's quantization_config.weight_block_size ([128, 128] by default). Every scale must
// be finite and not negative (0: a block of zeros); a weight with any other is refused,
// whichever block a read covers.
//
// Threads: after Open, every method is const and may be called concurrently.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/loader/config.h"
#include "model/loader/safetensors.h"

namespace mlaserve::model {

// A block of a tensor seen as 2-D [rows, cols]: cols is the last dimension and the leading
// dimensions fold into rows (a 1-D tensor [n] is [n, 1]). Counts of -1 mean "to the end".
// A rank's shard of a weight is such a block (docs/parallel.md).
struct TensorSlice {
  int64_t row_begin = 0;
  int64_t row_count = -1;
  int64_t col_begin = 0;
  int64_t col_count = -1;
  static TensorSlice Rows(int64_t begin, int64_t count) { return {begin, count, 0, -1}; }
  static TensorSlice Cols(int64_t begin, int64_t count) { return {0, -1, begin, count}; }
  bool whole() const { return row_begin == 0 && row_count < 0 && col_begin == 0 && col_count < 0; }
};

struct Fp8BlockSize {
  int n = 128;  // rows (output features) per scale
  int k = 128;  // columns (input features) per scale
};

class WeightStore {
 public:
  static absl::StatusOr<std::unique_ptr<WeightStore>> Open(const std::string& model_dir,
                                                           Fp8BlockSize block = {});
  // Block size from config.weight_block_n / weight_block_k.
  static absl::StatusOr<std::unique_ptr<WeightStore>> Open(const std::string& model_dir,
                                                           const ModelConfig& config);

  bool Has(std::string_view name) const { return checkpoint_->Has(name); }
  // The tensor as stored. NOT_FOUND (see SafetensorsCheckpoint::Get) when absent.
  absl::StatusOr<TensorView> Raw(std::string_view name) const { return checkpoint_->Get(name); }
  // Sorted; those starting with `prefix` (SafetensorsCheckpoint::TensorNames).
  std::vector<std::string> TensorNames(std::string_view prefix = {}) const {
    return checkpoint_->TensorNames(prefix);
  }
  const SafetensorsCheckpoint& checkpoint() const { return *checkpoint_; }
  Fp8BlockSize fp8_block() const { return block_; }

  // The tensor as f32, row-major. BF16, F16 and F32 convert exactly; F8_E4M3 is dequantized
  // with its block scales. The stored shape must equal `expected_shape`, else
  // INVALID_ARGUMENT naming the tensor and both shapes; integer dtypes are INVALID_ARGUMENT.
  absl::StatusOr<std::vector<float>> LoadF32(std::string_view name,
                                             std::span<const int64_t> expected_shape) const;
  absl::StatusOr<std::vector<float>> LoadF32(std::string_view name,
                                             std::initializer_list<int64_t> expected_shape) const {
    return LoadF32(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()));
  }

  // Only `slice` of the tensor (the shape check is on the whole tensor), row-major
  // [row_count, col_count]; only the slice's bytes are read from the checkpoint, and fp8
  // blocks are dequantized with the scales of their position in the whole tensor.
  // INVALID_ARGUMENT naming the tensor when the slice is outside it.
  absl::StatusOr<std::vector<float>> LoadF32(std::string_view name,
                                             std::span<const int64_t> expected_shape,
                                             const TensorSlice& slice) const;

  // The tensor as bf16 bits (for the GPU backend): BF16 is copied, F16/F32 are rounded to
  // nearest even, F8_E4M3 is dequantized in f32 and then rounded.
  absl::StatusOr<std::vector<uint16_t>> LoadBf16(std::string_view name,
                                                 std::span<const int64_t> expected_shape) const;
  absl::StatusOr<std::vector<uint16_t>> LoadBf16(
      std::string_view name, std::initializer_list<int64_t> expected_shape) const {
    return LoadBf16(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()));
  }

  absl::StatusOr<std::vector<uint16_t>> LoadBf16(std::string_view name,
                                                 std::span<const int64_t> expected_shape,
                                                 const TensorSlice& slice) const;

  // What LoadF32 / LoadBf16 check before reading, without reading or allocating anything: the
  // tensor is present (else NOT_FOUND), has `expected_shape` and a floating-point dtype, and an
  // fp8 tensor has block scales of the shape and dtype it needs, each finite and not negative
  // (else INVALID_ARGUMENT naming the tensor, as those do). For callers that size a buffer from the
  // config and want every tensor that fills it checked first (the routed experts' stack).
  absl::Status Check(std::string_view name, std::span<const int64_t> expected_shape) const;
  absl::Status Check(std::string_view name, std::initializer_list<int64_t> expected_shape) const {
    return Check(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()));
  }

  // The companion scale of an fp8 tensor: "<prefix>.weight" -> "<prefix>.weight_scale_inv".
  static std::string ScaleName(std::string_view weight_name);

 private:
  WeightStore(std::unique_ptr<SafetensorsCheckpoint> checkpoint, Fp8BlockSize block)
      : checkpoint_(std::move(checkpoint)), block_(block) {}

  absl::StatusOr<TensorView> Checked(std::string_view name,
                                     std::span<const int64_t> expected_shape) const;
  // The block scales of the fp8 tensor `weight` as f32, row-major [ceil(rows / block n),
  // ceil(cols / block k)], checked: `weight` 2-D, the scale present, of the shape the block
  // size gives, of dtype f32 or bf16, and every value finite and not negative (NaN or infinite
  // scales poison the weights, a negative one negates a block: a damaged checkpoint; a zero
  // one is a block of zeros, which a quantizer may write for an all-zero block). One scale per
  // 128x128 block, so checking all of them on every read, as the conversion already touches
  // them, costs little.
  absl::StatusOr<std::vector<float>> Fp8Scales(const TensorView& weight) const;
  // Dequantizes rows [r0, r0 + nr) x cols [c0, c0 + nc) of the 2-D fp8 `weight` into out
  // (nr / nc of -1: every row / column).
  absl::Status DequantFp8(const TensorView& weight, int64_t r0, int64_t nr, int64_t c0,
                          int64_t nc, float* out) const;
  // The slice's f32 values (any float dtype).
  absl::StatusOr<std::vector<float>> SliceF32(const TensorView& t, const TensorSlice& s) const;

  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
  Fp8BlockSize block_;
};

}  // namespace mlaserve::model
