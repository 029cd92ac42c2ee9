// FakeCollectiveGroup: N in-process ranks (one thread each) joined like an NCCL communicator,
// moving host memory. Each operation is a meeting of the ranks (rank_rendezvous.h, the same one
// NCCL ranks on threads of one process meet at): a rank's call blocks until all N ranks made
// the same call; the last to arrive checks that the calls agree (operation, count, dtype,
// pairwise all-to-all counts), computes every rank's result, and releases the others.
// Sums run in rank order in f32 (bf16 rounded once at the end), so results do not depend
// on thread timing.
//
// A call that waits longer than the group's timeout fails the whole group with
// DEADLINE_EXCEEDED (a rank that never arrives, e.g. one whose step failed before the
// collective and did not Abort). Mismatched calls fail the group with INTERNAL naming both.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/collective.h"

namespace mlaserve::parallel {

class FakeCollectiveGroup {
 public:
  // The communicators of ranks 0..size-1 (INVALID_ARGUMENT for size < 1). They share the
  // group's state, which lives as long as any of them.
  static absl::StatusOr<std::vector<std::unique_ptr<Collective>>> Create(
      int size, absl::Duration timeout = absl::Seconds(60));
};

}  // namespace mlaserve::parallel
