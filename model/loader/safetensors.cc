#include "model/loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "model/loader/json_nesting.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, so that a corrupt
// length never makes us parse gigabytes of tensor data as JSON.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::string Dump(const Json& v) {
  if (JsonNestedDeeperThan(v, 64)) return absl::StrCat("(", v.type_name(), " nested over 64 deep)");
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

bool IsNonNegativeInt(const Json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return buffer.str();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<kernels::DType> ParseSafetensorsDType(std::string_view name) {
  using kernels::DType;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F32") return DType::kF32;
  if (name == "F8_E4M3") return DType::kFP8E4M3;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  if (name == "U8") return DType::kU8;
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype '", std::string(name), "' is not supported (BF16, F16, F32, F8_E4M3, I32, I64, U8)"));
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat(path, ": file has ", size, " bytes, fewer than the 8-byte header length"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) {
    return absl::Status(absl::ErrnoToStatusCode(map_err),
                        absl::StrCat("cannot mmap ", path, ": ", std::strerror(map_err)));
  }
  file->map_ = map;
  file->map_size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(map);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", header_len, " exceeds the ",
                                            size - 8,
                                            " bytes after the length field (truncated file?)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header length ", header_len, " exceeds the ", kMaxHeaderBytes, "-byte limit"));
  }
  file->data_ = bytes + 8 + header_len;
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_len);
  RETURN_IF_ERROR(file->ParseHeader(header, size - 8 - header_len));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

absl::Status SafetensorsFile::ParseHeader(std::string_view header, size_t data_size) {
  Json root;
  try {
    root = Json::parse(header.begin(), header.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": header is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": header must be a JSON object, got ", Dump(root)));
  }
  std::vector<std::tuple<size_t, size_t, std::string>> ranges;  // begin, end, name
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": __metadata__ must be an object of strings, got ", Dump(v)));
      }
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(path_, ": __metadata__ value for '",
                                                         m.key(), "' must be a string, got ",
                                                         Dump(m.value())));
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "': ", what));
    };
    if (!v.is_object()) return bad(absl::StrCat("entry must be an object, got ", Dump(v)));
    auto dtype_it = v.find("dtype");
    auto shape_it = v.find("shape");
    auto offsets_it = v.find("data_offsets");
    if (dtype_it == v.end() || !dtype_it->is_string()) return bad("missing or non-string 'dtype'");
    if (shape_it == v.end() || !shape_it->is_array()) return bad("missing or non-list 'shape'");
    if (offsets_it == v.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !IsNonNegativeInt((*offsets_it)[0]) || !IsNonNegativeInt((*offsets_it)[1])) {
      return bad(absl::StrCat("'data_offsets' must be two non-negative integers, got ",
                              offsets_it == v.end() ? "nothing" : Dump(*offsets_it)));
    }
    absl::StatusOr<kernels::DType> dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
    if (!dtype.ok()) return bad(std::string(dtype.status().message()));

    Entry entry;
    entry.dtype = *dtype;
    uint64_t bytes = kernels::DTypeSize(*dtype);
    for (const Json& d : *shape_it) {
      if (!IsNonNegativeInt(d) || d.get<uint64_t>() > (uint64_t{1} << 62)) {
        return bad(absl::StrCat("shape must hold non-negative integers, got ", Dump(*shape_it)));
      }
      const uint64_t dim = d.get<uint64_t>();
      if (__builtin_mul_overflow(bytes, dim, &bytes)) return bad("shape size overflows");
      entry.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    if (end < begin) {
      return bad(absl::StrCat("data_offsets [", begin, ", ", end, "] end before they begin"));
    }
    if (end - begin != bytes) {
      return bad(absl::StrCat("data_offsets [", begin, ", ", end, "] hold ", end - begin,
                              " bytes but shape ", ShapeString(entry.shape), " of ",
                              dtype_it->get<std::string>(), " needs ", bytes));
    }
    if (end > data_size) {
      return absl::DataLossError(absl::StrCat(
          path_, ": tensor '", name, "': data_offsets [", begin, ", ", end,
          "] reach past the end of the data section (", data_size, " bytes; truncated file?)"));
    }
    entry.begin = static_cast<size_t>(begin);
    entry.bytes = static_cast<size_t>(bytes);
    if (bytes > 0) ranges.emplace_back(entry.begin, static_cast<size_t>(end), name);
    entries_.emplace(name, std::move(entry));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [prev_begin, prev_end, prev_name] = ranges[i - 1];
    const auto& [begin, end, name] = ranges[i];
    if (begin < prev_end) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensors '", prev_name, "' [",
                                                     prev_begin, ", ", prev_end, ") and '", name,
                                                     "' [", begin, ", ", end, ") overlap"));
    }
  }
  return absl::OkStatus();
}

