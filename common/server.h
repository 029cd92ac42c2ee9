// ServerRunner: the lifecycle every mlaserve gRPC server shares.
//
//   InstallTerminationHandlers();         // first thing in main()
//   ServerRunner runner(options);
//   runner.AddService(&my_service);       // services outlive the runner
//   RETURN_IF_ERROR(runner.Start());      // binds --listen (port 0 = ephemeral), health + reflection
//   runner.PrintListening();              // "listening on HOST:PORT", the line tests parse
//   runner.WaitForShutdown(on_drain);     // returns after SIGTERM/SIGINT or RequestShutdown():
//                                         // on_drain() ran, then the server shut down with
//                                         // options.drain_timeout as its deadline
//
// Every server serves grpc.health.v1 (SERVING while running, NOT_SERVING once draining) and
// server reflection.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/host_port.h"  // ParseHostPort, FormatHostPort: the listen address

namespace mlaserve::common {

struct ServerOptions {
  std::string listen = "0.0.0.0:0";
  // Budget for on_drain plus the server's own shutdown; calls still open then are cancelled.
  absl::Duration drain_timeout = absl::Seconds(10);
  // How long calls still open after on_drain returned may continue (within drain_timeout).
  // Infinite: until drain_timeout. Services whose on_drain waits for their own work set it short.
  absl::Duration shutdown_grace = absl::InfiniteDuration();
  int max_message_bytes = 64 << 20;  // KV pages travel in messages of one layer page each
  // TLS or plaintext (common/transport_security.h MakeServerCredentials). Null: plaintext,
  // for in-process tests; every main() sets it from its flags.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Memory gRPC may use for this server's connections and calls (a ResourceQuota); 0: no
  // bound of its own. Past it gRPC stops reading from clients until memory is freed.
  int64_t memory_quota_bytes = 0;
  // A connection with no call open for this long is closed: GOAWAY, then the socket
  // (GRPC_ARG_MAX_CONNECTION_IDLE_MS; gRPC's own default is never, so a client could hold
  // thousands of connections that open no call). Only connections without calls count: a call
  // open on one, however long (a Generate stream, a KV transfer stream), keeps it. A client
  // whose connection was closed reconnects at its next call. Infinite: never.
  absl::Duration max_connection_idle = absl::Minutes(5);
  // Extra integer channel arguments of the server (GRPC_ARG_...).
  std::vector<std::pair<std::string, int>> int_args = {};
  // What PrintListening writes before the address ("listening on" is the line tests parse
  // for a process's main port; a second listener uses another prefix).
  std::string listening_prefix = "listening on";
};

// Installs SIGTERM / SIGINT handlers that make WaitForShutdown drain and stop. Call at the top
// of main(). (A handler, not a blocked mask: libraries such as OpenBLAS start threads before
// main(), and a signal delivered to one of those would otherwise kill the process.)
void InstallTerminationHandlers();
// The former name of InstallTerminationHandlers, kept for existing callers.
inline void BlockTerminationSignals() { InstallTerminationHandlers(); }

class ServerRunner {
 public:
  explicit ServerRunner(ServerOptions options);
  ~ServerRunner();

  // Registers a service (sync or callback). Must be called before Start(); the service must
  // outlive the runner.
  void AddService(grpc::Service* service);

  // Builds the server and binds the listen address. INVALID_ARGUMENT for a malformed address
  // or a max_connection_idle not above zero, UNAVAILABLE when the port cannot be bound.
  absl::Status Start();

  // The bound address: the listen host with the actual port (after Start).
  const std::string& bound_address() const { return bound_address_; }
  int port() const { return port_; }
  grpc::Server* server() { return server_.get(); }

  // Writes "<listening_prefix> HOST:PORT\n" to stdout and flushes it.
  void PrintListening() const;

  // Blocks until a termination signal (when InstallTerminationHandlers was called) or
  // RequestShutdown(); then marks health NOT_SERVING, runs on_drain (stop taking new work,
  // finish or fail what runs) and shuts the server down, cancelling calls still open after
  // drain_timeout (counted from the signal) or shutdown_grace after on_drain, whichever is
  // first. Returns once the server has stopped.
  void WaitForShutdown(const std::function<void()>& on_drain = nullptr);

  // Thread-safe; may be called from any thread (tests, admin paths).
  void RequestShutdown();

 private:
  ServerOptions options_;
  std::vector<grpc::Service*> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string bound_address_;
  int port_ = 0;
  absl::Notification shutdown_requested_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mlaserve::common
