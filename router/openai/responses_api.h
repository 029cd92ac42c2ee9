// ResponsesApi: OpenAI's Responses API routes of the router's HTTP API (HttpApi dispatches to it):
//
//   POST   /v1/responses        a response, streamed (server-sent events) or not
//   GET    /v1/responses/{id}   a stored response
//   DELETE /v1/responses/{id}   drops a stored response
//
// A response is a chat completion: the request becomes the chat request it stands for
// (responses_request.h), which the chat route's own code turns into its Generate request (the
// chat template, tokenizing under the prompt bounds, forced tool calls: HttpApi passes that in
// as ChatToGenerate), and the answer is split as chat splits it and laid out as Responses items
// (responses_builder.h). Stored responses (the default, `store`) are kept in a bounded LRU in
// memory (response_store.h) for previous_response_id and GET / DELETE.
//
// A client that disconnects cancels its call, as on the other routes. Thread-safe: each request
// runs on its HTTP thread; the store locks itself.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include <httplib.h>

#include "absl/time/time.h"
#include "router/openai/api_request.h"
#include "router/openai/chat_prompt.h"
#include "router/openai/response_store.h"
#include "router/router_context.h"

namespace mlaserve::router::openai {

class ResponsesApi {
 public:
  struct Options {
    std::string served_model_name;
    absl::Duration liveness_interval = absl::Milliseconds(100);  // HttpApiOptions'
    ResponseStore::Options store;
  };

  // `router` and `stopping` (true once the HTTP API stops: waiting requests cancel) must
  // outlive this.
  ResponsesApi(RouterContext* router, ChatToGenerate to_generate, const std::atomic<bool>* stopping,
               Options options);

  void Create(const httplib::Request& req, httplib::Response& res);
  void Retrieve(const std::string& id, httplib::Response& res);
  void Delete(const std::string& id, httplib::Response& res);

 private:
  struct Call;  // one request's Generate call, builder and what storing it needs
  void WaitForBody(const httplib::Request& req, httplib::Response& res, Call& call);
  // One step of a streamed response (cpp-httplib's content provider); false drops the connection.
  bool StreamSome(Call& call, httplib::DataSink& sink);
  void Keep(const Call& call);

  RouterContext* const router_;
  const ChatToGenerate to_generate_;
  const std::atomic<bool>* const stopping_;
  const Options options_;
  ResponseStore store_;
};

}  // namespace mlaserve::router::openai
