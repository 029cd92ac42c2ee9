// config.json's quantization_config against transformers 5.17's FineGrainedFP8Config
// (model/loader/config.cc, ParseQuantization).
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/loader/config.h"
#include "model/loader/config_test_samples.h"

namespace mlaserve::model {
namespace {

using namespace config_samples;  // NOLINT: the sample configs and helpers

// What FineGrainedFP8Config().to_dict() writes into a config.json that transformers 5.17 saves
// (modules_to_convert and dequantize included): served as DeepSeek's own fp8 config is.
TEST(ModelConfigQuantizationTest, Transformers517SavedFp8ConfigParses) {
  Json j = Json::parse(kV3);
  j["quantization_config"] = Json::parse(R"({"activation_scheme": "dynamic", "dequantize": false,
      "modules_to_convert": null, "modules_to_not_convert": null, "quant_method": "fp8",
      "scale_fmt": "float", "weight_block_size": [128, 128]})");
  ModelConfig c = ParseOk(j.dump());
  EXPECT_TRUE(c.fp8_block_weights);
  EXPECT_EQ(c.weight_block_n, 128);
  EXPECT_EQ(c.weight_block_k, 128);
  // DeepSeek-V3.1's: ue8m0 scales (powers of two, stored as f32); the scheme lowercased as HF does.
  j["quantization_config"]["scale_fmt"] = "ue8m0";
  j["quantization_config"]["activation_scheme"] = "Dynamic";
  j["quantization_config"]["modules_to_convert"] = Json::array();
  j["quantization_config"]["weight_block_size"] = {64, 32};
  c = ParseOk(j.dump());
  EXPECT_EQ(c.weight_block_n, 64);
  EXPECT_EQ(c.weight_block_k, 32);
}

TEST(ModelConfigQuantizationTest, WhatTheLoaderCannotMatchIsRefusedNamingTheValue) {
  // null is per-tensor quantization in HF (one scalar scale), not the [128, 128] default.
  ExpectInvalid(
      ParseEdited(kV3, [](Json& j) { j["quantization_config"]["weight_block_size"] = nullptr; }),
      "weight_block_size is null", "per-tensor");
  ExpectInvalid(
      ParseEdited(kV3, [](Json& j) { j["quantization_config"]["scale_fmt"] = "e8m0"; }),
      "scale_fmt 'e8m0'", "float or ue8m0");
  ExpectInvalid(ParseEdited(kV3,
                            [](Json& j) {
                              j["quantization_config"]["modules_to_convert"] = {"embed_tokens"};
                            }),
                "modules_to_convert is [\"embed_tokens\"]");
  ExpectInvalid(
      ParseEdited(kV3, [](Json& j) { j["quantization_config"]["activation_scheme"] = "static"; }),
      "activation_scheme 'static'");
  ExpectInvalid(
      ParseEdited(kV3, [](Json& j) { j["quantization_config"]["quant_method"] = "compressed-tensors"; }),
      "quant_method 'compressed-tensors'");
}

}  // namespace
}  // namespace mlaserve::model
