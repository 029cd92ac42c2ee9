// NCCL pieces shared by the worker's collectives (nccl_collective.h) and the KV transfer's
// point-to-point communicator (kvtransfer/nccl): status mapping, bootstrap ids, and the
// non-blocking initialisation and enqueue that never hang a thread on a dead peer.
// Built only with CUDA and NCCL.
#pragma once

#include <string>
#include <string_view>

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mlaserve::parallel {

// ncclSuccess and ncclInProgress are OK. A remote or system error is UNAVAILABLE (the peer's
// problem: callers may retry elsewhere), anything else INTERNAL; the message is
// "<who>: <what>: <NCCL's text>".
absl::Status NcclStatus(ncclResult_t r, const char* who, const char* what);

// ncclGetUniqueId as its 128 bytes, the id every rank of a communicator joins with.
absl::StatusOr<std::string> NewNcclUniqueId();

// Joins the communicator `id` as `rank` of `size` on CUDA device `device` (made current on the
// calling thread), non-blocking: polls until every rank joined, NCCL fails, or `deadline`
// passes (then ncclCommAbort and DEADLINE_EXCEEDED).
absl::StatusOr<ncclComm_t> InitNcclComm(const std::string& id, int size, int rank, int device,
                                        absl::Time deadline, const char* who);

// Completes an operation a non-blocking communicator answered ncclInProgress for (the first
// operation to a peer connects to it and needs the peer to post its side), polling until it
// is enqueued, failed, or `deadline` passed (DEADLINE_EXCEEDED: the peer stalled or is gone).
absl::Status FinishEnqueue(ncclComm_t comm, ncclResult_t r, absl::Time deadline,
                           const char* who, const char* what);

// The NCCL version the process loaded, "2.28.3".
std::string NcclVersionString();

}  // namespace mlaserve::parallel
