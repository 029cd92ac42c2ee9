// Communicator: the two-rank point-to-point channel of one prefill/decode pair (rank 0 sends,
// rank 1 receives). The real one wraps a non-blocking NCCL communicator on a dedicated CUDA
// stream (nccl_communicator.cc); FakeCommunicator (fake_communicator.h) moves host bytes
// between two in-process ranks and injects failures for the CI tests.
//
// Contract: Send/Recv only enqueue; buffers must stay valid until WaitAll returned OK or the
// communicator was aborted. Operations match in posting order (NCCL has no tags), so both
// sides post the steps of one TransferPlan. Any error, a WaitAll deadline, or Abort leaves
// the communicator unusable (sticky); the pair then builds a new one (PairLink).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mlaserve::kvtransfer::nccl {

// An opaque bootstrap id (ncclUniqueId's 128 bytes for NCCL), created by the receiving (decode)
// side and handed to the sender through the control plane (KvNcclConnect in kv.proto).
using CommId = std::string;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  // The stream operations are ordered on (cudaStream_t for NCCL; nullptr for the fake).
  virtual void* stream() const = 0;
  virtual absl::Status Send(const void* buf, size_t bytes) = 0;
  virtual absl::Status Recv(void* buf, size_t bytes) = 0;
  // Returns when everything enqueued so far completed (OK), the communicator failed (its
  // error), or no enqueued operation completed for `no_progress` (DEADLINE_EXCEEDED: a stalled
  // or dead peer). The caller aborts on anything but OK.
  virtual absl::Status WaitAll(absl::Duration no_progress) = 0;
  // Tears the communicator down without waiting for the peer (ncclCommAbort). Idempotent.
  virtual void Abort() = 0;
  virtual bool usable() const = 0;
};

// Creates the rank's end of the communicator named by `id`. For NCCL this joins a collective
// init that completes only when both ranks joined; implementations bound it by `deadline`.
using CommunicatorFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    const CommId& id, int rank, absl::Time deadline)>;
// Creates a fresh bootstrap id (decode side).
using CommIdFactory = std::function<absl::StatusOr<CommId>()>;

}  // namespace mlaserve::kvtransfer::nccl
