// LogprobsFormat: one choice's per-token log-probabilities (api.proto's TokenLogprobs, which
// the chunks carry when the request asked for logprobs) in OpenAI's shapes:
//   completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: lp}...],
//                 "text_offset": [...]}; each top_logprobs dict holds the sampled token and the
//                 n most likely ones (n + 1 entries at most, as vLLM and OpenAI's legacy API).
//   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
//                 "logprob", "bytes"}...]}...]}; top_logprobs holds the n most likely tokens.
// A token's string is its bytes (TextCodec::TokenBytes), invalid UTF-8 replaced by U+FFFD as
// the tokenizer's decode does; a token the codec has no text for is "token_id:<id>" (vLLM's
// form). Logprobs below -9999 are reported as -9999 (vLLM's clamp: JSON has no -inf).
// text_offset counts characters (code points, as Python's len) from the choice's start.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "google/protobuf/repeated_ptr_field.h"
#include "mlaserve/v1/api.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"
#include "router/text_codec.h"

namespace mlaserve::router::openai {

// Token `id`'s string as the logprobs name it: its bytes (TextCodec::TokenBytes) as UTF-8,
// invalid UTF-8 replaced by U+FFFD, or "token_id:<id>" when the codec has no text for it. With
// `bytes`, also the raw bytes as an array of integers (null without text).
std::string TokenString(const TextCodec& codec, int32_t id, nlohmann::ordered_json* bytes = nullptr);

// vLLM's `prompt_logprobs` list for the prompt's entries (api.proto PromptTokenLogprobs, one
// per prompt token): null for the first token (no logprob), then per token an object keyed by
// token id (as a string) of {"logprob", "rank", "decoded_token"}: the prompt token first, then
// the `top_n` most likely (rank 1, 2, ...; a top token that is the prompt token keeps its entry).
nlohmann::ordered_json PromptLogprobsJson(const TextCodec& codec,
                                          std::span<const v1::PromptTokenLogprobs> entries,
                                          int top_n);

class LogprobsFormat {
 public:
  // `codec` must outlive this.
  LogprobsFormat(Endpoint endpoint, const TextCodec* codec);

  // Completions with echo: the prompt's tokens (api.proto PromptTokenLogprobs, from the first)
  // in the completions shape, before any generated token: the first token's logprob and top
  // dict null, the others with at most `top_n` alternatives. Returned and kept as Add's.
  nlohmann::ordered_json AddPrompt(std::span<const v1::PromptTokenLogprobs> entries, int top_n);

  // The `logprobs` value of a streamed choice for one chunk's tokens (`ids` and `logprobs`
  // pair up; extra entries of the longer one are ignored); they are also kept for All().
  nlohmann::ordered_json Add(std::span<const int32_t> ids,
                             const google::protobuf::RepeatedPtrField<v1::TokenLogprobs>& logprobs);
  // Every token so far (the non-streaming body's `logprobs`).
  const nlohmann::ordered_json& All() const { return all_; }

 private:
  nlohmann::ordered_json Empty() const;

  const Endpoint endpoint_;
  const TextCodec* const codec_;
  nlohmann::ordered_json all_;
  int64_t text_offset_ = 0;
};

}  // namespace mlaserve::router::openai
