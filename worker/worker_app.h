// WorkerApp: the process skeleton mlaserve-prefill and mlaserve-decode share.
//
//   flags -> logging + cluster security -> engine -> KV layout -> GPU profile -> metrics
//   -> role.Start (runner, transports, services) -> gRPC server -> role.OnServing
//   -> /metrics endpoint -> router registration -> "listening on" -> wait for SIGTERM/SIGINT
//   -> stop heartbeats, role.Drain, role.Stop -> server shut down.
//
// What differs between the two workers is a Role: the runner, its gRPC services, its transport
// and what it adds to the WorkerDescriptor. A main() is then
//
//   worker::WorkerApp app(worker::WorkerRoleKind::kPrefill, "mlaserve-prefill", "...");
//   if (std::optional<int> exit = app.Init(argc, argv)) return *exit;
//   PrefillRole role;  // declared after `app`: destroyed first, while the engine still lives
//   return app.Run(role);
//
// Flags are read in Init only (worker_options.h); every failure before serving prints
// "<binary>: <what>: <status>" on stderr and makes Run return 1.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cluster_security.h"
#include "common/metrics.h"
#include "kvtransfer/layout.h"
#include "mlaserve/v1/admin.pb.h"
#include "model/engine.h"
#include "profiles/profile_store.h"
#include "worker/json_mode_vocabulary.h"
#include "worker/worker_options.h"
#include "worker/worker_proto.h"

namespace mlaserve::worker {

// What WorkerApp built before the role starts; it outlives the role's use of it.
struct WorkerEnv {
  const WorkerOptions& options;
  model::Engine& engine;
  const kvtransfer::KvLayout& layout;
  const profiles::ResolvedProfile& profile;
  common::MetricsRegistry& metrics;
  const common::ClusterSecurity& security;
  // The KV pools are on GPUs where nccl can move them (a CUDA engine; not a data-parallel
  // prefill worker, whose prompts are on several GPUs; docs/parallel.md).
  bool gpu_pool = false;
  bool nccl_built = false;  // this binary has the NCCL transport (MLASERVE_HAVE_NCCL)
  // The descriptor GetInfo answers with (the same one registration sends); any thread.
  std::function<mlaserve::v1::WorkerDescriptor()> describe;
  // JSON mode's constraint vocabulary, one for the process (never null here).
  const JsonModeVocabulary* json_vocabulary = nullptr;
};

// A start-up step that failed: printed as "<binary>: <what>: <status>".
struct StartupError {
  std::string what;
  absl::Status status;
};

// The role-specific part of a worker. WorkerApp calls Start, Services and OnServing once, in
// that order, from main's thread; Describe from any thread while serving (GetInfo, heartbeats);
// Drain then Stop once at shutdown, after the router registration stopped.
class Role {
 public:
  virtual ~Role() = default;
  // Builds the runner, its transport and its services over `env`.
  virtual std::optional<StartupError> Start(const WorkerEnv& env) = 0;
  // The gRPC services to serve (owned by the role; they outlive the server).
  virtual std::vector<grpc::Service*> Services() = 0;
  // The port is bound; `advertised` is the address given to the router and peers.
  virtual void OnServing(const std::string& advertised) {}
  // Adds the role's facts (KV transport, local-prefill threshold) and its load.
  virtual void Describe(mlaserve::v1::WorkerDescriptor& descriptor) const = 0;
  // Finish admitted work within `timeout`, then fail what is left and free everything.
  virtual void Drain(absl::Duration timeout) = 0;
  virtual void Stop() = 0;
};

class WorkerApp {
 public:
  WorkerApp(WorkerRoleKind kind, std::string binary, std::string description);

  // Reads and validates the flags and sets up logging. Returns the exit code when the process
  // should end now (--help, bad flags), nullopt to go on with Run.
  std::optional<int> Init(int argc, char** argv);
  const WorkerOptions& options() const { return options_; }

  // Serves until SIGTERM / SIGINT; returns the process's exit code. What the role was given
  // (the engine, metrics, ...) belongs to the app and lives as long as it, so a role that
  // outlives Run (its destructor runs after) may still touch it.
  int Run(Role& role);

 private:
  int Fail(const std::string& what, const absl::Status& status) const;
  // Builds what WorkerEnv refers to; a StartupError when a step fails.
  std::optional<StartupError> Build();

  const WorkerRoleKind kind_;
  const std::string binary_;
  const std::string description_;
  WorkerOptions options_;
  std::optional<common::ClusterSecurity> security_;
  std::unique_ptr<model::Engine> engine_;
  std::optional<kvtransfer::KvLayout> layout_;
  std::optional<profiles::ResolvedProfile> profile_;
  std::string profile_json_;
  common::MetricsRegistry metrics_;
  AdvertisedAddress advertise_;  // set once the port is bound; read by GetInfo meanwhile
  std::unique_ptr<JsonModeVocabulary> json_vocabulary_;
};

}  // namespace mlaserve::worker
