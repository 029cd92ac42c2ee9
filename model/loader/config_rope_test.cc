// config.json's RoPE fields and the fields only some DeepSeek versions read (mlp_bias), against
// what transformers 5.17 computes from them (model/loader/config_rope.cc).
#include <cmath>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/loader/config.h"
#include "model/loader/config_test_samples.h"

namespace mlaserve::model {
namespace {

using ::testing::HasSubstr;
using namespace config_samples;  // NOLINT: the sample configs and helpers

TEST(ModelConfigTest, YarnAttentionScaling) {
  auto parse_rope = [](Json rope) {
    Json j = Json::parse(kV3);
    j["rope_scaling"] = std::move(rope);
    return ParseModelConfig(j.dump());
  };
  // mscale != mscale_all_dim: mscale(40, 0.707) / mscale(40, 1).
  auto c = parse_rope({{"type", "yarn"},
                       {"factor", 40},
                       {"mscale", 0.707},
                       {"mscale_all_dim", 1.0},
                       {"original_max_position_embeddings", 4096}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->rope.attention_scaling, 0.9210423553163399, 1e-14);
  // No mscale: HF falls back to mscale(factor), even with mscale_all_dim set.
  c = parse_rope({{"type", "yarn"},
                  {"factor", 40},
                  {"mscale_all_dim", 1.0},
                  {"original_max_position_embeddings", 4096}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->rope.attention_scaling, 1.3688879454113936, 1e-14);
  EXPECT_NEAR(c->softmax_scale, 0.1352337788608801, 1e-15);
  // No mscale_all_dim: the softmax is not rescaled.
  c = parse_rope({{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->softmax_scale, 1.0 / std::sqrt(192.0), 1e-15);
  // An explicit attention_factor wins; absent original_max_position_embeddings defaults to
  // max_position_embeddings; truncate and betas are read.
  c = parse_rope({{"rope_type", "yarn"},
                  {"factor", 8},
                  {"attention_factor", 0.5},
                  {"truncate", false},
                  {"beta_fast", 16},
                  {"beta_slow", 2}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope.attention_scaling, 0.5);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 163840);
  EXPECT_FALSE(c->rope.truncate);
  EXPECT_DOUBLE_EQ(c->rope.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c->rope.beta_slow, 2.0);
}

// YaRN's scales reach the kernels as f32: values that become inf (or 0) there are refused at
// parse time, naming the fields, instead of failing the first forward pass.
TEST(ModelConfigTest, YarnScalesMustBeFiniteFloat32) {
  auto parse_rope = [](Json rope) {
    Json j = Json::parse(kV3);
    j["rope_scaling"] = std::move(rope);
    return ParseModelConfig(j.dump()).status();
  };
  ExpectInvalid(parse_rope({{"type", "yarn"}, {"factor", 4}, {"mscale_all_dim", 1e300}}),
                "mscale_all_dim 1e+300", "softmax scale inf");
  ExpectInvalid(parse_rope({{"type", "yarn"}, {"factor", 4}, {"attention_factor", 1e308}}),
                "attention_factor 1e+308", "not a finite non-zero float32");
  ExpectInvalid(parse_rope({{"type", "yarn"},
                            {"factor", 4},
                            {"mscale", -1e300},
                            {"mscale_all_dim", 1e-300}}),
                "rope_scaling (factor 4, mscale -1e+300", "attention scaling");
}

// HF's deepseek_v2 greedy router never groups experts: n_group and topk_group are ignored (and
// warned about) rather than reaching the routing kernel, which sizes its arrays by them.
TEST(ModelConfigTest, V2GreedyIgnoresGroups) {
  for (const auto& [n_group, topk_group] : {std::pair{3, 1}, std::pair{1, 2147483647}}) {
    Json j = Json::parse(kV2Lite);
    j["n_group"] = n_group;
    j["topk_group"] = topk_group;
    absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->routing_method, RoutingMethod::kGreedy);
    EXPECT_EQ(c->n_group, 1);
    EXPECT_EQ(c->topk_group, 1);
    EXPECT_THAT(c->warnings, ::testing::Contains(HasSubstr(
                                 absl::StrCat("n_group ", n_group, " and topk_group ", topk_group,
                                              " are ignored"))));
  }
}

// The rope types transformers' DeepSeek classes run, read as HF reads them.
TEST(ModelConfigTest, RopeTypesAsHfReadsThem) {
  auto parse = [](Json rope, const char* base = kTinyV32Saved) {
    Json j = Json::parse(base);
    j["rope_parameters"] = std::move(rope);
    return ParseModelConfig(j.dump());
  };
  // yarn_apply_mscale scales the softmax for every non-default type with mscale_all_dim
  // (transformers 5.17: 0.23340248099017752 for qk_head_dim 24, linear factor 2).
  auto c = parse({{"rope_type", "linear"}, {"factor", 2.0}, {"mscale_all_dim", 1.0}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.type, "linear");
  EXPECT_DOUBLE_EQ(c->rope.factor, 2.0);
  EXPECT_NEAR(c->softmax_scale, 0.23340248099017752, 1e-15);
  c = parse({{"rope_type", "dynamic"}, {"factor", 3.0}, {"rope_theta", 5e5}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.type, "dynamic");
  EXPECT_DOUBLE_EQ(c->rope.theta, 5e5);
  EXPECT_NEAR(c->softmax_scale, 1.0 / std::sqrt(24.0), 1e-15);
  c = parse({{"rope_type", "llama3"},
             {"factor", 8.0},
             {"low_freq_factor", 1.0},
             {"high_freq_factor", 4.0},
             {"original_max_position_embeddings", 32}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 32);
  ExpectInvalid(parse({{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}})
                    .status(),
                "rope_parameters.low_freq_factor");
  ExpectInvalid(parse({{"rope_type", "linear"}}).status(), "rope_parameters.factor", "linear");
  ExpectInvalid(parse({{"rope_type", "longrope"}, {"factor", 2.0}}).status(), "'longrope'");

  // A key HF knows but the type does not read is ignored with a warning; an unknown one is not.
  c = parse({{"rope_type", "default"}, {"factor", 4.0}});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_THAT(c->warnings[0], HasSubstr("rope_parameters.factor is ignored"));
  ExpectInvalid(parse({{"rope_type", "default"}, {"scale", 4.0}}).status(),
                "rope_parameters.scale");

  // YaRN: a null factor is max_position_embeddings / original (256 / 64); a top-level
  // original_max_position_embeddings wins over the dict's (standardize_rope_params).
  c = parse({{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 64}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope.factor, 4.0);
  EXPECT_NEAR(c->rope.attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-15);
  ExpectInvalid(parse({{"rope_type", "yarn"},
                       {"factor", nullptr},
                       {"mscale_all_dim", 1.0},
                       {"original_max_position_embeddings", 64}})
                    .status(),
                "factor is null", "mscale_all_dim");
  Json j = Json::parse(kTinyV32Saved);
  j["original_max_position_embeddings"] = 32;
  c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.original_max_position_embeddings, 32);

  // partial_rotary_factor: the default RoPE ignores it; scaled types cannot run with it.
  j = Json::parse(kTinyV2Saved);
  j["partial_rotary_factor"] = 0.5;
  c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_THAT(c->warnings[0], HasSubstr("partial_rotary_factor 0.5 is ignored"));
  ExpectInvalid(parse({{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}})
                    .status(),
                "partial_rotary_factor 0.5", "rotate 4 of the 8");

  // rope_scaling null (published configs of unscaled models) is default RoPE at rope_theta.
  j = Json::parse(kV2Lite);
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = 50000;
  c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.type, "default");
  EXPECT_DOUBLE_EQ(c->rope.theta, 50000.0);
  EXPECT_NEAR(c->softmax_scale, 1.0 / std::sqrt(192.0), 1e-15);
}

// Null where HF tests the value for truth: DeepseekV3Config keeps rope_interleave None and the
// attention runs `if config.rope_interleave:` (half split); YaRN's `get("truncate", True)` is None
// and the correction range stays fractional. Both are false, not the absent field's true.
TEST(ModelConfigTest, NullRopeInterleaveAndTruncateAreFalseAsInHf) {
  Json j = Json::parse(kV3);
  j["rope_interleave"] = nullptr;
  j["rope_scaling"]["truncate"] = nullptr;
  auto c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->rope_interleave);
  EXPECT_FALSE(c->rope.truncate);
  ASSERT_EQ(c->warnings.size(), 2u);
  EXPECT_THAT(c->warnings[0], HasSubstr("rope_scaling.truncate null is read as false"));
  EXPECT_THAT(c->warnings[1], HasSubstr("rope_interleave null is read as false"));
  // V2 and V3.2 always interleave, whatever the field says.
  j = Json::parse(kTinyV32Saved);
  j["rope_interleave"] = nullptr;
  c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->rope_interleave);
}

// mlp_bias: HF's V2 MLP reads it, the V3 / V3.2 MLPs do not.
TEST(ModelConfigTest, MlpBiasOnlyForV2) {
  Json j = Json::parse(kTinyV2Saved);
  j["mlp_bias"] = true;
  auto c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->mlp_bias);
  EXPECT_TRUE(c->warnings.empty());
  j = Json::parse(kTinyV32Saved);
  j["mlp_bias"] = true;
  c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->mlp_bias);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_THAT(c->warnings[0], HasSubstr("mlp_bias true is ignored"));
}

}  // namespace
}  // namespace mlaserve::model
