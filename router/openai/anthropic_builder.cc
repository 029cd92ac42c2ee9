#include "router/openai/anthropic_builder.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// Cut arguments tried, from the longest, before ToolInput gives up on a text ({}).
constexpr int kMaxClosingTries = 256;

std::string SseEvent(const char* name, const Json& data) {
  return absl::StrCat("event: ", name, "\ndata: ", data.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
}

// `text` (a JSON text's start) with its open string and containers closed.
std::string Closed(absl::string_view text) {
  std::string closers;
  bool in_string = false;
  bool escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      closers += '}';
    } else if (c == '[') {
      closers += ']';
    } else if ((c == '}' || c == ']') && !closers.empty()) {
      closers.pop_back();
    }
  }
  std::string out(text);
  if (in_string) {
    if (escape) out.pop_back();
    out += '"';
  }
  out.append(closers.rbegin(), closers.rend());
  return out;
}

// Chat's call id ("call_…") as Anthropic names tool uses ("toolu_…"); other parsers' ids
// (kimi_k2's "functions.name:0", which its template renders back) are kept.
std::string ToolUseId(const std::string& chat_id) {
  constexpr std::string_view kChatPrefix = "call_";
  if (!chat_id.starts_with(kChatPrefix)) return chat_id;
  return absl::StrCat("toolu_", chat_id.substr(kChatPrefix.size()));
}

}  // namespace

AnthropicBuilder::AnthropicBuilder(const ApiRequest& chat, const ChatPrompt::Setup& setup, bool stream, std::string id)
    : stream_(stream), id_(std::move(id)), model_(chat.model), chat_(chat, id_, 0, setup.opens_reasoning) {
  if (setup.tool_calls.has_value()) {
    chat_.set_tool_calls(*setup.tool_calls, setup.call_opening, chat.parallel_tool_calls, setup.history_call_ids);
  }
}

std::string AnthropicBuilder::NewMessageId() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local absl::BitGen gen;
  std::string id = "msg_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)];
  return id;
}

Json AnthropicBuilder::ToolInput(const std::string& arguments) {
  const Json whole = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (!whole.is_discarded()) return whole.is_object() ? whole : Json::object();
  const absl::string_view text = absl::StripLeadingAsciiWhitespace(arguments);
  if (!absl::StartsWith(text, "{")) return Json::object();
  for (size_t cut = text.size(), tries = 0; cut > 0 && tries < kMaxClosingTries; --cut, ++tries) {
    const Json closed = Json::parse(Closed(text.substr(0, cut)), nullptr, /*allow_exceptions=*/false);
    if (!closed.is_discarded() && closed.is_object()) return closed;
  }
  return Json::object();
}

void AnthropicBuilder::Emit(const char* type, Json payload) {
  if (!stream_) return;
  Json event = Json{{"type", type}};
  for (auto& [key, value] : payload.items()) event[key] = std::move(value);
  events_ += SseEvent(type, event);
}

void AnthropicBuilder::Start() {
  started_ = true;
  Json message = Message();
  message["content"] = Json::array();
  message["stop_reason"] = nullptr;
  message["stop_sequence"] = nullptr;
  Emit("message_start", Json{{"message", std::move(message)}});
}

size_t AnthropicBuilder::Open(Kind kind, Json block) {
  CloseOpen();
  content_.push_back(block);
  arguments_.emplace_back();
  open_ = kind;
  open_index_ = content_.size() - 1;
  Emit("content_block_start", Json{{"index", open_index_}, {"content_block", std::move(block)}});
  return open_index_;
}

void AnthropicBuilder::CloseOpen() {
  if (open_ == Kind::kNone) return;
  if (open_ == Kind::kToolUse) content_[open_index_]["input"] = ToolInput(arguments_[open_index_]);
  Emit("content_block_stop", Json{{"index", open_index_}});
  open_ = Kind::kNone;
}

