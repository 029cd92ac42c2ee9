// Which KV transport a prefill/decode pair uses (--kv-transport auto|tcp|nccl on both workers).
// auto picks nccl when both sides have a GPU pool and an NCCL build and their GPUs can reach
// each other (same host: NVLink/PCIe peer access; other hosts: both report a network NCCL can
// use), tcp otherwise. A forced choice the pair cannot honour is an error naming the reason,
// not a silent fallback.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace mlaserve::kvtransfer::nccl {

struct TransportEnd {
  std::string flag = "auto";   // this worker's --kv-transport
  bool gpu_pool = false;       // its KV pool lives on a GPU
  bool nccl_built = false;     // the binary has the real NCCL communicator
  std::string host;            // host identity (e.g. boot id / hostname)
  bool network = false;        // an inter-host network NCCL can use (IB/RoCE or sockets allowed)
};

// "nccl" or "tcp"; INVALID_ARGUMENT for an unknown flag, FAILED_PRECONDITION when a side forces
// a transport the other refuses or nccl is forced but impossible.
absl::StatusOr<std::string> ChooseTransport(const TransportEnd& prefill,
                                            const TransportEnd& decode);

}  // namespace mlaserve::kvtransfer::nccl
