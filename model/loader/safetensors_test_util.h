// Test helpers: write safetensors files (well-formed or deliberately broken) into a per-test
// temporary directory. Used by safetensors_test.cc, weight_store_test.cc and
// model/deepseek_weights_checks_test.cc only.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model::testing {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "BF16", "F8_E4M3", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// 8-byte little-endian length + header text + data, as the format lays it out.
inline std::string AssembleFile(const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return file + header + data;
}

// A well-formed file: tensors laid out back to back in the given order, the header padded with
// spaces to a multiple of 8 bytes as the reference writer does.
inline std::string SerializeSafetensors(const std::vector<TestTensor>& tensors,
                                        const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (const TestTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  return AssembleFile(text, data);
}

inline void WriteFile(const std::filesystem::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// A fresh directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("mlaserve_") + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& file) const { return (dir_ / file).string(); }

  std::filesystem::path dir_;
};

}  // namespace mlaserve::model::testing
