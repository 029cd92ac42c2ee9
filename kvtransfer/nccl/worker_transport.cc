#include "kvtransfer/nccl/worker_transport.h"

#include "absl/strings/str_cat.h"
#include "kvtransfer/nccl/transport_select.h"

namespace mlaserve::kvtransfer::nccl {

absl::Status CheckNcclFlag(const std::string& flag, bool gpu_pool, bool nccl_built) {
  if (flag != "nccl") return absl::OkStatus();
  if (!gpu_pool) {
    return absl::FailedPreconditionError(
        "--kv-transport nccl needs the KV pool on a GPU (--backend cuda); use tcp or auto");
  }
  if (!nccl_built) {
    return absl::FailedPreconditionError(
        "--kv-transport nccl: this binary was built without NCCL; use tcp or auto");
  }
  return absl::OkStatus();
}

std::string DecodeOffer(const std::string& flag, bool gpu_pool, bool nccl_built) {
  return flag != "tcp" && gpu_pool && nccl_built ? "nccl" : "tcp";
}

absl::StatusOr<std::unique_ptr<KvSender>> SelectingKvTransport::Open(
    const KvSessionRef& ref, const KvLayout& local_layout, const KvSenderOptions& options) {
  if (ref.transport != "tcp" && ref.transport != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat("KV session ", ref.session_id,
                                                   " names transport \"", ref.transport,
                                                   "\"; this prefill worker speaks tcp, nccl"));
  }
  // The decode worker's offer stands for its side: "nccl" = a GPU pool with NCCL, tcp also
  // served. NCCL reaches any peer (NVLink/PCIe on one host, its network or socket transport
  // across hosts), so reachability is not a reason to refuse here.
  const bool offers = ref.transport == "nccl";
  TransportEnd p{flag_, gpu_pool_, nccl_ != nullptr, "", true};
  TransportEnd d{offers ? "auto" : "tcp", offers, offers, "", true};
  absl::StatusOr<std::string> choice = ChooseTransport(p, d);
  if (!choice.ok()) {
    return absl::Status(choice.status().code(),
                        absl::StrCat("KV session ", ref.session_id, " to ", ref.endpoint, ": ",
                                     choice.status().message()));
  }
  KvSessionRef chosen = ref;
  chosen.transport = *choice;
  return (*choice == "nccl" ? nccl_ : tcp_)->Open(chosen, local_layout, options);
}

}  // namespace mlaserve::kvtransfer::nccl
