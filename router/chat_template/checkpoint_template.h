// Finding a checkpoint's chat template and special tokens, as transformers does:
// tokenizer_config.json's `chat_template` (a string, or a list of {name, template} whose
// "default" entry is used), else chat_template.jinja beside it; a --chat-template file
// overrides both. The special tokens (bos_token, eos_token, pad_token, unk_token: strings or
// AddedToken objects) come from tokenizer_config.json and are passed to the template (read for
// DeepSeek-V3.2's format too, which writes its own: a request's own template may use them).
// A DeepSeek-V3.2 checkpoint (`model_type` deepseek_v32) with neither gets
// DeepSeek-V3.2's own chat format (deepseek_v32_encoding.h), which it publishes as a Python
// encoder instead of a template.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/chat_template/chat_template.h"

namespace mlaserve::router::chat_template {

struct CheckpointChatTemplate {
  std::string origin;  // where the template came from, for logs and errors
  std::optional<ChatTemplate> tmpl;  // nullopt: DeepSeek-V3.2's chat format (EncodeDeepseekV32)
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  std::string source = {};  // the template's text ("" for DeepSeek-V3.2's format)

  // The prompt for `variables` as apply_chat_template takes them (messages,
  // add_generation_prompt, the special tokens and the request's chat_template_kwargs). For
  // DeepSeek-V3.2's format: the messages, in thinking mode where `thinking` or
  // `enable_thinking` is true (the kwargs vLLM and SGLang read), else chat mode; the format
  // always ends a user turn with the assistant's prefix, so add_generation_prompt is not read.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& variables) const;
};

// NOT_FOUND (saying where it looked) when neither `override_path` nor the checkpoint gives a
// template; INVALID_ARGUMENT naming the file and the construct when it is outside the subset.
// `model_type`: config.json's, as the caller loaded it (model::ModelConfig::model_type_name).
absl::StatusOr<CheckpointChatTemplate> LoadChatTemplate(const std::string& model_dir, std::string_view model_type,
                                                        const std::string& override_path);

}  // namespace mlaserve::router::chat_template
