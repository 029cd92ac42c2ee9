// Sample config.json texts and helpers shared by config_test.cc and config_rope_test.cc.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/loader/config.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model::config_samples {

using Json = nlohmann::json;

// config.json of deepseek-ai/DeepSeek-V2-Lite as published.
constexpr char kV2Lite[] = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV2Config",
               "AutoModel": "modeling_deepseek.DeepseekV2Model",
               "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"},
  "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
  "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
  "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
  "norm_topk_prob": false, "num_attention_heads": 16, "num_experts_per_tok": 6,
  "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": null,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 102400})";

// config.json of deepseek-ai/DeepSeek-V3 (and DeepSeek-R1, identical but for the version).
constexpr char kV3[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
               "AutoModel": "modeling_deepseek.DeepseekV3Model",
               "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280})";

// Kimi-K2-Instruct's config.json as Moonshot publish it (model_type kimi_k2, DeepSeek-V3's
// architecture; YaRN with beta_fast = beta_slow = 1), written down from the published file (the
// hub is out of this machine's reach, so the values were not re-read from it).
constexpr char kKimiK2[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
               "AutoModel": "modeling_deepseek.DeepseekV3Model",
               "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
  "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163585,
  "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 7168,
  "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 131072, "model_type": "kimi_k2", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 384, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 64, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 64, "num_nextn_predict_layers": 0,
  "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid",
  "seq_aux": true, "tie_word_embeddings": false, "topk_group": 1, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.48.3", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 163840})";

// Moonlight-16B-A3B's config.json (model_type deepseek_v3, no q LoRA, no rope scaling), written
// down as kKimiK2.
constexpr char kMoonlight[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
               "AutoModel": "modeling_deepseek.DeepseekV3Model",
               "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
  "vocab_size": 163840, "hidden_size": 2048, "intermediate_size": 11264,
  "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
  "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
  "routed_scaling_factor": 2.446, "kv_lora_rank": 512, "q_lora_rank": null,
  "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc",
  "n_group": 1, "topk_group": 1, "num_experts_per_tok": 6, "moe_layer_freq": 1,
  "first_k_dense_replace": 1, "norm_topk_prob": true, "scoring_func": "sigmoid",
  "aux_loss_alpha": 0.001, "seq_aux": true, "hidden_act": "silu",
  "max_position_embeddings": 8192, "initializer_range": 0.02, "rms_norm_eps": 1e-05,
  "use_cache": true, "pad_token_id": 163839, "bos_token_id": 163584, "eos_token_id": 163585,
  "pretraining_tp": 1, "tie_word_embeddings": false, "rope_theta": 50000.0, "rope_scaling": null,
  "attention_bias": false, "attention_dropout": 0.0, "model_type": "deepseek_v3",
  "torch_dtype": "bfloat16", "transformers_version": "4.46.3"})";

// config.json of deepseek-ai/DeepSeek-V3.2-Exp.
constexpr char kV32Exp[] = R"({
  "architectures": ["DeepseekV32ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
  "hidden_act": "silu", "hidden_size": 7168, "index_head_dim": 128, "index_n_heads": 64,
  "index_topk": 2048, "initializer_range": 0.02, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v32",
  "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.44.2", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280})";

// A tiny deepseek_v32 as transformers 5.17's save_pretrained writes it: rope_parameters (with
// both rope_type and the legacy type), qk_head_dim, head_dim, mlp_layer_types, layer_types.
constexpr char kTinyV32Saved[] = R"({
  "architectures": ["DeepseekV32ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 0, "dtype": "float32", "eos_token_id": [1, 2], "first_k_dense_replace": 1,
  "head_dim": 8, "hidden_act": "silu", "hidden_size": 32, "index_head_dim": 16,
  "index_n_heads": 4, "index_topk": 8, "initializer_range": 0.02, "intermediate_size": 48,
  "kv_lora_rank": 16,
  "layer_types": ["deepseek_sparse_attention", "deepseek_sparse_attention",
                  "deepseek_sparse_attention", "deepseek_sparse_attention"],
  "max_position_embeddings": 256, "mlp_bias": false,
  "mlp_layer_types": ["dense", "sparse", "dense", "sparse"], "model_type": "deepseek_v32",
  "moe_intermediate_size": 16, "n_group": 2, "n_routed_experts": 8, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 2, "num_experts_per_tok": 2,
  "num_hidden_layers": 4, "num_key_value_heads": 2, "pad_token_id": null, "q_lora_rank": 24,
  "qk_head_dim": 24, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-06,
  "rope_parameters": {"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 1.0,
                      "mscale_all_dim": 1.0, "original_max_position_embeddings": 64,
                      "rope_theta": 10000.0, "rope_type": "yarn", "type": "yarn"},
  "routed_scaling_factor": 2.5, "tie_word_embeddings": false, "topk_group": 1,
  "transformers_version": "5.17.0", "use_cache": true, "v_head_dim": 12, "vocab_size": 64})";

