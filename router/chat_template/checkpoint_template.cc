#include "router/chat_template/checkpoint_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "router/chat_template/deepseek_v32_encoding.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The template text tokenizer_config.json gives, or "" when it has none.
absl::StatusOr<std::string> TemplateFromConfig(const nlohmann::ordered_json& config,
                                               const std::string& path) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::string();
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& entry : t) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": chat_template is a list without a \"default\" entry"));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template is neither a string nor a list"));
}

// bos_token, eos_token, pad_token and unk_token as tokenizer_config.json gives them (strings or
// AddedToken objects).
nlohmann::ordered_json SpecialTokens(const nlohmann::ordered_json& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    if (!config.contains(key)) continue;
    const auto& token = config[key];
    if (token.is_string()) {
      out[key] = token;
    } else if (token.is_object() && token.contains("content") && token["content"].is_string()) {
      out[key] = token["content"];
    }
  }
  return out;
}

bool KwargTrue(const nlohmann::ordered_json& variables, const char* key) {
  return variables.contains(key) && Value::FromJson(variables[key]).Truthy();
}

}  // namespace

absl::StatusOr<std::string> CheckpointChatTemplate::Render(const nlohmann::ordered_json& variables) const {
  if (tmpl.has_value()) return tmpl->Render(variables);
  const auto messages = variables.find("messages");
  return EncodeDeepseekV32(messages != variables.end() ? *messages : nlohmann::ordered_json::array(),
                           KwargTrue(variables, "thinking") || KwargTrue(variables, "enable_thinking"));
}

absl::StatusOr<CheckpointChatTemplate> LoadChatTemplate(const std::string& model_dir, std::string_view model_type,
                                                        const std::string& override_path) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::filesystem::exists(config_path)) {
    absl::StatusOr<std::string> text = ReadFile(config_path);
    if (!text.ok()) return text.status();
    config = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, " is not a JSON object"));
    }
  }
  std::string source, origin;
  if (!override_path.empty()) {
    absl::StatusOr<std::string> text = ReadFile(override_path);
    if (!text.ok()) return text.status();
    source = *std::move(text);
    origin = override_path;
  } else {
    absl::StatusOr<std::string> from_config = TemplateFromConfig(config, config_path);
    if (!from_config.ok()) return from_config.status();
    source = *std::move(from_config);
    origin = config_path;
    const std::string jinja_path = model_dir + "/chat_template.jinja";
    if (source.empty() && std::filesystem::exists(jinja_path)) {
      absl::StatusOr<std::string> text = ReadFile(jinja_path);
      if (!text.ok()) return text.status();
      source = *std::move(text);
      origin = jinja_path;
    }
    if (source.empty() && model_type == "deepseek_v32") {
      CheckpointChatTemplate out{"DeepSeek-V3.2's chat format (built in; the checkpoint ships it as a "
                                 "Python encoder, no template)",
                                 std::nullopt};
      // The format writes its own; a request's own template (--trust-request-chat-template)
      // reads them.
      out.special_tokens = SpecialTokens(config);
      return out;
    }
    if (source.empty()) {
      return absl::NotFoundError(absl::StrCat(
          model_dir, " has no chat template (no chat_template in tokenizer_config.json, no "
                     "chat_template.jinja)"));
    }
  }
  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", parsed.status().message()));
  }
  CheckpointChatTemplate out{origin, *std::move(parsed)};
  out.source = std::move(source);
  out.special_tokens = SpecialTokens(config);
  return out;
}

}  // namespace mlaserve::router::chat_template
