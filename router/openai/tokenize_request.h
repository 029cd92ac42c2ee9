// /tokenize and /detokenize request bodies, in vLLM's shapes (its TokenizeCompletionRequest,
// TokenizeChatRequest and DetokenizeRequest), and their response bodies:
//
//   POST /tokenize   {"model"?, "prompt": str, "add_special_tokens"?: true, "return_token_strs"?}
//                    {"model"?, "messages": [...], "add_generation_prompt"?: true,
//                     "continue_final_message"?: false, "add_special_tokens"?: false,
//                     "chat_template"?, "chat_template_kwargs"?, "tools"?,
//                     "return_token_strs"?}
//                 -> {"count", "max_model_len", "tokens": [ids], "token_strs": [...] or null}
//   POST /detokenize {"model"?, "tokens": [ids]} -> {"prompt": text}
//
// The messages form is read by the chat endpoint's own code (ReadChatPrompt) into an
// ApiRequest that HttpApi renders as a chat request (ChatPrompt), so /tokenize counts the
// tokens /v1/chat/completions sends. `model` is optional, as in vLLM; given, it must be the
// served name (404 model_not_found). Fields neither form has are refused as the other
// endpoints refuse them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"
#include "router/text_codec.h"

namespace mlaserve::router::openai {

struct TokenizeRequest {
  // The prompt form's text; nullopt for the messages form, whose fields `chat` holds
  // (Endpoint::kChat: messages, add_generation_prompt, continue_final_message,
  // chat_template, chat_template_kwargs, tools).
  std::optional<std::string> prompt;
  ApiRequest chat;
  // The tokenizer's own special tokens (BOS) added: vLLM's defaults, true for a prompt, false
  // for messages (the chat template writes its special tokens itself).
  bool add_special_tokens = true;
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::vector<int32_t> tokens;  // each in [0, vocab_size)
};

// A 400 naming the parameter, or 404 model_not_found.
std::variant<TokenizeRequest, ApiError> ParseTokenizeRequest(const std::string& body,
                                                             const std::string& served_model);
// `vocab_size`: the model's; an id outside [0, vocab_size) is a 400 naming `tokens` and the id.
std::variant<DetokenizeRequest, ApiError> ParseDetokenizeRequest(const std::string& body,
                                                                 const std::string& served_model,
                                                                 int32_t vocab_size);

// /tokenize's answer for `ids`. With `codec`, `token_strs` holds each token's string as the
// logprobs name tokens (logprobs_format.h: its bytes as UTF-8); without, null.
nlohmann::ordered_json TokenizeResponse(const std::vector<int32_t>& ids, int32_t max_model_len,
                                        const TextCodec* codec);

}  // namespace mlaserve::router::openai
