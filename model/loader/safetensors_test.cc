#include "model/loader/safetensors.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/loader/safetensors_test_util.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using kernels::DType;
using testing::AsBytes;
using testing::AssembleFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::SerializeSafetensors;
using testing::TempDirTest;
using testing::TestTensor;
using testing::WriteFile;
using Json = nlohmann::json;

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// One tensor of every dtype the reader accepts, plus a scalar and an empty tensor.
std::vector<TestTensor> AllDTypes(std::mt19937& rng) {
  return {
      {"a.bf16", "BF16", {2, 3}, RandomBytes(12, rng)},
      {"b.f16", "F16", {3}, RandomBytes(6, rng)},
      {"c.f32", "F32", {2, 2}, RandomBytes(16, rng)},
      {"d.fp8", "F8_E4M3", {4, 4}, RandomBytes(16, rng)},
      {"e.i32", "I32", {2}, RandomBytes(8, rng)},
      {"f.i64", "I64", {2}, RandomBytes(16, rng)},
      {"g.u8", "U8", {5}, RandomBytes(5, rng)},
      {"h.scalar", "F32", {}, RandomBytes(4, rng)},
      {"i.empty", "BF16", {0, 4}, {}},
  };
}

void ExpectSameTensor(const TensorView& view, const TestTensor& t) {
  EXPECT_EQ(view.name, t.name);
  EXPECT_EQ(kernels::DTypeName(view.dtype), kernels::DTypeName(*ParseSafetensorsDType(t.dtype)));
  EXPECT_EQ(view.shape, t.shape) << t.name;
  ASSERT_EQ(view.bytes, t.bytes.size()) << t.name;
  if (!t.bytes.empty()) EXPECT_EQ(std::memcmp(view.data, t.bytes.data(), view.bytes), 0) << t.name;
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& part1,
                 const std::string& part2 = "") {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(part1));
  if (!part2.empty()) EXPECT_THAT(std::string(s.message()), HasSubstr(part2));
}

using SafetensorsTest = TempDirTest;

