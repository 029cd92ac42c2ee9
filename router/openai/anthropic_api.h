// AnthropicApi: Anthropic's Messages API routes of the router's HTTP API (HttpApi dispatches to
// it), as DeepSeek's platform and vLLM serve them for clients built on the `anthropic` SDK:
//
//   POST /v1/messages               a message, streamed (server-sent events) or not
//   POST /v1/messages/count_tokens  {"input_tokens"} of the same body's prompt
//
// A message is a chat completion: the request becomes the chat request it stands for
// (anthropic_request.h), which the chat route's own code turns into its Generate request (the
// chat template, tokenizing under the prompt bounds, forced tool calls: HttpApi passes that in
// as ChatToGenerate), and the answer is split as chat splits it and laid out as content blocks
// (anthropic_builder.h). Errors, the authentication's and cpp-httplib's included, are in
// Anthropic's shape (anthropic_error.h).
//
// API keys: the router's (--api-key-file), sent as Anthropic's `x-api-key` header or as
// `Authorization: Bearer` (the `anthropic` client's auth_token); either one that holds a key is
// enough. `anthropic-version` and `anthropic-beta` are accepted and not required.
//
// A client that disconnects cancels its call, as on the other routes. Thread-safe: each request
// runs on its HTTP thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <httplib.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/call_auth.h"
#include "router/openai/api_request.h"
#include "router/openai/chat_prompt.h"
#include "router/router_context.h"

namespace mlaserve::router::openai {

class AnthropicApi {
 public:
  struct Options {
    std::string served_model_name;
    absl::Duration liveness_interval = absl::Milliseconds(100);  // HttpApiOptions'
  };

  // `router` and `stopping` (true once the HTTP API stops: waiting requests cancel) must outlive
  // this.
  AnthropicApi(RouterContext* router, ChatToGenerate to_generate, const std::atomic<bool>* stopping, Options options);

  // Whether `path` is one of these routes (or under /v1/messages/): its errors are Anthropic's.
  static bool Serves(std::string_view path);
  // The router's API-key check for these routes: `x-api-key`, else `Authorization`; a request
  // with both passes when either holds a key. OK, UNAUTHENTICATED or PERMISSION_DENIED.
  static absl::Status CheckApiKey(const httplib::Request& req, const common::CallAuthorizer& authorizer);
  // The refusal of CheckApiKey, as Anthropic answers it (401 authentication_error, 403
  // permission_error).
  static void SendAuthError(httplib::Response& res, const absl::Status& status);
  // cpp-httplib's own errors on these routes (no route, a body over the bound: 413
  // request_too_large), for HttpApi's error handler.
  static void SendHttpError(const httplib::Request& req, httplib::Response& res);

  void Messages(const httplib::Request& req, httplib::Response& res);
  void CountTokens(const httplib::Request& req, httplib::Response& res);

 private:
  struct Call;  // one request's Generate call and builder
  void WaitForBody(const httplib::Request& req, httplib::Response& res, Call& call);
  // One step of a streamed response (cpp-httplib's content provider); false drops the connection.
  bool StreamSome(Call& call, httplib::DataSink& sink);

  RouterContext* const router_;
  const ChatToGenerate to_generate_;
  const std::atomic<bool>* const stopping_;
  const Options options_;
};

}  // namespace mlaserve::router::openai
