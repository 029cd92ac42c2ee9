// The RoPE fields of config.json (see config.h), as transformers 5.17 reads them
// (configuration_utils' convert_rope_params_to_dict / standardize_rope_params, the
// modeling_rope_utils init functions, and the modeling files' yarn_apply_mscale).
//
// Spellings: legacy `rope_theta` + `rope_scaling {type, ...}` (DeepSeek's published configs) or
// transformers-5 `rope_parameters {rope_type, rope_theta, ...}`; both end in one RopeConfig.
// Types served: default, linear, dynamic, yarn, llama3. longrope and proportional are refused:
// longrope switches its frequencies by the batch's longest sequence, which a server mixing
// sequences cannot reproduce, and transformers' DeepSeek classes do not run proportional.
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"
#include "model/loader/config.h"
#include "model/loader/config_reader.h"

namespace mlaserve::model::config_internal {
namespace {

// yarn_get_mscale of the modeling files.
double YarnMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// Keys of transformers' RopeParameters (plus DeepSeek's mscale pair and truncate). One that the
// type does not read is ignored by HF with a warning, and so here; any other key is refused.
const std::set<std::string_view>& KnownRopeKeys() {
  static const std::set<std::string_view> kKeys = {
      "rope_theta",  "rope_type",         "type",          "partial_rotary_factor",
      "factor",      "original_max_position_embeddings", "attention_factor",
      "beta_fast",   "beta_slow",         "short_factor",  "long_factor",
      "low_freq_factor", "high_freq_factor", "mscale",     "mscale_all_dim",
      "truncate"};
  return kKeys;
}

class RopeParser {
 public:
  RopeParser(FieldReader& root, ModelConfig& c) : r_(root), c_(c) {}

