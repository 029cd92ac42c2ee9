#include "model/loader/weight_store.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/loader/safetensors_test_util.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using testing::AsBytes;
using ::testing::HasSubstr;
using testing::SerializeSafetensors;
using testing::TempDirTest;
using testing::TestTensor;
using testing::WriteFile;

// Reference decoders written from the format definitions, independently of numeric.h.

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// e4m3fn: bias 7; normal (8 + m) * 2^(e - 10), subnormal m * 2^-9; 0x7f/0xff are NaN.
float RefFp8(uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  const double mag = e == 0 ? m * std::pow(2.0, -9) : (8 + m) * std::pow(2.0, e - 10);
  return static_cast<float>((v & 0x80) ? -mag : mag);
}

// Nearest bf16 (ties to even), found by comparing the two candidates in double.
uint16_t RefBf16(float f) {
  const uint32_t lo = FloatBits(f) & 0xffff0000u;
  const uint32_t hi = lo + 0x10000u;
  const double dlo = std::fabs(static_cast<double>(BitsFloat(lo)) - f);
  const double dhi = std::fabs(static_cast<double>(BitsFloat(hi)) - f);
  if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) return static_cast<uint16_t>(lo >> 16);
  return static_cast<uint16_t>(hi >> 16);
}

// A random finite fp8 byte (never the NaN encodings).
uint8_t RandomFp8(std::mt19937& rng) {
  for (;;) {
    const uint8_t b = static_cast<uint8_t>(rng());
    if ((b & 0x7f) != 0x7f) return b;
  }
}

// An fp8 weight [rows, cols] with random bytes and random block scales, and the f32 values it
// must dequantize to.
struct Fp8Case {
  std::vector<uint8_t> weight;
  std::vector<float> scale;
  std::vector<int64_t> scale_shape;
  std::vector<float> expected;
};

Fp8Case MakeFp8(int64_t rows, int64_t cols, int bn, int bk, std::mt19937& rng) {
  Fp8Case c;
  const int64_t srows = (rows + bn - 1) / bn, scols = (cols + bk - 1) / bk;
  c.scale_shape = {srows, scols};
  std::uniform_real_distribution<float> dist(0.5f, 2.0f);
  for (int64_t i = 0; i < srows * scols; ++i) {
    c.scale.push_back(std::ldexp(dist(rng), static_cast<int>(rng() % 9) - 12));
  }
  for (int64_t i = 0; i < rows * cols; ++i) c.weight.push_back(RandomFp8(rng));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t col = 0; col < cols; ++col) {
      c.expected.push_back(RefFp8(c.weight[r * cols + col]) * c.scale[(r / bn) * scols + col / bk]);
    }
  }
  return c;
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& part1,
                 const std::string& part2 = "") {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(part1));
  if (!part2.empty()) EXPECT_THAT(std::string(s.message()), HasSubstr(part2));
}

