// Read-only access to safetensors checkpoints through mmap.
//
// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length
// N, N bytes of JSON {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets":
// [begin, end]}}, then the data section; offsets are relative to its start.
//
// Everything is validated when a file is opened, so a TensorView handed out later always lies
// inside the mapping and holds exactly numel * dtype-size bytes:
//   * a file shorter than its header says (header length, or tensor data past the end) is
//     DATA_LOSS (a truncated download);
//   * malformed content (bad JSON, unknown dtype, offsets out of order, overlapping, or not
//     matching shape x dtype size) is INVALID_ARGUMENT;
// and every message names the file and, where there is one, the tensor.
//
// Lifetime and threads: a TensorView points into the mapping of the SafetensorsFile (or
// SafetensorsCheckpoint) that returned it and is valid while that object lives. All const
// methods may be called from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"

namespace mlaserve::model {

struct TensorView {
  std::string name;
  kernels::DType dtype = kernels::DType::kF32;
  std::vector<int64_t> shape;     // row-major; empty for a scalar
  const uint8_t* data = nullptr;  // no alignment guarantee: read with memcpy
  size_t bytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// "[64, 128]"
std::string ShapeString(const std::vector<int64_t>& shape);

// The safetensors dtype names mlaserve reads: BF16, F16, F32, F8_E4M3 (floating point),
// I32, I64, U8 (raw). Others are INVALID_ARGUMENT.
absl::StatusOr<kernels::DType> ParseSafetensorsDType(std::string_view name);

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  bool Has(std::string_view name) const;
  // NOT_FOUND naming the tensor and the file when absent.
  absl::StatusOr<TensorView> Get(std::string_view name) const;
  std::vector<std::string> TensorNames() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    kernels::DType dtype;
    std::vector<int64_t> shape;
    size_t begin;  // into the data section
    size_t bytes;
  };
  SafetensorsFile() = default;
  absl::Status ParseHeader(std::string_view header, size_t data_size);

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, std::string> metadata_;
};

// A model directory's weights: model.safetensors.index.json (weight_map: tensor -> shard file)
// when present, else model.safetensors. Shards are opened and validated up front.
class SafetensorsCheckpoint {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& model_dir);

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  size_t num_files() const { return files_.size(); }
  bool Has(std::string_view name) const;
  // NOT_FOUND when absent. The message names the tensor and the checkpoint; when sharded, also
  // the shard the index assigns it to (if the index lists it but the shard lacks it), or else
  // the shard holding its nearest neighbours (e.g. the rest of its layer).
  absl::StatusOr<TensorView> Get(std::string_view name) const;
  // The names starting with `prefix` (every name by default), sorted; the cost is that of the
  // names returned, not of the checkpoint's.
  std::vector<std::string> TensorNames(std::string_view prefix = {}) const;

 private:
  SafetensorsCheckpoint() = default;

  std::string dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // tensor name -> index into files_ (for a single file, every tensor maps to 0).
  std::map<std::string, size_t, std::less<>> where_;
};

}  // namespace mlaserve::model
