#include "router/api_conversion.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/strings/str_cat.h"
#include "common/request_limits.h"
#include "router/validation.h"

namespace mlaserve::router {

SamplingConfig SamplingFromProto(const v1::SamplingParams& p) {
  SamplingConfig s;
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_p()) s.top_p = p.top_p();
  if (p.has_top_k()) s.top_k = p.top_k();
  if (p.has_min_p()) s.min_p = p.min_p();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  if (p.has_presence_penalty()) s.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) s.frequency_penalty = p.frequency_penalty();
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias.emplace_back(id, bias);
  if (p.has_logprobs()) s.logprobs = p.logprobs();
  if (p.has_prompt_logprobs()) s.prompt_logprobs = p.prompt_logprobs();
  s.json_object = p.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT;
  s.json_schema = p.response_format_schema();
  s.json_schema_strict = p.response_format_schema_strict();
  s.json_schema_requested = p.response_format() == v1::RESPONSE_FORMAT_JSON_SCHEMA;
  s.json_after = p.response_format_after();
  for (const v1::SchemaChoice& c : p.response_format_choices()) {
    s.json_choices.push_back({c.prefix(), c.schema(), c.strict()});
  }
  if (p.has_seed()) s.seed = p.seed();
  if (p.has_max_new_tokens()) s.max_new_tokens = p.max_new_tokens();
  s.stop.assign(p.stop().begin(), p.stop().end());
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  if (p.has_skip_special_tokens()) s.skip_special_tokens = p.skip_special_tokens();
  s.include_stop_str_in_output = p.include_stop_str_in_output();
  return s;
}

absl::Status ValidateSamplingProto(const v1::SamplingParams& p) {
  if (!v1::ResponseFormat_IsValid(p.response_format())) {
    return absl::InvalidArgumentError(absl::StrCat("response_format ", p.response_format(),
                                                   " is unknown; it must be TEXT (0), "
                                                   "JSON_OBJECT (1) or JSON_SCHEMA (2)"));
  }
  if (!p.response_format_schema().empty() &&
      p.response_format() != v1::RESPONSE_FORMAT_JSON_SCHEMA) {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format_schema is set with response_format ",
                     v1::ResponseFormat_Name(p.response_format()),
                     "; it needs RESPONSE_FORMAT_JSON_SCHEMA"));
  }
  const auto out_of_range = [](const char* field, int32_t value) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", value,
                                                   " is out of range; it must be in [0, ",
                                                   common::kMaxTopLogprobs, "] (unset = none)"));
  };
  if (p.has_logprobs() && p.logprobs() < 0) return out_of_range("logprobs", p.logprobs());
  if (p.has_prompt_logprobs() && p.prompt_logprobs() < 0) {
    return out_of_range("prompt_logprobs", p.prompt_logprobs());
  }
  return absl::OkStatus();
}

v1::SamplingParams SamplingToProto(const SamplingConfig& s) {
  v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_p(s.top_p);
  p.set_top_k(s.top_k);
  p.set_min_p(s.min_p);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  for (const auto& [id, bias] : s.logit_bias) (*p.mutable_logit_bias())[id] = bias;
  if (s.wants_logprobs()) p.set_logprobs(s.logprobs);
  if (s.wants_prompt_logprobs()) p.set_prompt_logprobs(s.prompt_logprobs);
  if (s.json_object) p.set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  if (!s.json_schema.empty()) {
    p.set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
    p.set_response_format_schema(s.json_schema);
    p.set_response_format_schema_strict(s.json_schema_strict);
  }
  if (!s.json_after.empty()) p.set_response_format_after(s.json_after);
  if (!s.json_choices.empty()) p.set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  for (const common::SchemaChoice& c : s.json_choices) {
    v1::SchemaChoice* out = p.add_response_format_choices();
    out->set_prefix(c.prefix);
    out->set_schema(c.schema);
    out->set_strict(c.strict);
  }
  if (s.seed.has_value()) p.set_seed(*s.seed);
  if (s.max_new_tokens.has_value()) p.set_max_new_tokens(*s.max_new_tokens);
  for (const auto& stop : s.stop) p.add_stop(stop);
  for (int32_t id : s.stop_token_ids) p.add_stop_token_ids(id);
  p.set_ignore_eos(s.ignore_eos);
  p.set_skip_special_tokens(s.skip_special_tokens);
  p.set_include_stop_str_in_output(s.include_stop_str_in_output);
  return p;
}

namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Walks the top-level fields of a message; for each length-delimited field, calls
// fn(field_number, bytes). Returns false when the wire data itself is malformed.
template <typename Fn>
bool ForEachLengthDelimited(const std::string& wire, Fn fn) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                      static_cast<int>(wire.size()));
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return in.CurrentPosition() == static_cast<int>(wire.size());
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t len;
      std::string bytes;
      if (!in.ReadVarint32(&len) || !in.ReadString(&bytes, static_cast<int>(len))) return false;
      fn(field, bytes);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
}

}  // namespace

absl::Status DiagnoseUnparsableGenerateRequest(const std::string& wire) {
  constexpr int kText = v1::GenerateRequest::kTextFieldNumber;
  constexpr int kRequestId = v1::GenerateRequest::kRequestIdFieldNumber;
  constexpr int kSampling = v1::GenerateRequest::kSamplingFieldNumber;
  constexpr int kStop = v1::SamplingParams::kStopFieldNumber;
  absl::Status found = absl::OkStatus();
  const bool well_formed = ForEachLengthDelimited(wire, [&](int field, const std::string& b) {
    if (!found.ok()) return;
    if (field == kText) {
      found = ValidateUtf8(b, "text");
    } else if (field == kRequestId) {
      found = ValidateUtf8(b, "request_id");
    } else if (field == kSampling) {
      int index = 0;
      ForEachLengthDelimited(b, [&](int sub, const std::string& s) {
        if (sub != kStop) return;
        if (found.ok()) found = ValidateUtf8(s, absl::StrCat("stop string ", index));
        ++index;
      });
    }
  });
  if (!found.ok()) return found;
  if (!well_formed) {
    return absl::InvalidArgumentError("GenerateRequest is not a well-formed protobuf message");
  }
  return absl::InvalidArgumentError(
      "GenerateRequest could not be parsed (a string field holds invalid UTF-8?)");
}

}  // namespace mlaserve::router
