#include "router/openai/tokenize_request.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "router/openai/logprobs_format.h"
#include "router/openai/request_reader.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

const std::set<std::string>& BothFormsKeys() {
  static const std::set<std::string> k{"model", "add_special_tokens", "return_token_strs"};
  return k;
}
const std::set<std::string>& PromptFormKeys() {
  static const std::set<std::string> k{"prompt"};
  return k;
}
// vLLM's TokenizeChatRequest. Its multimodal kwargs change nothing for text-only messages (the
// only content ReadChatPrompt accepts), so an object is accepted for them.
const std::set<std::string>& MessagesFormKeys() {
  static const std::set<std::string> k{"messages", "add_generation_prompt", "continue_final_message",
                                       "chat_template", "chat_template_kwargs", "tools",
                                       "mm_processor_kwargs", "media_io_kwargs"};
  return k;
}

// `model` is optional here (vLLM's); given, it must be the served one.
std::optional<ApiError> CheckModel(RequestReader& r, const std::string& served_model) {
  std::optional<std::string> model = r.String("model");
  if (r.failed()) return r.error();
  if (model && *model != served_model) return ModelNotFound(*model, served_model);
  return std::nullopt;
}

void ReadMessagesForm(RequestReader& r, const std::string& served_model, TokenizeRequest* out) {
  out->chat.endpoint = Endpoint::kChat;
  out->chat.model = served_model;
  ReadChatPrompt(r, &out->chat);
  if (r.failed()) return;
  for (const char* key : {"mm_processor_kwargs", "media_io_kwargs"}) {
    if (const Json* v = r.Get(key); v != nullptr && !v->is_object()) return r.WrongType(key, "an object", *v);
  }
}

}  // namespace

std::variant<TokenizeRequest, ApiError> ParseTokenizeRequest(const std::string& body,
                                                             const std::string& served_model) {
  std::variant<Json, ApiError> parsed = ParseRequestBody(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const Json& j = std::get<Json>(parsed);
  RequestReader r(j);
  const bool has_prompt = r.Get("prompt") != nullptr;
  const bool has_messages = r.Get("messages") != nullptr;
  if (has_prompt && has_messages) {
    return Invalid("give either 'prompt' (a text) or 'messages' (a chat), not both", "prompt");
  }
  if (!has_prompt && !has_messages) {
    return Invalid("'prompt' (a text) or 'messages' (a chat) is required", "prompt");
  }
  const std::set<std::string>& own = has_prompt ? PromptFormKeys() : MessagesFormKeys();
  const std::set<std::string>& other = has_prompt ? MessagesFormKeys() : PromptFormKeys();
  for (const auto& [key, value] : j.items()) {
    if (BothFormsKeys().count(key) != 0 || own.count(key) != 0) continue;
    if (other.count(key) != 0) {
      if (value.is_null()) continue;  // not given (a client that sends every field as null)
      return Invalid(absl::StrCat("'", key, "' belongs to the ", has_prompt ? "'messages'" : "'prompt'",
                                  " form of /tokenize; this request gives '",
                                  has_prompt ? "prompt" : "messages", "'"),
                     key);
    }
    return Invalid(absl::StrCat("unrecognized request argument supplied: ", key), key);
  }
  if (std::optional<ApiError> e = CheckModel(r, served_model)) return *e;
  TokenizeRequest out;
  out.add_special_tokens = r.Bool("add_special_tokens").value_or(has_prompt);
  out.return_token_strs = r.Bool("return_token_strs").value_or(false);
  if (has_prompt) {
    out.prompt = r.String("prompt");
  } else {
    ReadMessagesForm(r, served_model, &out);
  }
  if (r.failed()) return *r.error();
  return out;
}

std::variant<DetokenizeRequest, ApiError> ParseDetokenizeRequest(const std::string& body,
                                                                 const std::string& served_model,
                                                                 int32_t vocab_size) {
  std::variant<Json, ApiError> parsed = ParseRequestBody(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const Json& j = std::get<Json>(parsed);
  for (const auto& [key, value] : j.items()) {
    if (key != "model" && key != "tokens") {
      return Invalid(absl::StrCat("unrecognized request argument supplied: ", key), key);
    }
  }
  RequestReader r(j);
  if (std::optional<ApiError> e = CheckModel(r, served_model)) return *e;
  const Json* tokens = r.Get("tokens");
  if (tokens == nullptr) return Invalid("'tokens' is required", "tokens");
  if (!tokens->is_array()) {
    r.WrongType("tokens", "an array of token ids", *tokens);
    return *r.error();
  }
  DetokenizeRequest out;
  out.tokens.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& id = (*tokens)[i];
    if (!id.is_number_integer()) {
      return Invalid(absl::StrCat("'tokens' must be an array of token ids; position ", i, " holds ",
                                  JsonType(id)),
                     "tokens");
    }
    // An unsigned value past int64 is outside the vocabulary too.
    const bool inside = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                                                : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size;
    if (!inside) {
      return Invalid(absl::StrCat("'tokens' holds ", id.dump(), " at position ", i,
                                  ", outside the vocabulary [0, ", vocab_size, ")"),
                     "tokens");
    }
    out.tokens.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

Json TokenizeResponse(const std::vector<int32_t>& ids, int32_t max_model_len, const TextCodec* codec) {
  Json body{{"count", ids.size()}, {"max_model_len", max_model_len}, {"tokens", ids}};
  if (codec == nullptr) {
    body["token_strs"] = nullptr;
    return body;
  }
  Json strs = Json::array();
  for (int32_t id : ids) strs.push_back(TokenString(*codec, id));
  body["token_strs"] = std::move(strs);
  return body;
}

}  // namespace mlaserve::router::openai
