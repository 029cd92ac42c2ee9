// NcclCollective: the Collective of one rank over an NCCL communicator (non-blocking
// initialisation and enqueue, nccl_common.h). Operations enqueue on the stream each call is
// given (the engine's compute stream), so they are ordered with the step's kernels and can be
// captured in a CUDA graph. Ranks on threads of one process also meet around each enqueue
// (rank_rendezvous.h). Built only with CUDA and NCCL.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/collective.h"
#include "parallel/rank_rendezvous.h"

namespace mlaserve::parallel {

// Joins the communicator `id` (NewNcclUniqueId's bytes, shared by every rank) as `rank` of
// `size` on CUDA device `device`, which becomes current on the calling thread. Every rank
// calls this concurrently (one thread or process per GPU); it returns once all joined, or
// DEADLINE_EXCEEDED at `deadline`. An operation that NCCL cannot enqueue within
// `enqueue_timeout` (a peer that never posts its side) fails with DEADLINE_EXCEEDED; any
// failure leaves the collective failed and its communicator aborted.
//
// Ranks that are threads of one process pass the same `in_process` rendezvous (of `size`
// ranks): each operation is then enqueued by every rank between two meetings of the ranks
// (RankRendezvous::PostTogether), and returns only once every rank has enqueued it. Without
// that, a rank's thread that blocks on its device after a collective while holding a lock
// another rank needs before its own side deadlocks the process (rank_rendezvous.h). A failure
// of one rank (Abort included) then releases the others from their meeting. Null: a rank of a
// process of its own.
absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const std::string& id, int rank, int size, int device, absl::Time deadline,
    absl::Duration enqueue_timeout = absl::Seconds(60),
    std::shared_ptr<RankRendezvous> in_process = nullptr);

}  // namespace mlaserve::parallel
