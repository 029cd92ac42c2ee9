// Parsing of DeepSeek config.json files (see config.h).
//
// The semantics follow Hugging Face transformers 5.17 (configuration_deepseek_v{2,3,32}.py,
// modeling_deepseek_v{2,3,32}.py, modeling_rope_utils.py), not the original DeepSeek remote code:
// where the two differ (routing, rope_interleave, moe_layer_freq) the config records what HF runs
// and adds a warning when the file asks for something HF ignores.
//
// Every key of the file must be consumed by the parser or be on the list of fields that do not
// affect inference; anything else is INVALID_ARGUMENT naming the key, so a new field in a future
// checkpoint is noticed instead of silently dropped.
#include "model/loader/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "common/status.h"
#include "model/loader/config_reader.h"

namespace mlaserve::model {
namespace {

using config_internal::FieldReader;
using config_internal::Json;
using config_internal::ShortDump;

// Keys HF's configs carry that change nothing at inference, accepted and ignored.
// head_dim is here because every DeepSeek config class overwrites it with qk_rope_head_dim.
const std::set<std::string_view>& IgnoredFields() {
  // clang-format off
  static const std::set<std::string_view> kFields = {
      "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "use_cache",
      "initializer_range", "aux_loss_alpha", "seq_aux", "pretraining_tp", "attention_dropout",
      "pad_token_id", "ep_size", "head_dim", "layer_types", "_name_or_path",
      "output_hidden_states", "output_attentions", "return_dict", "chunk_size_feed_forward",
      "is_encoder_decoder", "id2label", "label2id", "problem_type", "num_labels",
      "tokenizer_class",
      // transformers 4.x wrote PretrainedConfig's own attributes into config.json whenever a
      // config was saved with use_diff=False or dumped from to_dict(), and 4.48-4.51 leaked
      // _attn_implementation_autoset into saved models' configs. transformers 5.17 still loads
      // such files; none of these touch the DeepSeek forward pass. (pruned_heads is read by
      // Parser::RefusePrunedHeads.)
      "_attn_implementation_autoset", "_attn_implementation", "attn_implementation",
      "torchscript", "use_bfloat16", "tf_legacy_loss", "is_decoder", "add_cross_attention",
      "cross_attention_hidden_size", "tie_encoder_decoder", "finetuning_task", "prefix",
      "sep_token_id", "decoder_start_token_id", "task_specific_params", "output_scores",
      "return_dict_in_generate",
      // generate() defaults of transformers 4.x configs (HF moves them to the generation
      // config). The server samples as each request says, as it does with
      // generation_config.json's sampling fields.
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
      "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
      "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
      "num_return_sequences", "forced_bos_token_id", "forced_eos_token_id",
      "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
      "begin_suppress_tokens"};
  // clang-format on
  return kFields;
}

class Parser {
 public:
  explicit Parser(const Json& root) : r_(root, "") {}

  absl::StatusOr<ModelConfig> Run() {
    RETURN_IF_ERROR(ParseModelType());
    RETURN_IF_ERROR(RefuseNulls());
    RETURN_IF_ERROR(ParseDims());
    RETURN_IF_ERROR(config_internal::ParseRope(r_, c_));
    RETURN_IF_ERROR(config_internal::ParseMlpLayers(r_, c_));
    RETURN_IF_ERROR(config_internal::ParseMoeRouting(r_, c_));
    RETURN_IF_ERROR(ParseIndexer());
    RETURN_IF_ERROR(CheckMlpWidths());
    RETURN_IF_ERROR(ParseTokens());
    RETURN_IF_ERROR(config_internal::ParseQuantization(r_, c_));
    RETURN_IF_ERROR(RefusePrunedHeads());
    for (const std::string& key : r_.Unused()) {
      if (IgnoredFields().count(key) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("config.json: unknown field '", key, "' (value ", ShortDump(*r_.Peek(key)),
                         ") for model_type ", c_.model_type_name,
                         "; mlaserve does not know whether it changes the model"));
      }
    }
    return std::move(c_);
  }

 private:
  bool v2() const { return c_.model_type == ModelType::kDeepseekV2; }
  bool v32() const { return c_.model_type == ModelType::kDeepseekV32; }

  void Warn(std::string message) { config_internal::AddWarning(c_, std::move(message)); }

