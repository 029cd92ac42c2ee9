#include "router/openai/responses_builder.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// An output item's id: `prefix` and 32 random hex digits (OpenAI's items are named so).
std::string ItemId(const char* prefix) {
  static constexpr char kHex[] = "0123456789abcdef";
  thread_local absl::BitGen gen;
  std::string id = prefix;
  for (int i = 0; i < 32; ++i) id += kHex[absl::Uniform<size_t>(gen, 0, 16)];
  return id;
}

}  // namespace

ResponsesBuilder::ResponsesBuilder(const ResponsesRequest& request, const ApiRequest& chat,
                                   const ChatPrompt::Setup& setup, std::string id, int64_t created_at,
                                   const TextCodec* codec)
    : request_(request),
      stream_(request.stream),
      logprobs_(request.logprobs),
      id_(std::move(id)),
      created_at_(created_at),
      codec_(codec),
      chat_(chat, id_, created_at, setup.opens_reasoning) {
  if (setup.tool_calls.has_value()) {
    chat_.set_tool_calls(*setup.tool_calls, setup.call_opening, chat.parallel_tool_calls, setup.history_call_ids);
  }
  if (chat.sampling.has_logprobs()) chat_.set_logprobs(codec);
}

void ResponsesBuilder::Emit(const char* type, Json payload) {
  const int64_t number = sequence_++;
  if (!stream_) return;
  Json event = Json{{"type", type}};
  for (auto& [key, value] : payload.items()) event[key] = std::move(value);
  event["sequence_number"] = number;
  absl::StrAppend(&events_, "event: ", type, "\ndata: ", event.dump(-1, ' ', false, Json::error_handler_t::replace),
                  "\n\n");
}

std::string ResponsesBuilder::StartEvents() {
  events_.clear();
  Emit("response.created", Json{{"response", Response()}});
  Emit("response.in_progress", Json{{"response", Response()}});
  // A forced call's opening (tool_choice "required" or named) is the router's: its name, when
  // it has one, opens the call item before the model writes anything.
  AddToolDeltas(chat_.TakeOpeningToolCalls());
  return std::exchange(events_, "");
}

size_t ResponsesBuilder::Open(Kind kind, Json item) {
  CloseOpen("completed");
  output_.push_back(item);
  open_ = kind;
  open_index_ = output_.size() - 1;
  Emit("response.output_item.added", Json{{"output_index", open_index_}, {"item", std::move(item)}});
  return open_index_;
}

void ResponsesBuilder::CloseOpen(const char* status) {
  if (open_ == Kind::kNone) return;
  Json& item = output_[open_index_];
  const Json at = Json{{"item_id", item["id"]}, {"output_index", open_index_}};
  if (open_ == Kind::kReasoning || open_ == Kind::kMessage) {
    const Json& part = item["content"][0];
    Json done = at;
    done["content_index"] = 0;
    done["text"] = part["text"];
    if (open_ == Kind::kMessage) done["logprobs"] = part["logprobs"];
    Emit(open_ == Kind::kMessage ? "response.output_text.done" : "response.reasoning_text.done", std::move(done));
    Json part_done = at;
    part_done["content_index"] = 0;
    part_done["part"] = part;
    Emit("response.content_part.done", std::move(part_done));
  } else {
    Json done = at;
    done["name"] = item["name"];
    done["arguments"] = item["arguments"];
    Emit("response.function_call_arguments.done", std::move(done));
  }
  item["status"] = status;
  Emit("response.output_item.done", Json{{"output_index", open_index_}, {"item", item}});
  open_ = Kind::kNone;
}

void ResponsesBuilder::AddReasoning(const std::string& text) {
  if (open_ != Kind::kReasoning) {
    const size_t i = Open(Kind::kReasoning, Json{{"id", ItemId("rs_")},
                                                 {"type", "reasoning"},
                                                 {"summary", Json::array()},
                                                 {"content", Json::array()},
                                                 {"status", "in_progress"}});
    Json part = Json{{"type", "reasoning_text"}, {"text", ""}};
    output_[i]["content"].push_back(part);
    Emit("response.content_part.added",
         Json{{"item_id", output_[i]["id"]}, {"output_index", i}, {"content_index", 0}, {"part", std::move(part)}});
  }
  Json& part = output_[open_index_]["content"][0];
  part["text"] = part["text"].get<std::string>() + text;
  Emit("response.reasoning_text.delta",
       Json{{"item_id", output_[open_index_]["id"]}, {"output_index", open_index_}, {"content_index", 0}, {"delta", text}});
}

