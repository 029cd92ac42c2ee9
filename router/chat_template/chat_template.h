// ChatTemplate: a checkpoint's Jinja chat template (tokenizer_config.json `chat_template`),
// rendered the way transformers' apply_chat_template renders it, for the OpenAI chat API.
//
// No Jinja library exists for C++ in Debian, so this is a small, strict interpreter of the
// Jinja subset DeepSeek's templates use, plus macros and call blocks, Jinja's builtin filters,
// tests and globals and the str / dict / list methods as other checkpoints' templates (Llama
// 3.x, Qwen, Mistral, Gemma, Phi, gpt-oss, Kimi, GLM) use them (parser.h lists it). Strict
// means: a construct it does not implement fails Parse() naming the construct and line, never
// renders differently. Agreement with
// transformers is tested byte for byte (tests/fixtures/chat_template, made by
// tools/make_chat_template_fixtures.py, tools/make_chat_template_macro_fixtures.py and
// tools/make_chat_template_filter_fixtures.py).
//
// Thread-safety: a parsed template is immutable; Render may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/chat_template/strftime.h"

namespace mlaserve::router::chat_template {

struct Stmt;

class ChatTemplate {
 public:
  // INVALID_ARGUMENT naming the line and the construct for templates outside the subset.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // `variables`: a JSON object of the template's globals, as apply_chat_template passes them
  // (messages, add_generation_prompt, tools, documents, bos_token, eos_token, ... and extra
  // template kwargs). INVALID_ARGUMENT naming the line for render errors (an undefined value
  // used in arithmetic, raise_exception(), a type error).
  // strftime_now reads the system clock (local time) when the template calls it.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& variables) const;
  // With strftime_now reading `clock` (tests).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& variables, const Clock& clock) const;

  // Whether the template reads the global `name` anywhere (e.g. "tools": DeepSeek's own
  // templates render tool calls and results but never the tool definitions).
  bool ReadsVariable(std::string_view name) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlaserve::router::chat_template
