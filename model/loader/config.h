// ModelConfig: a DeepSeek config.json (model_type deepseek_v2, deepseek_v3, deepseek_v32) as
// published on the Hugging Face hub, parsed and validated once.
//
// Unknown model_type, fields of the wrong type, and contradictions (e.g. n_routed_experts not
// divisible by n_group, topk_group > n_group, q_lora_rank given for a V3.2 indexer without
// it) are INVALID_ARGUMENT naming the field and its value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/activation.h"

namespace mlaserve::model {

enum class ModelType : uint8_t { kDeepseekV2, kDeepseekV3, kDeepseekV32 };
enum class RoutingScoring : uint8_t { kSoftmax, kSigmoid };
enum class RoutingMethod : uint8_t { kGreedy, kGroupLimitedGreedy, kNoauxTc };

struct RopeConfig {
  std::string type = "default";  // "default", "linear", "dynamic", "yarn" or "llama3"
  double theta = 10000.0;
  // Every type but default: the scaling factor (linear divides the frequencies by it; dynamic
  // NTK rescales theta by it only past max_position_embeddings, which the engine refuses, so
  // its frequencies are the default ones). mscale_all_dim scales the softmax for all of them.
  double factor = 1.0;
  // YaRN and llama3 (rope_scaling / rope_parameters)
  int original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  std::optional<double> attention_factor;  // explicit override, when the config gives one
  // The multiplier HF applies to cos/sin (its `attention_scaling`): 1 for default RoPE; for YaRN
  // attention_factor when given, else mscale(factor, mscale) / mscale(factor, mscale_all_dim)
  // when both are non-zero, else mscale(factor, 1) (modeling_rope_utils._compute_yarn_parameters).
  double attention_scaling = 1.0;
};

struct ModelConfig {
  ModelType model_type = ModelType::kDeepseekV3;
  std::string model_type_name;  // as written in config.json
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int moe_intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q_a_proj, kv_a_proj_with_mqa and o_proj carry biases
  bool mlp_bias = false;        // V2 only: the dense MLP and shared experts carry biases
  std::string hidden_act = "silu";  // as written in config.json (for messages)
  // The MLPs' and experts' act(gate) * up (HF's ACT2FN[hidden_act]; swish is kSilu). Both
  // backends run every one; on CUDA, SiLU is fused into the gate_up products and the others
  // run as a pass of their own after them (kernels/common/activation.h).
  kernels::Activation activation = kernels::Activation::kSilu;

  // MLA
  std::optional<int> q_lora_rank;  // null: q_proj; set: q_a_proj -> q_a_layernorm -> q_b_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }

  RopeConfig rope;
  bool rope_interleave = true;  // V2 and V3.2 always interleave; V3 follows rope_interleave
  // Softmax scale of attention: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 for YaRN.
  double softmax_scale = 0.0;

  // MoE
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  RoutingMethod routing_method = RoutingMethod::kGreedy;
  RoutingScoring scoring = RoutingScoring::kSoftmax;
  bool norm_topk_prob = false;  // as HF applies it (V2's router never normalises)
  double routed_scaling_factor = 1.0;
  bool has_correction_bias = false;  // e_score_correction_bias present (noaux_tc)
  std::vector<bool> layer_is_moe;    // per layer: from first_k_dense_replace / mlp_layer_types

  // V3.2 DSA indexer
  bool has_indexer = false;
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;

  std::vector<int32_t> eos_token_ids;  // generation_config.json's when it sets them
  std::optional<int32_t> bos_token_id;

  // Weight quantization: "fp8" with weight_block_size [128,128] when quantization_config says so.
  bool fp8_block_weights = false;
  int weight_block_n = 128;
  int weight_block_k = 128;

  // Multi-token-prediction layers stored after the main ones (V3 checkpoints carry
  // model.layers.<num_hidden_layers>.*); HF does not run them and neither do we.
  int num_nextn_predict_layers = 0;

  // Fields the config sets that HF ignores in a way that changes their meaning (e.g. V2 with
  // norm_topk_prob true). Each is also logged with spdlog::warn when parsed.
  std::vector<std::string> warnings;
};

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);
// config.json of `model_dir`; eos_token_ids come from generation_config.json instead when that
// file sets eos_token_id (what HF's generate() stops at).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace mlaserve::model
