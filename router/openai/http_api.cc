#include "router/openai/http_api.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_http_server.h"
#include "common/call_auth.h"
#include "common/http_accept_loop.h"
#include "kernels/common/page.h"
#include "router/openai/anthropic_api.h"
#include "router/openai/api_request.h"
#include "router/openai/chat_prompt.h"
#include "router/openai/connection_probe.h"
#include "router/openai/forced_arguments.h"
#include "router/openai/generate_exchange.h"
#include "router/openai/http_json.h"
#include "router/openai/reasoning_splitter.h"
#include "router/openai/response_builder.h"
#include "router/openai/responses_api.h"
#include "router/openai/tokenize_request.h"
#include "router/validation.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

int64_t UnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

// One request's choices (n per prompt): a Generate call and a response builder each. A streamed
// response's content provider keeps it between its calls. The waker is declared first so it
// outlives the exchanges, whose calls bump it until they end.
struct ChoiceSet {
  std::shared_ptr<ExchangeWaker> waker = std::make_shared<ExchangeWaker>();
  std::vector<std::unique_ptr<GenerateExchange>> exchanges;
  std::vector<std::unique_ptr<ResponseBuilder>> builders;
  std::vector<bool> ended;
  bool started = false;

  void CancelAll() {
    for (auto& e : exchanges) e->Cancel();
  }
  std::vector<const ResponseBuilder*> Builders() const {
    std::vector<const ResponseBuilder*> out;
    for (const auto& b : builders) out.push_back(b.get());
    return out;
  }
};

}  // namespace

struct HttpApi::Impl {
  RouterContext* router;
  std::optional<ChatPrompt> chat;  // set by Start
  // Why this router cannot tokenize text (it has no tokenizer: TokenIdsOnlyCodec), else OK;
  // /detokenize answers with it as the text endpoints do.
  absl::Status text_unavailable;
  HttpApiOptions options;
  std::unique_ptr<httplib::Server> server;
  std::thread listener;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::unique_ptr<ResponsesApi> responses;  // /v1/responses (responses_api.h)
  std::unique_ptr<AnthropicApi> anthropic;  // /v1/messages (anthropic_api.h)

