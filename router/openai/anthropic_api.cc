#include "router/openai/anthropic_api.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai/anthropic_builder.h"
#include "router/openai/anthropic_error.h"
#include "router/openai/anthropic_request.h"
#include "router/openai/connection_probe.h"
#include "router/openai/generate_exchange.h"
#include "router/openai/http_json.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kMessagesPath = "/v1/messages";

void SendAnthropic(httplib::Response& res, const AnthropicError& error) {
  SendJson(res, error.http_status, AnthropicErrorBody(error));
}

void Send(httplib::Response& res, const ApiError& error) { SendAnthropic(res, ToAnthropicError(error)); }

ApiError FromStatus(const absl::Status& end) {
  return AnthropicParamNames(
      ErrorFromStatus(end.ok() ? absl::InternalError("the request ended without a result") : end));
}

}  // namespace

struct AnthropicApi::Call {
  ApiRequest chat;
  // The builder refers to `chat`; the exchange goes first, so its call never outlives them.
  std::unique_ptr<AnthropicBuilder> builder;
  std::unique_ptr<GenerateExchange> exchange;
};

AnthropicApi::AnthropicApi(RouterContext* router, ChatToGenerate to_generate, const std::atomic<bool>* stopping,
                           Options options)
    : router_(router), to_generate_(std::move(to_generate)), stopping_(stopping), options_(std::move(options)) {}

bool AnthropicApi::Serves(std::string_view path) {
  return path == kMessagesPath || (path.starts_with(kMessagesPath) && path[kMessagesPath.size()] == '/');
}

absl::Status AnthropicApi::CheckApiKey(const httplib::Request& req, const common::CallAuthorizer& authorizer) {
  std::optional<absl::Status> first;
  for (const char* header : {"x-api-key", "Authorization"}) {
    if (!req.has_header(header)) continue;
    const std::string value = req.get_header_value(header);
    const std::string authorization = header[0] == 'x' ? absl::StrCat("Bearer ", value) : value;
    absl::Status s = authorizer.CheckCredentials(authorization, std::nullopt, common::Privilege::kClient);
    if (s.ok()) return s;
    if (!first.has_value()) first = std::move(s);
  }
  if (first.has_value()) return *first;
  return authorizer.CheckCredentials(std::nullopt, std::nullopt, common::Privilege::kClient);
}

void AnthropicApi::SendAuthError(httplib::Response& res, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kPermissionDenied) {
    return SendAnthropic(res, AnthropicError{403, "permission_error", std::string(status.message())});
  }
  SendAnthropic(res, AnthropicError{401, "authentication_error",
                                    absl::StrCat("a valid API key is required: send \"x-api-key: <key>\" or "
                                                 "\"Authorization: Bearer <key>\" (", status.message(), ")")});
}

void AnthropicApi::SendHttpError(const httplib::Request& req, httplib::Response& res) {
  Send(res, ApiError{res.status, TransportErrorMessage(req, res.status), "invalid_request_error",
                     std::nullopt, std::nullopt});
}

void AnthropicApi::Messages(const httplib::Request& req, httplib::Response& res) {
  std::variant<AnthropicRequest, ApiError> parsed =
      ParseAnthropicRequest(req.body, options_.served_model_name, AnthropicRoute::kMessages);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Send(res, *e);
  const AnthropicRequest& r = std::get<AnthropicRequest>(parsed);
  auto call = std::make_shared<Call>();
  std::variant<ApiRequest, ApiError> chat = AnthropicToChat(r, options_.served_model_name);
  if (auto* e = std::get_if<ApiError>(&chat)) return Send(res, *e);
  call->chat = std::get<ApiRequest>(std::move(chat));
  ChatPrompt::Setup setup;
  std::variant<std::vector<v1::GenerateRequest>, ApiError> g = to_generate_(call->chat, &setup);
  if (auto* e = std::get_if<ApiError>(&g)) return Send(res, AnthropicParamNames(*e));
  call->builder = std::make_unique<AnthropicBuilder>(call->chat, setup, r.stream, AnthropicBuilder::NewMessageId());
  call->exchange = std::make_unique<GenerateExchange>(router_, std::get<std::vector<v1::GenerateRequest>>(g).front());
  if (std::optional<absl::Status> early = call->exchange->EarlyEnd()) {
    return Send(res, AnthropicParamNames(ErrorForRequest(*early, call->chat)));
  }
  if (!r.stream) return WaitForBody(req, res, *call);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [this, call](size_t, httplib::DataSink& sink) {
    return StreamSome(*call, sink);
  });
}

void AnthropicApi::WaitForBody(const httplib::Request& req, httplib::Response& res, Call& call) {
  ConnectionProbe probe(req);
  const absl::Status end = call.exchange->Drain(
      options_.liveness_interval, [&] { return stopping_->load() || probe.ClientGone(); },
      [&](const v1::GenerateResponse& message) { call.builder->OnMessage(message); });
  if (!end.ok() || !call.builder->complete()) return Send(res, FromStatus(end));
  SendJson(res, 200, call.builder->Message());
}

bool AnthropicApi::StreamSome(Call& call, httplib::DataSink& sink) {
  std::string events;
  bool end = false;
  absl::Duration wait = options_.liveness_interval;
  while (std::optional<GenerateExchange::Event> e = call.exchange->Next(wait)) {
    wait = absl::ZeroDuration();
    if (e->message.has_value()) {
      events += call.builder->OnMessage(*e->message);
      continue;
    }
    end = true;
    if (!e->end.ok() || !call.builder->complete()) {
      events += AnthropicBuilder::ErrorEvent(ToAnthropicError(FromStatus(e->end)));
    }
    break;
  }
  if (!end && events.empty() && (stopping_->load() || !sink.is_writable())) call.exchange->Cancel();
  if (!events.empty() && !sink.write(events.data(), events.size())) {
    call.exchange->Cancel();  // the client is gone; the exchange drains when dropped
    return false;
  }
  if (end) sink.done();
  return true;
}

void AnthropicApi::CountTokens(const httplib::Request& req, httplib::Response& res) {
  std::variant<AnthropicRequest, ApiError> parsed =
      ParseAnthropicRequest(req.body, options_.served_model_name, AnthropicRoute::kCountTokens);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Send(res, *e);
  std::variant<ApiRequest, ApiError> chat = AnthropicToChat(std::get<AnthropicRequest>(parsed), options_.served_model_name);
  if (auto* e = std::get_if<ApiError>(&chat)) return Send(res, *e);
  // The prompt the messages call would send: rendered and tokenized by the same code.
  ChatPrompt::Setup setup;
  std::variant<std::vector<v1::GenerateRequest>, ApiError> g = to_generate_(std::get<ApiRequest>(chat), &setup);
  if (auto* e = std::get_if<ApiError>(&g)) return Send(res, AnthropicParamNames(*e));
  const v1::GenerateRequest& prompt = std::get<std::vector<v1::GenerateRequest>>(g).front();
  SendJson(res, 200, Json{{"input_tokens", prompt.token_ids().ids_size()}});
}

}  // namespace mlaserve::router::openai