  absl::Status Run() {
    RopeConfig& rope = c_.rope;
    RETURN_IF_ERROR(r_.Double("rope_theta", &rope.theta));
    // Top-level fallbacks HF moves into the dict (the dict's own value wins for the first;
    // the top-level original_max_position_embeddings wins over the dict's, as in
    // standardize_rope_params).
    std::optional<double> top_partial;
    if (r_.Contains("partial_rotary_factor") && !r_.IsNull("partial_rotary_factor")) {
      double p = 1.0;
      RETURN_IF_ERROR(r_.Double("partial_rotary_factor", &p));
      top_partial = p;
    } else {
      r_.Take("partial_rotary_factor");
    }
    std::optional<int> top_original;
    if (r_.Contains("original_max_position_embeddings") &&
        !r_.IsNull("original_max_position_embeddings")) {
      int o = 0;
      RETURN_IF_ERROR(r_.Int("original_max_position_embeddings", &o, 1));
      top_original = o;
    } else {
      r_.Take("original_max_position_embeddings");
    }

    const bool has_legacy = r_.Contains("rope_scaling") && !r_.IsNull("rope_scaling");
    const bool has_params = r_.Contains("rope_parameters") && !r_.IsNull("rope_parameters");
    if (has_legacy && has_params) {
      return absl::InvalidArgumentError(
          "config.json: both rope_scaling and rope_parameters are set; write only one");
    }
    scope_ = has_legacy ? "rope_scaling" : "rope_parameters";
    // Take both: a null rope_scaling or rope_parameters just means default RoPE.
    const Json* legacy_json = r_.Take("rope_scaling");
    const Json* params_json = r_.Take("rope_parameters");
    const Json empty = Json::object();
    const Json* dict_json = has_legacy ? legacy_json : (has_params ? params_json : &empty);
    if (!dict_json->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", scope_,
                                                     " must be an object, got ",
                                                     ShortDump(*dict_json)));
    }
    FieldReader d(*dict_json, scope_);
    std::string rope_type, legacy_type;
    RETURN_IF_ERROR(d.String("rope_type", &rope_type));
    RETURN_IF_ERROR(d.String("type", &legacy_type));
    if (!rope_type.empty() && !legacy_type.empty() && rope_type != legacy_type) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", scope_, ".rope_type '",
                                                     rope_type, "' contradicts ", scope_,
                                                     ".type '", legacy_type, "'"));
    }
    rope.type = !rope_type.empty() ? rope_type : (!legacy_type.empty() ? legacy_type : "default");
    RETURN_IF_ERROR(d.Double("rope_theta", &rope.theta));  // the dict wins, as in HF
    if (!(rope.theta > 0.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: rope_theta must be positive, got ", rope.theta));
    }
    double partial = top_partial.value_or(1.0);
    RETURN_IF_ERROR(d.Double("partial_rotary_factor", &partial));

    if (rope.type == "default") {
      if (top_original.has_value()) {
        AddWarning(c_, absl::StrCat("original_max_position_embeddings ", *top_original,
                                    " is ignored: HF's default RoPE does not read it"));
      }
      // compute_default_rope_parameters of the DeepSeek modeling files rotates all
      // qk_rope_head_dim values whatever partial_rotary_factor says.
      if (partial != 1.0) {
        AddWarning(c_, absl::StrCat("partial_rotary_factor ", partial,
                                    " is ignored: HF's default RoPE for ", c_.model_type_name,
                                    " rotates all qk_rope_head_dim values"));
      }
    } else if (rope.type == "linear" || rope.type == "dynamic" || rope.type == "yarn" ||
               rope.type == "llama3") {
      // These rotate int(head_dim * partial_rotary_factor) values; the DeepSeek attention
      // only runs (and only rotates everything) when that is qk_rope_head_dim.
      const int dim = c_.qk_rope_head_dim;
      if (static_cast<int>(dim * partial) != dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: ", scope_, ".partial_rotary_factor ", partial, " would rotate ",
            static_cast<int>(dim * partial), " of the ", dim,
            " qk_rope_head_dim values; HF's DeepSeek attention cannot run that (use 1)"));
      }
      RETURN_IF_ERROR(ParseFactor(d));
      RETURN_IF_ERROR(d.Double("mscale_all_dim", &rope.mscale_all_dim));
      if (rope.type == "yarn") {
        RETURN_IF_ERROR(ParseYarn(d, top_original));
      } else if (rope.type == "llama3") {
        RETURN_IF_ERROR(ParseLlama3(d, top_original));
      } else if (top_original.has_value()) {
        AddWarning(c_, absl::StrCat("original_max_position_embeddings ", *top_original,
                                    " is ignored: HF's rope type ", rope.type, " does not read it"));
      }
      if (rope.type == "dynamic" && dim <= 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: dynamic RoPE with qk_rope_head_dim ", dim,
            " divides by zero in HF (dim / (dim - 2)); it needs qk_rope_head_dim > 2"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", scope_, " type '", rope.type,
          "' is not supported; expected default, linear, dynamic, yarn or llama3"));
    }
    for (const std::string& key : d.Unused()) {
      if (KnownRopeKeys().count(key) == 0) {
        return absl::InvalidArgumentError(absl::StrCat("config.json: unknown field '", scope_, ".",
                                                       key, "' for rope type ", rope.type));
      }
      AddWarning(c_, absl::StrCat(scope_, ".", key, " is ignored: HF's rope type ", rope.type,
                                  " does not read it"));
    }
    // yarn_apply_mscale: any non-default type with a non-zero mscale_all_dim scales the softmax
    // by mscale(factor, mscale_all_dim)^2.
    c_.softmax_scale = 1.0 / std::sqrt(static_cast<double>(c_.qk_head_dim()));
    if (rope.type != "default" && rope.mscale_all_dim != 0.0) {
      const double m = YarnMscale(rope.factor, rope.mscale_all_dim);
      c_.softmax_scale *= m * m;
    }
    // Both scales reach the kernels as f32 (kernels/rope's table, the attention's softmax):
    // mscale fields beyond its range would make them inf or 0 there.
    const auto finite_f32 = [](double v) {
      return std::isfinite(static_cast<float>(v)) && static_cast<float>(v) != 0.0f;
    };
    if (!finite_f32(c_.softmax_scale)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", scope_, " factor ", rope.factor, " with mscale_all_dim ",
          rope.mscale_all_dim, " gives softmax scale ", c_.softmax_scale,
          ", which is not a finite non-zero float32"));
    }
    if (!finite_f32(rope.attention_scaling)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", scope_, " (factor ", rope.factor, ", mscale ", rope.mscale,
          ", mscale_all_dim ", rope.mscale_all_dim, ", attention_factor ",
          rope.attention_factor.has_value() ? absl::StrCat(*rope.attention_factor) : "unset",
          ") gives attention scaling ", rope.attention_scaling,
          ", which is not a finite non-zero float32"));
    }
    return ParseInterleave();
  }

 private:
  // `factor` must be present (HF's validation raises a KeyError otherwise). Only YaRN takes a
  // null one: _compute_yarn_parameters then uses max_position_embeddings / original.
  absl::Status ParseFactor(FieldReader& d) {
    RopeConfig& rope = c_.rope;
    if (!d.Contains("factor")) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", scope_,
                                                     ".factor is required for rope type ",
                                                     rope.type));
    }
    if (d.IsNull("factor")) {
      d.Take("factor");
      if (rope.type != "yarn") {
        return absl::InvalidArgumentError(absl::StrCat("config.json: ", scope_,
                                                       ".factor is null; rope type ", rope.type,
                                                       " needs a number"));
      }
      factor_from_lengths_ = true;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(d.Double("factor", &rope.factor));
    if (!(rope.factor > 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", scope_,
                                                     ".factor must be positive, got ",
                                                     rope.factor));
    }
    return absl::OkStatus();
  }

  // original_max_position_embeddings of yarn / llama3: a top-level value wins, then the
  // dict's, then max_position_embeddings (standardize_rope_params).
  absl::Status ParseOriginalMax(FieldReader& d, std::optional<int> top_original) {
    RopeConfig& rope = c_.rope;
    rope.original_max_position_embeddings = c_.max_position_embeddings;
    RETURN_IF_ERROR(
        d.Int("original_max_position_embeddings", &rope.original_max_position_embeddings, 1));
    if (top_original.has_value()) rope.original_max_position_embeddings = *top_original;
    return absl::OkStatus();
  }

  absl::Status ParseYarn(FieldReader& d, std::optional<int> top_original) {
    RopeConfig& rope = c_.rope;
    RETURN_IF_ERROR(ParseOriginalMax(d, top_original));
    if (factor_from_lengths_) {
      if (rope.mscale_all_dim != 0.0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: ", scope_, ".factor is null with mscale_all_dim ", rope.mscale_all_dim,
            "; HF's yarn_apply_mscale needs a factor (it fails on this config)"));
      }
      rope.factor = static_cast<double>(c_.max_position_embeddings) /
                    rope.original_max_position_embeddings;
    }
    // HF reads `get("beta_fast") or 32`: zero and null mean the default.
    RETURN_IF_ERROR(d.Double("beta_fast", &rope.beta_fast));
    RETURN_IF_ERROR(d.Double("beta_slow", &rope.beta_slow));
    if (rope.beta_fast == 0.0) rope.beta_fast = 32.0;
    if (rope.beta_slow == 0.0) rope.beta_slow = 1.0;
    const bool has_mscale = d.Contains("mscale") && !d.IsNull("mscale");
    RETURN_IF_ERROR(d.Double("mscale", &rope.mscale));
    // HF reads `rope_parameters.get("truncate", True)` and tests it for truth: null (None)
    // keeps the correction range fractional, as false does.
    if (d.IsNull("truncate")) {
      AddWarning(c_, absl::StrCat(scope_, ".truncate null is read as false, as HF's YaRN does "
                                          "(the correction range is not rounded)"));
    }
    RETURN_IF_ERROR(d.TruthBool("truncate", &rope.truncate));
    if (d.Contains("attention_factor") && !d.IsNull("attention_factor")) {
      double af = 0.0;
      RETURN_IF_ERROR(d.Double("attention_factor", &af));
      if (!(af > 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: ", scope_, ".attention_factor must be positive, got ", af));
      }
      rope.attention_factor = af;
      rope.attention_scaling = af;
    } else {
      d.Take("attention_factor");
      if (has_mscale && rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
        rope.attention_scaling =
            YarnMscale(rope.factor, rope.mscale) / YarnMscale(rope.factor, rope.mscale_all_dim);
      } else {
        rope.attention_scaling = YarnMscale(rope.factor, 1.0);
      }
    }
    return absl::OkStatus();
  }

  absl::Status ParseLlama3(FieldReader& d, std::optional<int> top_original) {
    RopeConfig& rope = c_.rope;
    for (const char* key : {"low_freq_factor", "high_freq_factor"}) {
      if (!d.Contains(key) || d.IsNull(key)) {
        return absl::InvalidArgumentError(absl::StrCat("config.json: ", scope_, ".", key,
                                                       " is required for rope type llama3"));
      }
    }
    RETURN_IF_ERROR(d.Double("low_freq_factor", &rope.low_freq_factor));
    RETURN_IF_ERROR(d.Double("high_freq_factor", &rope.high_freq_factor));
    if (!(rope.low_freq_factor > 0.0) || !(rope.high_freq_factor > rope.low_freq_factor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", scope_, ".low_freq_factor ", rope.low_freq_factor,
          " and high_freq_factor ", rope.high_freq_factor,
          " must satisfy 0 < low_freq_factor < high_freq_factor"));
    }
    return ParseOriginalMax(d, top_original);
  }

  // rope_interleave is a V3 field; HF's V2 and V3.2 attention always interleave.
  absl::Status ParseInterleave() {
    if (c_.model_type == ModelType::kDeepseekV3) {
      // DeepseekV3Config types it `bool | None` and the attention tests it for truth
      // (`if self.config.rope_interleave:`), so null runs the half-split form, as false does.
      if (r_.IsNull("rope_interleave")) {
        AddWarning(c_, "rope_interleave null is read as false (half-split RoPE), as HF's "
                       "deepseek_v3 attention does");
      }
      return r_.TruthBool("rope_interleave", &c_.rope_interleave);
    }
    bool interleave = true;
    RETURN_IF_ERROR(r_.Bool("rope_interleave", &interleave));
    if (!interleave) {
      AddWarning(c_, absl::StrCat("rope_interleave false is ignored: HF's ", c_.model_type_name,
                                  " attention always uses interleaved RoPE"));
    }
    c_.rope_interleave = true;
    return absl::OkStatus();
  }

  FieldReader& r_;
  ModelConfig& c_;
  std::string scope_;
  bool factor_from_lengths_ = false;
};

}  // namespace

absl::Status ParseRope(FieldReader& r, ModelConfig& c) { return RopeParser(r, c).Run(); }

}  // namespace mlaserve::model::config_internal