void ExpectBitsEqual(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(FloatBits(got[i]), FloatBits(want[i]))
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

using WeightStoreTest = TempDirTest;

TEST(Fp8ReferenceTest, KnownEncodings) {
  EXPECT_EQ(RefFp8(0x38), 1.0f);
  EXPECT_EQ(RefFp8(0x40), 2.0f);
  EXPECT_EQ(RefFp8(0xc0), -2.0f);
  EXPECT_EQ(RefFp8(0x7e), 448.0f);
  EXPECT_EQ(RefFp8(0x08), 0.015625f);             // smallest normal, 2^-6
  EXPECT_EQ(RefFp8(0x01), 0.001953125f);          // smallest subnormal, 2^-9
  EXPECT_EQ(RefBf16(1.0f + 1.0f / 256), 0x3f80);  // tie -> even
  EXPECT_EQ(RefBf16(1.0f + 3.0f / 256), 0x3f82);  // tie -> even (up)
}

TEST_F(WeightStoreTest, FloatDTypesLoadExactly) {
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const int64_t rows = 5, cols = 7, n = rows * cols;
  std::vector<float> f32(n), from_bf16(n), from_f16(n);
  std::vector<uint16_t> bf16(n), f16(n);
  for (int64_t i = 0; i < n; ++i) {
    f32[i] = dist(rng);
    bf16[i] = static_cast<uint16_t>(FloatBits(f32[i]) >> 16);  // truncation: any bf16 will do
    from_bf16[i] = BitsFloat(static_cast<uint32_t>(bf16[i]) << 16);
    const _Float16 h = static_cast<_Float16>(f32[i] * (i == 0 ? 1e-6f : 1.0f));  // one subnormal
    std::memcpy(&f16[i], &h, 2);
    from_f16[i] = static_cast<float>(h);
  }
  WriteFile(dir_ / "model.safetensors",
            SerializeSafetensors({{"w.f32", "F32", {rows, cols}, AsBytes(f32)},
                                  {"w.bf16", "BF16", {rows, cols}, AsBytes(bf16)},
                                  {"w.f16", "F16", {rows, cols}, AsBytes(f16)},
                                  {"ids", "I64", {2}, AsBytes(std::vector<int64_t>{1, 2})}}));
  auto store = WeightStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<int64_t> shape = {rows, cols};

  auto got = (*store)->LoadF32("w.f32", shape);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitsEqual(*got, f32);
  got = (*store)->LoadF32("w.bf16", {rows, cols});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitsEqual(*got, from_bf16);
  got = (*store)->LoadF32("w.f16", shape);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitsEqual(*got, from_f16);

  auto b = (*store)->LoadBf16("w.bf16", shape);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, bf16);
  b = (*store)->LoadBf16("w.f32", shape);
  ASSERT_TRUE(b.ok()) << b.status();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ((*b)[i], RefBf16(f32[i])) << i;

  ExpectError((*store)->LoadF32("w.f32", {cols, rows}).status(), absl::StatusCode::kInvalidArgument,
              "'w.f32' has shape [5, 7]", "expects [7, 5]");
  ExpectError((*store)->LoadBf16("w.f32", {rows * cols}).status(),
              absl::StatusCode::kInvalidArgument, "'w.f32'", "[35]");
  ExpectError((*store)->LoadF32("ids", {2}).status(), absl::StatusCode::kInvalidArgument, "'ids'",
              "i64");
  ExpectError((*store)->LoadF32("w.nope", shape).status(), absl::StatusCode::kNotFound, "'w.nope'");
  EXPECT_TRUE((*store)->Has("ids"));
  EXPECT_FALSE((*store)->Has("w.nope"));
  auto raw = (*store)->Raw("ids");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->dtype, kernels::DType::kI64);
}