TEST_F(SafetensorsTest, SingleFileRoundTripsEveryDType) {
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  const std::vector<TestTensor> tensors = AllDTypes(rng);
  WriteFile(dir_ / "model.safetensors", SerializeSafetensors(tensors, {{"format", "pt"}}));

  auto file = SafetensorsFile::Open(Path("model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  EXPECT_EQ((*file)->TensorNames().size(), tensors.size());
  for (const TestTensor& t : tensors) {
    auto view = (*file)->Get(t.name);
    ASSERT_TRUE(view.ok()) << view.status();
    ExpectSameTensor(*view, t);
  }
  EXPECT_EQ((*file)->Get("h.scalar")->numel(), 1);

  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_FALSE((*ckpt)->sharded());
  EXPECT_TRUE((*ckpt)->Has("d.fp8"));
  EXPECT_FALSE((*ckpt)->Has("z"));
  ExpectSameTensor(*(*ckpt)->Get("d.fp8"), tensors[3]);
  ExpectError((*ckpt)->Get("z.missing").status(), absl::StatusCode::kNotFound, "'z.missing'",
              "model.safetensors");
}

TEST_F(SafetensorsTest, ShardedCheckpointFollowsTheIndex) {
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  const std::vector<TestTensor> all = AllDTypes(rng);
  const std::vector<TestTensor> shard1(all.begin(), all.begin() + 4);
  std::vector<TestTensor> shard2(all.begin() + 4, all.end());
  shard2.push_back({"model.layers.1.mlp.up.weight", "F32", {2}, RandomBytes(8, rng)});
  shard2.push_back({"model.layers.1.mlp.down.weight", "F32", {2}, RandomBytes(8, rng)});
  const std::string name1 = "model-00001-of-00002.safetensors";
  const std::string name2 = "model-00002-of-00002.safetensors";
  WriteFile(dir_ / name1, SerializeSafetensors(shard1));
  WriteFile(dir_ / name2, SerializeSafetensors(shard2));
  Json index = {{"metadata", {{"total_size", 123}}}, {"weight_map", Json::object()}};
  for (const auto& t : shard1) index["weight_map"][t.name] = name1;
  for (const auto& t : shard2) index["weight_map"][t.name] = name2;
  index["weight_map"]["model.layers.1.mlp.gate.weight"] = name1;  // listed, but not in shard 1
  WriteFile(dir_ / "model.safetensors.index.json", index.dump(2));

  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->sharded());
  EXPECT_EQ((*ckpt)->num_files(), 2u);
  for (const auto& t : shard1) ExpectSameTensor(*(*ckpt)->Get(t.name), t);
  for (const auto& t : shard2) ExpectSameTensor(*(*ckpt)->Get(t.name), t);
  EXPECT_EQ((*ckpt)->TensorNames().size(), all.size() + 3);
  // By prefix, sorted, the index's names included.
  EXPECT_EQ((*ckpt)->TensorNames("model.layers.1.mlp."),
            (std::vector<std::string>{"model.layers.1.mlp.down.weight",
                                      "model.layers.1.mlp.gate.weight",
                                      "model.layers.1.mlp.up.weight"}));
  EXPECT_TRUE((*ckpt)->TensorNames("model.layers.2.").empty());

  // Listed in the index but absent from its shard: the shard is named.
  EXPECT_FALSE((*ckpt)->Has("model.layers.1.mlp.gate.weight"));
  ExpectError((*ckpt)->Get("model.layers.1.mlp.gate.weight").status(), absl::StatusCode::kNotFound,
              "'model.layers.1.mlp.gate.weight'", name1);
  // Not listed at all: the shard holding the rest of the layer is named.
  ExpectError((*ckpt)->Get("model.layers.1.mlp.act.scale").status(), absl::StatusCode::kNotFound,
              "'model.layers.1.mlp.act.scale'", "'model.layers.1.mlp.*' tensors are in shard");
  ExpectError((*ckpt)->Get("model.layers.1.mlp.act.scale").status(), absl::StatusCode::kNotFound,
              name2);
  ExpectError((*ckpt)->Get("lm_head.weight").status(), absl::StatusCode::kNotFound,
              "'lm_head.weight'", "2 shards");
}

TEST_F(SafetensorsTest, IndexErrors) {
  WriteFile(dir_ / "model.safetensors.index.json",
            Json({{"weight_map", {{"w", "model-00001-of-00001.safetensors"}}}}).dump());
  ExpectError(SafetensorsCheckpoint::Open(dir_.string()).status(), absl::StatusCode::kNotFound,
              "model-00001-of-00001.safetensors", "model.safetensors.index.json");

  WriteFile(dir_ / "model.safetensors.index.json",
            Json({{"weight_map", {{"w", "../../etc/passwd"}}}}).dump());
  ExpectError(SafetensorsCheckpoint::Open(dir_.string()).status(),
              absl::StatusCode::kInvalidArgument, "outside the model directory");

  WriteFile(dir_ / "model.safetensors.index.json", "{\"weight_map\": ");
  ExpectError(SafetensorsCheckpoint::Open(dir_.string()).status(),
              absl::StatusCode::kInvalidArgument, "model.safetensors.index.json", "not valid JSON");

  WriteFile(dir_ / "model.safetensors.index.json", "{\"metadata\": {}}");
  ExpectError(SafetensorsCheckpoint::Open(dir_.string()).status(),
              absl::StatusCode::kInvalidArgument, "weight_map");

  std::filesystem::remove(dir_ / "model.safetensors.index.json");
  ExpectError(SafetensorsCheckpoint::Open(dir_.string()).status(), absl::StatusCode::kNotFound,
              "no weights in", dir_.string());
}

// Writes `header` (JSON text) + `data` as a file and returns the status of opening it.
class BrokenFileTest : public TempDirTest {
 protected:
  absl::Status OpenRaw(const std::string& header, const std::string& data) {
    WriteFile(dir_ / "broken.safetensors", AssembleFile(header, data));
    return SafetensorsFile::Open(Path("broken.safetensors")).status();
  }
};

TEST_F(BrokenFileTest, TruncatedFileIsDataLoss) {
  std::mt19937 rng(7);
  std::string full = SerializeSafetensors(AllDTypes(rng));
  WriteFile(dir_ / "t.safetensors", full.substr(0, full.size() - 3));
  // The last tensor with data (h.scalar) now reaches past the end.
  ExpectError(SafetensorsFile::Open(Path("t.safetensors")).status(), absl::StatusCode::kDataLoss,
              "t.safetensors", "'h.scalar'");

  WriteFile(dir_ / "t.safetensors", full.substr(0, 100));  // cut inside the header
  ExpectError(SafetensorsFile::Open(Path("t.safetensors")).status(), absl::StatusCode::kDataLoss,
              "t.safetensors", "header length");

  WriteFile(dir_ / "t.safetensors", full.substr(0, 5));
  ExpectError(SafetensorsFile::Open(Path("t.safetensors")).status(), absl::StatusCode::kDataLoss,
              "t.safetensors", "5 bytes");

  ExpectError(SafetensorsFile::Open(Path("absent.safetensors")).status(),
              absl::StatusCode::kNotFound, "absent.safetensors");
}

TEST_F(BrokenFileTest, HeaderLengthBeyondFile) {
  std::string file = AssembleFile("{}", "");
  file[0] = '\xff';
  file[3] = '\x01';
  WriteFile(dir_ / "h.safetensors", file);
  ExpectError(SafetensorsFile::Open(Path("h.safetensors")).status(), absl::StatusCode::kDataLoss,
              "header length 16777471", "exceeds");
}

TEST_F(BrokenFileTest, MalformedHeaders) {
  const std::string data(32, '\0');
  ExpectError(OpenRaw("{\"w\": {\"dtype\": \"F32\"", data), absl::StatusCode::kInvalidArgument,
              "broken.safetensors", "not valid JSON");
  ExpectError(OpenRaw("[1, 2]", data), absl::StatusCode::kInvalidArgument, "JSON object");
  ExpectError(OpenRaw(R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", data),
              absl::StatusCode::kInvalidArgument, "'w'", "'F64'");
  ExpectError(OpenRaw(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", data),
              absl::StatusCode::kInvalidArgument, "'w'", "needs 12");
  ExpectError(OpenRaw(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", data),
              absl::StatusCode::kInvalidArgument, "'w'", "[8, 0]");
  ExpectError(OpenRaw(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", data),
              absl::StatusCode::kInvalidArgument, "'w'", "shape");
  ExpectError(OpenRaw(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", data),
              absl::StatusCode::kInvalidArgument, "'w'", "data_offsets");
  ExpectError(OpenRaw(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", data),
              absl::StatusCode::kInvalidArgument, "'w'", "dtype");
  ExpectError(OpenRaw(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}})", data),
              absl::StatusCode::kDataLoss, "'w'", "[24, 40]");
  ExpectError(OpenRaw(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                         "v": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                      data),
              absl::StatusCode::kInvalidArgument, "'w'", "overlap");
  ExpectError(OpenRaw(R"({"w": {"dtype": "U8", "shape": [4611686018427387904, 4611686018427387904],
                         "data_offsets": [0, 8]}})",
                      data),
              absl::StatusCode::kInvalidArgument, "'w'", "overflow");
  ExpectError(OpenRaw(R"({"__metadata__": {"format": 3}})", data),
              absl::StatusCode::kInvalidArgument, "__metadata__", "'format'");
}

// Deeply nested JSON parses (nlohmann's parser keeps its own stack) but Json::dump() recurses
// per level: messages quoting such a value must not overflow the stack.
TEST_F(BrokenFileTest, DeeplyNestedHeaderValues) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  ExpectError(OpenRaw(deep, ""), absl::StatusCode::kInvalidArgument, "JSON object",
              "(array nested over 64 deep)");
  ExpectError(OpenRaw("{\"w\": " + deep + "}", ""), absl::StatusCode::kInvalidArgument, "'w'",
              "(array nested over 64 deep)");
}

TEST(SafetensorsDTypeTest, Names) {
  EXPECT_EQ(*ParseSafetensorsDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseSafetensorsDType("F8_E4M3"), DType::kFP8E4M3);
  EXPECT_EQ(*ParseSafetensorsDType("I64"), DType::kI64);
  EXPECT_EQ(ParseSafetensorsDType("F8_E5M2").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShapeString({3, 4}), "[3, 4]");
  EXPECT_EQ(ShapeString({}), "[]");
}

}  // namespace
}  // namespace mlaserve::model