  void Register() {
    server->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      Health(res);
    });
    server->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      SendJson(res, 200, Json{{"object", "list"}, {"data", Json::array({ModelCard()})}});
    });
    server->Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] == options.served_model_name) return SendJson(res, 200, ModelCard());
      SendError(res, ApiError{404, absl::StrCat("The model '", std::string(req.matches[1]), "' does not exist"),
                              "invalid_request_error", "model", "model_not_found"});
    });
    server->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Endpoint::kCompletions, req, res);
    });
    server->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Endpoint::kChat, req, res);
    });
    server->Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
      responses->Create(req, res);
    });
    server->Get(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      responses->Retrieve(req.matches[1], res);
    });
    server->Delete(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      responses->Delete(req.matches[1], res);
    });
    server->Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
      anthropic->Messages(req, res);
    });
    server->Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
      anthropic->CountTokens(req, res);
    });
    server->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      Tokenize(req, res);
    });
    server->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      Detokenize(req, res);
    });
    server->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      common::CorrectBoundStatus(res);  // 408, 413, 414, 431 where cpp-httplib says 400
      if (AnthropicApi::Serves(req.path)) return AnthropicApi::SendHttpError(req, res);
      SendError(res, ApiError{res.status, TransportErrorMessage(req, res.status), "invalid_request_error",
                              std::nullopt, std::nullopt});
    });
    // A body's framing is checked before it is read (411 without a length, 400 for lengths that
    // disagree); then the gRPC API's API keys (--api-key-file), through the same authorizer;
    // /health stays open for probes.
    server->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (std::optional<common::FramingError> framing = common::CheckRequestFraming(req)) {
        // The body is left unread: nothing after it on this connection can be framed.
        res.set_header("Connection", "close");
        if (AnthropicApi::Serves(req.path)) {
          res.status = framing->status;
          AnthropicApi::SendHttpError(req, res);
        } else {
          SendError(res, ApiError{framing->status, framing->message, "invalid_request_error", std::nullopt,
                                  std::nullopt});
        }
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      if (AnthropicApi::Serves(req.path)) {  // Anthropic's x-api-key too, and its error shape
        absl::Status allowed = AnthropicApi::CheckApiKey(req, router->public_authorizer());
        if (allowed.ok()) return httplib::Server::HandlerResponse::Unhandled;
        AnthropicApi::SendAuthError(res, allowed);
        return httplib::Server::HandlerResponse::Handled;
      }
      absl::Status allowed = CheckApiKey(req);
      if (allowed.ok()) return httplib::Server::HandlerResponse::Unhandled;
      SendError(res, AuthError(allowed));
      return httplib::Server::HandlerResponse::Handled;
    });
  }

  absl::Status CheckApiKey(const httplib::Request& req) const {
    std::optional<absl::string_view> authorization;
    std::string header;
    if (req.has_header("Authorization")) {
      header = req.get_header_value("Authorization");
      authorization = header;
    }
    return router->public_authorizer().CheckCredentials(authorization, std::nullopt,
                                                        common::Privilege::kClient);
  }

  // OpenAI answers a missing or unknown key with 401 invalid_api_key; a credential of another
  // kind (a cluster token) is no API key either, but its holder is known: 403.
  static ApiError AuthError(const absl::Status& status) {
    if (status.code() == absl::StatusCode::kPermissionDenied) {
      return ApiError{403, std::string(status.message()), "permission_error", std::nullopt,
                      std::nullopt};
    }
    return ApiError{401,
                    absl::StrCat("a valid API key is required: send \"Authorization: Bearer "
                                 "<key>\" (", status.message(), ")"),
                    "authentication_error", std::nullopt, "invalid_api_key"};
  }

  Json ModelCard() const {
    return Json{{"id", options.served_model_name},
                {"object", "model"},
                {"created", absl::ToUnixSeconds(router->start_time())},
                {"owned_by", "mlaserve"},
                {"max_model_len", router->model().limits.max_context},
                // mlaserve's own: what a client needs to make random token-id prompts
                // (mlaserve-bench --backend openai).
                {"mlaserve", {{"vocab_size", router->model().limits.vocab_size},
                              {"eos_token_ids", router->model().limits.eos_token_ids},
                              {"bos_token_id", router->model().limits.bos_token_id
                                                   ? Json(*router->model().limits.bos_token_id)
                                                   : Json(nullptr)}}}};
  }

  void Health(httplib::Response& res) {
    const bool decode = !router->registry().Routable(WorkerRole::kDecode).empty();
    const bool prefill = !router->registry().Routable(WorkerRole::kPrefill).empty();
    if (decode && prefill) return SendJson(res, 200, Json{{"status", "ok"}});
    SendJson(res, 503, Json{{"status", "unavailable"},
                            {"message", absl::StrCat("healthy workers: ", decode ? "" : "no ",
                                                     "decode, ", prefill ? "" : "no ", "prefill")}});
  }

  // Text the HTTP front end tokenizes itself (a rendered chat, /tokenize's text), held to the
  // bounds GenerateCall holds a text prompt to: the prompt-size bound, checked before
  // tokenizing (a 400 naming `param`), and the router's tokenizing budget (503).
  std::variant<std::vector<int32_t>, ApiError> TokenizeText(const std::string& text, bool add_special_tokens,
                                                           const char* param) const {
    if (absl::Status st = ValidatePromptBytes(text.size(), router->codec().MaxBytesPerToken(),
                                              router->model().limits);
        !st.ok()) {
      ApiError e = ErrorFromStatus(st);
      e.param = param;
      return e;
    }
    absl::StatusOr<RouterContext::TokenizingClaim> claim = router->ClaimTokenizing(text.size());
    if (!claim.ok()) return ErrorFromStatus(claim.status());
    absl::StatusOr<std::vector<int32_t>> ids =
        add_special_tokens ? router->codec().Encode(text) : router->codec().EncodeVerbatim(text);
    if (!ids.ok()) return ErrorFromStatus(ids.status());
    return *std::move(ids);
  }

  // The Generate request of each prompt (completions may have several; chat has one), or the
  // error to answer with.
  std::variant<std::vector<v1::GenerateRequest>, ApiError> ToGenerateRequests(
      const ApiRequest& r, ChatPrompt::Setup* setup) {
    v1::GenerateRequest g;
    g.set_request_id(router->NewRequestId());
    *g.mutable_sampling() = r.sampling;
    g.set_cache_salt(r.cache_salt);
    // Logprobs pair up with their token ids (LogprobsFormat names the tokens).
    g.mutable_output()->set_include_token_ids(r.sampling.has_logprobs());
    g.mutable_output()->set_include_text(true);
    if (r.endpoint == Endpoint::kCompletions) {
      std::vector<v1::GenerateRequest> out;
      for (const ApiRequest::Prompt& prompt : r.prompts) {
        v1::GenerateRequest& one = out.emplace_back(g);
        if (out.size() > 1) one.set_request_id(router->NewRequestId());
        if (prompt.text.has_value()) {
          one.set_text(*prompt.text);
        } else {
          one.mutable_token_ids()->mutable_ids()->Assign(prompt.ids.begin(), prompt.ids.end());
        }
      }
      return out;
    }
    std::variant<std::string, ApiError> prompt = chat->Render(r, setup);
    if (auto* e = std::get_if<ApiError>(&prompt)) return *e;
    if (setup->opens_reasoning &&
        (r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT ||
         r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_SCHEMA)) {
      // A reasoning model thinks first: the answer after "</think>" is the JSON object / the
      // schema's value (the reasoning_content split, below, is at the same place).
      g.mutable_sampling()->set_response_format_after(std::string(ReasoningSplitter::kReasoningEnd));
    }
    if (r.tool_choice == ApiRequest::ToolChoice::kRequired || r.tool_choice == ApiRequest::ToolChoice::kNamed) {
      // The prompt ends with the forced call's opening (ChatPrompt): its arguments are held to
      // the tool.
      ConstrainForcedCall(*setup->tool_calls, r, setup->history_call_ids, g.mutable_sampling());
    }
    // The rendered prompt carries its special tokens: tokenized as written (no second BOS).
    std::variant<std::vector<int32_t>, ApiError> ids =
        TokenizeText(std::get<std::string>(prompt), /*add_special_tokens=*/false, "messages");
    if (auto* e = std::get_if<ApiError>(&ids)) return *e;
    const std::vector<int32_t>& prompt_ids = std::get<std::vector<int32_t>>(ids);
    g.mutable_token_ids()->mutable_ids()->Assign(prompt_ids.begin(), prompt_ids.end());
    if (!g.sampling().has_max_new_tokens()) {
      if (std::optional<int32_t> room = ChatRoom(static_cast<int32_t>(prompt_ids.size()))) {
        g.mutable_sampling()->set_max_new_tokens(*room);
      }
    }
    return std::vector<v1::GenerateRequest>{std::move(g)};
  }

  // The text `echo` repeats: a text prompt as written, token ids as the tokenizer decodes them
  // (special tokens as the request's skip_special_tokens says, as for the output).
  std::string PromptText(const ApiRequest::Prompt& prompt, const v1::SamplingParams& sampling) const {
    if (prompt.text.has_value()) return *prompt.text;
    std::unique_ptr<StreamingDetokenizer> detokenizer = router->codec().NewDetokenizer(
        {}, sampling.has_skip_special_tokens() ? sampling.skip_special_tokens() : true);
    std::string text;
    for (int32_t id : prompt.ids) text += detokenizer->Push(id);
    return text + detokenizer->Finish();
  }

  // OpenAI bounds a chat answer without max_tokens only by the context: what it leaves after
  // the prompt, and no more than the largest decode pool can hold with the prompt (else no
  // worker could ever take the request). nullopt when nothing is left (the router's
  // validation then says the prompt is too long).
  std::optional<int32_t> ChatRoom(int32_t prompt_tokens) const {
    int64_t room = static_cast<int64_t>(router->model().limits.max_context) - prompt_tokens;
    int64_t largest_pool_tokens = 0;
    for (const WorkerSnapshot& w : router->registry().Routable(WorkerRole::kDecode)) {
      largest_pool_tokens = std::max<int64_t>(
          largest_pool_tokens,
          static_cast<int64_t>(w.descriptor.load.request_pages_total()) * kernels::kPageSize);
    }
    if (largest_pool_tokens > 0) room = std::min(room, largest_pool_tokens - prompt_tokens);
    if (room < 1) return std::nullopt;
    return static_cast<int32_t>(room);
  }

  // vLLM's /tokenize: a text, or messages rendered as /v1/chat/completions renders them.
  // Nothing reaches a worker.
  void Tokenize(const httplib::Request& req, httplib::Response& res) {
    std::variant<TokenizeRequest, ApiError> parsed = ParseTokenizeRequest(req.body, options.served_model_name);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
    const TokenizeRequest& t = std::get<TokenizeRequest>(parsed);
    std::string text;
    if (t.prompt.has_value()) {
      text = *t.prompt;
    } else {
      ChatPrompt::Setup setup;
      std::variant<std::string, ApiError> rendered = chat->Render(t.chat, &setup);
      if (auto* e = std::get_if<ApiError>(&rendered)) return SendError(res, *e);
      text = std::get<std::string>(std::move(rendered));
    }
    std::variant<std::vector<int32_t>, ApiError> ids =
        TokenizeText(text, t.add_special_tokens, t.prompt.has_value() ? "prompt" : "messages");
    if (auto* e = std::get_if<ApiError>(&ids)) return SendError(res, *e);
    SendJson(res, 200, TokenizeResponse(std::get<std::vector<int32_t>>(ids), router->model().limits.max_context,
                                        t.return_token_strs ? &router->codec() : nullptr));
  }

  // vLLM's /detokenize: the ids' text, special tokens included (as transformers' decode).
  void Detokenize(const httplib::Request& req, httplib::Response& res) {
    std::variant<DetokenizeRequest, ApiError> parsed =
        ParseDetokenizeRequest(req.body, options.served_model_name, router->model().limits.vocab_size);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
    if (!text_unavailable.ok()) return SendError(res, ErrorFromStatus(text_unavailable));
    std::unique_ptr<StreamingDetokenizer> detokenizer =
        router->codec().NewDetokenizer({}, /*skip_special_tokens=*/false);
    std::string text;
    for (int32_t id : std::get<DetokenizeRequest>(parsed).tokens) text += detokenizer->Push(id);
    text += detokenizer->Finish();
    SendJson(res, 200, Json{{"prompt", std::move(text)}});
  }

  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    std::variant<ApiRequest, ApiError> parsed =
        ParseApiRequest(endpoint, req.body, options.served_model_name);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
    const ApiRequest& r = std::get<ApiRequest>(parsed);
    ChatPrompt::Setup setup;
    std::variant<std::vector<v1::GenerateRequest>, ApiError> g = ToGenerateRequests(r, &setup);
    if (auto* e = std::get_if<ApiError>(&g)) return SendError(res, *e);
    const std::vector<v1::GenerateRequest>& prompts = std::get<std::vector<v1::GenerateRequest>>(g);

    // Prompt p's choice j is choice p * n + j, each its own Generate call.
    auto choices = std::make_shared<ChoiceSet>();
    const std::string id = absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-",
                                        prompts.front().request_id());
    const int64_t created = UnixSeconds();
    const int count = static_cast<int>(prompts.size()) * r.n;
    for (int i = 0; i < count; ++i) {
      const v1::GenerateRequest& prompt = prompts[i / r.n];
      v1::GenerateRequest choice = prompt;
      if (i % r.n > 0) {
        choice.set_request_id(router->NewRequestId());
        // Each choice samples on its own; with a seed, choice j of a prompt uses seed + j.
        if (prompt.sampling().has_seed()) {
          choice.mutable_sampling()->set_seed(prompt.sampling().seed() + static_cast<uint64_t>(i % r.n));
        }
      }
      auto exchange = std::make_unique<GenerateExchange>(router, choice, choices->waker);
      if (std::optional<absl::Status> early = exchange->EarlyEnd()) {
        // The choices already started are cancelled when `choices` goes.
        return SendError(res, ErrorForRequest(*early, r));
      }
      choices->exchanges.push_back(std::move(exchange));
      choices->builders.push_back(std::make_unique<ResponseBuilder>(
          r, id, created, setup.opens_reasoning, i, count, /*counts_prompt=*/i % r.n == 0));
      if (setup.tool_calls.has_value()) {
        choices->builders.back()->set_tool_calls(*setup.tool_calls, setup.call_opening, r.parallel_tool_calls,
                                                 setup.history_call_ids);
      }
      ResponseBuilder& builder = *choices->builders.back();
      if (r.echo) builder.set_echo(PromptText(r.prompts[i / r.n], r.sampling));
      if (r.sampling.has_logprobs()) builder.set_logprobs(&router->codec());
      if (r.echo_logprobs) builder.set_echo_logprobs(r.sampling.logprobs());
      // vLLM returns the prompt's list whenever it computed one: with the parameter, or for an
      // echo with logprobs (its n alternatives).
      if (r.prompt_logprobs || r.echo_logprobs) {
        builder.set_prompt_logprobs(&router->codec(),
                                    r.prompt_logprobs.value_or(r.sampling.logprobs()));
      }
      if (r.prompt_only) builder.set_prompt_only();
    }
    choices->ended.assign(choices->exchanges.size(), false);
    if (!r.stream) return WaitForBody(req, res, *choices);

    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, choices](size_t, httplib::DataSink& sink) {
          return StreamSome(*choices, sink);
        });
  }

  void WaitForBody(const httplib::Request& req, httplib::Response& res, ChoiceSet& choices) {
    ConnectionProbe probe(req);
    for (size_t i = 0; i < choices.exchanges.size(); ++i) {
      ResponseBuilder& builder = *choices.builders[i];
      // A client gone cancels every choice (this one with them).
      const absl::Status end = choices.exchanges[i]->Drain(
          options.liveness_interval,
          [&] {
            if (stopping.load() || probe.ClientGone()) choices.CancelAll();
            return false;
          },
          [&](const v1::GenerateResponse& message) { builder.OnMessage(message); });
      if (!end.ok() || !builder.complete()) {
        // The other choices are cancelled when `choices` goes.
        return SendError(res, ErrorFromStatus(end.ok() ? absl::InternalError("the request ended without a result")
                                                       : end));
      }
    }
    if (choices.builders.size() == 1) return SendJson(res, 200, choices.builders[0]->Body());
    SendJson(res, 200, ResponseBuilder::MergeChoices(choices.Builders()));
  }

  // One step of a streamed response: writes what arrived from any choice (or waits up to the
  // liveness interval). Returning false drops the connection.
  bool StreamSome(ChoiceSet& choices, httplib::DataSink& sink) {
    std::string events;
    if (!choices.started) {
      choices.started = true;
      for (auto& b : choices.builders) events += b->StartEvents();
    }
    const uint64_t seen = choices.waker->version();
    bool any = false;
    bool failed = false;
    for (size_t i = 0; i < choices.exchanges.size() && !failed; ++i) {
      while (!choices.ended[i]) {
        std::optional<GenerateExchange::Event> e = choices.exchanges[i]->Next(absl::ZeroDuration());
        if (!e.has_value()) break;
        any = true;
        if (e->message.has_value()) {
          events += choices.builders[i]->OnMessage(*e->message);
          continue;
        }
        choices.ended[i] = true;
        if (!e->end.ok()) {
          events += ResponseBuilder::ErrorEvents(ErrorFromStatus(e->end));
          failed = true;
          choices.CancelAll();
        }
      }
    }
    const bool all_ended =
        std::all_of(choices.ended.begin(), choices.ended.end(), [](bool e) { return e; });
    const bool end = failed || all_ended;
    if (!end && !any) {
      choices.waker->WaitPast(seen, options.liveness_interval);
      if (stopping.load() || !sink.is_writable()) choices.CancelAll();
    }
    // One choice's builder ends its own stream; n of them end here, usage summed.
    if (all_ended && !failed && choices.builders.size() > 1) {
      events += ResponseBuilder::EndOfChoices(choices.Builders());
    }
    if (!events.empty() && !sink.write(events.data(), events.size())) {
      choices.CancelAll();  // the client is gone; the exchanges drain when dropped
      return false;
    }
    if (end) sink.done();
    return true;
  }
};

