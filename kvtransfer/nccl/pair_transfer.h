// One session's pages over a pair's Communicator, following a TransferPlan; and PairLink, the
// pair's communicator with its rebuild-after-failure rule.
//
// Sender (prefill side): Begin() readies the page io, SendLayers(end) as prefill finishes
// layers (every layer before `end` written; SendLayer(l) for one at a time; only enqueues on
// the device path, so the prefill thread does not wait for the wire), Finish() waits until
// every byte left. Receiver (decode side): ReceivePlan() posts the matching receives and
// scatters into the session's pages.
//
// Page copies (CopyBatching): the layers a SendLayers call makes ready are gathered one
// SlotBlock per message they touch, so a message whose layers are all written costs one gather
// (one kernel launch on CUDA), and layers streamed one at a time cost one each, as they come;
// a received message is scattered as one block. kPerLayer keeps one copy per layer on both
// sides (the engine before batching; mlaserve-nccl-bench A/Bs the two).
// Any failure (peer error, no progress within the deadline, plan mismatch) aborts the
// communicator — NCCL cannot resynchronise a pair whose send/recv sequence diverged — and is
// returned; the owner then frees its pages (PairTransfer never owns pages) and the PairLink
// builds a fresh communicator for the next session. PlanSender and ReceivePlan run on one
// thread each (per session); PairLink is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvtransfer/nccl/communicator.h"
#include "kvtransfer/nccl/page_io.h"
#include "kvtransfer/nccl/schedule.h"

namespace mlaserve::kvtransfer::nccl {

enum class CopyBatching {
  kPerMessage,  // a message's ready layers in one gather; a received message in one scatter
  kPerLayer,    // one gather / scatter per layer
};
const char* CopyBatchingName(CopyBatching b);  // "per-message" / "per-layer"

class PlanSender {
 public:
  // `pages` are the sender's page ids for the request, plan.num_pages of them.
  PlanSender(Communicator* comm, PageIo* io, const TransferPlan* plan,
             std::vector<int32_t> pages, absl::Duration no_progress,
             CopyBatching batching = CopyBatching::kPerMessage);
  absl::Status Begin();
  // Layers [next, end) are written (next: the first layer not sent yet): gathers them, each
  // message's share in one block, and sends every message whose last layer is among them. A
  // layer fence the io waits for must cover every one of them (PageIo::WaitFence). `end`
  // must be past the layers already sent and at most the plan's layer count
  // (FAILED_PRECONDITION otherwise). Returns the sticky failure, if any.
  absl::Status SendLayers(int end);
  // SendLayers(layer + 1) for the next layer; another layer is FAILED_PRECONDITION.
  absl::Status SendLayer(int layer);
  // Waits for the last byte (after every layer was sent); returns the payload bytes sent.
  absl::StatusOr<int64_t> Finish();
  // Aborts the communicator (idempotent); later calls return `reason`.
  void Abort(const absl::Status& reason);
  const absl::Status& status() const { return status_; }
  int64_t bytes_enqueued() const { return bytes_; }

 private:
  absl::Status Fail(absl::Status s);
  Communicator* const comm_;
  PageIo* const io_;
  const TransferPlan* const plan_;
  const std::vector<int32_t> pages_;
  const absl::Duration no_progress_;
  const CopyBatching batching_;
  absl::Status status_;
  int next_layer_ = 0;
  int64_t bytes_ = 0;
  bool begun_ = false;
};

// Receives a whole plan into `pages` (the receiver's ids, plan.num_pages of them). Returns the
// payload bytes received; FAILED_PRECONDITION when the sender's header names another plan.
// The communicator is aborted on any failure.
absl::StatusOr<int64_t> ReceivePlan(Communicator* comm, PageIo* io, const TransferPlan& plan,
                                    const std::vector<int32_t>& pages,
                                    absl::Duration no_progress,
                                    CopyBatching batching = CopyBatching::kPerMessage);

// The communicator of one prefill/decode pair. The decode side names communicators (it creates
// the CommId, sent to the sender in the control plane's connect answer); both sides call
// Get(id) and share the communicator while the id stays the same. After a failure the owner
// calls Invalidate(); the decode side's next NextId() mints a fresh id, so the next session
// rebuilds the communicator on both sides.
class PairLink {
 public:
  PairLink(int rank, CommunicatorFactory factory, CommIdFactory id_factory = nullptr);
  ~PairLink();

  // Decode side: the id for the next session (a new one after Invalidate or at first use).
  absl::StatusOr<CommId> CurrentId();
  // The communicator for `id`, built (bounded by `deadline`) when none is held for it.
  absl::StatusOr<Communicator*> Get(const CommId& id, absl::Time deadline);
  // Aborts and drops the held communicator.
  void Invalidate();
  // A usable communicator is held (its id joined by both ranks).
  bool holds_usable() const;
  // A communicator is held, usable or not.
  bool holds() const;
  int communicators_built() const;

 private:
  const int rank_;
  const CommunicatorFactory factory_;
  const CommIdFactory id_factory_;
  mutable absl::Mutex mu_;
  CommId id_ ABSL_GUARDED_BY(mu_);
  bool id_valid_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Communicator> comm_ ABSL_GUARDED_BY(mu_);
  CommId comm_id_ ABSL_GUARDED_BY(mu_);
  int built_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mlaserve::kvtransfer::nccl
