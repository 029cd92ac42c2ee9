#include "common/request_limits.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::common {

std::string IdForMessages(absl::string_view id) {
  if (id.size() <= kEchoedIdBytes) return std::string(id);
  return absl::StrCat(id.substr(0, kEchoedIdBytes), "... (", id.size(), " bytes)");
}

absl::Status ValidateRequestId(absl::string_view id) {
  if (id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("request_id has ", id.size(),
                                                   " bytes; at most ", kMaxRequestIdBytes,
                                                   " are allowed (it starts \"",
                                                   id.substr(0, kEchoedIdBytes), "\")"));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("request_id has byte 0x", absl::Hex(c, absl::kZeroPad2), " at offset ", i,
                       "; it must be printable ASCII"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCacheSalt(absl::string_view cache_salt) {
  if (cache_salt.size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cache_salt has ", cache_salt.size(),
                                                   " bytes; at most ", kMaxCacheSaltBytes,
                                                   " are allowed"));
  }
  return absl::OkStatus();
}

absl::Status ValidateStopCounts(size_t stop_strings, size_t stop_token_ids) {
  if (stop_strings > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stop has ", stop_strings,
                                                   " strings; at most ", kMaxStopStrings,
                                                   " are allowed"));
  }
  if (stop_token_ids > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat("stop_token_ids has ", stop_token_ids,
                                                   " ids; at most ", kMaxStopTokenIds,
                                                   " are allowed"));
  }
  return absl::OkStatus();
}

absl::Status ValidateStopString(size_t index, absl::string_view stop) {
  if (stop.size() > kMaxStopStringBytes) {
    return absl::InvalidArgumentError(absl::StrCat("stop string ", index, " has ", stop.size(),
                                                   " bytes; at most ", kMaxStopStringBytes,
                                                   " are allowed"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSamplingValues(const SamplingValues& v, int32_t vocab_size) {
  const auto out_of_range = [](absl::string_view field, auto value, absl::string_view range) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", value, " is out of range; it must be ", range));
  };
  // Written as !(x in range) so NaN fails too.
  if (!(v.temperature >= 0.0f) || std::isinf(v.temperature)) {
    return out_of_range("temperature", v.temperature, ">= 0 (0 = greedy)");
  }
  if (!(v.top_p > 0.0f && v.top_p <= 1.0f)) return out_of_range("top_p", v.top_p, "in (0, 1]");
  if (v.top_k < 0) return out_of_range("top_k", v.top_k, ">= 0 (0 = off)");
  if (!(v.min_p >= 0.0f && v.min_p <= 1.0f)) return out_of_range("min_p", v.min_p, "in [0, 1]");
  if (!(v.repetition_penalty > 0.0f) || std::isinf(v.repetition_penalty)) {
    return out_of_range("repetition_penalty", v.repetition_penalty, "> 0 (1 = off)");
  }
  if (!(std::fabs(v.presence_penalty) <= kMaxOccurrencePenalty)) {
    return out_of_range("presence_penalty", v.presence_penalty, "in [-2, 2] (0 = off)");
  }
  if (!(std::fabs(v.frequency_penalty) <= kMaxOccurrencePenalty)) {
    return out_of_range("frequency_penalty", v.frequency_penalty, "in [-2, 2] (0 = off)");
  }
  if (v.logit_bias.size() > kMaxLogitBiasEntries) {
    return absl::InvalidArgumentError(absl::StrCat("logit_bias has ", v.logit_bias.size(),
                                                   " entries; at most ", kMaxLogitBiasEntries,
                                                   " are allowed"));
  }
  for (const auto& [id, bias] : v.logit_bias) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return absl::InvalidArgumentError(
          vocab_size > 0
              ? absl::StrCat("logit_bias token id ", id, " is outside the vocabulary [0, ",
                             vocab_size, ")")
              : absl::StrCat("logit_bias token id ", id, " is negative"));
    }
    if (!(std::fabs(bias) <= kMaxLogitBias)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias value ", bias, " for token id ",
                                                     id, " is out of range; it must be in "
                                                     "[-100, 100]"));
    }
  }
  if (v.logprobs < -1 || v.logprobs > kMaxTopLogprobs) {
    return out_of_range("logprobs", v.logprobs, "in [0, 20] (unset = none)");
  }
  if (v.prompt_logprobs < -1 || v.prompt_logprobs > kMaxTopLogprobs) {
    return out_of_range("prompt_logprobs", v.prompt_logprobs, "in [0, 20] (unset = none)");
  }
  return absl::OkStatus();
}