// fp8 weights with partial edge blocks in both dimensions, in a sharded checkpoint where the
// scale lives in another shard than its weight.
TEST_F(WeightStoreTest, Fp8BlockScaledDequantizes) {
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  const Fp8Case big = MakeFp8(300, 200, 128, 128, rng);   // blocks of 128/128/44 x 128/72
  const Fp8Case small = MakeFp8(100, 64, 128, 128, rng);  // one partial block
  const std::string s1 = "model-00001-of-00002.safetensors";
  const std::string s2 = "model-00002-of-00002.safetensors";
  WriteFile(dir_ / s1,
            SerializeSafetensors(
                {{"l.q.weight", "F8_E4M3", {300, 200}, big.weight},
                 {"l.k.weight", "F8_E4M3", {100, 64}, small.weight},
                 {"l.k.weight_scale_inv", "F32", small.scale_shape, AsBytes(small.scale)},
                 {"l.bad.weight", "F8_E4M3", {100, 64}, small.weight},
                 {"l.bad.weight_scale_inv", "F32", {2, 1}, AsBytes(std::vector<float>{1, 2})},
                 {"l.noscale.weight", "F8_E4M3", {4, 4}, std::vector<uint8_t>(16)}}));
  WriteFile(dir_ / s2, SerializeSafetensors(
                           {{"l.q.weight_scale_inv", "F32", big.scale_shape, AsBytes(big.scale)}}));
  nlohmann::json index = {{"weight_map",
                           {{"l.q.weight", s1},
                            {"l.k.weight", s1},
                            {"l.k.weight_scale_inv", s1},
                            {"l.bad.weight", s1},
                            {"l.bad.weight_scale_inv", s1},
                            {"l.noscale.weight", s1},
                            {"l.q.weight_scale_inv", s2}}}};
  WriteFile(dir_ / "model.safetensors.index.json", index.dump());

  auto store = WeightStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status();
  auto got = (*store)->LoadF32("l.q.weight", {300, 200});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitsEqual(*got, big.expected);
  got = (*store)->LoadF32("l.k.weight", {100, 64});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitsEqual(*got, small.expected);

  auto b = (*store)->LoadBf16("l.q.weight", {300, 200});
  ASSERT_TRUE(b.ok()) << b.status();
  for (size_t i = 0; i < big.expected.size(); ++i) {
    ASSERT_EQ((*b)[i], RefBf16(big.expected[i])) << i;
  }

  ExpectError((*store)->LoadF32("l.bad.weight", {100, 64}).status(),
              absl::StatusCode::kInvalidArgument, "'l.bad.weight_scale_inv' has shape [2, 1]",
              "needs [1, 1]");
  ExpectError((*store)->LoadF32("l.noscale.weight", {4, 4}).status(), absl::StatusCode::kNotFound,
              "'l.noscale.weight'", "l.noscale.weight_scale_inv");
  // A missing tensor of a sharded checkpoint names the shard of its neighbours.
  ExpectError((*store)->LoadF32("l.v.weight", {4, 4}).status(), absl::StatusCode::kNotFound,
              "'l.v.weight'", s1);

  // Check: the verdicts of a load, scales included, without reading the data.
  EXPECT_TRUE((*store)->Check("l.q.weight", {300, 200}).ok());
  ExpectError((*store)->Check("l.q.weight", {300, 201}), absl::StatusCode::kInvalidArgument,
              "'l.q.weight' has shape [300, 200]", "expects [300, 201]");
  ExpectError((*store)->Check("l.bad.weight", {100, 64}), absl::StatusCode::kInvalidArgument,
              "'l.bad.weight_scale_inv' has shape [2, 1]", "needs [1, 1]");
  ExpectError((*store)->Check("l.noscale.weight", {4, 4}), absl::StatusCode::kNotFound,
              "'l.noscale.weight'", "l.noscale.weight_scale_inv");
  ExpectError((*store)->Check("l.v.weight", {4, 4}), absl::StatusCode::kNotFound, "'l.v.weight'");
}

// The block size comes from the config's quantization_config.weight_block_size.
TEST_F(WeightStoreTest, Fp8BlockSizeFromConfig) {
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 1);
  const Fp8Case c = MakeFp8(70, 33, 64, 16, rng);  // scales [2, 3]
  WriteFile(dir_ / "model.safetensors",
            SerializeSafetensors({{"w.weight", "F8_E4M3", {70, 33}, c.weight},
                                  {"w.weight_scale_inv", "F32", c.scale_shape, AsBytes(c.scale)},
                                  {"v.weight", "F8_E4M3", {2, 2, 2}, std::vector<uint8_t>(8)}}));
  ModelConfig config;
  config.fp8_block_weights = true;
  config.weight_block_n = 64;
  config.weight_block_k = 16;
  auto store = WeightStore::Open(dir_.string(), config);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->fp8_block().n, 64);
  auto got = (*store)->LoadF32("w.weight", {70, 33});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitsEqual(*got, c.expected);
  ExpectError((*store)->LoadF32("v.weight", {2, 2, 2}).status(), absl::StatusCode::kInvalidArgument,
              "'v.weight'", "2-D");

  // With the default 128x128 blocks the same scale tensor has the wrong shape.
  auto default_store = WeightStore::Open(dir_.string());
  ASSERT_TRUE(default_store.ok());
  ExpectError((*default_store)->LoadF32("w.weight", {70, 33}).status(),
              absl::StatusCode::kInvalidArgument, "[2, 3]", "needs [1, 1]");
}