void AnthropicBuilder::AddThinking(const std::string& text) {
  if (open_ != Kind::kThinking) Open(Kind::kThinking, Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
  Json& block = content_[open_index_];
  block["thinking"] = block["thinking"].get<std::string>() + text;
  Emit("content_block_delta",
       Json{{"index", open_index_}, {"delta", {{"type", "thinking_delta"}, {"thinking", text}}}});
}

void AnthropicBuilder::AddText(const std::string& text) {
  if (open_ != Kind::kText) Open(Kind::kText, Json{{"type", "text"}, {"text", ""}});
  Json& block = content_[open_index_];
  block["text"] = block["text"].get<std::string>() + text;
  Emit("content_block_delta", Json{{"index", open_index_}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

void AnthropicBuilder::AddToolDeltas(const Json& deltas) {
  if (!deltas.is_array()) return;
  for (const Json& d : deltas) {
    const size_t call = d["index"].get<size_t>();
    if (d.contains("id")) {
      const size_t i = Open(Kind::kToolUse, Json{{"type", "tool_use"},
                                                 {"id", ToolUseId(d["id"].get<std::string>())},
                                                 {"name", d["function"]["name"]},
                                                 {"input", Json::object()}});
      if (call_blocks_.size() <= call) call_blocks_.resize(call + 1, content_.size());
      call_blocks_[call] = i;
    }
    if (call >= call_blocks_.size() || call_blocks_[call] >= content_.size()) continue;
    const size_t i = call_blocks_[call];
    std::string piece = d["function"].value("arguments", "");
    // The client parses the partial JSON at every delta: whitespace before the object (a
    // forced call's, before the schema's start) is no JSON it can parse, and means nothing.
    if (arguments_[i].empty()) piece = std::string(absl::StripLeadingAsciiWhitespace(piece));
    if (piece.empty()) continue;
    arguments_[i] += piece;
    Emit("content_block_delta",
         Json{{"index", i}, {"delta", {{"type", "input_json_delta"}, {"partial_json", std::move(piece)}}}});
  }
}

std::string AnthropicBuilder::OnMessage(const v1::GenerateResponse& message) {
  events_.clear();
  ResponseBuilder::Piece p = chat_.Absorb(message);
  if (p.kind == ResponseBuilder::Piece::Kind::kNone) return "";
  if (!started_) {
    Start();
    // A forced call's opening (tool_choice "any" or "tool") is the router's: its name starts the
    // tool_use block before the model writes anything.
    AddToolDeltas(chat_.TakeOpeningToolCalls());
  }
  if (!p.reasoning.empty()) AddThinking(p.reasoning);
  if (p.kind == ResponseBuilder::Piece::Kind::kComplete) {
    if (message.complete().matched_case() == v1::GenerateComplete::kMatchedStop) {
      matched_stop_ = message.complete().matched_stop();
    }
    // The end's pieces: what the parsers held back (chat sends the calls first, too).
    AddToolDeltas(p.tool_calls);
    if (!p.text.empty()) AddText(p.text);
    Finish();
    return std::exchange(events_, "");
  }
  if (!p.text.empty()) AddText(p.text);
  AddToolDeltas(p.tool_calls);
  return std::exchange(events_, "");
}

void AnthropicBuilder::Finish() {
  CloseOpen();
  Json usage = Usage();
  Emit("message_delta", Json{{"delta", {{"stop_reason", *StopReason()}, {"stop_sequence", Message()["stop_sequence"]}}},
                             {"usage", std::move(usage)}});
  Emit("message_stop", Json::object());
}

std::string AnthropicBuilder::ErrorEvent(const AnthropicError& error) {
  return SseEvent("error", AnthropicErrorBody(error));
}

std::optional<std::string> AnthropicBuilder::StopReason() const {
  const std::optional<std::string>& finish = chat_.finish_reason();
  if (!finish.has_value()) return std::nullopt;
  if (*finish == "tool_calls") return "tool_use";
  if (*finish == "length") return "max_tokens";
  return matched_stop_.empty() ? "end_turn" : "stop_sequence";
}

Json AnthropicBuilder::Usage() const {
  const int32_t cached = std::min(chat_.cached_tokens(), chat_.prompt_tokens());
  return Json{{"input_tokens", chat_.prompt_tokens() - cached},
              {"output_tokens", chat_.completion_tokens()},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", cached}};
}

Json AnthropicBuilder::Message() const {
  const std::optional<std::string> stop_reason = StopReason();
  Json content = content_;
  // A tool_use block still open (streamed, not yet stopped) shows its input so far.
  if (open_ == Kind::kToolUse) content[open_index_]["input"] = ToolInput(arguments_[open_index_]);
  return Json{{"id", id_},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model_},
              {"content", std::move(content)},
              {"stop_reason", stop_reason ? Json(*stop_reason) : Json(nullptr)},
              {"stop_sequence", stop_reason == "stop_sequence" ? Json(matched_stop_) : Json(nullptr)},
              {"usage", Usage()}};
}

}  // namespace mlaserve::router::openai
