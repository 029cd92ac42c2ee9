// How the workers pick a pair's KV transport (--kv-transport auto|tcp|nccl on both).
//
// The decode worker offers what it serves in every KvSessionRef (and its WorkerDescriptor):
// "nccl" when its pool is on a GPU, the binary has NCCL and its flag is not tcp (it then serves
// KvNcclService next to KvService), "tcp" otherwise. KvService (tcp) is always served, so a
// prefill worker that cannot use nccl still reaches a decode worker that offers it.
// The prefill worker decides per session with ChooseTransport (transport_select.h): its own
// flag and capabilities against the decode worker's offer. A forced choice the pair cannot
// honour fails that session with FAILED_PRECONDITION naming why; a worker forcing nccl that
// cannot run it at all refuses to start (CheckNcclFlag).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "kvtransfer/transport.h"

namespace mlaserve::kvtransfer::nccl {

// FAILED_PRECONDITION naming what is missing when `flag` is "nccl" but this worker cannot.
absl::Status CheckNcclFlag(const std::string& flag, bool gpu_pool, bool nccl_built);

// The decode worker's offer ("nccl" or "tcp").
std::string DecodeOffer(const std::string& flag, bool gpu_pool, bool nccl_built);

// Prefill side: opens each session on `tcp` or `nccl` (null when this worker has none).
class SelectingKvTransport final : public KvTransport {
 public:
  SelectingKvTransport(std::string flag, bool gpu_pool, KvTransport* tcp, KvTransport* nccl)
      : flag_(std::move(flag)), gpu_pool_(gpu_pool), tcp_(tcp), nccl_(nccl) {}
  std::string_view name() const override { return flag_; }
  absl::StatusOr<std::unique_ptr<KvSender>> Open(const KvSessionRef& ref,
                                                 const KvLayout& local_layout,
                                                 const KvSenderOptions& options) override;

 private:
  const std::string flag_;
  const bool gpu_pool_;
  KvTransport* const tcp_;
  KvTransport* const nccl_;
};

}  // namespace mlaserve::kvtransfer::nccl
