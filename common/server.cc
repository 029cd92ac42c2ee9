#include "common/server.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_callback_anchor.h"
#include "spdlog/spdlog.h"

namespace mlaserve::common {
namespace {

// Set by the signal handler (async-signal-safe: a lock-free atomic store), read by the
// watcher thread of WaitForShutdown.
std::atomic<int> g_signal{0};
bool g_handlers_installed = false;

void OnTerminationSignal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

void InstallTerminationHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnTerminationSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  g_handlers_installed = true;
}

ServerRunner::ServerRunner(ServerOptions options) : options_(std::move(options)) {}

ServerRunner::~ServerRunner() {
  RequestShutdown();
  if (server_ != nullptr) {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      server_->Shutdown(std::chrono::system_clock::now());
      stopped_ = true;
    }
  }
}

void ServerRunner::AddService(grpc::Service* service) { services_.push_back(service); }

absl::Status ServerRunner::Start() {
  KeepGrpcCallbackQueueAlive();
  auto hp = ParseHostPort(options_.listen);
  if (!hp.ok()) return hp.status();
  if (options_.max_connection_idle <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connection_idle is ", absl::FormatDuration(options_.max_connection_idle),
                     "; expected a positive duration (or infinite: never)"));
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(FormatHostPort(hp->host, hp->port),
                           options_.credentials != nullptr ? options_.credentials
                                                           : grpc::InsecureServerCredentials(),
                           &selected_port);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  if (options_.max_connection_idle != absl::InfiniteDuration()) {
    const int64_t idle_ms = std::clamp<int64_t>(
        absl::ToInt64Milliseconds(options_.max_connection_idle), 1, INT_MAX);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(idle_ms));
  }
  for (const auto& [name, value] : options_.int_args) builder.AddChannelArgument(name, value);
  if (options_.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("mlaserve-server");
    quota.Resize(static_cast<size_t>(options_.memory_quota_bytes));
    builder.SetResourceQuota(quota);
  }
  for (grpc::Service* s : services_) builder.RegisterService(s);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected_port == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen, " (address in use or not local?)"));
  }
  port_ = selected_port;
  bound_address_ = FormatHostPort(hp->host, port_);
  if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
    health->SetServingStatus(true);
  }
  return absl::OkStatus();
}

void ServerRunner::PrintListening() const {
  std::printf("%s %s\n", options_.listening_prefix.c_str(), bound_address_.c_str());
  std::fflush(stdout);
}

void ServerRunner::RequestShutdown() {
  if (!shutdown_requested_.HasBeenNotified()) shutdown_requested_.Notify();
}

void ServerRunner::WaitForShutdown(const std::function<void()>& on_drain) {
  std::thread signal_thread;
  if (g_handlers_installed) {
    // Watches the handler's flag in bounded steps, ending when shutdown comes another way.
    signal_thread = std::thread([this] {
      while (!shutdown_requested_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
        if (const int sig = g_signal.load(std::memory_order_relaxed); sig != 0) {
          spdlog::info("received {}, draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
          RequestShutdown();
        }
      }
    });
  }
  shutdown_requested_.WaitForNotification();
  if (signal_thread.joinable()) signal_thread.join();
  if (server_ == nullptr) return;
  if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
    health->SetServingStatus(false);
  }
  // One budget for both phases: the services' own drain, then the server's (calls still open
  // at the deadline are cancelled).
  const absl::Time t0 = absl::Now();
  const absl::Time deadline = t0 + options_.drain_timeout;
  if (on_drain) on_drain();
  const absl::Time t1 = absl::Now();
  absl::MutexLock lock(&mu_);
  if (!stopped_) {
    // gRPC holds Shutdown until its deadline while idle client connections stay open, so a
    // service whose on_drain already waited for its work sets a short shutdown_grace.
    const absl::Time stop_by = std::min(deadline, absl::Now() + options_.shutdown_grace);
    server_->Shutdown(absl::ToChronoTime(std::max(stop_by, absl::Now())));
    stopped_ = true;
  }
  spdlog::debug("shutdown: drain took {}, server stop {}", absl::FormatDuration(t1 - t0),
                absl::FormatDuration(absl::Now() - t1));
}

}  // namespace mlaserve::common
