#include "router/openai/response_builder.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

std::string Event(const Json& payload) { return absl::StrCat("data: ", payload.dump(), "\n\n"); }

// OpenAI's values. ABORT never gets here (GenerateExchange makes it an error); STOP covers
// EOS, stop tokens and stop strings.
std::string FinishReasonName(v1::FinishReason reason) {
  return reason == v1::FINISH_REASON_LENGTH ? "length" : "stop";
}

// OpenAI's call ids: "call_" and 24 random letters and digits.
std::string NewCallId() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local absl::BitGen gen;
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)];
  return id;
}

// The pieces of two consecutive runs of tokens in one chunk's completions logprobs.
Json JoinedLogprobs(Json first, const Json& second) {
  if (first.is_null()) return second;
  if (second.is_null()) return first;
  for (auto& [key, value] : first.items()) {
    for (const auto& item : second[key]) value.push_back(item);
  }
  return first;
}

}  // namespace

ResponseBuilder::ResponseBuilder(const ApiRequest& request, std::string id, int64_t created,
                                 bool prompt_opens_reasoning, int choice_index, int choice_count,
                                 bool counts_prompt)
    : endpoint_(request.endpoint),
      stream_(request.stream),
      choice_index_(choice_index),
      single_choice_(choice_count == 1),
      counts_prompt_(counts_prompt),
      include_usage_(request.include_usage),
      continuous_usage_(request.continuous_usage_stats),
      model_(request.model),
      id_(std::move(id)),
      created_(created),
      splitter_(prompt_opens_reasoning) {}

void ResponseBuilder::set_tool_calls(ToolCallFormat format, const std::string& opening, bool parallel,
                                     std::vector<std::string> history_call_ids) {
  tool_calls_ = std::make_unique<ToolCallParser>(format, std::move(history_call_ids));
  splitter_.set_content_openers(ToolCallParser::ReasoningEndingOpenings(format));
  parallel_tool_calls_ = parallel;
  if (!opening.empty()) opening_deltas_ = ToolDeltas(tool_calls_->Add(opening).calls);
  if (call_ids_.empty()) unsaid_opening_ = opening;
}

std::string ResponseBuilder::ToolAnswerContent(std::string content, bool call_started, bool finish) {
  if (!unsaid_opening_.empty() && !content.empty()) {
    // The parser hands an unnamed block back whole, so the opening leads it.
    if (content.starts_with(unsaid_opening_)) content.erase(0, unsaid_opening_.size());
    unsaid_opening_.clear();
  }
  content.insert(0, std::exchange(held_whitespace_, ""));
  if (finish && call_ids_.empty()) return content;  // no call followed: all of it
  const size_t end = content.find_last_not_of(" \t\r\n");
  const size_t kept = end == std::string::npos ? 0 : end + 1;
  if (!call_started) held_whitespace_ = content.substr(kept);
  content.resize(kept);
  return content;
}

Json ResponseBuilder::ToolDeltas(const std::vector<ToolCallDelta>& deltas) {
  Json out = nullptr;
  for (const ToolCallDelta& d : deltas) {
    if (!Keeps(d.index)) continue;
    Json call = Json{{"index", d.index}};
    if (d.name.has_value()) {
      while (call_ids_.size() <= static_cast<size_t>(d.index)) call_ids_.push_back(NewCallId());
      if (d.id.has_value()) call_ids_[d.index] = *d.id;
      call["id"] = call_ids_[d.index];
      call["type"] = "function";
      call["function"] = Json{{"name", *d.name}, {"arguments", d.arguments}};
    } else if (!d.arguments.empty()) {
      call["function"] = Json{{"arguments", d.arguments}};
    } else {
      continue;
    }
    if (out.is_null()) out = Json::array();
    out.push_back(std::move(call));
  }
  return out;
}