void ResponsesBuilder::AddText(const std::string& text) {
  if (open_ != Kind::kMessage) {
    const size_t i = Open(Kind::kMessage, Json{{"id", ItemId("msg_")},
                                               {"type", "message"},
                                               {"status", "in_progress"},
                                               {"role", "assistant"},
                                               {"content", Json::array()}});
    Json part = Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
    output_[i]["content"].push_back(part);
    Emit("response.content_part.added",
         Json{{"item_id", output_[i]["id"]}, {"output_index", i}, {"content_index", 0}, {"part", std::move(part)}});
  }
  if (text.empty()) return;
  Json& part = output_[open_index_]["content"][0];
  part["text"] = part["text"].get<std::string>() + text;
  Json logprobs = std::exchange(pending_logprobs_, Json::array());
  for (const Json& entry : logprobs) part["logprobs"].push_back(entry);
  Emit("response.output_text.delta", Json{{"item_id", output_[open_index_]["id"]},
                                          {"output_index", open_index_},
                                          {"content_index", 0},
                                          {"delta", text},
                                          {"logprobs", std::move(logprobs)}});
}

void ResponsesBuilder::AddToolDeltas(const Json& deltas) {
  if (!deltas.is_array()) return;
  for (const Json& d : deltas) {
    const size_t call = d["index"].get<size_t>();
    const Json& function = d["function"];
    if (d.contains("id")) {
      const size_t i = Open(Kind::kCall, Json{{"id", ItemId("fc_")},
                                              {"type", "function_call"},
                                              {"status", "in_progress"},
                                              {"call_id", d["id"]},
                                              {"name", function["name"]},
                                              {"arguments", ""}});
      if (call_items_.size() <= call) call_items_.resize(call + 1, output_.size());
      call_items_[call] = i;
    }
    const std::string arguments = function.value("arguments", "");
    if (arguments.empty() || call >= call_items_.size() || call_items_[call] >= output_.size()) continue;
    const size_t i = call_items_[call];
    output_[i]["arguments"] = output_[i]["arguments"].get<std::string>() + arguments;
    Emit("response.function_call_arguments.delta",
         Json{{"item_id", output_[i]["id"]}, {"output_index", i}, {"delta", arguments}});
  }
}

std::string ResponsesBuilder::OnMessage(const v1::GenerateResponse& message) {
  events_.clear();
  ResponseBuilder::Piece p = chat_.Absorb(message);
  if (p.kind == ResponseBuilder::Piece::Kind::kNone) return "";
  AddToolDeltas(chat_.TakeOpeningToolCalls());  // not streamed: no StartEvents took it
  if (logprobs_ && p.logprobs.is_object() && p.logprobs.contains("content")) {
    for (const Json& entry : p.logprobs["content"]) pending_logprobs_.push_back(entry);
  }
  if (!p.reasoning.empty()) AddReasoning(p.reasoning);
  if (p.kind == ResponseBuilder::Piece::Kind::kComplete) {
    // The end's pieces: what the parsers held back (chat sends the calls first, too).
    AddToolDeltas(p.tool_calls);
    if (!p.text.empty()) AddText(p.text);
    Finish();
    return std::exchange(events_, "");
  }
  if (!p.text.empty()) AddText(p.text);
  AddToolDeltas(p.tool_calls);
  // Tokens that wrote only reasoning or a call are not the message's.
  if (p.text.empty() && (!p.reasoning.empty() || !p.tool_calls.is_null())) pending_logprobs_ = Json::array();
  return std::exchange(events_, "");
}

