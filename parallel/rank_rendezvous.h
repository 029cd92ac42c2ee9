// RankRendezvous: where the ranks of one process meet at every collective operation, so that
// they agree on what they call and move on together. Two users:
//   * the in-process fake (fake_collective.h): the operation happens at the meeting; the last
//     rank to arrive moves every rank's data (Meet);
//   * NCCL ranks on threads of one process (nccl_collective.h, model::ParallelEngine): the ranks
//     meet before enqueuing each operation and again once every rank has enqueued it
//     (PostTogether).
//
// Why NCCL ranks of one process need the second meeting. An NCCL call only enqueues: it returns
// once this rank's kernel is on its stream, and that kernel then waits on the device until every
// peer's kernel has started. If a rank's thread then blocks on its device (a stream sync, a copy
// to pageable memory, the first launch of a kernel, whose module the driver loads lazily and may
// load only once the device is idle) while it holds something a peer needs *before that peer
// enqueues its side* (a lock shared by the threads of the process: a library's plan cache, the
// driver's own), nothing moves again: the device waits for the peer, the peer for the lock, the
// lock's holder for the device. (NCCL's own advice, NVIDIA/nccl issue 613: a CUDA call after a
// collective on one thread can block a CUDA call before it on another.) Once PostTogether has
// returned on any rank, every rank has enqueued the operation, so no device of the process
// waits for a host thread and whatever a rank blocks on next completes. The first meeting checks
// that the calls match before anything is enqueued, so a rank calling another operation, count
// or dtype fails every rank with INTERNAL instead of hanging their devices. One process per GPU
// shares no host locks between ranks and needs neither.
//
// The fake's calls return only after every rank arrived, which is what PostTogether gives NCCL:
// the CPU tests (one thread per rank, as on the GPUs) run under the same rule as the GPUs.
//
// Failure is sticky: a mismatch, a rank that waits longer than the timeout, or Abort fails every
// pending and later meeting of every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/common/types.h"

namespace mlaserve::parallel {

enum class CollectiveOp : uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAllV, kBarrier };

// "AllReduceSum", "AllGather", ... (the Collective method's name).
const char* CollectiveOpName(CollectiveOp op);

// One rank's side of an operation: what the ranks must agree on, and for the fake its host
// buffers (NCCL leaves them null).
struct CollectiveCall {
  CollectiveOp op = CollectiveOp::kBarrier;
  int64_t count = 0;  // elements; unused by AllToAllV
  kernels::DType dtype = kernels::DType::kF32;
  std::vector<int64_t> send_counts, send_offsets, recv_counts, recv_offsets;  // AllToAllV
  const void* send = nullptr;
  void* recv = nullptr;
};

class RankRendezvous {
 public:
  // `size` ranks (INVALID_ARGUMENT below 1). A rank that waits longer than `timeout` for the
  // others fails the group with DEADLINE_EXCEEDED. `who` opens every error message.
  static absl::StatusOr<std::shared_ptr<RankRendezvous>> Create(int size, absl::Duration timeout,
                                                               std::string who);

  int size() const { return size_; }

  // Rank `rank` arrives with `call` and returns when every rank has arrived with its call (the
  // k-th meeting of each rank is one meeting). The last to arrive checks that the calls agree
  // (operation, dtype, count; AllToAllV counts pairwise) -- INTERNAL naming both sides if not --
  // and then runs `complete` (if set) over every rank's call, before the others are released.
  using Complete = std::function<void(std::span<const CollectiveCall> calls)>;
  absl::Status Meet(int rank, CollectiveCall call, const Complete& complete = nullptr);

  // An operation that is only enqueued (NCCL): every rank meets with `call`, then each runs its
  // `enqueue`, then each returns once every rank's enqueue returned. An enqueue error aborts the
  // group (the other ranks return ABORTED) and is this rank's result.
  absl::Status PostTogether(int rank, CollectiveCall call,
                            const std::function<absl::Status()>& enqueue);

  // Fails every rank's pending and later meetings with ABORTED naming `rank`; idempotent. Any
  // thread may call it.
  void Abort(int rank);

 private:
  // A meeting about to enqueue (its calls checked), or one after the enqueue (not rechecked).
  enum class Phase { kCall, kEnqueued };
  RankRendezvous(int size, absl::Duration timeout, std::string who);
  absl::Status Arrive(int rank, CollectiveCall call, const Complete& complete, Phase phase);
  // Why the calls of the current meeting disagree; empty when they agree.
  std::string Mismatch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int size_;
  const absl::Duration timeout_;
  const std::string who_;
  absl::Mutex mu_;  // guards the meeting in progress and the group's error
  std::vector<CollectiveCall> calls_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t meetings_ ABSL_GUARDED_BY(mu_) = 0;  // completed
  absl::Status error_ ABSL_GUARDED_BY(mu_);   // sticky
};

}  // namespace mlaserve::parallel