  absl::Status ParseModelType() {
    RETURN_IF_ERROR(r_.String("model_type", &c_.model_type_name, /*required=*/true));
    if (c_.model_type_name == "deepseek_v2") {
      c_.model_type = ModelType::kDeepseekV2;
    } else if (c_.model_type_name == "deepseek_v3" || c_.model_type_name == "kimi_k2") {
      // Kimi-K2 is DeepSeek-V3's architecture (DeepseekV3ForCausalLM) under its own model_type;
      // its configuration_deepseek.py is DeepSeek's V3 config class with no field added, so
      // every field means what it means for deepseek_v3 (HF's DeepseekV3Config).
      c_.model_type = ModelType::kDeepseekV3;
    } else if (c_.model_type_name == "deepseek_v32") {
      c_.model_type = ModelType::kDeepseekV32;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: model_type '", c_.model_type_name,
                       "' is not supported; expected deepseek_v2, deepseek_v3, deepseek_v32 or kimi_k2"));
    }
    return absl::OkStatus();
  }

  // Fields HF types as non-optional (its strict config rejects null) or cannot run with null
  // (first_k_dense_replace). The optional readers would take null as "use the default", which
  // would serve a model HF refuses; refuse it here instead.
  absl::Status RefuseNulls() {
    for (const char* key : {"n_shared_experts", "routed_scaling_factor", "max_position_embeddings",
                            "rms_norm_eps", "tie_word_embeddings", "attention_bias", "mlp_bias",
                            "hidden_act", "first_k_dense_replace", "moe_intermediate_size"}) {
      if (r_.IsNull(key)) {
        return absl::InvalidArgumentError(
            absl::StrCat("config.json: field '", key, "' is null; HF's ", c_.model_type_name,
                         " config needs a value (leave the field out for its default)"));
      }
    }
    return absl::OkStatus();
  }

  // transformers 4.x prunes the listed heads at load through the model's _prune_heads, which
  // no DeepSeek class implements: an empty map is the only value a loadable config holds.
  absl::Status RefusePrunedHeads() {
    const Json* heads = r_.Take("pruned_heads");
    if (heads == nullptr || heads->is_null() || (heads->is_object() && heads->empty())) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: pruned_heads is ", ShortDump(*heads),
                     "; pruned attention heads are not supported (HF's DeepSeek models cannot "
                     "prune heads either)"));
  }

  absl::Status ParseDims() {
    RETURN_IF_ERROR(r_.Int("vocab_size", &c_.vocab_size, 1, true));
    RETURN_IF_ERROR(r_.Int("hidden_size", &c_.hidden_size, 1, true));
    RETURN_IF_ERROR(r_.Int("intermediate_size", &c_.intermediate_size, 1, true));
    RETURN_IF_ERROR(r_.Int("num_hidden_layers", &c_.num_hidden_layers, 1, true));
    RETURN_IF_ERROR(r_.Int("num_attention_heads", &c_.num_attention_heads, 1, true));
    RETURN_IF_ERROR(r_.Int("kv_lora_rank", &c_.kv_lora_rank, 1, true));
    RETURN_IF_ERROR(r_.Int("qk_nope_head_dim", &c_.qk_nope_head_dim, 1, true));
    RETURN_IF_ERROR(r_.Int("qk_rope_head_dim", &c_.qk_rope_head_dim, 2, true));
    RETURN_IF_ERROR(r_.Int("v_head_dim", &c_.v_head_dim, 1, true));
    if (c_.qk_rope_head_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: qk_rope_head_dim is ", c_.qk_rope_head_dim, "; RoPE needs an even size"));
    }
    // q_lora_rank must be written out: HF's default when it is absent is 1536, not "no LoRA".
    if (!r_.Contains("q_lora_rank")) {
      return absl::InvalidArgumentError(
          "config.json: required field 'q_lora_rank' is missing (write null for a model whose "
          "queries use a plain q_proj)");
    }
    if (!r_.IsNull("q_lora_rank")) {
      int rank = 0;
      RETURN_IF_ERROR(r_.Int("q_lora_rank", &rank, 1, true));
      c_.q_lora_rank = rank;
    } else {
      r_.Take("q_lora_rank");
    }
    RETURN_IF_ERROR(CheckAttentionWidths());
    // Optional fields take HF's per-model defaults.
    // MLA decompresses the latent into a key and value for every head, so num_key_value_heads
    // has no effect on the math. HF's V3 class default is 128 whatever the head count, and tiny
    // configs often keep it; HF's default (sdpa) path then still runs all heads. Record the
    // effective value and warn.
    int kv_heads = c_.num_attention_heads;
    RETURN_IF_ERROR(r_.Int("num_key_value_heads", &kv_heads, 1));
    c_.num_key_value_heads = c_.num_attention_heads;
    if (kv_heads != c_.num_attention_heads) {
      Warn(absl::StrCat("num_key_value_heads ", kv_heads, " is ignored: MLA gives each of the ",
                        c_.num_attention_heads, " attention heads its own key and value"));
    }
    if (v2() && c_.hidden_size % c_.num_attention_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: hidden_size ", c_.hidden_size, " is not a multiple of num_attention_heads ",
          c_.num_attention_heads, " (DeepseekV2Config rejects this)"));
    }
    int qk_head_dim = c_.qk_head_dim();
    RETURN_IF_ERROR(r_.Int("qk_head_dim", &qk_head_dim, 1));
    if (qk_head_dim != c_.qk_head_dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: qk_head_dim is ", qk_head_dim,
                       " but qk_nope_head_dim + qk_rope_head_dim = ", c_.qk_head_dim()));
    }
    c_.max_position_embeddings = v2() ? 2048 : (v32() ? 163840 : 4096);
    RETURN_IF_ERROR(r_.Int("max_position_embeddings", &c_.max_position_embeddings, 1));
    RETURN_IF_ERROR(r_.Double("rms_norm_eps", &c_.rms_norm_eps));
    if (!(c_.rms_norm_eps >= 0.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: rms_norm_eps must be >= 0, got ", c_.rms_norm_eps));
    }
    RETURN_IF_ERROR(r_.Bool("tie_word_embeddings", &c_.tie_word_embeddings));
    RETURN_IF_ERROR(r_.Bool("attention_bias", &c_.attention_bias));
    // Only HF's V2 MLP reads mlp_bias (dense MLP and shared experts; routed experts have no
    // bias); the V3 and V3.2 MLPs are built without biases whatever it says.
    bool mlp_bias = false;
    RETURN_IF_ERROR(r_.Bool("mlp_bias", &mlp_bias));
    if (v2()) {
      c_.mlp_bias = mlp_bias;
    } else if (mlp_bias) {
      Warn(absl::StrCat("mlp_bias true is ignored: HF's ", c_.model_type_name,
                        " MLPs have no biases"));
    }
    RETURN_IF_ERROR(r_.String("hidden_act", &c_.hidden_act));
    // Any elementwise key of HF's ACT2FN (swish is nn.SiLU); parametric (prelu, xielu) and
    // unknown names are refused naming the value.
    absl::StatusOr<kernels::Activation> act = kernels::ActivationFromHfName(c_.hidden_act);
    if (!act.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", act.status().message()));
    }
    c_.activation = *act;
    int mtp = 0;
    RETURN_IF_ERROR(r_.AliasedInt("num_nextn_predict_layers", "num_mtp_layers", &mtp, 0));
    c_.num_nextn_predict_layers = mtp;
    return absl::OkStatus();
  }

  // The engine holds weight widths in int and pads each up to kMlaDimAlign (model/mla_dims.h,
  // model/model_widths.h); `value` (what `what` multiplies out to) above kMaxWeightWidth
  // would overflow there.
  static absl::Status CheckWidth(const std::string& what, int64_t value) {
    constexpr int64_t kMaxWeightWidth = int64_t{1} << 30;
    if (value <= kMaxWeightWidth) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", what, " is ", value,
                                                   "; mlaserve supports weight widths up to ",
                                                   kMaxWeightWidth));
  }

  absl::Status CheckAttentionWidths() const {
    const int64_t heads = c_.num_attention_heads, nope = c_.qk_nope_head_dim,
                  rope = c_.qk_rope_head_dim, v = c_.v_head_dim;
    RETURN_IF_ERROR(CheckWidth("vocab_size", c_.vocab_size));
    RETURN_IF_ERROR(CheckWidth("hidden_size", c_.hidden_size));
    if (c_.q_lora_rank.has_value()) {
      RETURN_IF_ERROR(CheckWidth("q_lora_rank", *c_.q_lora_rank));
    }
    RETURN_IF_ERROR(CheckWidth(absl::StrCat("kv_lora_rank ", c_.kv_lora_rank,
                                            " + qk_rope_head_dim ", rope),
                               c_.kv_lora_rank + rope));
    RETURN_IF_ERROR(CheckWidth(absl::StrCat("num_attention_heads ", heads,
                                            " x (qk_nope_head_dim ", nope,
                                            " + qk_rope_head_dim ", rope, ")"),
                               heads * (nope + rope)));
    return CheckWidth(absl::StrCat("num_attention_heads ", heads, " x (qk_nope_head_dim ", nope,
                                   " + v_head_dim ", v, ")"),
                      heads * (nope + v));
  }

  // gate_proj and up_proj are stacked into one matrix of twice the intermediate width.
  absl::Status CheckMlpWidths() const {
    const int64_t inter = c_.intermediate_size, moe = c_.moe_intermediate_size;
    RETURN_IF_ERROR(CheckWidth(absl::StrCat("2 x intermediate_size ", inter), 2 * inter));
    RETURN_IF_ERROR(CheckWidth(absl::StrCat("2 x moe_intermediate_size ", moe), 2 * moe));
    RETURN_IF_ERROR(CheckWidth(absl::StrCat("2 x n_shared_experts ", c_.n_shared_experts,
                                            " x moe_intermediate_size ", moe),
                               2 * moe * c_.n_shared_experts));
    return CheckWidth(absl::StrCat("index_n_heads ", c_.index_n_heads, " x index_head_dim ",
                                   c_.index_head_dim),
                      int64_t{c_.index_n_heads} * c_.index_head_dim);
  }

  absl::Status ParseIndexer() {
    if (!v32()) {
      for (const char* key : {"index_n_heads", "index_head_dim", "index_topk"}) {
        if (r_.Contains(key)) {
          return absl::InvalidArgumentError(
              absl::StrCat("config.json: field '", key,
                           "' is only "
                           "meaningful for deepseek_v32, but model_type is ",
                           c_.model_type_name));
        }
      }
      return absl::OkStatus();
    }
    c_.has_indexer = true;
    RETURN_IF_ERROR(r_.Int("index_n_heads", &c_.index_n_heads, 1, true));
    RETURN_IF_ERROR(r_.Int("index_head_dim", &c_.index_head_dim, 1, true));
    c_.index_topk = 2048;
    RETURN_IF_ERROR(r_.Int("index_topk", &c_.index_topk, 1));
    if (!c_.q_lora_rank.has_value()) {
      return absl::InvalidArgumentError(
          "config.json: q_lora_rank is null, but the deepseek_v32 indexer projects the q_lora_rank "
          "query latent (wq_b); it must be set");
    }
    if (c_.index_head_dim < c_.qk_rope_head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: index_head_dim ", c_.index_head_dim, " is smaller than qk_rope_head_dim ",
          c_.qk_rope_head_dim, ", which the indexer rotates"));
    }
    return absl::OkStatus();
  }

  // An absent eos_token_id / bos_token_id is HF's class default (DeepseekV2Config: bos 1,
  // eos 2; V3 and V3.2: bos 0, eos 1), which generate() stops at; only null means none.
  absl::Status ParseTokens() {
    const int default_bos = v2() ? 1 : 0;
    const int default_eos = v2() ? 2 : 1;
    if (!r_.Contains("eos_token_id")) {
      c_.eos_token_ids = {default_eos};
      Warn(absl::StrCat("eos_token_id is absent: HF's ", c_.model_type_name, " default ",
                        default_eos, " is used"));
    } else {
      RETURN_IF_ERROR(config_internal::ParseEosTokenIds(r_.Take("eos_token_id"), "config.json",
                                                        &c_.eos_token_ids));
    }
    if (!r_.Contains("bos_token_id")) {
      c_.bos_token_id = default_bos;
    } else if (!r_.IsNull("bos_token_id")) {
      int bos = 0;
      RETURN_IF_ERROR(r_.Int("bos_token_id", &bos, 0));
      c_.bos_token_id = bos;
    } else {
      r_.Take("bos_token_id");
    }
    return absl::OkStatus();
  }

  FieldReader r_;
  ModelConfig c_;
};

