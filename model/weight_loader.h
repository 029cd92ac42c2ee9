// WeightLoader: reads checkpoint tensors through a WeightStore and places them in the engine's
// backend memory, in its storage dtype (f32 on the CPU backend, bf16 on CUDA) unless a tensor
// asks for f32, zero-padded where asked to the widths the engine stores (PaddedAxis:
// model/mla_dims.h for the MLA widths, model/model_widths.h for the hidden state and the MLP
// intermediates). Which tensors a DeepSeek checkpoint has and along which axes each is padded
// is LoadDeepseekWeights' business (deepseek_weights.cc); this class knows tensors, slices and
// padding only. Load time only: every call reads through the host.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "model/deepseek_weights.h"
#include "model/loader/weight_store.h"
#include "model/padded_matrix.h"

namespace mlaserve::model {

class WeightLoader {
 public:
  using Shape = std::vector<int64_t>;

  // `store` outlives the loader.
  WeightLoader(WeightStore& store, kernels::Backend backend)
      : store_(store), backend_(backend), dtype_(StorageDType(backend)) {}

  bool Has(const std::string& name) const { return store_.Has(name); }
  // The checkpoint's tensor names that start with `prefix`, sorted.
  std::vector<std::string> TensorNames(std::string_view prefix) const {
    return store_.TensorNames(prefix);
  }
  kernels::DType dtype() const { return dtype_; }
  kernels::Backend backend() const { return backend_; }

  // The checks of a read (presence, shape, dtype, fp8 scales) without the read
  // (WeightStore::Check): what a caller runs over every tensor of a buffer before sizing it.
  absl::Status Check(const std::string& name, const Shape& shape) const {
    return store_.Check(name, shape);
  }

  // The tensor's host bytes in `dtype` (f32 or bf16), block `slice` of it.
  absl::StatusOr<std::vector<uint8_t>> Bytes(const std::string& name, const Shape& shape,
                                             kernels::DType dtype,
                                             const TensorSlice& slice = {}) const;
  // Host bytes of `numel` elements of `dtype` into a buffer of the backend.
  absl::StatusOr<WeightTensor> Upload(const std::vector<uint8_t>& bytes, kernels::DType dtype,
                                      int64_t numel) const;
  // The whole tensor, in the storage dtype or in `dtype`.
  absl::StatusOr<WeightTensor> Tensor(const std::string& name, const Shape& shape) const;
  absl::StatusOr<WeightTensor> Tensor(const std::string& name, const Shape& shape,
                                      kernels::DType dtype) const;
  // name.weight [out, in], plus name.bias [out] when `bias` (attention_bias).
  absl::StatusOr<LinearWeight> Linear(const std::string& name, int out, int in,
                                      bool bias = false) const;

  // Block `slice` of tensor `name` (`shape`, read as [rows, cols]: [rows.real(), cols.real()])
  // as host bytes of [rows.stored(), cols.stored()] in the storage dtype, zeros in the padding.
  absl::StatusOr<std::vector<uint8_t>> PaddedBytes(const std::string& name, const Shape& shape,
                                                   const TensorSlice& slice, const PaddedAxis& rows,
                                                   const PaddedAxis& cols) const;
  // name [axis.real()] stored as [axis.stored()], zeros past the real values (an RMSNorm weight
  // over the padded hidden state).
  absl::StatusOr<WeightTensor> PaddedVector(const std::string& name, const PaddedAxis& axis) const;
  // A block of name.weight [out, in] -- `slice`, [rows.real(), cols.real()] -- stored as
  // [rows.stored(), cols.stored()] with zero padding, plus name.bias [out] (the slice's rows,
  // padded alike) when `bias`. A rank's shard of a projection is such a block
  // (parallel_layout.h): its heads' output rows (column parallel) or input columns (row
  // parallel), padded head by head, so the padded shards of the ranks are the padded whole
  // matrix's; or its slice of an intermediate size, padded after the slice.
  absl::StatusOr<LinearWeight> PaddedLinear(const std::string& name, int out, int in,
                                            const TensorSlice& slice, const PaddedAxis& rows,
                                            const PaddedAxis& cols, bool bias) const;

 private:
  WeightStore& store_;
  kernels::Backend backend_;
  kernels::DType dtype_;
};

}  // namespace mlaserve::model
