#include "model/loader/config.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/loader/config_test_samples.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace config_samples;  // NOLINT: the sample configs and helpers

TEST(ModelConfigTest, DeepSeekV2Lite) {
  const ModelConfig c = ParseOk(kV2Lite);
  EXPECT_EQ(c.model_type, ModelType::kDeepseekV2);
  EXPECT_EQ(c.model_type_name, "deepseek_v2");
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 27);
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.latent_dim(), 576);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);
  EXPECT_DOUBLE_EQ(c.rope.attention_scaling, 1.0);  // mscale == mscale_all_dim
  // 192^-0.5 * (0.1 * 0.707 * ln 40 + 1)^2, computed offline.
  EXPECT_NEAR(c.softmax_scale, 0.11472138679292611, 1e-15);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.routing_method, RoutingMethod::kGreedy);
  EXPECT_EQ(c.scoring, RoutingScoring::kSoftmax);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_FALSE(c.has_correction_bias);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
  ASSERT_EQ(c.layer_is_moe.size(), 27u);
  EXPECT_FALSE(c.layer_is_moe[0]);
  EXPECT_TRUE(c.layer_is_moe[1]);
  EXPECT_TRUE(c.layer_is_moe[26]);
  EXPECT_FALSE(c.has_indexer);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(100001));
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_FALSE(c.fp8_block_weights);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(ModelConfigTest, DeepSeekV3) {
  const ModelConfig c = ParseOk(kV3);
  EXPECT_EQ(c.model_type, ModelType::kDeepseekV3);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_NEAR(c.softmax_scale, 0.1352337788608801, 1e-15);  // 192^-0.5 * (0.1 ln 40 + 1)^2
  EXPECT_DOUBLE_EQ(c.rope.attention_scaling, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_TRUE(c.rope.truncate);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.routing_method, RoutingMethod::kNoauxTc);
  EXPECT_EQ(c.scoring, RoutingScoring::kSigmoid);
  EXPECT_TRUE(c.has_correction_bias);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  ASSERT_EQ(c.layer_is_moe.size(), 61u);
  EXPECT_FALSE(c.layer_is_moe[2]);
  EXPECT_TRUE(c.layer_is_moe[3]);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_TRUE(c.fp8_block_weights);
  EXPECT_EQ(c.weight_block_n, 128);
  EXPECT_EQ(c.weight_block_k, 128);
  EXPECT_TRUE(c.warnings.empty());
}

// Kimi-K2: model_type kimi_k2 is DeepSeek-V3 (same fields, same meaning); the name is kept.
TEST(ModelConfigTest, KimiK2IsDeepSeekV3) {
  const ModelConfig c = ParseOk(kKimiK2);
  EXPECT_EQ(c.model_type, ModelType::kDeepseekV3);
  EXPECT_EQ(c.model_type_name, "kimi_k2");
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.827);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 1.0);  // as written, not the 0/null default of 32
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);
  ASSERT_EQ(c.layer_is_moe.size(), 61u);
  EXPECT_FALSE(c.layer_is_moe[0]);
  EXPECT_TRUE(c.layer_is_moe[1]);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{163585});
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_TRUE(c.fp8_block_weights);
  EXPECT_TRUE(c.warnings.empty());
  // The same file as deepseek_v3 parses to the same model.
  Json as_v3 = Json::parse(kKimiK2);
  as_v3["model_type"] = "deepseek_v3";
  const ModelConfig v3 = ParseOk(as_v3.dump());
  EXPECT_EQ(v3.softmax_scale, c.softmax_scale);
  EXPECT_EQ(v3.rope.attention_scaling, c.rope.attention_scaling);
  // Fields V3 refuses, kimi_k2 refuses (index_* belong to deepseek_v32).
  ExpectInvalid(ParseEdited(kKimiK2, [](Json& j) { j["index_topk"] = 2048; }), "index_topk");
  ExpectInvalid(ParseEdited(kKimiK2, [](Json& j) { j["model_type"] = "kimi_k25"; }), "kimi_k2");
}

TEST(ModelConfigTest, Moonlight) {
  const ModelConfig c = ParseOk(kMoonlight);
  EXPECT_EQ(c.model_type, ModelType::kDeepseekV3);
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(ModelConfigTest, DeepSeekV32Exp) {
  const ModelConfig c = ParseOk(kV32Exp);
  EXPECT_EQ(c.model_type, ModelType::kDeepseekV32);
  EXPECT_TRUE(c.has_indexer);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 2048);
  EXPECT_EQ(c.routing_method, RoutingMethod::kNoauxTc);
  EXPECT_TRUE(c.fp8_block_weights);
  EXPECT_FALSE(c.layer_is_moe[2]);
  EXPECT_TRUE(c.layer_is_moe[60]);
  EXPECT_NEAR(c.softmax_scale, 0.1352337788608801, 1e-15);
}

