// mlaserve-router: the public Generation API and the Admin API in front of prefill and decode
// workers, each on its own listener. Flags are read here only and turned into RouterOptions;
// the security flags are in router_security.h (docs/security.md).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

#include "common/metrics.h"
#include "common/metrics_tls.h"
#include "common/server.h"
#include "model/loader/config.h"
#include "router/admin_service.h"
#include "router/generation_service.h"
#include "router/openai/http_api.h"
#include "router/router_context.h"
#include "router/router_security.h"
#include "router/tokenizer_codec.h"
#include "router/worker_poller.h"

namespace mlaserve::router {
namespace {

// The health service name that is SERVING once the router can route (one healthy decode
// and one healthy prefill worker); "" (the whole server) is SERVING while it runs.
constexpr char kReadinessService[] = "mlaserve.v1.Generation";
// Admin messages are small; worker descriptors with their profile documents are the largest.
constexpr int kAdminMaxMessageBytes = 4 << 20;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "mlaserve-router: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  common::BlockTerminationSignals();
  CLI::App app{"mlaserve-router: routes Generate calls to prefill and decode workers"};
  RouterOptions o;
  int64_t heartbeat_timeout_ms = 10'000;
  int64_t poll_interval_ms = 1'000;
  int64_t reserve_timeout_ms = 10'000;
  int64_t prefill_timeout_ms = 600'000;
  int64_t request_timeout_s = 3600;
  int64_t queue_timeout_ms = 600'000;
  std::string log_level = "info";
  int http_port = -1;
  int64_t http_read_timeout_s = 30;
  std::string chat_template_file;
  openai::HttpApiOptions http;
  app.add_option("--listen", o.listen,
                 "HOST:PORT of the public Generation API (port 0 = ephemeral)")
      ->capture_default_str();
  AddSecurityFlags(app, &o);
  app.add_option("--model", o.model_dir, "model directory (config.json, tokenizer.json)")
      ->required();
  app.add_option("--prefill", o.prefill_addresses,
                 "static prefill worker HOST:PORT or [IPV6]:PORT (repeatable)");
  app.add_option("--decode", o.decode_addresses,
                 "static decode worker HOST:PORT or [IPV6]:PORT (repeatable)");
  app.add_option("--metrics-port", o.metrics_port,
                 "Prometheus /metrics port (0 = ephemeral, -1 = off)")
      ->capture_default_str();
  common::MetricsTlsFlags metrics_tls_flags;
  common::AddMetricsTlsFlags(app, &metrics_tls_flags);
  app.add_option("--heartbeat-timeout-ms", heartbeat_timeout_ms,
                 "self-registered workers silent this long are marked unhealthy")
      ->capture_default_str()->check(CLI::Range(int64_t{100}, int64_t{3'600'000}));
  app.add_option("--poll-interval-ms", poll_interval_ms, "GetInfo period for static workers")
      ->capture_default_str()->check(CLI::Range(int64_t{10}, int64_t{600'000}));
  app.add_option("--reserve-timeout-ms", reserve_timeout_ms, "deadline of one KV reservation")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--prefill-timeout-ms", prefill_timeout_ms, "deadline of one remote prefill")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--request-timeout-s", request_timeout_s,
                 "deadline of a whole Generate (a shorter client deadline wins)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--queue-timeout-ms", queue_timeout_ms,
                 "how long a request may wait for a decode worker with room for its prompt's KV "
                 "pages before RESOURCE_EXHAUSTED (0 = fail at once)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_flag("--prefix-affinity", o.prefix_affinity,
               "send a prompt to the prefill worker expected to have its longest prefix cached, "
               "unless it is busier by more than that saves (--prefix-affinity=false: by load "
               "alone)")
      ->capture_default_str();
  app.add_option("--prefix-affinity-entries", o.prefix_affinity_table.max_entries,
                 "pages (of 64 prompt tokens, one per prefill worker) the prefix-affinity table "
                 "remembers, least recently sent forgotten first; about 50 bytes each")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, PrefixAffinity::kMaxEntries));
  app.add_flag("--decode-affinity", o.decode_affinity.enabled,
               "with --prefix-affinity: send a prompt the decode worker would prefill itself "
               "(and, with --remote-prefill-reuse, one prefilled remotely) to the one expected "
               "to hold most of it in its prefix cache, unless that one is overloaded "
               "(--decode-affinity=false: decode workers by load alone)")
      ->capture_default_str();
  app.add_option("--decode-affinity-balance-abs", o.decode_affinity.balance_abs,
                 "a decode worker is overloaded (loses its affinity) when it has more than this "
                 "many requests more than the least loaded candidate ...")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--decode-affinity-balance-rel", o.decode_affinity.balance_rel,
                 "... and more than this many times as many")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e6));
  app.add_flag("--remote-prefill-reuse", o.remote_prefill_reuse,
               "a remotely prefilled prompt's decode worker keeps the leading pages its prefix "
               "cache holds and is sent only the rest of the KV; with --decode-affinity such "
               "prompts go to the decode worker expected to hold most (--remote-prefill-reuse="
               "false: every page shipped, decode workers for them by load)")
      ->capture_default_str();
  app.add_option("--http-port", http_port,
                 "OpenAI-compatible HTTP API port on the --listen host (0 = ephemeral, -1 = off)")
      ->capture_default_str()->check(CLI::Range(-1, 65535));
  app.add_option("--http-threads", http.threads,
                 "HTTP requests served at once (a streaming response holds a thread)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--http-read-timeout-s", http_read_timeout_s,
                 "seconds an HTTP request may take to arrive, line, headers and body (past it: 408 "
                 "and the connection closed; bounds how long a slow client holds an HTTP thread)")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  app.add_option("--served-model-name", http.served_model_name,
                 "the model name of the HTTP API (default: the model directory's name)");
  app.add_option("--chat-template", chat_template_file,
                 "Jinja chat template file (default: the checkpoint's tokenizer_config.json)")
      ->check(CLI::ExistingFile);
  app.add_option("--tool-call-parser", http.tool_call_parser,
                 "the tool-call syntax of the model's output for the HTTP API's tools: auto (read "
                 "off the chat template), none (tools refused), deepseek_v3, deepseek_v31, deepseek_v32, "
                 "kimi_k2")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "none", "deepseek_v3", "deepseek_v31", "deepseek_v32", "kimi_k2"}));
  app.add_flag("--trust-request-chat-template", http.trust_request_chat_template,
               "let HTTP chat and /tokenize requests bring their own Jinja chat_template "
               "(rendered by the router's interpreter, at most 64 KiB); off: such a request is a 400")
      ->capture_default_str();
  app.add_option("--responses-store-size", http.responses_store_size,
                 "stored responses of the HTTP API's /v1/responses the router keeps in memory, least "
                 "recently used out (also at most 256 MiB of their conversations); 0: none kept, so "
                 "previous_response_id and GET /v1/responses/{id} find none")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  CLI11_PARSE(app, argc, argv);

  // stdout carries only the "listening on" line; logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("mlaserve-router"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  o.heartbeat_timeout = absl::Milliseconds(heartbeat_timeout_ms);
  o.heartbeat_interval = std::max(absl::Milliseconds(50), o.heartbeat_timeout / 5);
  o.poll_interval = absl::Milliseconds(poll_interval_ms);
  o.reserve_timeout = absl::Milliseconds(reserve_timeout_ms);
  o.prefill_timeout = absl::Milliseconds(prefill_timeout_ms);
  o.request_timeout = absl::Seconds(request_timeout_s);
  o.queue_timeout = absl::Milliseconds(queue_timeout_ms);
  if (o.metrics_port < -1 || o.metrics_port > 65535) {
    return Fail("--metrics-port", absl::InvalidArgumentError(
                                      "must be -1 (off), 0 (ephemeral) or a port number"));
  }

  absl::StatusOr<model::ModelConfig> config = model::LoadModelConfig(o.model_dir);
  if (!config.ok()) return Fail("loading " + o.model_dir + "/config.json", config.status());
  std::unique_ptr<TextCodec> codec;
  if (absl::StatusOr<std::unique_ptr<TokenizerCodec>> t = TokenizerCodec::FromModelDir(o.model_dir);
      t.ok()) {
    codec = *std::move(t);
  } else if (t.status().code() == absl::StatusCode::kNotFound) {
    // FromModelDir's NOT_FOUND: "<dir> has no tokenizer (neither tokenizer.json nor
    // tiktoken.model)"; text requests get the same words back.
    const std::string why(t.status().message());
    spdlog::warn("{}; the router reads tokenizer.json, or tiktoken.model with "
                 "tokenizer_config.json beside it; serving token_ids requests only",
                 why);
    codec = TokenIdsOnlyCodec(why);
  } else {
    return Fail("loading the tokenizer of " + o.model_dir, t.status());
  }
  std::string model_name =
      std::filesystem::path(o.model_dir).lexically_normal().filename().string();
  if (model_name.empty()) {
    model_name = std::filesystem::path(o.model_dir).lexically_normal().parent_path().filename();
  }

  absl::StatusOr<RouterSecurity> security = MakeRouterSecurity(&o);
  if (!security.ok()) return Fail("invalid flags", security.status());
  absl::StatusOr<common::MetricsTlsOptions> metrics_tls =
      common::ResolveMetricsTls(metrics_tls_flags, o.cluster.tls);
  if (!metrics_tls.ok()) return Fail("invalid flags", metrics_tls.status());
  RouterContext router(o, RouterModelFromConfig(*config, model_name), std::move(codec));
  for (const std::string& a : o.prefill_addresses) {
    auto id = router.registry().AddByAddress(WorkerRole::kPrefill, a, WorkerSource::kStatic);
    if (!id.ok()) return Fail("--prefill " + a, id.status());
  }
  for (const std::string& a : o.decode_addresses) {
    auto id = router.registry().AddByAddress(WorkerRole::kDecode, a, WorkerSource::kStatic);
    if (!id.ok()) return Fail("--decode " + a, id.status());
  }

  // gRPC refuses a request over the size limit only after buffering it: the memory quota
  // bounds what oversized requests cost together, and without BDP probing a stream's receive
  // window stays small, so one sender cannot take the whole quota at once.
  common::ServerRunner runner({.listen = o.listen,
                               .max_message_bytes = o.public_listener.max_request_bytes,
                               .credentials = security->public_credentials,
                               .memory_quota_bytes = o.public_listener.memory_quota_bytes,
                               .int_args = {{GRPC_ARG_HTTP2_BDP_PROBE, 0}}});
  common::ServerRunner admin_runner({.listen = o.admin_listen,
                                     .max_message_bytes = kAdminMaxMessageBytes,
                                     .credentials = security->admin_credentials,
                                     .memory_quota_bytes = 32 << 20,
                                     .int_args = {{GRPC_ARG_HTTP2_BDP_PROBE, 0}},
                                     .listening_prefix = "admin listening on"});

  // The poller's thread starts after the server is bound (it sets the readiness status).
  WorkerPoller poller(&router, [&runner](bool ready) {
    if (auto* health = runner.server()->GetHealthCheckService(); health != nullptr) {
      health->SetServingStatus(kReadinessService, ready);
    }
  });
  GenerationService generation(&router);
  AdminService admin(&router, [&poller] { poller.Wake(); }, &security->admin_authorizer);
  runner.AddService(&generation);
  admin_runner.AddService(&admin);
  if (absl::Status st = runner.Start(); !st.ok()) return Fail("--listen " + o.listen, st);
  if (absl::Status st = admin_runner.Start(); !st.ok()) {
    return Fail("--admin-listen " + o.admin_listen, st);
  }
  router.set_listen_address(runner.bound_address());
  grpc::HealthCheckServiceInterface* health = runner.server()->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(kReadinessService, false);

  std::unique_ptr<common::MetricsHttpServer> metrics;
  if (o.metrics_port >= 0) {
    auto host = common::ParseHostPort(o.listen);
    auto m = common::MetricsHttpServer::Start(&router.metrics_registry(), host->host,
                                              o.metrics_port, *metrics_tls);
    if (!m.ok()) return Fail("--metrics-port", m.status());
    metrics = *std::move(m);
    spdlog::info("metrics on {}", metrics->url());
  }

  // The OpenAI HTTP API (router/openai): the same Generate path on its own port, with the
  // public listener's security: HTTPS with its certificate unless --insecure, its API keys
  // (RouterContext::public_authorizer) and its request size bound.
  std::unique_ptr<openai::HttpApi> http_api;
  if (http_port >= 0) {
    auto chat = chat_template::LoadChatTemplate(o.model_dir, config->model_type_name, chat_template_file);
    if (!chat.ok() && !chat_template_file.empty()) return Fail("--chat-template", chat.status());
    if (chat.ok()) {
      spdlog::info("chat template from {}", chat->origin);
    } else {
      spdlog::warn("/v1/chat/completions is unavailable: {}", std::string(chat.status().message()));
    }
    if (http.trust_request_chat_template) {
      spdlog::info("--trust-request-chat-template: chat requests may bring their own chat_template");
    }
    http.host = common::ParseHostPort(o.listen)->host;
    http.port = http_port;
    http.request_read_timeout = absl::Seconds(http_read_timeout_s);
    if (!o.public_listener.tls.insecure) {
      http.tls_cert_file = o.public_listener.tls.cert_file;
      http.tls_key_file = o.public_listener.tls.key_file;
    }
    http.max_body_bytes = static_cast<size_t>(o.public_listener.max_request_bytes);
    if (http.served_model_name.empty()) http.served_model_name = model_name;
    auto started = openai::HttpApi::Start(&router, std::move(chat), http);
    if (!started.ok()) return Fail("--http-port", started.status());
    http_api = *std::move(started);
  }

  poller.Start();
  spdlog::info("router for model '{}' ({}), {} static prefill / {} static decode workers",
               model_name, router.model().identity.model_type, o.prefill_addresses.size(),
               o.decode_addresses.size());
  runner.PrintListening();
  admin_runner.PrintListening();  // after the main line, which tests and scripts read first
  if (http_api) {
    std::printf("http listening on %s\n",
                common::FormatHostPort(http.host, http_api->port()).c_str());
    std::fflush(stdout);
  }
  runner.WaitForShutdown([&] {
    poller.Stop();
    if (health != nullptr) health->SetServingStatus(kReadinessService, false);
    if (http_api) http_api->Stop();
  });
  admin_runner.RequestShutdown();
  admin_runner.WaitForShutdown();
  if (!router.WaitForCallsToEnd(absl::Seconds(5))) {
    spdlog::warn("some requests were still winding down at exit");
    std::fflush(nullptr);
    std::_Exit(0);  // skip destructors that such requests could still touch
  }
  spdlog::info("router stopped");
  return 0;
}

}  // namespace
}  // namespace mlaserve::router

int main(int argc, char** argv) { return mlaserve::router::Main(argc, argv); }