namespace {

std::string Escaped(std::string_view s) { return absl::CHexEscape(absl::string_view(s.data(), s.size())); }

absl::Status ValidateSchemaChoices(const SamplingValues& v) {
  if (!v.json_schema.empty() || v.json_object || !v.json_after.empty() || v.json_schema_strict) {
    return absl::InvalidArgumentError(
        "response_format_choices replaces response_format_schema (and its strict) and cannot "
        "be combined with response_format_after or json_object; set one of them");
  }
  if (v.json_choices.size() > kMaxSchemaChoices) {
    return absl::InvalidArgumentError(absl::StrCat("response_format_choices has ",
                                                   v.json_choices.size(), " choices; at most ",
                                                   kMaxSchemaChoices, " are allowed"));
  }
  size_t schema_bytes = 0;
  std::vector<std::string_view> prefixes;
  for (size_t i = 0; i < v.json_choices.size(); ++i) {
    const SchemaChoice& c = v.json_choices[i];
    if (c.prefix.empty() || c.prefix.size() > kMaxSchemaChoicePrefixBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "response_format_choices[", i, "].prefix has ", c.prefix.size(), " bytes; it needs 1 to ",
          kMaxSchemaChoicePrefixBytes));
    }
    if (c.schema.size() > kMaxJsonSchemaBytes) {
      return absl::InvalidArgumentError(absl::StrCat("response_format_choices[", i, "].schema has ",
                                                     c.schema.size(), " bytes; at most ",
                                                     kMaxJsonSchemaBytes, " are allowed"));
    }
    schema_bytes += c.schema.size();
    prefixes.push_back(c.prefix);
  }
  if (schema_bytes > kMaxSchemaChoicesBytes) {
    return absl::InvalidArgumentError(absl::StrCat("response_format_choices' schemas have ",
                                                   schema_bytes, " bytes together; at most ",
                                                   kMaxSchemaChoicesBytes, " are allowed"));
  }
  // Sorted, a prefix that begins others comes right before one of them.
  std::sort(prefixes.begin(), prefixes.end());
  for (size_t i = 1; i < prefixes.size(); ++i) {
    if (prefixes[i].starts_with(prefixes[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "response_format_choices' prefix \"", Escaped(prefixes[i - 1]),
          "\" begins another one (\"", Escaped(prefixes[i]),
          "\"): the text written could not tell which choice it is"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateResponseFormat(const SamplingValues& v, bool ignore_eos) {
  const bool schema = !v.json_schema.empty() || !v.json_choices.empty();
  if (v.json_schema_requested && !schema) {
    return absl::InvalidArgumentError(
        "response_format json_schema needs the schema (response_format_schema is empty)");
  }
  if (!v.json_choices.empty()) {
    if (!v.json_schema_requested) {
      return absl::InvalidArgumentError(
          "response_format_choices is set without response_format json_schema");
    }
    if (absl::Status s = ValidateSchemaChoices(v); !s.ok()) return s;
  }
  if (v.json_object && schema) {
    return absl::InvalidArgumentError(
        "response_format json_object and json_schema are exclusive; set one");
  }
  if (v.constrained() && ignore_eos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "response_format ", schema ? "json_schema" : "json_object",
        " cannot be combined with ignore_eos: the JSON ", schema ? "value" : "object",
        " ends with EOS (drop ignore_eos, or use response_format text)"));
  }
  if (!v.json_after.empty() && !v.constrained()) {
    const std::string shown = absl::CHexEscape(v.json_after.substr(0, kMaxJsonAfterBytes));
    return absl::InvalidArgumentError(absl::StrCat(
        "response_format_after \"", shown,
        "\" is set without response_format json_object or json_schema; it says where the JSON "
        "starts"));
  }
  if (v.json_after.size() > kMaxJsonAfterBytes) {
    return absl::InvalidArgumentError(absl::StrCat("response_format_after has ",
                                                   v.json_after.size(), " bytes; at most ",
                                                   kMaxJsonAfterBytes, " are allowed"));
  }
  if (v.json_schema_strict && !schema) {
    return absl::InvalidArgumentError(
        "response_format_schema_strict is set without response_format json_schema");
  }
  if (v.json_schema.size() > kMaxJsonSchemaBytes) {
    return absl::InvalidArgumentError(absl::StrCat("response_format json_schema's schema has ",
                                                   v.json_schema.size(), " bytes; at most ",
                                                   kMaxJsonSchemaBytes, " are allowed"));
  }
  return absl::OkStatus();
}

absl::Status NormalizeLogitBias(SamplingValues& v) {
  std::sort(v.logit_bias.begin(), v.logit_bias.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < v.logit_bias.size(); ++i) {
    if (v.logit_bias[i].first == v.logit_bias[i - 1].first) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias names token id ",
                                                     v.logit_bias[i].first, " twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::common