TEST(ModelConfigTest, Transformers517SavedV32) {
  const ModelConfig c = ParseOk(kTinyV32Saved);
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 64);
  // 24^-0.5 * (0.1 ln 4 + 1)^2
  EXPECT_NEAR(c.softmax_scale, 0.2646422579642267, 1e-15);
  // mlp_layer_types wins over first_k_dense_replace for V3.2, as in HF.
  EXPECT_THAT(c.layer_is_moe, ElementsAre(false, true, false, true));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1, 2));
  EXPECT_EQ(c.index_topk, 8);
  EXPECT_EQ(c.n_group, 2);
  EXPECT_EQ(c.topk_group, 1);
}

TEST(ModelConfigTest, Transformers517SavedV2) {
  const ModelConfig c = ParseOk(kTinyV2Saved);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.attention_scaling, 1.0);
  EXPECT_NEAR(c.softmax_scale, 1.0 / std::sqrt(12.0), 1e-15);
  EXPECT_EQ(c.n_group, 1);  // null -> 1
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_EQ(c.v_head_dim, 6);
  EXPECT_THAT(c.layer_is_moe, ElementsAre(false, true));
}

// A config written by transformers 4.x with all of PretrainedConfig's attributes (what
// transformers 5.17 still loads) parses like the same config saved without them.
TEST(ModelConfigTest, Transformers4FullDumpParses) {
  const ModelConfig c = ParseOk(kTinyV3Transformers451Full);
  EXPECT_EQ(c.model_type, ModelType::kDeepseekV3);
  EXPECT_EQ(c.q_lora_rank, 32);
  EXPECT_EQ(c.n_group, 2);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_THAT(c.layer_is_moe, ElementsAre(false, true));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));
  EXPECT_TRUE(c.warnings.empty());
  // Non-empty pruned_heads is refused (no DeepSeek class can prune heads).
  ExpectInvalid(ParseEdited(kTinyV3Transformers451Full,
                            [](Json& j) { j["pruned_heads"] = Json{{"0", Json::array({1})}}; }),
                "pruned_heads is {\"0\":[1]}");
}

// Absent token ids are HF's class defaults (generate() stops at that EOS); null is none.
TEST(ModelConfigTest, AbsentTokenIdsTakeHfClassDefaults) {
  Json v2 = Json::parse(kV2Lite);
  v2.erase("eos_token_id");
  v2.erase("bos_token_id");
  ModelConfig c = ParseOk(v2.dump());
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_THAT(c.warnings, ElementsAre(HasSubstr("eos_token_id is absent: HF's deepseek_v2 default 2")));
  Json v3 = Json::parse(kV3);
  v3.erase("eos_token_id");
  v3.erase("bos_token_id");
  c = ParseOk(v3.dump());
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));
  EXPECT_EQ(c.bos_token_id, 0);
  v3["eos_token_id"] = nullptr;
  v3["bos_token_id"] = nullptr;
  c = ParseOk(v3.dump());
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.bos_token_id.has_value());
}

TEST(ModelConfigTest, FieldsHfIgnoresBecomeWarnings) {
  Json j = Json::parse(kV2Lite);
  j["norm_topk_prob"] = true;
  j["scoring_func"] = "sigmoid";
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->scoring, RoutingScoring::kSoftmax);
  ASSERT_EQ(c->warnings.size(), 2u);
  EXPECT_THAT(c->warnings[1], HasSubstr("norm_topk_prob"));

  j = Json::parse(kV3);
  j["topk_method"] = "greedy";
  j["rope_interleave"] = false;
  c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->routing_method, RoutingMethod::kNoauxTc);
  EXPECT_FALSE(c->rope_interleave);  // a real V3 field: followed
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_THAT(c->warnings[0], HasSubstr("topk_method 'greedy'"));

  j = Json::parse(kV32Exp);
  j["rope_interleave"] = false;
  c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->rope_interleave);  // V3.2 always interleaves
  EXPECT_EQ(c->warnings.size(), 1u);
}

TEST(ModelConfigTest, KeyValueHeadCountIsTheHeadCount) {
  // transformers' DeepseekV3Config keeps num_key_value_heads at 128 for a 2-head tiny model.
  Json j = Json::parse(kTinyV32Saved);
  j["num_key_value_heads"] = 128;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_key_value_heads, 2);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_THAT(c->warnings[0], HasSubstr("num_key_value_heads 128"));
}

TEST(ModelConfigTest, V2GroupLimitedGreedy) {
  Json j = Json::parse(kV2Lite);
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 8;
  j["topk_group"] = 3;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->routing_method, RoutingMethod::kGroupLimitedGreedy);
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->topk_group, 3);
  j["topk_method"] = "noaux_tc";
  ExpectInvalid(ParseModelConfig(j.dump()).status(), "noaux_tc", "deepseek_v2");
}

