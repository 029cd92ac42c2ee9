#include "router/openai/http_api.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/call_auth.h"
#include "kernels/common/page.h"
#include "router/openai/api_request.h"
#include "router/openai/connection_probe.h"
#include "router/openai/forced_arguments.h"
#include "router/openai/generate_exchange.h"
#include "router/openai/reasoning_splitter.h"
#include "router/openai/response_builder.h"
#include "router/openai/tool_prompt.h"
#include "router/chat_template/deepseek_v32_encoding.h"
#include "router/validation.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

void SendJson(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void SendError(httplib::Response& res, const ApiError& error) {
  SendJson(res, error.http_status, ErrorBody(error));
}

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
  absl::StatusOr<chat_template::CheckpointChatTemplate> chat_template;
  std::optional<ToolCallFormat> tool_call_format;  // nullopt: requests with tools are refused
  bool template_reads_tools = false;  // the Jinja template renders `tools` itself
  HttpApiOptions options;
  std::unique_ptr<httplib::Server> server;
  std::thread listener;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> listener_done{false};  // listen_after_bind returned

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
    server->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string what = res.status == 404 ? absl::StrCat("no route for ", req.method, " ", req.path)
                               : res.status == 413 ? "the request body is too large"
                                                   : absl::StrCat("HTTP ", res.status);
      SendError(res, ApiError{res.status, what, "invalid_request_error", std::nullopt, std::nullopt});
    });
    // The gRPC API's API keys (--api-key-file), through the same authorizer; /health stays
    // open for probes.
    server->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
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

  // What a chat prompt sets up for its answer.
  struct ChatSetup {
    bool opens_reasoning = false;               // the prompt ends inside <think>
    std::optional<ToolCallFormat> tool_calls;   // the answer is parsed for tool calls
    std::string call_opening;                   // the forced call's opening, ending the prompt
    std::vector<std::string> history_call_ids;  // the ids of the history's calls (kimi_k2's count)
  };

  // The template's variables for a chat request: its messages, with the tools where the
  // model will see them (tool_prompt.h).
  std::variant<Json, ApiError> ChatVariables(const ApiRequest& r, ChatSetup* setup) const {
    Json vars = chat_template->special_tokens;
    vars["messages"] = r.messages;
    vars["tools"] = nullptr;
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = r.add_generation_prompt;
    for (const auto& [k, v] : r.chat_template_kwargs.items()) vars[k] = v;
    // DeepSeek-V3.2's encoder renders a system message's response_format ("## Response
    // Format" with its JSON): a json_schema request's goes on the first message, as the tools
    // do (the output is held to it as well).
    if (!chat_template->tmpl.has_value() && !r.response_format.is_null()) {
      vars["messages"] = chat_template::WithRequestResponseFormat(vars["messages"], r.response_format);
    }
    if (r.tool_choice == ApiRequest::ToolChoice::kNone) return vars;
    if (r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT ||
        r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_SCHEMA) {
      const bool object = r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT;
      return ApiError{400,
                      absl::StrCat("'response_format' ", object ? "json_object" : "json_schema",
                                   " cannot be combined with 'tools': a tool call is not ",
                                   object ? "a JSON object" : "the schema's value",
                                   "; use tool_choice \"none\" or drop response_format"),
                      "invalid_request_error", "response_format", std::nullopt};
    }
    if (!tool_call_format.has_value()) {
      const std::string why = options.tool_call_parser == "none"
                                  ? std::string("this server runs with --tool-call-parser none")
                                  : absl::StrCat(chat_template->origin,
                                                 " writes no tool calls, so the tool-call syntax of "
                                                 "this model is unknown; start the router with "
                                                 "--tool-call-parser");
      return ApiError{400, absl::StrCat("'tools' cannot be served: ", why), "invalid_request_error",
                      "tools", std::nullopt};
    }
    // A named function is the only tool the model is shown (as SGLang does).
    Json tools = Json::array();
    for (const Json& tool : r.tools) {
      if (r.tool_choice != ApiRequest::ToolChoice::kNamed || tool["function"]["name"] == r.tool_name) {
        tools.push_back(tool);
      }
    }
    setup->tool_calls = tool_call_format;
    setup->history_call_ids = HistoryCallIds(r.messages);
    if (!chat_template->tmpl.has_value()) {
      vars["messages"] = chat_template::WithRequestTools(r.messages, tools);
    } else if (template_reads_tools) {
      vars["tools"] = std::move(tools);
    } else if (*tool_call_format != ToolCallFormat::kDeepseekV32) {
      vars["messages"] = WithToolsSection(r.messages, ToolsSection(*tool_call_format, tools));
    } else {
      return ApiError{400,
                      absl::StrCat("'tools' cannot be served: ", chat_template->origin,
                                   " does not render tools and DeepSeek-V3.2's tool section "
                                   "is its encoder's; drop --chat-template"),
                      "invalid_request_error", "tools", std::nullopt};
    }
    return vars;
  }

  // The Generate request of each prompt (completions may have several; chat has one), or the
  // error to answer with.
  std::variant<std::vector<v1::GenerateRequest>, ApiError> ToGenerateRequests(
      const ApiRequest& r, ChatSetup* setup) {
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
    if (!chat_template.ok()) {
      return ApiError{400, absl::StrCat("this model has no usable chat template (",
                                        chat_template.status().message(),
                                        "); use /v1/completions, or start the router with "
                                        "--chat-template FILE"),
                      "invalid_request_error", "messages", "chat_template_unavailable"};
    }
    std::variant<Json, ApiError> vars = ChatVariables(r, setup);
    if (auto* e = std::get_if<ApiError>(&vars)) return *e;
    absl::StatusOr<std::string> prompt = chat_template->Render(std::get<Json>(vars));
    if (!prompt.ok()) {
      return ApiError{400, absl::StrCat("rendering the chat template failed: ", prompt.status().message()),
                      "invalid_request_error", "messages", std::nullopt};
    }
    setup->opens_reasoning = ReasoningSplitter::PromptOpensReasoning(*prompt);
    if (setup->opens_reasoning &&
        (r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT ||
         r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_SCHEMA)) {
      // A reasoning model thinks first: the answer after "</think>" is the JSON object / the
      // schema's value (the reasoning_content split, below, is at the same place).
      g.mutable_sampling()->set_response_format_after(std::string(ReasoningSplitter::kReasoningEnd));
    }
    if (r.tool_choice == ApiRequest::ToolChoice::kRequired || r.tool_choice == ApiRequest::ToolChoice::kNamed) {
      // A call is made certain by writing its opening (and the named function) at the prompt's
      // end; a prompt that opened a <think> would lose it.
      if (setup->opens_reasoning) {
        return ApiError{400,
                        "'tool_choice' \"required\" or a named function cannot be combined with "
                        "thinking mode: the call would have to start before the reasoning ends; use "
                        "\"auto\" or turn thinking off",
                        "invalid_request_error", "tool_choice", std::nullopt};
      }
      const bool named = r.tool_choice == ApiRequest::ToolChoice::kNamed;
      setup->call_opening = ToolCallParser::CallOpening(
          *setup->tool_calls, named ? std::optional<std::string>(r.tool_name) : std::nullopt, setup->history_call_ids);
      *prompt += setup->call_opening;
      ConstrainForcedCall(*setup->tool_calls, r, setup->history_call_ids, g.mutable_sampling());
    }
    // A rendered chat is tokenized here, not in GenerateCall: the same bounds as a text prompt.
    if (absl::Status st = ValidatePromptBytes(prompt->size(), router->codec().MaxBytesPerToken(),
                                              router->model().limits);
        !st.ok()) {
      return ErrorForRequest(st, r);
    }
    absl::StatusOr<RouterContext::TokenizingClaim> claim = router->ClaimTokenizing(prompt->size());
    if (!claim.ok()) return ErrorFromStatus(claim.status());
    absl::StatusOr<std::vector<int32_t>> ids = router->codec().EncodeVerbatim(*prompt);
    if (!ids.ok()) return ErrorFromStatus(ids.status());
    g.mutable_token_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
    if (!g.sampling().has_max_new_tokens()) {
      if (std::optional<int32_t> room = ChatRoom(static_cast<int32_t>(ids->size()))) {
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

  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    std::variant<ApiRequest, ApiError> parsed =
        ParseApiRequest(endpoint, req.body, options.served_model_name);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
    const ApiRequest& r = std::get<ApiRequest>(parsed);
    ChatSetup setup;
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
      if (exchange->ended_early()) {
        // Refused before any output (validation, no worker): the status code can say so. The
        // choices already started are cancelled when `choices` goes.
        std::optional<GenerateExchange::Event> end = exchange->Next(absl::InfiniteDuration());
        return SendError(res, ErrorForRequest(end->end, r));
      }
      choices->exchanges.push_back(std::move(exchange));
      choices->builders.push_back(std::make_unique<ResponseBuilder>(
          r, id, created, setup.opens_reasoning, i, count, /*counts_prompt=*/i % r.n == 0));
      if (setup.tool_calls.has_value()) {
        choices->builders.back()->set_tool_calls(*setup.tool_calls, setup.call_opening, r.parallel_tool_calls,
                                                 setup.history_call_ids);
      }
      if (r.echo) choices->builders.back()->set_echo(PromptText(r.prompts[i / r.n], r.sampling));
      if (r.sampling.has_logprobs()) choices->builders.back()->set_logprobs(&router->codec());
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
      GenerateExchange& exchange = *choices.exchanges[i];
      ResponseBuilder& builder = *choices.builders[i];
      while (true) {
        std::optional<GenerateExchange::Event> e = exchange.Next(options.liveness_interval);
        if (!e.has_value()) {
          if (stopping.load() || probe.ClientGone()) choices.CancelAll();
          continue;
        }
        if (e->message.has_value()) {
          builder.OnMessage(*e->message);
          continue;
        }
        if (e->end.ok() && builder.complete()) break;
        // The other choices are cancelled when `choices` goes.
        return SendError(res, ErrorFromStatus(e->end.ok() ? absl::InternalError("the request ended without a result")
                                                          : e->end));
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
  if (options.tool_call_parser == "auto") {
    if (chat_template.ok()) impl->tool_call_format = DetectToolCallFormat(*chat_template);
  } else if (options.tool_call_parser != "none") {
    impl->tool_call_format = ToolCallFormatFromName(options.tool_call_parser);
    if (!impl->tool_call_format.has_value()) {
      std::string names = "auto, none";
      for (const ToolCallFormat f : kToolCallFormats) absl::StrAppend(&names, ", ", std::string(ToolCallFormatName(f)));
      return absl::InvalidArgumentError(
          absl::StrCat("tool-call parser '", options.tool_call_parser, "' is not one of ", names));
    }
    // DeepSeek-V3.2's built-in format describes DSML to the model: another syntax would
    // never be parsed.
    if (chat_template.ok() && !chat_template->tmpl.has_value() &&
        *impl->tool_call_format != ToolCallFormat::kDeepseekV32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool-call parser '", options.tool_call_parser, "' does not match DeepSeek-V3.2's chat "
          "format, whose tool calls are deepseek_v32 (DSML); use auto or deepseek_v32"));
    }
  }
  impl->template_reads_tools = chat_template.ok() && chat_template->tmpl.has_value() &&
                               chat_template->tmpl->ReadsVariable("tools");
  impl->chat_template = std::move(chat_template);
  if (impl->tool_call_format.has_value()) {
    spdlog::info("tool calls: {} syntax", ToolCallFormatName(*impl->tool_call_format));
  } else {
    spdlog::info("tool calls: none (requests with tools are refused; see --tool-call-parser)");
  }
  impl->options = std::move(options);
  if (!impl->options.tls_cert_file.empty()) {
    auto tls = std::make_unique<httplib::SSLServer>(impl->options.tls_cert_file.c_str(),
                                                    impl->options.tls_key_file.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot load the TLS certificate ",
                                                     impl->options.tls_cert_file, " and key ",
                                                     impl->options.tls_key_file));
    }
    impl->server = std::move(tls);
  } else {
    impl->server = std::make_unique<httplib::Server>();
  }
  const int threads = impl->options.threads;
  impl->server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl->server->set_payload_max_length(impl->options.max_body_bytes);
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
  httplib::Server* server = impl->server.get();
  std::atomic<bool>* listener_done = &impl->listener_done;
  impl->listener = std::thread([server, listener_done] {
    server->listen_after_bind();
    listener_done->store(true);
  });
  // cpp-httplib's stop() does nothing until the accept loop has started (is_running()), so a
  // Stop() right after Start() would leave the listener running forever: wait for the loop.
  while (!server->is_running() && !listener_done->load()) {
    absl::SleepFor(absl::Microseconds(100));
  }
  return std::unique_ptr<HttpApi>(new HttpApi(std::move(impl)));
}

}  // namespace mlaserve::router::openai