Json ResponseBuilder::Envelope(const char* object) const {
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

Json ResponseBuilder::Usage() const {
  return Json{{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion_tokens_},
              {"total_tokens", prompt_tokens_ + completion_tokens_},
              {"prompt_tokens_details", Json{{"cached_tokens", cached_tokens_}}}};
}

std::string ResponseBuilder::StartEvents() {
  if (endpoint_ != Endpoint::kChat) {
    // With echo logprobs the echo waits for the prompt's logprobs (FinishPrompt).
    if (echo_.empty() || echo_logprobs_) return "";
    return ChunkEvent(echo_, "", std::nullopt, /*with_usage_now=*/false);
  }
  Json chunk = Envelope("chat.completion.chunk");
  chunk["choices"] = Json::array({Json{{"index", choice_index_},
                                       {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
  if (include_usage_) chunk["usage"] = continuous_usage_ ? Usage() : Json(nullptr);
  std::string events = Event(chunk);
  if (!opening_deltas_.is_null()) {
    events += ChunkEvent("", "", std::nullopt, /*with_usage_now=*/false, nullptr, std::move(opening_deltas_));
    opening_deltas_ = nullptr;
  }
  return events;
}

void ResponseBuilder::AddText(const std::string& text, bool finish, std::string* text_delta,
                              std::string* reasoning_delta, Json* tool_deltas) {
  if (endpoint_ != Endpoint::kChat) {
    *text_delta += text;
    text_ += text;
    return;
  }
  ReasoningSplitter::Delta d = finish ? splitter_.Finish() : splitter_.Add(text);
  *reasoning_delta += d.reasoning;
  reasoning_ += d.reasoning;
  if (tool_calls_ == nullptr) {
    *text_delta += d.content;
    text_ += d.content;
    return;
  }
  ToolCallParser::Delta calls = tool_calls_->Add(d.content);
  if (finish) {
    ToolCallParser::Delta last = tool_calls_->Finish();
    calls.content += last.content;
    calls.calls.insert(calls.calls.end(), last.calls.begin(), last.calls.end());
  }
  *tool_deltas = ToolDeltas(calls.calls);
  const bool call_started = std::any_of(calls.calls.begin(), calls.calls.end(),
                                        [](const ToolCallDelta& c) { return c.name.has_value(); });
  const std::string content = ToolAnswerContent(std::move(calls.content), call_started, finish);
  *text_delta += content;
  text_ += content;
}

std::string ResponseBuilder::ChunkEvent(const std::string& text, const std::string& reasoning,
                                        const std::optional<std::string>& finish_reason,
                                        bool with_usage_now, Json logprobs, Json tool_calls) {
  if (!tool_calls.is_array() || tool_calls.size() <= 1) {
    return OneChunkEvent(text, reasoning, finish_reason, with_usage_now, std::move(logprobs),
                         std::move(tool_calls));
  }
  std::string events;
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    const bool first = i == 0;
    const bool last = i + 1 == tool_calls.size();
    events += OneChunkEvent(first ? text : "", first ? reasoning : "", last ? finish_reason : std::nullopt,
                            with_usage_now, first ? std::move(logprobs) : Json(nullptr),
                            Json::array({std::move(tool_calls[i])}));
  }
  return events;
}

std::string ResponseBuilder::OneChunkEvent(const std::string& text, const std::string& reasoning,
                                           const std::optional<std::string>& finish_reason,
                                           bool with_usage_now, Json logprobs, Json tool_calls) {
  Json choice = Json{{"index", choice_index_}};
  if (endpoint_ == Endpoint::kChat) {
    Json delta = Json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!text.empty()) delta["content"] = text;
    if (!tool_calls.is_null()) delta["tool_calls"] = std::move(tool_calls);
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? Json(*finish_reason) : Json(nullptr);
  Json chunk = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = Json::array({std::move(choice)});
  if (include_usage_) chunk["usage"] = with_usage_now ? Usage() : Json(nullptr);
  return Event(chunk);
}

void ResponseBuilder::FinishPrompt(std::string* echo_text, Json* echo_logprobs) {
  if (prompt_finished_) return;
  prompt_finished_ = true;
  if (!echo_logprobs_) return;
  *echo_logprobs = logprobs_->AddPrompt(prompt_entries_, echo_top_n_);
  *echo_text = echo_;
}

ResponseBuilder::Piece ResponseBuilder::Absorb(const v1::GenerateResponse& message) {
  Piece piece;
  if (message.has_chunk()) {
    piece.kind = Piece::Kind::kChunk;
    const v1::GenerateChunk& c = message.chunk();
    prompt_tokens_ = c.prompt_tokens();
    if (!prompt_only_) completion_tokens_ = c.completion_tokens();
    prompt_entries_.insert(prompt_entries_.end(), c.prompt_logprobs().begin(),
                           c.prompt_logprobs().end());
    // The prompt's entries all precede the first generated token.
    if (c.completion_tokens() > 0) FinishPrompt(&piece.text, &piece.logprobs);
    if (!prompt_only_) {
      AddText(c.text(), /*finish=*/false, &piece.text, &piece.reasoning, &piece.tool_calls);
      if (logprobs_ != nullptr && c.logprobs_size() > 0) {
        piece.logprobs = JoinedLogprobs(
            std::move(piece.logprobs),
            logprobs_->Add(std::span<const int32_t>(c.token_ids().data(), c.token_ids_size()),
                           c.logprobs()));
      }
    }
  } else if (message.has_complete()) {
    piece.kind = Piece::Kind::kComplete;
    const v1::GenerateComplete& c = message.complete();
    prompt_tokens_ = c.prompt_tokens();
    cached_tokens_ = c.cached_prompt_tokens();
    completion_tokens_ = prompt_only_ ? 0 : c.completion_tokens();
    FinishPrompt(&piece.text, &piece.logprobs);  // a prompt whose output was all dropped or held
    if (endpoint_ == Endpoint::kChat) {
      AddText("", /*finish=*/true, &piece.text, &piece.reasoning, &piece.tool_calls);
    }
    // The prompt alone (max_tokens 0): it stopped at its length, whatever the dropped token was.
    finish_reason_ = prompt_only_ ? "length" : FinishReasonName(c.finish_reason());
    // OpenAI's reason when the answer calls tools (a cut-off answer stays "length").
    if (*finish_reason_ == "stop" && !call_ids_.empty()) finish_reason_ = "tool_calls";
  }
  return piece;
}

std::string ResponseBuilder::OnMessage(const v1::GenerateResponse& message) {
  Piece p = Absorb(message);
  if (!stream_ || p.kind == Piece::Kind::kNone) return "";
  if (p.kind == Piece::Kind::kChunk) {
    if (p.text.empty() && p.reasoning.empty() && !continuous_usage_ && p.logprobs.is_null() &&
        p.tool_calls.is_null()) {
      return "";
    }
    return ChunkEvent(p.text, p.reasoning, std::nullopt, continuous_usage_, std::move(p.logprobs),
                      std::move(p.tool_calls));
  }
  std::string events;
  if (!p.tool_calls.is_null()) {
    events += ChunkEvent("", "", std::nullopt, continuous_usage_, nullptr, std::move(p.tool_calls));
  }
  events += ChunkEvent(p.text, p.reasoning, finish_reason_, continuous_usage_, std::move(p.logprobs));
  if (!single_choice_) return events;  // EndOfChoices() ends the stream
  if (include_usage_) {
    Json last = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
    last["choices"] = Json::array();
    last["usage"] = Usage();
    events += Event(last);
  }
  events += "data: [DONE]\n\n";
  return events;
}

std::vector<ResponseBuilder::Call> ResponseBuilder::tool_calls() const {
  std::vector<Call> out;
  if (tool_calls_ == nullptr) return out;
  const std::vector<ToolCall>& parsed = tool_calls_->calls();
  for (size_t i = 0; i < parsed.size() && i < call_ids_.size(); ++i) {
    if (!Keeps(static_cast<int>(i))) continue;
    out.push_back(Call{call_ids_[i], parsed[i].name, parsed[i].arguments});
  }
  return out;
}

std::string ResponseBuilder::ErrorEvents(const ApiError& error) {
  return Event(ErrorBody(error)) + "data: [DONE]\n\n";
}

Json ResponseBuilder::Body() const {
  Json body = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion");
  Json choice = Json{{"index", choice_index_}};
  if (endpoint_ == Endpoint::kChat) {
    Json message = Json{{"role", "assistant"}};
    // A reasoning response whose reasoning never ended has no content yet (DeepSeek's API).
    const bool no_content = splitter_.in_reasoning_mode() && !splitter_.reasoning_ended() && text_.empty();
    // An answer that only calls tools has null content, as OpenAI's.
    const bool only_calls = !call_ids_.empty() && text_.empty();
    message["content"] = no_content || only_calls ? Json(nullptr) : Json(text_);
    if (splitter_.in_reasoning_mode()) message["reasoning_content"] = reasoning_;
    if (!call_ids_.empty()) {
      Json calls = Json::array();
      for (const Call& call : tool_calls()) {
        calls.push_back(Json{{"id", call.id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    choice["message"] = std::move(message);
  } else {
    choice["text"] = echo_ + text_;
  }
  choice["logprobs"] = logprobs_ != nullptr ? logprobs_->All() : Json(nullptr);
  choice["finish_reason"] = finish_reason_ ? Json(*finish_reason_) : Json(nullptr);
  // vLLM's prompt_logprobs: a completions choice's own; chat's once, on the response.
  Json prompt_logprobs = nullptr;
  if (prompt_codec_ != nullptr) {
    prompt_logprobs = PromptLogprobsJson(*prompt_codec_, prompt_entries_, prompt_top_n_);
    if (endpoint_ != Endpoint::kChat) choice["prompt_logprobs"] = std::move(prompt_logprobs);
  }
  body["choices"] = Json::array({std::move(choice)});
  body["usage"] = Usage();
  if (endpoint_ == Endpoint::kChat && prompt_codec_ != nullptr) {
    body["prompt_logprobs"] = std::move(prompt_logprobs);
  }
  return body;
}

// OpenAI's usage of several choices: each prompt counted once, every choice's completion.
nlohmann::ordered_json ResponseBuilder::SummedUsage(
    const std::vector<const ResponseBuilder*>& choices) {
  int64_t prompt = 0;
  int64_t cached = 0;
  int64_t completion = 0;
  for (const ResponseBuilder* c : choices) {
    if (c->counts_prompt_) {
      prompt += c->prompt_tokens_;
      cached += c->cached_tokens_;
    }
    completion += c->completion_tokens_;
  }
  return nlohmann::ordered_json{
      {"prompt_tokens", prompt},
      {"completion_tokens", completion},
      {"total_tokens", prompt + completion},
      {"prompt_tokens_details", nlohmann::ordered_json{{"cached_tokens", cached}}}};
}

std::string ResponseBuilder::EndOfChoices(const std::vector<const ResponseBuilder*>& choices) {
  const ResponseBuilder& first = *choices.front();
  std::string events;
  if (first.include_usage_) {
    Json last = first.Envelope(first.endpoint_ == Endpoint::kChat ? "chat.completion.chunk"
                                                                   : "text_completion");
    last["choices"] = Json::array();
    last["usage"] = SummedUsage(choices);
    events += Event(last);
  }
  return events + "data: [DONE]\n\n";
}

nlohmann::ordered_json ResponseBuilder::MergeChoices(
    const std::vector<const ResponseBuilder*>& choices) {
  Json body = choices.front()->Body();
  for (size_t i = 1; i < choices.size(); ++i) {
    body["choices"].push_back(choices[i]->Body()["choices"][0]);
  }
  body["usage"] = SummedUsage(choices);
  return body;
}

}  // namespace mlaserve::router::openai
