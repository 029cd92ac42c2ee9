// RouterRegistration: a worker started with --router registers with the router's Admin API
// and keeps a heartbeat with its load (admin.proto RegisterWorker / Heartbeat).
//
// A background thread: RegisterWorker (retried with capped backoff while the router is
// unreachable), then Heartbeat every heartbeat_interval_ms the router asked for. NOT_FOUND on
// a heartbeat (router restarted, or the worker expired) means register again.
// FAILED_PRECONDITION at registration (the router serves another model) is logged and retried
// slowly: an operator must fix the deployment. Every RPC carries a deadline.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport_security.h"
#include "mlaserve/v1/admin.grpc.pb.h"

namespace mlaserve::worker {

class RouterRegistration {
 public:
  struct Options {
    std::string router_address;  // the router's admin listener (--admin-listen)
    // TLS and the cluster token the router's RegisterWorker / Heartbeat require.
    std::shared_ptr<const common::ClusterDialer> dialer = common::ClusterDialer::Insecure();
    absl::Duration rpc_timeout = absl::Seconds(5);
    absl::Duration max_backoff = absl::Seconds(5);
  };
  // `describe` is called for every registration (the full descriptor), `load` for every
  // heartbeat; both from the registration thread.
  RouterRegistration(Options options, std::function<mlaserve::v1::WorkerDescriptor()> describe,
                     std::function<mlaserve::v1::WorkerLoad()> load);
  ~RouterRegistration();  // stops the thread (bounded by one rpc_timeout)

  void Start();
  std::string worker_id() const;
  bool draining() const;
  // Number of successful heartbeats (tests wait on it).
  int heartbeats() const;

 private:
  void Loop();
  // Sleeps up to `d`; false when stopping.
  bool SleepUnlessStopping(absl::Duration d);

  const Options options_;
  const std::function<mlaserve::v1::WorkerDescriptor()> describe_;
  const std::function<mlaserve::v1::WorkerLoad()> load_;
  std::unique_ptr<mlaserve::v1::Admin::Stub> stub_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mlaserve::worker
