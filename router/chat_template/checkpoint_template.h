// Finding a checkpoint's chat template and special tokens, as transformers does:
// tokenizer_config.json's `chat_template` (a string, or a list of {name, template} whose
// "default" entry is used), else chat_template.jinja beside it; a --chat-template file
// overrides both. The special tokens (bos_token, eos_token, pad_token, unk_token: strings or
// AddedToken objects) come from tokenizer_config.json and are passed to the template.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/chat_template/chat_template.h"

namespace mlaserve::router::chat_template {

struct CheckpointChatTemplate {
  std::string origin;  // where the template came from, for logs and errors
  ChatTemplate tmpl;
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// NOT_FOUND (saying where it looked) when neither `override_path` nor the checkpoint gives a
// template; INVALID_ARGUMENT naming the file and the construct when it is outside the subset.
absl::StatusOr<CheckpointChatTemplate> LoadChatTemplate(const std::string& model_dir,
                                                        const std::string& override_path);

}  // namespace mlaserve::router::chat_template
