// HttpApi: the router's OpenAI-compatible HTTP API, on its own port.
//
//   POST /v1/completions        text or token-id prompt
//   POST /v1/chat/completions   messages, rendered with the checkpoint's chat template (or the
//                               request's own, with trust_request_chat_template)
//   GET  /v1/models, /v1/models/{id}
//   GET  /health                200 once a prefill and a decode worker are healthy, else 503
//   POST /tokenize, /detokenize vLLM's: a text or a chat's messages as token ids, and back
//                               (tokenize_request.h); answered by the router alone
//   POST /v1/responses, GET / DELETE /v1/responses/{id}
//                               OpenAI's Responses API, served as chat requests (responses_api.h)
//   POST /v1/messages, /v1/messages/count_tokens
//                               Anthropic's Messages API, served as chat requests (anthropic_api.h);
//                               its API key may come as x-api-key too
//
// Each completions or chat request becomes one Generate call per choice (`n`; router/generate_call.h) started in
// process through GenerateExchange, so validation, tokenization of text prompts, routing, admission, stop
// strings and aborts are the gRPC API's own code. What is HTTP's alone: JSON parsing and
// OpenAI's parameters (api_request.h), the chat template (chat_prompt.h), response formats and server-sent
// events (response_builder.h), and the connection: a client that disconnects cancels its
// call, which aborts its workers and frees its KV pages.
//
// Security is the gRPC API's (docs/security.md): main() passes the public listener's
// certificate and request size bound, and requests are checked against the router's
// public_authorizer() (its API keys).
//
// Threads: cpp-httplib serves each connection on a thread of its pool (`threads`); a
// streaming response holds its thread until it ends, so `threads` bounds the requests served
// at once (more connections wait for a thread). The transport (common/bounded_http_server.h)
// bounds how long and how much one request may take to arrive.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/chat_template/checkpoint_template.h"
#include "router/router_context.h"

namespace mlaserve::router::openai {

struct HttpApiOptions {
  std::string host = "0.0.0.0";
  int port = 0;  // 0 = ephemeral
  int threads = 128;
  std::string served_model_name;  // the `model` requests must name
  // Larger bodies get 413 (main() passes --max-request-bytes, the gRPC API's bound).
  size_t max_body_bytes = 4u << 20;
  // Reading one request (line, headers and body, from its first byte) may take at most this
  // long (--http-read-timeout-s): past it, 408 and the connection closed, so a client sending a
  // byte every few seconds does not hold a thread for ever. Request lines and headers are held
  // to 64 KiB (414 / 431) and bodies to max_body_bytes as sent, chunked or not (413).
  absl::Duration request_read_timeout = absl::Seconds(30);
  // How often a waiting request checks whether its client is still connected.
  absl::Duration liveness_interval = absl::Milliseconds(100);
  // With both files set the listener serves HTTPS (main() passes the public listener's
  // certificate unless --insecure). API keys are the router's: every request but /health
  // must pass RouterContext::public_authorizer() (401 otherwise).
  std::string tls_cert_file;
  std::string tls_key_file;
  // The tool-call syntax of the model's output (docs/api.md#tool-calls): "auto" reads it off
  // the chat template (tool_prompt.h), "none" refuses requests with tools, or a
  // ToolCallFormatName ("deepseek_v3", "deepseek_v31", "deepseek_v32").
  std::string tool_call_parser = "auto";
  // Whether a chat or /tokenize request may bring its own `chat_template` (vLLM's
  // --trust-request-chat-template): false answers it with a 400 naming the flag. A request's
  // template runs in the router's interpreter under the server template's limits.
  bool trust_request_chat_template = false;
  // The Responses API's stored responses kept at most (--responses-store-size; 0: none is kept,
  // so previous_response_id and GET find none). Their memory is bounded too (response_store.h).
  size_t responses_store_size = 1024;
};

class HttpApi {
 public:
  // Binds and starts serving. `chat_template` is the checkpoint's template, or why there is
  // none (chat requests then get a 400 saying so; completions still work). INVALID_ARGUMENT
  // for bad options, UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(
      RouterContext* router, absl::StatusOr<chat_template::CheckpointChatTemplate> chat_template,
      HttpApiOptions options);
  ~HttpApi();  // Stop()

  int port() const;
  // Stops accepting and waits for the requests being served (each ends promptly: a stopping
  // router fails its calls).
  void Stop();

 private:
  struct Impl;
  explicit HttpApi(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlaserve::router::openai