// A tiny deepseek_v2 as transformers 5.17 saves it: default RoPE, null q_lora_rank and groups.
constexpr char kTinyV2Saved[] = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 1, "dtype": "bfloat16", "eos_token_id": 2, "first_k_dense_replace": 1,
  "head_dim": 4, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
  "intermediate_size": 48, "kv_lora_rank": 16, "max_position_embeddings": 2048,
  "mlp_bias": false, "model_type": "deepseek_v2", "moe_intermediate_size": 16, "n_group": null,
  "n_routed_experts": 4, "n_shared_experts": 1, "norm_topk_prob": false,
  "num_attention_heads": 2, "num_experts_per_tok": 2, "num_hidden_layers": 2,
  "num_key_value_heads": 2, "pad_token_id": null, "pretraining_tp": 1, "q_lora_rank": null,
  "qk_head_dim": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "routed_scaling_factor": 1.0, "tie_word_embeddings": false, "topk_group": null,
  "topk_method": "greedy", "transformers_version": "5.17.0", "use_cache": true,
  "v_head_dim": 6, "vocab_size": 64})";

// DeepseekV3Config(...).to_dict() of transformers 4.51.3 after a model was built from it
// (_attn_implementation_autoset), as `config.to_json_file(path, use_diff=False)` writes it:
// every PretrainedConfig attribute of transformers 4.x, generate() defaults included.
constexpr char kTinyV3Transformers451Full[] = R"({"_attn_implementation_autoset": true,
  "_name_or_path": "", "add_cross_attention": false, "architectures": null,
  "attention_bias": false, "attention_dropout": 0.0, "bad_words_ids": null,
  "begin_suppress_tokens": null, "bos_token_id": 0, "chunk_size_feed_forward": 0,
  "cross_attention_hidden_size": null, "decoder_start_token_id": null, "diversity_penalty": 0.0,
  "do_sample": false, "early_stopping": false, "encoder_no_repeat_ngram_size": 0,
  "eos_token_id": 1, "exponential_decay_length_penalty": null, "finetuning_task": null,
  "first_k_dense_replace": 1, "forced_bos_token_id": null, "forced_eos_token_id": null,
  "head_dim": 8, "hidden_act": "silu", "hidden_size": 64,
  "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "initializer_range": 0.02,
  "intermediate_size": 128, "is_decoder": false, "is_encoder_decoder": false,
  "kv_lora_rank": 32, "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "length_penalty": 1.0,
  "max_length": 20, "max_position_embeddings": 256, "min_length": 0, "model_type": "deepseek_v3",
  "moe_intermediate_size": 32, "n_group": 2, "n_routed_experts": 4, "n_shared_experts": 1,
  "no_repeat_ngram_size": 0, "norm_topk_prob": true, "num_attention_heads": 2,
  "num_beam_groups": 1, "num_beams": 1, "num_experts_per_tok": 2, "num_hidden_layers": 2,
  "num_key_value_heads": 2, "num_return_sequences": 1, "output_attentions": false,
  "output_hidden_states": false, "output_scores": false, "pad_token_id": null, "prefix": null,
  "pretraining_tp": 1, "problem_type": null, "pruned_heads": {}, "q_lora_rank": 32,
  "qk_head_dim": 24, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
  "remove_invalid_values": false, "repetition_penalty": 1.0, "return_dict": true,
  "return_dict_in_generate": false, "rms_norm_eps": 1e-06, "rope_interleave": true,
  "rope_scaling": null, "rope_theta": 10000.0, "routed_scaling_factor": 2.5,
  "sep_token_id": null, "suppress_tokens": null, "task_specific_params": null,
  "temperature": 1.0, "tf_legacy_loss": false, "tie_encoder_decoder": false,
  "tie_word_embeddings": false, "tokenizer_class": null, "top_k": 50, "top_p": 1.0,
  "topk_group": 1, "torch_dtype": null, "torchscript": false, "transformers_version": "4.51.3",
  "typical_p": 1.0, "use_bfloat16": false, "use_cache": true, "v_head_dim": 16,
  "vocab_size": 512})";

inline ModelConfig ParseOk(const std::string& text) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

// Parses `base` after `edit` and returns the status (expected to be an error).
template <typename Edit>
inline absl::Status ParseEdited(const char* base, Edit edit) {
  Json j = Json::parse(base);
  edit(j);
  return ParseModelConfig(j.dump()).status();
}

inline void ExpectInvalid(const absl::Status& s, const std::string& part1, const std::string& part2 = "") {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(part1));
  if (!part2.empty()) EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(part2));
}

}  // namespace mlaserve::model::config_samples