// A checkpoint written by the reference libraries (tests/fixtures/loader/make_fixture.py:
// huggingface_hub sharding over safetensors.torch) loads to the values torch computed.
TEST(WeightStoreFixtureTest, MatchesHfWrittenCheckpoint) {
  const std::string dir = "tests/fixtures/loader/hf_sharded";
  std::ifstream in(dir + "/expected.json");
  ASSERT_TRUE(in.good()) << "run from the source root; missing " << dir;
  const nlohmann::json expected = nlohmann::json::parse(in);
  auto store = WeightStore::Open(dir, Fp8BlockSize{8, 8});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->checkpoint().sharded());
  EXPECT_EQ((*store)->checkpoint().num_files(), 3u);
  ASSERT_EQ(expected.size(), 4u);
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const std::vector<int64_t> shape = it.value()["shape"].get<std::vector<int64_t>>();
    std::vector<float> want;
    for (const auto& v : it.value()["values"]) want.push_back(v.get<float>());
    auto got = (*store)->LoadF32(it.key(), shape);
    ASSERT_TRUE(got.ok()) << got.status();
    SCOPED_TRACE(it.key());
    ExpectBitsEqual(*got, want);
  }
  auto ids = (*store)->Raw("model.layers.0.ids");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->bytes, 5 * sizeof(int64_t));
  std::vector<int64_t> id_values(5);
  std::memcpy(id_values.data(), ids->data, ids->bytes);
  EXPECT_EQ(id_values, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  auto pos = (*store)->Raw("model.layers.0.pos");
  ASSERT_TRUE(pos.ok()) << pos.status();
  ASSERT_EQ(pos->dtype, kernels::DType::kI32);
  int32_t p[2];
  std::memcpy(p, pos->data, sizeof(p));
  EXPECT_EQ(p[0], 7);
  EXPECT_EQ(p[1], -3);
  auto mask = (*store)->Raw("model.layers.0.mask");
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(std::vector<uint8_t>(mask->data, mask->data + mask->bytes),
            (std::vector<uint8_t>{1, 0, 1}));
}

TEST_F(WeightStoreTest, OpenErrors) {
  ExpectError(WeightStore::Open(dir_.string()).status(), absl::StatusCode::kNotFound,
              "no weights in");
  ExpectError(WeightStore::Open(dir_.string(), Fp8BlockSize{0, 128}).status(),
              absl::StatusCode::kInvalidArgument, "[0, 128]");
}

