// NcclCollective: the Collective of one rank over an NCCL communicator (non-blocking
// initialisation and enqueue, nccl_common.h). Operations enqueue on the stream each call is
// given (the engine's compute stream), so they are ordered with the step's kernels and can be
// captured in a CUDA graph. Built only with CUDA and NCCL.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/collective.h"

namespace mlaserve::parallel {

// Joins the communicator `id` (NewNcclUniqueId's bytes, shared by every rank) as `rank` of
// `size` on CUDA device `device`, which becomes current on the calling thread. Every rank
// calls this concurrently (one thread or process per GPU); it returns once all joined, or
// DEADLINE_EXCEEDED at `deadline`. An operation that NCCL cannot enqueue within
// `enqueue_timeout` (a peer that never posts its side) fails with DEADLINE_EXCEEDED and
// leaves the collective failed.
absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const std::string& id, int rank, int size, int device, absl::Time deadline,
    absl::Duration enqueue_timeout = absl::Seconds(60));

}  // namespace mlaserve::parallel
