// Bounds on what one request may carry, shared by the router (public API) and the workers
// (which check again what the router checked: a worker port may be reached without the router).
// Each check is INVALID_ARGUMENT naming the field and the limit, and echoes at most
// kEchoedIdBytes of a client's id so an oversized id cannot inflate the error it causes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace mlaserve::common {

inline constexpr size_t kMaxRequestIdBytes = 256;
// A prefix-cache salt (api.proto cache_salt): room for any secret worth using (32 random bytes
// are 44 in base64, a SHA-512 is 128 in hex) while keeping what the workers store per cached
// prefix small.
inline constexpr size_t kMaxCacheSaltBytes = 256;
inline constexpr size_t kEchoedIdBytes = 64;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr size_t kMaxStopTokenIds = 64;
// OpenAI's limits: logit_bias values in [-100, 100], top_logprobs <= 20, penalties in [-2, 2].
inline constexpr size_t kMaxLogitBiasEntries = 1024;
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr float kMaxOccurrencePenalty = 2.0f;
// JSON mode's start marker (response_format_after): a short closing tag, not a document.
inline constexpr size_t kMaxJsonAfterBytes = 64;
// Structured outputs: a JSON Schema's text (model::kMaxSchemaBytes, checked again there).
inline constexpr size_t kMaxJsonSchemaBytes = 64 * 1024;
// Schema choices (api.proto response_format_choices): one per tool of a request at most
// (OpenAI takes 128 tools), a prefix being a tool's name and the syntax around it.
inline constexpr size_t kMaxSchemaChoices = 128;
inline constexpr size_t kMaxSchemaChoicePrefixBytes = 256;
inline constexpr size_t kMaxSchemaChoicesBytes = 4 * kMaxJsonSchemaBytes;  // all schemas' text

// A client's id as error messages show it: whole when short, else its first kEchoedIdBytes
// bytes, "..." and the length.
std::string IdForMessages(absl::string_view id);

// Empty is allowed (the router makes one); at most kMaxRequestIdBytes bytes of printable ASCII
// (it travels in logs, metrics-free messages and every response).
absl::Status ValidateRequestId(absl::string_view request_id);

// At most kMaxCacheSaltBytes bytes, any bytes; empty is the shared default. The message gives
// the length, never the salt (a secret).
absl::Status ValidateCacheSalt(absl::string_view cache_salt);

// Counts of stop conditions (their contents are checked where they are used).
absl::Status ValidateStopCounts(size_t stop_strings, size_t stop_token_ids);
absl::Status ValidateStopString(size_t index, absl::string_view stop);

// One way a constrained text may begin (api.proto SchemaChoice): `prefix`, then a JSON value
// `schema` admits (`strict`: OpenAI's json_schema.strict for it); an empty schema: any text.
struct SchemaChoice {
  std::string prefix;
  std::string schema;
  bool strict = false;
  bool operator==(const SchemaChoice&) const = default;
};

// The sampling knobs of one request, with the defaults and ranges of api.proto's
// SamplingParams. The router's request and the model's SamplingOptions extend it.
struct SamplingValues {
  float temperature = 1.0f;         // >= 0 and finite; 0 = greedy
  int32_t top_k = 0;                // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0 and finite; 1 = off
  // OpenAI / vLLM semantics, over the tokens generated so far (not the prompt):
  // logit[t] -= presence_penalty * (count[t] > 0) + frequency_penalty * count[t].
  float presence_penalty = 0.0f;    // [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;   // [-2, 2]; 0 = off
  // (token id, bias) added to the logits before sampling; ids distinct and in the vocabulary,
  // biases in [-100, 100]; sorted by id once validated. At most kMaxLogitBiasEntries.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Log-probabilities returned with every generated token: -1 = none; n >= 0 = the chosen
  // token's and the n most likely alternatives' (n <= kMaxTopLogprobs).
  int32_t logprobs = -1;
  // Prompt log-probabilities (vLLM's prompt_logprobs): -1 = none; n >= 0 = for every prompt
  // token after the first, its log-probability given the tokens before it, its rank and the n
  // most likely tokens' there (n <= kMaxTopLogprobs). Computed where the prompt is prefilled,
  // on the decode worker (docs/api.md).
  int32_t prompt_logprobs = -1;
  // JSON mode (api.proto ResponseFormat JSON_OBJECT): the output is one JSON object, then EOS;
  // each token is drawn under a mask of the tokens that keep it so (model/constraint).
  bool json_object = false;
  // Structured outputs (api.proto ResponseFormat JSON_SCHEMA): the JSON Schema's text, set iff
  // that format; the output is one JSON value it admits, then EOS. Compiled where it is used
  // (model::JsonSchema::Get: the router's validation, each worker's RPC edge and runner). At
  // most kMaxJsonSchemaBytes. `json_schema_strict`: OpenAI's json_schema.strict.
  std::string json_schema;
  bool json_schema_strict = false;
  // The request named the JSON_SCHEMA format (a proto edge sets it): then json_schema must be
  // set; INVALID_ARGUMENT otherwise, rather than free text.
  bool json_schema_requested = false;
  // With json_object or json_schema: the constraint starts after the first occurrence of this
  // text in the output (api.proto response_format_after, e.g. "</think>"); empty: from the
  // first token. At most kMaxJsonAfterBytes.
  std::string json_after;
  // Structured outputs in place of json_schema (api.proto response_format_choices): the text is
  // one choice's prefix, then a value its schema admits. Compiled where json_schema is.
  std::vector<SchemaChoice> json_choices;

  // Some response format constrains the text (JSON mode or structured outputs).
  bool constrained() const { return json_object || !json_schema.empty() || !json_choices.empty(); }

  bool wants_logprobs() const { return logprobs >= 0; }
  bool wants_prompt_logprobs() const { return prompt_logprobs >= 0; }
};

// The one sampling check, made once at each process edge: the router's API
// (router::ValidateAndResolveSampling), the workers' RPCs (worker::ToSamplingOptions) and
// mlaserve-run's flags. Past an edge the values are trusted: the engine's per-step sampling
// does not check them again. INVALID_ARGUMENT naming the field, its value and the range
// ("top_p 1.5 is out of range; it must be in (0, 1]"); NaN fails every range. With
// vocab_size > 0 the logit_bias ids must lie in [0, vocab_size) (the engine checks them
// against its vocabulary again where no vocab_size was known).
absl::Status ValidateSamplingValues(const SamplingValues& values, int32_t vocab_size = 0);

// What the response format asks of the stop rules, checked at the same edges (ignore_eos is
// not a sampling knob, so it is passed in): JSON mode and structured outputs end the value with
// EOS, so json_object / json_schema with ignore_eos is INVALID_ARGUMENT naming both; so are
// json_object with json_schema, json_after without either (or longer than
// kMaxJsonAfterBytes), json_schema_strict without json_schema, a schema longer than
// kMaxJsonSchemaBytes, and json_choices beside json_schema, json_object or json_after, or past
// the kMaxSchemaChoice* bounds, with an empty prefix, or a prefix that begins another.
// Whether a schema compiles is checked where it is compiled.
absl::Status ValidateResponseFormat(const SamplingValues& values, bool ignore_eos);

// Sorts logit_bias by token id (the order the samplers and the wire use); a repeated id is
// INVALID_ARGUMENT naming it.
absl::Status NormalizeLogitBias(SamplingValues& values);

}  // namespace mlaserve::common