TEST(ModelConfigTest, ErrorsNameFieldAndValue) {
  ExpectInvalid(ParseEdited(kV2Lite,
                            [](Json& j) {
                              j["mlp_bias"] = true;
                              j["n_shared_experts"] = 0;
                            }),
                "n_shared_experts 0 with mlp_bias true");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["frobnicate"] = 3; }), "'frobnicate'");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["rope_scaling"]["warp"] = 1; }),
                "rope_scaling.warp");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["quantization_config"]["bits"] = 4; }),
                "quantization_config.bits");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["n_group"] = 7; }), "n_routed_experts 256",
                "n_group 7");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["topk_group"] = 9; }), "topk_group 9",
                "n_group 8");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["num_experts_per_tok"] = 300; }),
                "num_experts_per_tok 300", "n_routed_experts 256");
  ExpectInvalid(ParseEdited(kV3,
                            [](Json& j) {
                              j["num_experts_per_tok"] = 40;
                              j["topk_group"] = 1;
                            }),
                "num_experts_per_tok 40", "32 experts");
  ExpectInvalid(ParseEdited(kV3,
                            [](Json& j) {
                              j["n_group"] = 256;
                              j["topk_group"] = 8;
                            }),
                "1 expert(s) per group");
  ExpectInvalid(ParseEdited(kV32Exp, [](Json& j) { j["q_lora_rank"] = nullptr; }), "q_lora_rank",
                "indexer");
  ExpectInvalid(ParseEdited(kV3,
                            [](Json& j) {
                              j["q_lora_rank"] = nullptr;
                              j["index_topk"] = 8;
                            }),
                "index_topk", "deepseek_v3");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["hidden_size"] = "7168"; }), "'hidden_size'",
                "\"7168\"");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["hidden_size"] = 7168.5; }), "'hidden_size'",
                "7168.5");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["kv_lora_rank"] = -512; }), "'kv_lora_rank'",
                "-512");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["first_k_dense_replace"] = -1; }),
                "'first_k_dense_replace'", "-1");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["tie_word_embeddings"] = 1; }),
                "'tie_word_embeddings'", "true or false");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["vocab_size"] = 5000000000LL; }), "'vocab_size'",
                "5000000000");
  ExpectInvalid(ParseEdited(kV32Exp,
                            [](Json& j) {
                              j["mlp_layer_types"] = {"dense", "sparse"};
                            }),
                "mlp_layer_types has 2 entries", "num_hidden_layers is 61");
  ExpectInvalid(ParseEdited(kTinyV32Saved, [](Json& j) { j["mlp_layer_types"][1] = "moe"; }),
                "mlp_layer_types[1]", "'moe'");
  ExpectInvalid(ParseEdited(kV3,
                            [](Json& j) {
                              j["mlp_layer_types"] = Json::array();
                              for (int i = 0; i < 61; ++i) j["mlp_layer_types"].push_back("sparse");
                            }),
                "mlp_layer_types[0]", "first_k_dense_replace 3");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["model_type"] = "llama"; }), "'llama'");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j.erase("q_lora_rank"); }), "'q_lora_rank'",
                "missing");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j.erase("hidden_size"); }), "'hidden_size'",
                "missing");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["rope_scaling"]["type"] = "longrope"; }),
                "'longrope'");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["rope_scaling"].erase("factor"); }),
                "rope_scaling.factor");
  ExpectInvalid(ParseEdited(kV3,
                            [](Json& j) {
                              j["rope_parameters"] = {{"rope_type", "default"}};
                            }),
                "both rope_scaling and rope_parameters");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["quantization_config"]["fmt"] = "e5m2"; }),
                "'e5m2'");
  ExpectInvalid(
      ParseEdited(kV3, [](Json& j) { j["quantization_config"]["weight_block_size"] = {128}; }),
      "weight_block_size", "[128]");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["eos_token_id"] = "</s>"; }), "eos_token_id",
                "\"</s>\"");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["qk_head_dim"] = 128; }), "qk_head_dim is 128",
                "192");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["hidden_act"] = "gelu_tanh"; }), "'gelu_tanh'");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["num_local_experts"] = 128; }),
                "'n_routed_experts' is 256", "'num_local_experts' is 128");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["scoring_func"] = "relu"; }), "'relu'");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["n_shared_experts"] = nullptr; }),
                "'n_shared_experts' is null");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["first_k_dense_replace"] = nullptr; }),
                "'first_k_dense_replace' is null");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["routed_scaling_factor"] = 1e300; }),
                "routed_scaling_factor 1e+300", "finite float32");
  // Widths the engine derives (and pads) in int: an overflow is refused naming its factors.
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["num_attention_heads"] = 2147483647; }),
                "num_attention_heads 2147483647 x (qk_nope_head_dim 128 + qk_rope_head_dim 64) "
                "is 412316860224", "up to 1073741824");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["kv_lora_rank"] = 2147483647; }),
                "kv_lora_rank 2147483647 + qk_rope_head_dim 64");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["hidden_size"] = 2147483647; }),
                "hidden_size is 2147483647");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["n_shared_experts"] = 2147483647; }),
                "2 x n_shared_experts 2147483647 x moe_intermediate_size 2048");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["moe_intermediate_size"] = 2147483647; }),
                "2 x moe_intermediate_size 2147483647");
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  ExpectInvalid(ParseModelConfig(deep).status(), "(array nested over 64 deep)");
  std::string deep_field = kV3;  // as text: Json::dump() of the edit would itself recurse
  deep_field.insert(deep_field.rfind('}'), ", \"hidden_act\": " + deep);
  ExpectInvalid(ParseModelConfig(deep_field).status(), "'hidden_act'",
                "(array nested over 64 deep)");
  ExpectInvalid(ParseModelConfig("{\"model_type\": ").status(), "not valid JSON");
  ExpectInvalid(ParseModelConfig("[1, 2]").status(), "JSON object");
}

