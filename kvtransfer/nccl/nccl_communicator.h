// The real Communicator: a two-rank NCCL communicator (non-blocking: ncclCommInitRankConfig
// with blocking = 0, so neither init nor a send to a dead peer can hang a thread) on a
// dedicated non-blocking CUDA stream of the given device. Built only with CUDA + NCCL.
#pragma once

#include "kvtransfer/nccl/communicator.h"

namespace mlaserve::kvtransfer::nccl {

// ncclGetUniqueId, as the 128-byte CommId the control plane carries. Decode side.
absl::StatusOr<CommId> NewNcclCommId();

// Joins the communicator `id` as `rank` (0 sender, 1 receiver) on CUDA device `device`.
// Initialisation polls ncclCommGetAsyncError until it succeeds, fails, or `deadline` passes
// (then ncclCommAbort, DEADLINE_EXCEEDED). WaitAll polls stream completion and the async error
// with its no-progress deadline; Abort is ncclCommAbort. A Send/Recv that NCCL cannot enqueue
// within `enqueue_timeout` (the first operation to a peer waits for the peer to connect) fails
// with DEADLINE_EXCEEDED like a stalled transfer.
CommunicatorFactory NcclCommunicatorFactory(int device,
                                            absl::Duration enqueue_timeout = absl::Seconds(30));

// The NCCL version the process loaded, "2.28.3".
std::string NcclVersionString();

}  // namespace mlaserve::kvtransfer::nccl
