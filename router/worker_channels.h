// WorkerChannels: one gRPC channel per worker address, shared by every call to that worker.
// Channels keep TCP keepalive on so a vanished peer is noticed even on an idle stream, and
// reconnect quickly so a restarted worker is reachable again within seconds.
// Thread-safe (mu_).
#pragma once

#include <map>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/transport_security.h"
#include "mlaserve/v1/worker.grpc.pb.h"

namespace mlaserve::router {

class WorkerChannels {
 public:
  // `dialer`: TLS and the cluster token every worker RPC needs.
  explicit WorkerChannels(std::shared_ptr<const common::ClusterDialer> dialer)
      : dialer_(std::move(dialer)) {}

  std::shared_ptr<v1::PrefillWorker::Stub> Prefill(const std::string& address);
  std::shared_ptr<v1::DecodeWorker::Stub> Decode(const std::string& address);

  // Channel arguments for every channel to a worker (also used by mlaservectl-like clients).
  static grpc::ChannelArguments Arguments();

 private:
  struct Stubs {
    std::shared_ptr<v1::PrefillWorker::Stub> prefill;
    std::shared_ptr<v1::DecodeWorker::Stub> decode;
  };
  Stubs& StubsLocked(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const common::ClusterDialer> dialer_;
  absl::Mutex mu_;
  std::map<std::string, Stubs> by_address_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::router
