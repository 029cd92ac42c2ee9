// NcclKvTransport: the `nccl` KvTransport (sender side, prefill worker). Pages go GPU to GPU
// through the pair engine (pair_transfer.h); the control plane is KvNcclService on the decode
// worker (kv_nccl_service.h) plus KvService.AbortSession.
//
// Per decode endpoint, decode rank and prefill rank ("pair": one communicator per GPU pair; a
// data-parallel decode worker receives each session on its rank's GPU, KvSessionRef::rank; a
// data-parallel prefill worker sends it from its prompt's rank's GPU, KvSender::SetSourceRank)
// the transport keeps one PairLink (rank 0) and one worker thread. Sessions of a pair run on
// that thread one after another, in the order they were queued (opened; with rank pools,
// placed on a rank): NCCL point-to-point has no tags, so the decode side posts its receives in
// the order the Connect calls reached it, and only one session may be on the wire per pair at
// a time.
// A session's life on the pair thread:
//   wait for its first layer (or Complete/Abort) -> Connect (layout, plan digest, pair id;
//   answer: communicator id) -> join/reuse the communicator -> PlanSender::Begin ->
//   SendLayers as the prefill thread reports layers (each run of layers reported since the
//   last round at once) -> Complete: PlanSender::Finish
//   (every byte left) -> Finish RPC (the receiver's verdict and byte count) -> done(verdict).
// The prefill thread never waits for the wire: KvSender::SendLayer only records the layer.
// A later session of the same pair waits (its layers accumulate) until the earlier one ended.
//
// Failures: any error (peer gone, no progress for the no-progress deadline, refused Connect,
// plan mismatch) tells the decode worker through AbortSession so it frees the pages at once,
// and is reported by done / status(). Once the receiver answered the session's Connect, an
// error also aborts the communicator and invalidates the PairLink (the decode side mints a new
// id, so the next session rebuilds the communicator on both sides: the next Connect tells the
// receiver we hold none, in case it saw no failure); a Connect the receiver refused leaves the
// communicator to both. Every wait on the peer after Connect, joining the
// communicator included, is bounded by the session's no-progress deadline.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/transport_security.h"
#include "kvtransfer/nccl/communicator.h"
#include "kvtransfer/nccl/page_io.h"
#include "kvtransfer/nccl/schedule.h"
#include "kvtransfer/transport.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer::nccl {

// Builds the PageIo a session uses on `comm` (HostPageIo for host pools; CudaPageIo on
// comm->stream() for CUDA pools) with slots of at least `slot_bytes`.
using PageIoFactory = std::function<absl::StatusOr<std::unique_ptr<PageIo>>(
    model::KvPool* pool, Communicator* comm, size_t slot_bytes)>;

// HostPageIo with two slots (CPU pools, FakeCommunicator).
PageIoFactory HostPageIoFactory();

// Called on the prefill thread in SendLayer: a handle the layer's first gather waits for (for
// CUDA an event recorded on the compute stream, whose KV writes on_layer_done only enqueued).
// A session's fences must be made in layer order on one stream (the rank's compute stream): a
// run of layers ready together is gathered after its last layer's fence only.
using LayerFenceFactory = std::function<absl::StatusOr<std::shared_ptr<void>>()>;

struct NcclTransportOptions {
  std::string pair_id;   // this worker's stable id (one communicator per prefill/decode pair)
  std::string host;      // this worker's host identity, for the decode side's checks/logs
  int max_message_pages = 512;
  // Layers smaller than this share a message (see schedule.h); the receiver follows.
  int64_t coalesce_bytes = PlanParams::kDefaultCoalesceBytes;
  CommunicatorFactory comm_factory;
  PageIoFactory page_io_factory = HostPageIoFactory();
  LayerFenceFactory layer_fence;  // null: the pages are complete when SendLayer is called
  // A data-parallel prefill worker (docs/parallel.md): each rank's prompts are in its own pool
  // on its own GPU. A session is sent from the pool of the rank its sender names
  // (KvSender::SetSourceRank) through a communicator and page io of that rank's GPU, one pair
  // (communicator, thread) per (decode endpoint, decode rank, prefill rank), made when its
  // first session is bound. Empty: every session is sent from the constructor's pool with the
  // factories above (one GPU; tensor attention's replicated cache).
  struct RankPool {
    model::KvPool* pool = nullptr;
    CommunicatorFactory comm_factory;
    PageIoFactory page_io_factory = HostPageIoFactory();
    LayerFenceFactory layer_fence;  // as above, on this rank's stream
  };
  std::vector<RankPool> rank_pools;
  // Bound on the Connect RPC, and on joining a communicator (both ranks must join) together
  // with the session's no-progress deadline, whichever is shorter.
  absl::Duration connect_timeout = absl::Seconds(30);
  // TLS and the cluster token for the control channels to decode workers.
  std::shared_ptr<const common::ClusterDialer> dialer = common::ClusterDialer::Insecure();
};

class NcclKvTransport final : public KvTransport {
 public:
  // `pool`: the sender's KV pool, which SendLayer's page ids address (rank 0's with
  // options.rank_pools). Senders must not outlive the transport.
  NcclKvTransport(model::KvPool* pool, NcclTransportOptions options);
  ~NcclKvTransport() override;  // aborts sessions still running and joins the pair threads

  std::string_view name() const override { return "nccl"; }
  absl::StatusOr<std::unique_ptr<KvSender>> Open(const KvSessionRef& ref,
                                                 const KvLayout& local_layout,
                                                 const KvSenderOptions& options) override;

  // Communicators this side built (a rebuild after a failure counts again).
  int communicators_built() const;

  struct Pair;     // nccl_transport.cc
  struct Session;  // nccl_transport.cc
  class Sender;    // nccl_transport.cc

 private:
  // Null once the transport is shutting down.
  std::shared_ptr<Pair> PairFor(const std::string& endpoint, int decode_rank, int source_rank);
  // Fixes the prefill rank `s` is sent from and queues it on its pair (once; the same rank
  // again is OK, another one FAILED_PRECONDITION).
  absl::Status Bind(const std::shared_ptr<Session>& s, int source_rank);

  // One per prefill rank: options_.rank_pools, or the constructor's pool and factories.
  std::vector<NcclTransportOptions::RankPool> sources_;
  const NcclTransportOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Pair>> pairs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mlaserve::kvtransfer::nccl
