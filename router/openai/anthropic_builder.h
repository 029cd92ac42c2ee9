// AnthropicBuilder: the Messages API's message object, and its server-sent events, for one
// /v1/messages request, from the Generate messages of the chat call it was served with. The
// answer is split by the chat route's own ResponseBuilder (the reasoning splitter, the tool-call
// parser); this class lays the pieces out as Anthropic's content blocks:
//
//   {"type": "thinking", "thinking", "signature": ""}   the reasoning, when the prompt opened
//                                                       a <think> (no signature: nothing is signed)
//   {"type": "text", "text"}                            the answer's text
//   {"type": "tool_use", "id": "toolu_…", "name", "input": {...}}
//                                                       per tool call; `input` the arguments'
//                                                       JSON object (a cut call's: the object its
//                                                       text starts, closed)
//
// stop_reason: "tool_use" when the answer calls tools, "max_tokens" when cut by max_tokens (or
// the context), "stop_sequence" with `stop_sequence` the matched one, else "end_turn". usage:
// input_tokens (the prompt's, less those read from the prefix cache), cache_read_input_tokens
// (chat's cached_tokens), cache_creation_input_tokens 0, output_tokens.
//
// Streamed, each event is `event: NAME` + `data: {"type": NAME, ...}`, in the order the
// `anthropic` client's stream accumulates them: message_start (once the call's first message
// brings the prompt's token count; content empty, stop_reason null), per block
// content_block_start, content_block_delta (text_delta / thinking_delta / input_json_delta with
// partial_json) ..., content_block_stop, each with the block's `index`; a block is stopped when
// the next starts; then message_delta ({stop_reason, stop_sequence}, the final usage) and
// message_stop. An error after the start is an `error` event, ending the stream.
//
// Pure (no I/O); one per request, not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlaserve/v1/api.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/anthropic_error.h"
#include "router/openai/chat_prompt.h"
#include "router/openai/response_builder.h"

namespace mlaserve::router::openai {

class AnthropicBuilder {
 public:
  // `chat`: the chat request the Messages request became (AnthropicToChat) and `setup` what its
  // prompt set up; `stream`: events are written; `id` "msg_…".
  AnthropicBuilder(const ApiRequest& chat, const ChatPrompt::Setup& setup, bool stream, std::string id);

  // The events one Generate message adds (none when not streaming: it is only accumulated).
  std::string OnMessage(const v1::GenerateResponse& message);
  // Streaming: an error after the stream started.
  static std::string ErrorEvent(const AnthropicError& error);

  bool complete() const { return chat_.complete(); }
  // The message object: content so far, and once complete() the stop reason and final usage.
  nlohmann::ordered_json Message() const;

  // "msg_" and 24 random letters and digits, as Anthropic names messages.
  static std::string NewMessageId();
  // A tool_use block's input: `arguments` (a call's JSON text) as an object; text cut short
  // (max_tokens) gives the object it starts, closed; anything else {}.
  static nlohmann::ordered_json ToolInput(const std::string& arguments);

 private:
  enum class Kind { kNone, kThinking, kText, kToolUse };
  void Emit(const char* type, nlohmann::ordered_json payload);
  void Start();
  // Starts a block of `kind` (stopping the open one); returns its index.
  size_t Open(Kind kind, nlohmann::ordered_json block);
  void CloseOpen();
  void AddThinking(const std::string& text);
  void AddText(const std::string& text);
  void AddToolDeltas(const nlohmann::ordered_json& deltas);
  void Finish();
  std::optional<std::string> StopReason() const;
  nlohmann::ordered_json Usage() const;

  const bool stream_;
  const std::string id_;
  const std::string model_;
  ResponseBuilder chat_;  // splits the answer as /v1/chat/completions does
  nlohmann::ordered_json content_ = nlohmann::ordered_json::array();
  std::vector<std::string> arguments_;  // per block: a tool_use block's JSON text so far
  std::vector<size_t> call_blocks_;     // block index of tool call i
  std::string events_;                  // of the message being taken
  bool started_ = false;                // message_start sent
  Kind open_ = Kind::kNone;
  size_t open_index_ = 0;
  std::string matched_stop_;  // the stop sequence that ended the answer
};

}  // namespace mlaserve::router::openai
