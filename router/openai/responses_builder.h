// ResponsesBuilder: the Responses API's response object, and its server-sent events, for one
// /v1/responses request, from the Generate messages of the chat call it was served with. The
// answer is split by the chat route's own ResponseBuilder (the reasoning splitter, the tool-call
// parser, logprobs); this class only lays the pieces out as Responses output items:
//
//   {"type": "reasoning", "id": "rs_…", "summary": [], "content": [{"type": "reasoning_text", "text"}]}
//       when the model reasoned (a prompt that opens <think>);
//   {"type": "message", "id": "msg_…", "role": "assistant", "status",
//    "content": [{"type": "output_text", "text", "annotations": [], "logprobs": [...]}]}
//       the answer's text (an empty one when the answer has nothing else);
//   {"type": "function_call", "id": "fc_…", "call_id", "name", "arguments", "status"}
//       per tool call, call_id the id chat would give the call.
//
// Events, each `event: TYPE` + `data: {..., "type", "sequence_number"}` (no [DONE]), in the
// order the `openai` client's stream helper accumulates them: response.created,
// response.in_progress; per item response.output_item.added, then for a message
// response.content_part.added, response.output_text.delta..., response.output_text.done,
// response.content_part.done; for reasoning the same with response.reasoning_text.delta / .done;
// for a call response.function_call_arguments.delta... / .done; then response.output_item.done.
// An item is closed when the next one opens. Last: response.completed, or response.incomplete
// (status "incomplete", incomplete_details.reason "max_output_tokens") when the answer was cut
// by max_output_tokens or the context; an error after the start: `error`, then response.failed.
//
// Pure (no I/O); one per request, not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlaserve/v1/api.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/chat_prompt.h"
#include "router/openai/response_builder.h"
#include "router/openai/responses_request.h"
#include "router/text_codec.h"

namespace mlaserve::router::openai {

class ResponsesBuilder {
 public:
  // `request`: the Responses request (its echoed fields); `chat`: the chat request it became
  // (ToChatRequest) and `setup` what its prompt set up; `id` "resp_…", `created_at` unix
  // seconds. `codec` (which must outlive this) names logprobs' tokens and counts the reasoning
  // tokens.
  ResponsesBuilder(const ResponsesRequest& request, const ApiRequest& chat, const ChatPrompt::Setup& setup,
                   std::string id, int64_t created_at, const TextCodec* codec);

  // Streaming: response.created and response.in_progress.
  std::string StartEvents();
  // The events one Generate message adds (none when not streaming: the message is only
  // accumulated).
  std::string OnMessage(const v1::GenerateResponse& message);
  // Streaming: an error after the stream started (an `error` event, then response.failed).
  std::string ErrorEvents(const ApiError& error);

  bool complete() const { return chat_.complete(); }
  // The response object: in progress (no usage) until complete(), then final.
  nlohmann::ordered_json Response() const;
  // The output items so far (complete ones once complete()).
  const nlohmann::ordered_json& output() const { return output_; }
  const std::string& id() const { return id_; }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  // Adds an event (streaming only), numbering it.
  void Emit(const char* type, nlohmann::ordered_json payload);
  void AddReasoning(const std::string& text);
  void AddText(const std::string& text);
  void AddToolDeltas(const nlohmann::ordered_json& deltas);
  // Opens an item of `kind` (closing the open one) and returns its output index.
  size_t Open(Kind kind, nlohmann::ordered_json item);
  void CloseOpen(const char* status);
  void Finish();
  nlohmann::ordered_json Usage() const;

  const ResponsesRequest& request_;
  const bool stream_;
  const bool logprobs_;
  const std::string id_;
  const int64_t created_at_;
  const TextCodec* const codec_;
  ResponseBuilder chat_;  // splits the answer as /v1/chat/completions does
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  std::string events_;   // of the message being taken
  int64_t sequence_ = 0;
  Kind open_ = Kind::kNone;
  size_t open_index_ = 0;
  std::optional<int64_t> completed_at_;
  std::string status_ = "in_progress";
  nlohmann::ordered_json error_ = nullptr;  // response.failed's {"code", "message"}
  // The logprobs of tokens taken since the last text (chat's content entries), for the next
  // text delta: a chunk that wrote only reasoning or a tool call drops them.
  nlohmann::ordered_json pending_logprobs_ = nlohmann::ordered_json::array();
  std::vector<size_t> call_items_;  // output index of tool call i
};

}  // namespace mlaserve::router::openai
