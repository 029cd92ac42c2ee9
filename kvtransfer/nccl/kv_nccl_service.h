// KvNcclServiceImpl: the receiving (decode) side of the `nccl` KV transport, served next to
// KvServiceImpl (which keeps AbortSession for both transports). It feeds KvReceiver sessions
// through the receiver's direct-write hook (AcquireDirect / MarkLayersLanded).
//
// Connect(session, sender layout, pair id, plan digest): opens the receiver session (layout
// checks as for tcp), derives the TransferPlan from the session (layers, transfer pages, layer
// page bytes, the sender's max_message_pages, the source rank and the decode rank the sender
// addressed, which must be the session's pool's), refuses a different digest
// (FAILED_PRECONDITION), answers the pair's current communicator id with the route
// (KvNcclConnectResponse.rank_route: source rank -> decode rank and its replicas, also in the
// Finish result), and queues the session on the pair's receive thread. Sessions of a pair are received one after another in Connect
// order, the order the sender puts them on the wire.
// The receive thread joins/reuses the communicator (rank 1; a fresh one when the sender says it
// holds none, KvNcclConnectRequest.sender_holds_none), runs ReceivePlan into the
// session's pinned pages, then marks all layers landed; on any failure it invalidates the
// pair (the next Connect answers a fresh id, so both sides rebuild) and fails the session. The
// pin is dropped only after the receive returned and the page io drained, so a page is never
// back in the pool while a device write into it may still land.
// Deadlines (a peer that dies at any point): once a session's Connect is answered, each step
// of its receive waits for the peer at most no_progress_timeout (joining the communicator
// included; the CommunicatorFactory's enqueue bound should be the same), so its pages are
// back within that of the peer's death, plus the page io's drain. A session that ends (the
// decode runner's cancel on the router's Abort, AbortSession, the receiver's no-progress
// deadline) while its Connect still waits for its turn leaves the queue at once: its Connect is
// answered with the reason and its pages are freed; it is never received (the sender posts
// nothing for an unanswered Connect, so the pair stays in step and keeps its communicator).
// Finish(session, completion): answered once the receive ended: the receiver's Complete
// verdict (byte totals and page coverage checked as for tcp).
//
// Multi-GPU decode workers (docs/parallel.md): a session's pages live in its rank's pool on
// that rank's GPU (data-parallel attention, KvReceiver::CreateSession's pool), so the pair's
// communicator and page io must be on that GPU: a pool listed in pool_devices gets its own
// pair per sender (keyed by the sender's pair id and the rank) with that entry's factories.
// Tensor attention replicates the cache: a receive into a pool with replicas is copied into
// them (KvPool::SyncReplicas, device to device) before the session completes.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/call_auth.h"
#include "kvtransfer/nccl/communicator.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/receiver.h"
#include "mlaserve/v1/kv.grpc.pb.h"

namespace mlaserve::kvtransfer::nccl {

struct KvNcclServiceOptions {
  CommunicatorFactory comm_factory;
  CommIdFactory id_factory;
  PageIoFactory page_io_factory = HostPageIoFactory();
  // The GPUs of a data-parallel decode worker's rank pools: sessions in `pool` are received
  // through communicators and page io of that GPU. Pools not listed use the two factories above.
  struct PoolDevice {
    model::KvPool* pool = nullptr;
    CommunicatorFactory comm_factory;
    PageIoFactory page_io_factory;
  };
  std::vector<PoolDevice> pool_devices;
  // Joining a communicator waits at most the shorter of the two.
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration no_progress_timeout = absl::Seconds(30);
  // Both RPCs need the cluster credential (null: open, for in-process tests).
  const common::CallAuthorizer* authorizer = nullptr;
};

class KvNcclServiceImpl final : public mlaserve::v1::KvNcclService::CallbackService {
 public:
  // `receiver` and its pools must outlive the service. `pool`: the receiver's own.
  KvNcclServiceImpl(KvReceiver* receiver, model::KvPool* pool, KvNcclServiceOptions options);
  // Fails queued sessions, lets a receive in progress end by its deadlines (its communicator
  // cannot be aborted from another thread), joins the receive threads.
  ~KvNcclServiceImpl() override;

  grpc::ServerUnaryReactor* Connect(grpc::CallbackServerContext* context,
                                    const mlaserve::v1::KvNcclConnectRequest* request,
                                    mlaserve::v1::KvNcclConnectResponse* response) override;
  grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                   const mlaserve::v1::KvNcclFinishRequest* request,
                                   mlaserve::v1::KvPushResult* response) override;

  int communicators_built() const;
  // Sessions connected and waiting for their turn on their pair (not yet answered).
  int sessions_waiting() const;
  // Waits until `n` receives ended in all (pins dropped, pages of failed sessions freed).
  bool AwaitReceivesEnded(int64_t n, absl::Duration timeout) const;

  struct Pair;  // kv_nccl_service.cc
  struct Job;

 private:
  // The pair of sender `pair_id` for sessions in `pool`.
  std::shared_ptr<Pair> PairFor(const std::string& pair_id, model::KvPool* pool);
  void RunJob(Pair& pair, const std::shared_ptr<Job>& job);
  // Takes `job` off `pair`'s queue if its turn has not come (false otherwise) and ends it with
  // its outcome (EndUnstarted).
  bool Withdraw(Pair& pair, const std::shared_ptr<Job>& job);
  // Ends a job whose Connect was never answered: answers it with `why`, drops the pin, fails
  // the session.
  void EndUnstarted(const std::shared_ptr<Job>& job, const absl::Status& why);
  void Answer(const std::shared_ptr<Job>& job);  // answers a waiting Finish, if both are ready

  KvReceiver* const receiver_;
  model::KvPool* const pool_;
  const KvNcclServiceOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Pair>> pairs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);  // by session id
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t receives_ended_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mlaserve::kvtransfer::nccl