// hidden_act: every name the activation parser knows (kernels/common/activation.h; each name's
// formula is held by kernels_activation_test) reaches the config as that function, swish and
// silu alike; the parametric ones and unknown names are refused naming the value and listing
// what is supported. The default (field absent) is HF's class default, silu.
TEST(ModelConfigTest, HiddenActFollowsHfAct2Fn) {
  using kernels::Activation;
  EXPECT_EQ(kernels::ActivationFromHfName("swish").value(), Activation::kSilu);
  for (const kernels::ActivationHfName& entry : kernels::kActivationHfNames) {
    const std::string name(entry.name);
    const Activation act = entry.act;
    Json j = Json::parse(kV3);
    j["hidden_act"] = name;
    auto c = ParseModelConfig(j.dump());
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_EQ(c->activation, act) << name;
    EXPECT_EQ(c->hidden_act, name);  // kept as written, for messages
    EXPECT_TRUE(c->warnings.empty()) << name;
  }
  EXPECT_EQ(ParseOk(kV3).activation, Activation::kSilu);
  Json absent = Json::parse(kV3);
  absent.erase("hidden_act");
  auto c = ParseModelConfig(absent.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->activation, Activation::kSilu);

  for (const char* bad : {"prelu", "xielu", "gelu_tanh", "GELU", "identity", "swiglu"}) {
    SCOPED_TRACE(bad);
    const absl::Status st = ParseEdited(kV3, [bad](Json& j) { j["hidden_act"] = bad; });
    ExpectInvalid(st, absl::StrCat("hidden_act '", bad, "' is not supported"),
                  "supported: gelu, gelu_10, gelu_fast, gelu_new");
    ExpectInvalid(st, "relu6, sigmoid, silu, sqrtsoftplus, swish, tanh");
  }
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["hidden_act"] = "prelu"; }),
                "learned parameters");
  ExpectInvalid(ParseEdited(kV3, [](Json& j) { j["hidden_act"] = 3; }), "hidden_act");
}

TEST(ModelConfigTest, NoMoeLayersNeedNoExperts) {
  Json j = Json::parse(kTinyV2Saved);
  j["first_k_dense_replace"] = 2;
  for (const char* key : {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"}) {
    j.erase(key);
  }
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->layer_is_moe, ElementsAre(false, false));
  j["first_k_dense_replace"] = 1;
  ExpectInvalid(ParseModelConfig(j.dump()).status(), "'n_routed_experts'", "missing");
}

TEST(ModelConfigTest, LoadModelConfigReadsDirectory) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("mlaserve_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  absl::StatusOr<ModelConfig> missing = LoadModelConfig(dir.string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr((dir / "config.json").string()));

  std::ofstream(dir / "config.json") << kV2Lite;
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 2048);

  EXPECT_THAT(c->eos_token_ids, ElementsAre(100001));

  // generation_config.json's eos_token_id is what HF's generate() stops at.
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 100000,
      "eos_token_id": [100001, 100002], "do_sample": true, "temperature": 0.3})";
  c = LoadModelConfig(dir.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(100001, 100002));
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_THAT(c->warnings[0], HasSubstr("generation_config.json"));
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": true})";
  c = LoadModelConfig(dir.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(100001));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": "eos"})";
  ExpectInvalid(LoadModelConfig(dir.string()).status(), "generation_config.json", "\"eos\"");
  std::filesystem::remove(dir / "generation_config.json");

  std::ofstream(dir / "config.json") << "{\"model_type\": \"deepseek_v3\"}";
  c = LoadModelConfig(dir.string());
  ExpectInvalid(c.status(), (dir / "config.json").string(), "'vocab_size'");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mlaserve::model
