#include "router/openai/response_builder.h"

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

Json ResponseBuilder::Envelope(const char* object) const {
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

Json ResponseBuilder::Usage() const {
  return Json{{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion_tokens_},
              {"total_tokens", prompt_tokens_ + completion_tokens_}};
}

std::string ResponseBuilder::StartEvents() {
  if (endpoint_ != Endpoint::kChat) {
    return echo_.empty() ? "" : ChunkEvent(echo_, "", std::nullopt, /*with_usage_now=*/false);
  }
  Json chunk = Envelope("chat.completion.chunk");
  chunk["choices"] = Json::array({Json{{"index", choice_index_},
                                       {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
  if (include_usage_) chunk["usage"] = continuous_usage_ ? Usage() : Json(nullptr);
  return Event(chunk);
}

void ResponseBuilder::AddText(const std::string& text, std::string* text_delta,
                              std::string* reasoning_delta) {
  if (endpoint_ != Endpoint::kChat) {
    *text_delta += text;
    text_ += text;
    return;
  }
  ReasoningSplitter::Delta d = splitter_.Add(text);
  *text_delta += d.content;
  *reasoning_delta += d.reasoning;
  text_ += d.content;
  reasoning_ += d.reasoning;
}

std::string ResponseBuilder::ChunkEvent(const std::string& text, const std::string& reasoning,
                                        const std::optional<std::string>& finish_reason,
                                        bool with_usage_now, Json logprobs) {
  Json choice = Json{{"index", choice_index_}};
  if (endpoint_ == Endpoint::kChat) {
    Json delta = Json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!text.empty()) delta["content"] = text;
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

std::string ResponseBuilder::OnMessage(const v1::GenerateResponse& message) {
  std::string events;
  if (message.has_chunk()) {
    const v1::GenerateChunk& c = message.chunk();
    prompt_tokens_ = c.prompt_tokens();
    completion_tokens_ = c.completion_tokens();
    std::string text, reasoning;
    AddText(c.text(), &text, &reasoning);
    Json logprobs = nullptr;
    if (logprobs_ != nullptr && c.logprobs_size() > 0) {
      logprobs = logprobs_->Add(std::span<const int32_t>(c.token_ids().data(), c.token_ids_size()),
                                c.logprobs());
    }
    if (stream_ && (!text.empty() || !reasoning.empty() || continuous_usage_ || !logprobs.is_null())) {
      events += ChunkEvent(text, reasoning, std::nullopt, continuous_usage_, std::move(logprobs));
    }
  } else if (message.has_complete()) {
    const v1::GenerateComplete& c = message.complete();
    prompt_tokens_ = c.prompt_tokens();
    completion_tokens_ = c.completion_tokens();
    std::string text, reasoning;
    if (endpoint_ == Endpoint::kChat) {
      ReasoningSplitter::Delta d = splitter_.Finish();
      text = d.content;
      reasoning = d.reasoning;
      text_ += d.content;
      reasoning_ += d.reasoning;
    }
    finish_reason_ = FinishReasonName(c.finish_reason());
    if (stream_) {
      events += ChunkEvent(text, reasoning, finish_reason_, continuous_usage_);
      if (!single_choice_) return events;  // EndOfChoices() ends the stream
      if (include_usage_) {
        Json last = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
        last["choices"] = Json::array();
        last["usage"] = Usage();
        events += Event(last);
      }
      events += "data: [DONE]\n\n";
    }
  }
  return events;
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
    message["content"] = no_content ? Json(nullptr) : Json(text_);
    if (splitter_.in_reasoning_mode()) message["reasoning_content"] = reasoning_;
    choice["message"] = std::move(message);
  } else {
    choice["text"] = echo_ + text_;
  }
  choice["logprobs"] = logprobs_ != nullptr ? logprobs_->All() : Json(nullptr);
  choice["finish_reason"] = finish_reason_ ? Json(*finish_reason_) : Json(nullptr);
  body["choices"] = Json::array({std::move(choice)});
  body["usage"] = Usage();
  return body;
}

// OpenAI's usage of several choices: each prompt counted once, every choice's completion.
nlohmann::ordered_json ResponseBuilder::SummedUsage(
    const std::vector<const ResponseBuilder*>& choices) {
  int64_t prompt = 0;
  int64_t completion = 0;
  for (const ResponseBuilder* c : choices) {
    if (c->counts_prompt_) prompt += c->prompt_tokens_;
    completion += c->completion_tokens_;
  }
  return nlohmann::ordered_json{{"prompt_tokens", prompt},
                                {"completion_tokens", completion},
                                {"total_tokens", prompt + completion}};
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
