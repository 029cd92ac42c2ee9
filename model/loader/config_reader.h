// Internals of the config.json parser (config.cc, config_moe.cc, config_rope.cc,
// config_quantization.cc); not for other users.
//
// FieldReader: typed, strict access to the fields of one JSON object of config.json. It
// remembers which keys were read so the caller can reject the ones nobody read. Errors are
// INVALID_ARGUMENT and name the field with its scope ("rope_scaling.factor") and the value.
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/loader/config.h"
#include "model/loader/json_nesting.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace mlaserve::model::config_internal {

using Json = nlohmann::json;

// The value as JSON text, cut short so messages stay one line.
inline std::string ShortDump(const Json& v) {
  if (JsonNestedDeeperThan(v, 64)) return absl::StrCat("(", v.type_name(), " nested over 64 deep)");
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

class FieldReader {
 public:
  FieldReader(const Json& object, std::string scope) : obj_(object), scope_(std::move(scope)) {}

  const std::string& scope() const { return scope_; }
  std::string Name(const std::string& key) const {
    return scope_.empty() ? key : absl::StrCat(scope_, ".", key);
  }

  bool Contains(const std::string& key) const { return obj_.contains(key); }
  bool IsNull(const std::string& key) const { return Contains(key) && obj_.at(key).is_null(); }
  const Json* Peek(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  // Marks `key` as read; nullptr when absent.
  const Json* Take(const std::string& key) {
    used_.insert(key);
    return Peek(key);
  }

  // Integer fields: absent or null leaves *out unchanged (an error when `required`); values
  // must be integers in [min, INT32_MAX].
  absl::Status Int(const std::string& key, int* out, int64_t min, bool required = false) {
    const Json* v = Take(key);
    if (v == nullptr || v->is_null()) return Missing(key, required);
    if (!v->is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: field '", Name(key),
                                                     "' must be an integer, got ", ShortDump(*v)));
    }
    // Unsigned values above INT64_MAX are rejected before conversion.
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) {
      return OutOfRange(key, *v, min);
    }
    const int64_t x = v->get<int64_t>();
    if (x < min || x > std::numeric_limits<int32_t>::max()) return OutOfRange(key, *v, min);
    *out = static_cast<int>(x);
    return absl::OkStatus();
  }

  // An integer field HF also accepts under another name (attribute_map); both given and
  // different is a contradiction.
  absl::Status AliasedInt(const std::string& key, const std::string& alias, int* out, int64_t min,
                          bool required = false) {
    int a = *out, b = *out;
    const bool has_key = Contains(key) && !IsNull(key);
    const bool has_alias = Contains(alias) && !IsNull(alias);
    absl::Status s = Int(key, &a, min, required && !has_alias);
    if (!s.ok()) return s;
    s = Int(alias, &b, min);
    if (!s.ok()) return s;
    if (has_key && has_alias && a != b) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: '", Name(key), "' is ", a,
                                                     " but its alias '", Name(alias), "' is ", b));
    }
    *out = has_key ? a : b;
    return absl::OkStatus();
  }

  absl::Status Double(const std::string& key, double* out, bool required = false) {
    const Json* v = Take(key);
    if (v == nullptr || v->is_null()) return Missing(key, required);
    if (!v->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: field '", Name(key),
                                                     "' must be a number, got ", ShortDump(*v)));
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const std::string& key, bool* out) {
    const Json* v = Take(key);
    if (v == nullptr || v->is_null()) return absl::OkStatus();
    if (!v->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: field '", Name(key), "' must be true or false, got ", ShortDump(*v)));
    }
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  // A bool HF tests for truth (`if config.key:`): null reads as false (None is falsy), absent
  // leaves *out (the class default).
  absl::Status TruthBool(const std::string& key, bool* out) {
    if (IsNull(key)) *out = false;
    return Bool(key, out);
  }

  absl::Status String(const std::string& key, std::string* out, bool required = false) {
    const Json* v = Take(key);
    if (v == nullptr || v->is_null()) return Missing(key, required);
    if (!v->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: field '", Name(key),
                                                     "' must be a string, got ", ShortDump(*v)));
    }
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

  absl::Status StringList(const std::string& key, std::vector<std::string>* out) {
    const Json* v = Take(key);
    if (v == nullptr || v->is_null()) return absl::OkStatus();
    if (!v->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: field '", Name(key), "' must be a list of strings, got ", ShortDump(*v)));
    }
    out->clear();
    for (const Json& e : *v) {
      if (!e.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: field '", Name(key), "' must be a list of strings, got ", ShortDump(*v)));
      }
      out->push_back(e.get<std::string>());
    }
    return absl::OkStatus();
  }

  // Keys present in the object that nobody read, in key order.
  std::vector<std::string> Unused() const {
    std::vector<std::string> keys;
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (used_.count(it.key()) == 0) keys.push_back(it.key());
    }
    return keys;
  }

 private:
  absl::Status Missing(const std::string& key, bool required) const {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: required field '", Name(key), "' is missing or null"));
  }
  absl::Status OutOfRange(const std::string& key, const Json& v, int64_t min) const {
    return absl::InvalidArgumentError(absl::StrCat("config.json: field '", Name(key), "' is ",
                                                   ShortDump(v), "; expected an integer in [", min,
                                                   ", ", std::numeric_limits<int32_t>::max(), "]"));
  }

  const Json& obj_;
  std::string scope_;
  std::set<std::string> used_;
};

// Records a field HF ignores or reinterprets (ModelConfig::warnings) and logs it.
inline void AddWarning(ModelConfig& config, std::string message) {
  spdlog::warn("config.json: {}", message);
  config.warnings.push_back(std::move(message));
}

// eos_token_id of config.json or generation_config.json (`file`, for messages): an id or a list
// of ids; null or absent gives none.
absl::Status ParseEosTokenIds(const Json* eos, const char* file, std::vector<int32_t>* out);

// config_rope.cc: rope_theta, rope_scaling / rope_parameters, partial_rotary_factor,
// rope_interleave; sets RopeConfig and softmax_scale. Expects model_type and the head dims
// (qk_rope_head_dim, qk_head_dim) and max_position_embeddings already parsed.
absl::Status ParseRope(FieldReader& r, ModelConfig& c);

// config_moe.cc. Both expect model_type and num_hidden_layers already parsed.
// layer_is_moe from first_k_dense_replace / mlp_layer_types.
absl::Status ParseMlpLayers(FieldReader& r, ModelConfig& c);
// Expert counts and the router (routing_method, scoring, groups, normalisation); needs
// layer_is_moe.
absl::Status ParseMoeRouting(FieldReader& r, ModelConfig& c);

// config_quantization.cc: quantization_config (fp8 block scales: fp8_block_weights,
// weight_block_n / weight_block_k); anything HF's FineGrainedFP8Config would read differently
// is refused naming the field and value.
absl::Status ParseQuantization(FieldReader& r, ModelConfig& c);

}  // namespace mlaserve::model::config_internal