void ResponsesBuilder::Finish() {
  const bool incomplete = chat_.finish_reason() == "length";
  const char* item_status = incomplete ? "incomplete" : "completed";
  if (open_ == Kind::kMessage) {  // tokens that wrote nothing after the text (EOS) are still its
    for (const Json& entry : pending_logprobs_) output_[open_index_]["content"][0]["logprobs"].push_back(entry);
  }
  pending_logprobs_ = Json::array();
  CloseOpen(item_status);
  bool answered = false;
  for (const Json& item : output_) answered = answered || item["type"] != "reasoning";
  if (!answered) {  // an empty answer is an empty message, as clients look for one
    AddText("");
    CloseOpen(item_status);
  }
  status_ = incomplete ? "incomplete" : "completed";
  completed_at_ = absl::ToUnixSeconds(absl::Now());
  Emit(incomplete ? "response.incomplete" : "response.completed", Json{{"response", Response()}});
}

std::string ResponsesBuilder::ErrorEvents(const ApiError& error) {
  events_.clear();
  Emit("error", Json{{"code", error.code ? Json(*error.code) : Json(nullptr)},
                     {"message", error.message},
                     {"param", error.param ? Json(*error.param) : Json(nullptr)}});
  status_ = "failed";
  // A refused request (400) is the prompt's fault; anything else (an abort, 499; a worker's
  // failure) the server's.
  error_ = Json{{"code", error.http_status == 400 ? "invalid_prompt" : "server_error"}, {"message", error.message}};
  Emit("response.failed", Json{{"response", Response()}});
  return std::exchange(events_, "");
}

Json ResponsesBuilder::Usage() const {
  int64_t reasoning_tokens = 0;
  if (!chat_.reasoning().empty() && codec_ != nullptr) {
    // The reasoning text as the tokenizer counts it (the chunks' tokens are not told apart).
    if (absl::StatusOr<std::vector<int32_t>> ids = codec_->EncodeVerbatim(chat_.reasoning()); ids.ok()) {
      reasoning_tokens = std::min<int64_t>(static_cast<int64_t>(ids->size()), chat_.completion_tokens());
    }
  }
  return Json{{"input_tokens", chat_.prompt_tokens()},
              // cache_write_tokens: a field the client's types require; the prefix cache's
              // writes are not counted (nothing is billed for them).
              {"input_tokens_details", {{"cached_tokens", chat_.cached_tokens()}, {"cache_write_tokens", 0}}},
              {"output_tokens", chat_.completion_tokens()},
              {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
              {"total_tokens", chat_.prompt_tokens() + chat_.completion_tokens()}};
}

Json ResponsesBuilder::Response() const {
  const ResponsesRequest::Echo& echo = request_.echo;
  Json r = Json{{"id", id_}, {"object", "response"}, {"created_at", created_at_}, {"status", status_}};
  r["background"] = false;
  r["error"] = error_;
  r["incomplete_details"] =
      status_ == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
  r["instructions"] = request_.instructions ? Json(*request_.instructions) : Json(nullptr);
  r["max_output_tokens"] = echo.max_output_tokens;
  r["max_tool_calls"] = nullptr;
  r["model"] = request_.model;
  r["output"] = output_;
  r["parallel_tool_calls"] = echo.parallel_tool_calls;
  r["previous_response_id"] = request_.previous_response_id ? Json(*request_.previous_response_id) : Json(nullptr);
  r["reasoning"] = echo.reasoning;
  r["service_tier"] = echo.service_tier;
  r["store"] = request_.store;
  r["temperature"] = echo.temperature;
  r["text"] = echo.text;
  r["tool_choice"] = echo.tool_choice;
  r["tools"] = echo.tools;
  r["top_logprobs"] = echo.top_logprobs;
  r["top_p"] = echo.top_p;
  r["truncation"] = "disabled";
  r["usage"] = status_ == "completed" || status_ == "incomplete" ? Usage() : Json(nullptr);
  r["user"] = echo.user;
  r["metadata"] = echo.metadata;
  if (completed_at_.has_value()) r["completed_at"] = *completed_at_;
  return r;
}

}  // namespace mlaserve::router::openai