bool SafetensorsFile::Has(std::string_view name) const {
  return entries_.find(name) != entries_.end();
}

absl::StatusOr<TensorView> SafetensorsFile::Get(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' is not in ", path_));
  }
  TensorView view;
  view.name = it->first;
  view.dtype = it->second.dtype;
  view.shape = it->second.shape;
  view.data = data_ + it->second.begin;
  view.bytes = it->second.bytes;
  return view;
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsCheckpoint

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& model_dir) {
  std::unique_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
  ckpt->dir_ = model_dir;
  const std::string index_path = model_dir + "/model.safetensors.index.json";
  const std::string single_path = model_dir + "/model.safetensors";
  if (!FileExists(index_path)) {
    if (!FileExists(single_path)) {
      return absl::NotFoundError(absl::StrCat("no weights in ", model_dir,
                                              ": neither model.safetensors.index.json nor "
                                              "model.safetensors exists"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single_path));
    for (const std::string& name : file->TensorNames()) ckpt->where_.emplace(name, 0);
    ckpt->files_.push_back(std::move(file));
    return ckpt;
  }

  ckpt->sharded_ = true;
  ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(index_path));
  Json index;
  try {
    index = Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, " is not valid JSON: ", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": expected an object with a 'weight_map' object"));
  }
  std::map<std::string, size_t> shard_ids;  // shard file name -> index into files_
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry for '",
                                                     it.key(), "' must be a file name, got ",
                                                     Dump(it.value())));
    }
    const std::string shard = it.value().get<std::string>();
    // Shards live in the model directory; refuse paths that would leave it.
    if (shard.empty() || shard[0] == '/' || shard == ".." || absl::StartsWith(shard, "../") ||
        absl::StrContains(shard, "/../")) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry for '",
                                                     it.key(), "' names shard '", shard,
                                                     "' outside the model directory"));
    }
    shard_ids.emplace(shard, 0);
  }
  for (auto& [shard, id] : shard_ids) {
    id = ckpt->files_.size();
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::Open(model_dir + "/" + shard);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat("shard '", shard, "' listed in ", index_path, ": ",
                                       file.status().message()));
    }
    ckpt->files_.push_back(*std::move(file));
  }
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    ckpt->where_.emplace(it.key(), shard_ids.at(it.value().get<std::string>()));
  }
  return ckpt;
}

bool SafetensorsCheckpoint::Has(std::string_view name) const {
  auto it = where_.find(name);
  return it != where_.end() && files_[it->second]->Has(name);
}

absl::StatusOr<TensorView> SafetensorsCheckpoint::Get(std::string_view name) const {
  auto it = where_.find(name);
  if (it != where_.end()) {
    const SafetensorsFile& file = *files_[it->second];
    if (file.Has(name)) return file.Get(name);
    return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' is listed in ", dir_,
                                            "/model.safetensors.index.json for shard ", file.path(),
                                            ", but that shard does not contain it"));
  }
  if (!sharded_) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", std::string(name), "' is not in ", files_[0]->path()));
  }
  // Point at the shard holding the tensor's nearest relatives ("model.layers.5." ...), which is
  // where a converter that dropped it would have had to put it.
  std::string_view prefix = name;
  for (size_t dot = prefix.rfind('.'); dot != std::string_view::npos; dot = prefix.rfind('.')) {
    prefix = prefix.substr(0, dot);
    const std::string with_dot = absl::StrCat(std::string(prefix), ".");
    auto near = where_.lower_bound(with_dot);
    if (near != where_.end() && absl::StartsWith(near->first, with_dot)) {
      return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' is not in ", dir_,
                                              "/model.safetensors.index.json; the other '",
                                              with_dot, "*' tensors are in shard ",
                                              files_[near->second]->path()));
    }
  }
  return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' is not in ", dir_,
                                          "/model.safetensors.index.json (", where_.size(),
                                          " tensors in ", files_.size(), " shards)"));
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames(std::string_view prefix) const {
  std::vector<std::string> names;
  for (auto it = where_.lower_bound(prefix);
       it != where_.end() && it->first.starts_with(prefix); ++it) {
    names.push_back(it->first);
  }
  return names;
}

}  // namespace mlaserve::model
