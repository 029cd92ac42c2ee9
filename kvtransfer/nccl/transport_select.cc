#include "kvtransfer/nccl/transport_select.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

absl::Status CheckFlag(const char* side, const std::string& flag) {
  if (flag == "auto" || flag == "tcp" || flag == "nccl") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the ", side, " worker's --kv-transport is \"",
                                                 flag, "\"; expected auto, tcp or nccl"));
}

// Empty when nccl works for the pair, else why not.
std::string WhyNotNccl(const TransportEnd& p, const TransportEnd& d) {
  if (!p.gpu_pool) return "the prefill worker's KV pool is not on a GPU";
  if (!d.gpu_pool) return "the decode worker's KV pool is not on a GPU";
  if (!p.nccl_built) return "the prefill worker was built without NCCL";
  if (!d.nccl_built) return "the decode worker was built without NCCL";
  if (p.host != d.host && !(p.network && d.network)) {
    return absl::StrCat("the workers run on different hosts (", p.host, ", ", d.host,
                        ") without a network NCCL can use on both");
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> ChooseTransport(const TransportEnd& prefill,
                                            const TransportEnd& decode) {
  if (auto s = CheckFlag("prefill", prefill.flag); !s.ok()) return s;
  if (auto s = CheckFlag("decode", decode.flag); !s.ok()) return s;
  if ((prefill.flag == "tcp" && decode.flag == "nccl") ||
      (prefill.flag == "nccl" && decode.flag == "tcp")) {
    return absl::FailedPreconditionError(
        absl::StrCat("the prefill worker forces --kv-transport ", prefill.flag,
                     ", the decode worker ", decode.flag));
  }
  const std::string why = WhyNotNccl(prefill, decode);
  if (prefill.flag == "nccl" || decode.flag == "nccl") {
    if (!why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--kv-transport nccl is forced but ", why));
    }
    return std::string("nccl");
  }
  if (prefill.flag == "tcp" || decode.flag == "tcp") return std::string("tcp");
  return std::string(why.empty() ? "nccl" : "tcp");
}

}  // namespace mlaserve::kvtransfer::nccl