// A block scale that is not finite or is negative (NaN, +-inf, -0.5; f32 or bf16) is refused
// by every read of its weight and by Check, naming the scale, the value and its index (before:
// NaN or infinite weights, or a negated block, in the model). A zero scale (an all-zero block,
// as a quantizer may write one) is a block of zeros. Every
// scale is checked even where a slice reads other blocks, so all ranks agree.
TEST_F(WeightStoreTest, Fp8ScalesMustBeFiniteAndNotNegative) {
  std::mt19937 rng(5);
  const int64_t rows = 300, cols = 200;
  const Fp8Case fp8 = MakeFp8(rows, cols, 128, 128, rng);  // scales [3, 2]
  const std::vector<int64_t> shape = {rows, cols};
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float value;
    std::string shown;
  };
  for (const Case& c : {Case{std::numeric_limits<float>::quiet_NaN(), "nan"}, Case{inf, "inf"},
                        Case{-inf, "-inf"}, Case{-0.5f, "-0.5"}}) {
    SCOPED_TRACE(c.shown);
    std::vector<float> scale = fp8.scale;
    scale[2 * 2 + 1] = c.value;
    std::vector<uint16_t> bf16_scale(scale.size());
    for (size_t i = 0; i < scale.size(); ++i) {
      bf16_scale[i] = static_cast<uint16_t>(FloatBits(scale[i]) >> 16);  // keeps nan, inf, 0
    }
    WriteFile(dir_ / "model.safetensors",
              SerializeSafetensors({{"w.weight", "F8_E4M3", shape, fp8.weight},
                                    {"w.weight_scale_inv", "F32", fp8.scale_shape, AsBytes(scale)},
                                    {"b.weight", "F8_E4M3", shape, fp8.weight},
                                    {"b.weight_scale_inv", "BF16", fp8.scale_shape,
                                     AsBytes(bf16_scale)}}));
    auto store = WeightStore::Open(dir_.string());
    ASSERT_TRUE(store.ok()) << store.status();
    const std::string message = "scale 'w.weight_scale_inv' holds " + c.shown + " at [2, 1]";
    const std::string why = "block scales of fp8 weight 'w.weight' must be finite and not negative";
    ExpectError((*store)->LoadF32("w.weight", shape).status(), absl::StatusCode::kInvalidArgument,
                message, why);
    ExpectError((*store)->LoadBf16("w.weight", shape).status(), absl::StatusCode::kInvalidArgument,
                message, why);
    ExpectError((*store)->LoadF32("w.weight", shape, TensorSlice::Rows(0, 128)).status(),
                absl::StatusCode::kInvalidArgument, message, why);
    ExpectError((*store)->Check("w.weight", shape), absl::StatusCode::kInvalidArgument, message,
                why);
    ExpectError((*store)->Check("b.weight", shape), absl::StatusCode::kInvalidArgument,
                "scale 'b.weight_scale_inv' holds " + c.shown + " at [2, 1]");
  }
  // A zero scale: block [2, 1] (rows 256.., cols 128..) reads as zeros, the rest as before.
  std::vector<float> scale = fp8.scale;
  scale[2 * 2 + 1] = 0.0f;
  WriteFile(dir_ / "model.safetensors",
            SerializeSafetensors({{"w.weight", "F8_E4M3", shape, fp8.weight},
                                  {"w.weight_scale_inv", "F32", fp8.scale_shape, AsBytes(scale)}}));
  auto store = WeightStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Check("w.weight", shape).ok());
  auto got = (*store)->LoadF32("w.weight", shape);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t col = 0; col < cols; ++col) {
      const float want = r >= 256 && col >= 128 ? 0.0f : fp8.expected[r * cols + col];
      ASSERT_EQ((*got)[r * cols + col], want) << r << ", " << col;
    }
  }
}

// A rank's shard (TensorSlice) of an fp8 tensor spanning several 128x128 blocks, and of a
// bf16 3-D tensor folded to 2-D, equals the same block of the whole tensor bit for bit.
TEST_F(WeightStoreTest, SlicesEqualTheirBlockOfTheWholeTensor) {
  std::mt19937 rng(17);
  const int64_t rows = 300, cols = 200;
  const Fp8Case fp8 = MakeFp8(rows, cols, 128, 128, rng);
  std::vector<uint16_t> bf16(2 * 6 * 5);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = static_cast<uint16_t>(0x3f80 + i);
  WriteFile(dir_ / "model.safetensors",
            SerializeSafetensors({{"w.weight", "F8_E4M3", {rows, cols}, fp8.weight},
                                  {"w.weight_scale_inv", "F32", fp8.scale_shape, AsBytes(fp8.scale)},
                                  {"e", "BF16", {2, 6, 5}, AsBytes(bf16)}}));
  auto store = WeightStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status();

  const std::vector<int64_t> shape = {rows, cols}, e_shape = {2, 6, 5};
  const TensorSlice slice{100, 150, 60, 130};  // crosses block edges in both dimensions
  auto got = (*store)->LoadF32("w.weight", shape, slice);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<float> want;
  for (int64_t r = 100; r < 250; ++r) {
    for (int64_t c = 60; c < 190; ++c) want.push_back(fp8.expected[r * cols + c]);
  }
  ExpectBitsEqual(*got, want);

  // [2, 6, 5] as [12, 5]: rows 7..9 are expert 1's rows 1..3.
  auto e = (*store)->LoadBf16("e", e_shape, TensorSlice{7, 3, 1, 4});
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<uint16_t> want_e;
  for (int r = 7; r < 10; ++r) {
    for (int c = 1; c < 5; ++c) want_e.push_back(bf16[r * 5 + c]);
  }
  EXPECT_EQ(*e, want_e);

  ExpectError((*store)->LoadF32("w.weight", shape, TensorSlice::Rows(250, 51)).status(),
              absl::StatusCode::kInvalidArgument, "'w.weight'", "rows [250, 301)");
}

}  // namespace
}  // namespace mlaserve::model