HttpApi::HttpApi(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpApi::~HttpApi() { Stop(); }

int HttpApi::port() const { return impl_->port; }

void HttpApi::Stop() {
  if (!impl_->server) return;
  impl_->stopping.store(true);
  impl_->server->stop();
  if (impl_->listener.joinable()) impl_->listener.join();
  impl_->server.reset();
}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(
    RouterContext* router, absl::StatusOr<chat_template::CheckpointChatTemplate> chat_template,
    HttpApiOptions options) {
  if (options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP threads ", options.threads, ": must be >= 1"));
  }
  if (options.served_model_name.empty()) return absl::InvalidArgumentError("served model name is empty");
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("HTTPS needs both a certificate and a key file");
  }
  // A client that disconnects mid-write must not kill the router (cpp-httplib sends without
  // MSG_NOSIGNAL).
  signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->router = router;
  absl::StatusOr<ChatPrompt> chat = ChatPrompt::Create(
      std::move(chat_template), ChatPrompt::Options{.tool_call_parser = options.tool_call_parser,
                                                    .trust_request_chat_template = options.trust_request_chat_template});
  if (!chat.ok()) return chat.status();
  impl->chat = *std::move(chat);
  // A codec that cannot encode even "" has no tokenizer at all (TokenIdsOnlyCodec).
  impl->text_unavailable = router->codec().EncodeVerbatim("").status();
  if (impl->chat->tool_call_format().has_value()) {
    spdlog::info("tool calls: {} syntax", ToolCallFormatName(*impl->chat->tool_call_format()));
  } else {
    spdlog::info("tool calls: none (requests with tools are refused; see --tool-call-parser)");
  }
  impl->options = std::move(options);
  // The Responses API serves its requests as chat requests, built as the chat route builds them.
  Impl* chat_route = impl.get();
  impl->responses = std::make_unique<ResponsesApi>(
      router,
      [chat_route](const ApiRequest& r, ChatPrompt::Setup* setup) { return chat_route->ToGenerateRequests(r, setup); },
      &impl->stopping,
      ResponsesApi::Options{.served_model_name = impl->options.served_model_name,
                            .liveness_interval = impl->options.liveness_interval,
                            .store = {.max_responses = impl->options.responses_store_size}});
  impl->anthropic = std::make_unique<AnthropicApi>(
      router,
      [chat_route](const ApiRequest& r, ChatPrompt::Setup* setup) { return chat_route->ToGenerateRequests(r, setup); },
      &impl->stopping,
      AnthropicApi::Options{.served_model_name = impl->options.served_model_name,
                            .liveness_interval = impl->options.liveness_interval});
  // Slow, oversized and unframed requests are cut short by the transport (bounded_http_server.h).
  impl->server = common::NewBoundedHttpServer(
      common::HttpRequestBounds{.read_timeout = impl->options.request_read_timeout,
                                .max_body_bytes = impl->options.max_body_bytes},
      impl->options.tls_cert_file, impl->options.tls_key_file);
  if (!impl->server->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load the TLS certificate ",
                                                   impl->options.tls_cert_file, " and key ",
                                                   impl->options.tls_key_file));
  }
  const int threads = impl->options.threads;
  impl->server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl->server->set_keep_alive_max_count(1000);
  impl->Register();
  const HttpApiOptions& o = impl->options;
  if (o.port == 0) {
    impl->port = impl->server->bind_to_any_port(o.host);
  } else if (impl->server->bind_to_port(o.host, o.port)) {
    impl->port = o.port;
  } else {
    impl->port = -1;
  }
  if (impl->port <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.host, ":", o.port, " for HTTP"));
  }
  impl->listener = StartAcceptLoop(*impl->server);  // so a Stop() right after Start() ends it
  return std::unique_ptr<HttpApi>(new HttpApi(std::move(impl)));
}

}  // namespace mlaserve::router::openai
