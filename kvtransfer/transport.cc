#include "kvtransfer/transport.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer {

absl::Status ValidateSessionRef(const KvSessionRef& ref, const KvLayout& local_layout) {
  if (ref.session_id.empty()) return absl::InvalidArgumentError("KV session id is empty");
  if (ref.endpoint.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV session ", ref.session_id, " has no endpoint"));
  }
  if (!ref.compat_hash.empty() && ref.compat_hash != local_layout.CompatHash()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV session ", ref.session_id, ": the receiver's KV compatibility hash is ",
        ref.compat_hash, " but this sender's is ", local_layout.CompatHash(), " (",
        local_layout.Describe(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kvtransfer
