// The `tcp` KV transport: page payloads through host memory over a gRPC client stream
// (KvService.PushPages, kv.proto). Works everywhere; CI uses it.
//
// Sender: TcpKvTransport::Open starts one PushPages stream per session (channels are cached
// per endpoint: `connections_per_endpoint` of them, each its own TCP connection, sessions
// spread round-robin, so that many concurrent transfers are not serialized on one socket and
// one HTTP/2 connection's reader) and queues the open message; SendPage queues a page (bounded by
// max_inflight_bytes); Complete queues the completion and half-closes; the receiver's single
// answer is the verdict. A watchdog fails (and cancels) a stream that has work queued or an
// answer pending but no progress for the no-progress deadline.
// Receiver: KvServiceImpl (kv_service.h).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/transport_security.h"
#include "kvtransfer/kv_service.h"  // the receiving side, for users of both
#include "kvtransfer/transport.h"
#include "mlaserve/v1/kv.grpc.pb.h"

namespace mlaserve::kvtransfer {

class PushStream;  // tcp_transport.cc

class TcpKvTransport final : public KvTransport {
 public:
  // `dialer`: TLS and the cluster token for the channels to decode workers.
  static constexpr int kDefaultConnectionsPerEndpoint = 4;
  explicit TcpKvTransport(
      std::shared_ptr<const common::ClusterDialer> dialer = common::ClusterDialer::Insecure(),
      int connections_per_endpoint = kDefaultConnectionsPerEndpoint);
  ~TcpKvTransport() override;  // cancels streams still open

  std::string_view name() const override { return "tcp"; }
  absl::StatusOr<std::unique_ptr<KvSender>> Open(const KvSessionRef& ref,
                                                 const KvLayout& local_layout,
                                                 const KvSenderOptions& options) override;

 private:
  std::shared_ptr<grpc::Channel> ChannelFor(const std::string& endpoint);
  void WatchdogLoop();

  struct EndpointChannels {
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    size_t next = 0;  // round-robin over sessions
  };

  const std::shared_ptr<const common::ClusterDialer> dialer_;
  const int connections_per_endpoint_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, EndpointChannels> channels_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<PushStream>> streams_ ABSL_GUARDED_BY(mu_);
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace mlaserve::kvtransfer