// The file's text; NOT_FOUND when it cannot be opened.
absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return buffer.str();
}

// HF's generate() stops at generation_config.json's eos_token_id when the checkpoint has that
// file (GenerationConfig.from_pretrained), and falls back to config.json's only without it.
absl::Status ApplyGenerationConfig(const std::string& model_dir, ModelConfig& c) {
  const std::string path = model_dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must hold a JSON object, got ", ShortDump(root)));
  }
  auto it = root.find("eos_token_id");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  std::vector<int32_t> eos;
  RETURN_IF_ERROR(config_internal::ParseEosTokenIds(&*it, "generation_config.json", &eos));
  if (eos != c.eos_token_ids) {
    config_internal::AddWarning(
        c, absl::StrCat("generation_config.json's eos_token_id ", ShortDump(*it),
                        " replaces config.json's, as in HF's generate()"));
  }
  c.eos_token_ids = std::move(eos);
  return absl::OkStatus();
}

}  // namespace

namespace config_internal {

absl::Status ParseEosTokenIds(const Json* eos, const char* file, std::vector<int32_t>* out) {
  out->clear();
  if (eos == nullptr || eos->is_null()) return absl::OkStatus();
  auto add = [&](const Json& v) -> absl::Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": eos_token_id must be a token id or a list of them, got ", ShortDump(*eos)));
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
    return absl::OkStatus();
  };
  if (eos->is_array()) {
    for (const Json& v : *eos) RETURN_IF_ERROR(add(v));
    return absl::OkStatus();
  }
  return add(*eos);
}

}  // namespace config_internal

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config.json is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json must hold a JSON object, got ", ShortDump(root)));
  }
  return Parser(root).Run();
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  RETURN_IF_ERROR(ApplyGenerationConfig(model_dir, *config));
  return config;
}

}  // namespace mlaserve::model
