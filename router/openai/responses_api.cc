#include "router/openai/responses_api.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai/connection_probe.h"
#include "router/openai/generate_exchange.h"
#include "router/openai/http_json.h"
#include "router/openai/responses_builder.h"
#include "router/openai/responses_request.h"

namespace mlaserve::router::openai {

using Json = nlohmann::ordered_json;

struct ResponsesApi::Call {
  ResponsesRequest request;
  ApiRequest chat;
  std::shared_ptr<const ResponseStore::Entry> previous;  // the response it continues
  // The builder refers to `request`; the exchange goes first, so its call never outlives them.
  std::unique_ptr<ResponsesBuilder> builder;
  std::unique_ptr<GenerateExchange> exchange;
  bool started = false;
};

namespace {

ApiError ResponseNotFound(const std::string& id, const char* param) {
  return ApiError{404, absl::StrCat("Response with id '", id, "' not found (never stored, deleted, or evicted from "
                                    "this router's store)"),
                  "invalid_request_error", param ? std::optional<std::string>(param) : std::nullopt,
                  "response_not_found"};
}

}  // namespace

ResponsesApi::ResponsesApi(RouterContext* router, ChatToGenerate to_generate, const std::atomic<bool>* stopping,
                           Options options)
    : router_(router),
      to_generate_(std::move(to_generate)),
      stopping_(stopping),
      options_(std::move(options)),
      store_(options_.store) {}

void ResponsesApi::Create(const httplib::Request& req, httplib::Response& res) {
  std::variant<ResponsesRequest, ApiError> parsed = ParseResponsesRequest(req.body, options_.served_model_name);
  if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
  auto call = std::make_shared<Call>();
  call->request = std::get<ResponsesRequest>(std::move(parsed));
  const ResponsesRequest& r = call->request;
  Json history = Json::array();
  if (r.previous_response_id.has_value()) {
    call->previous = store_.Get(*r.previous_response_id);
    if (call->previous == nullptr) return SendError(res, ResponseNotFound(*r.previous_response_id, "previous_response_id"));
    history = ResponseStore::Conversation(*call->previous);
  }
  std::variant<ApiRequest, ApiError> chat = ToChatRequest(r, history, options_.served_model_name);
  if (auto* e = std::get_if<ApiError>(&chat)) return SendError(res, *e);
  call->chat = std::get<ApiRequest>(std::move(chat));
  ChatPrompt::Setup setup;
  std::variant<std::vector<v1::GenerateRequest>, ApiError> g = to_generate_(call->chat, &setup);
  if (auto* e = std::get_if<ApiError>(&g)) return SendError(res, ResponsesError(*e));
  const v1::GenerateRequest& generate = std::get<std::vector<v1::GenerateRequest>>(g).front();
  call->builder = std::make_unique<ResponsesBuilder>(call->request, call->chat, setup, NewResponseId(),
                                                     absl::ToUnixSeconds(absl::Now()), &router_->codec());
  call->exchange = std::make_unique<GenerateExchange>(router_, generate);
  if (std::optional<absl::Status> early = call->exchange->EarlyEnd()) {
    return SendError(res, ResponsesError(ErrorForRequest(*early, call->chat)));
  }
  if (!r.stream) return WaitForBody(req, res, *call);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [this, call](size_t, httplib::DataSink& sink) {
    return StreamSome(*call, sink);
  });
}

void ResponsesApi::WaitForBody(const httplib::Request& req, httplib::Response& res, Call& call) {
  ConnectionProbe probe(req);
  const absl::Status end = call.exchange->Drain(
      options_.liveness_interval, [&] { return stopping_->load() || probe.ClientGone(); },
      [&](const v1::GenerateResponse& message) { call.builder->OnMessage(message); });
  if (!end.ok() || !call.builder->complete()) {
    return SendError(res, ResponsesError(ErrorFromStatus(
                              end.ok() ? absl::InternalError("the request ended without a result") : end)));
  }
  Keep(call);
  SendJson(res, 200, call.builder->Response());
}

bool ResponsesApi::StreamSome(Call& call, httplib::DataSink& sink) {
  std::string events;
  if (!call.started) {
    call.started = true;
    events = call.builder->StartEvents();
  }
  bool end = false;
  absl::Duration wait = events.empty() ? options_.liveness_interval : absl::ZeroDuration();
  while (std::optional<GenerateExchange::Event> e = call.exchange->Next(wait)) {
    wait = absl::ZeroDuration();
    if (e->message.has_value()) {
      events += call.builder->OnMessage(*e->message);
      continue;
    }
    end = true;
    if (e->end.ok() && call.builder->complete()) {
      Keep(call);
    } else {
      events += call.builder->ErrorEvents(ResponsesError(ErrorFromStatus(
          e->end.ok() ? absl::InternalError("the request ended without a result") : e->end)));
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

void ResponsesApi::Keep(const Call& call) {
  if (!call.request.store) return;
  store_.Put(call.builder->Response(), call.request.input, call.previous);
}

void ResponsesApi::Retrieve(const std::string& id, httplib::Response& res) {
  std::shared_ptr<const ResponseStore::Entry> entry = store_.Get(id);
  if (entry == nullptr) return SendError(res, ResponseNotFound(id, nullptr));
  res.status = 200;
  res.set_content(entry->response, "application/json");  // the JSON SendJson sent when it was made
}

void ResponsesApi::Delete(const std::string& id, httplib::Response& res) {
  if (!store_.Erase(id)) return SendError(res, ResponseNotFound(id, nullptr));
  SendJson(res, 200, Json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
}

}  // namespace mlaserve::router::openai
