#include "kvtransfer/transport.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer {

absl::Status KvSender::SendPages(int layer, int first_page_index, int num_pages,
                                 std::span<const uint8_t> bytes) {
  if (num_pages <= 0 || bytes.size() % num_pages != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SendPages: ", bytes.size(),
                                                   " bytes are not ", num_pages, " equal pages"));
  }
  const size_t page_bytes = bytes.size() / num_pages;
  for (int i = 0; i < num_pages; ++i) {
    const auto* page = reinterpret_cast<const char*>(bytes.data()) + i * page_bytes;
    absl::Status s = SendPage(layer, first_page_index + i, std::string(page, page_bytes));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateSessionRef(const KvSessionRef& ref, const KvLayout& local_layout) {
  if (ref.session_id.empty()) return absl::InvalidArgumentError("KV session id is empty");
  if (ref.endpoint.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV session ", ref.session_id, " has no endpoint"));
  }
  if (ref.cached_pages < 0 || (ref.cached_pages > 0 && ref.cached_pages >= ref.num_pages)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV session ", ref.session_id, ": cached_pages ", ref.cached_pages,
        " not in [0, num_pages ", ref.num_pages, ")"));
  }
  if (!ref.compat_hash.empty() && ref.compat_hash != local_layout.CompatHash()) {
    // The one difference a hash can still name: a receiver of another KV protocol.
    for (int protocol = 1; protocol <= kKvProtocolVersion; ++protocol) {
      KvLayout other = local_layout;
      other.kv_protocol = protocol;
      if (protocol != local_layout.kv_protocol && ref.compat_hash == other.CompatHash()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "KV session ", ref.session_id, ": the receiver speaks KV transfer protocol ",
            protocol, " but this sender speaks ", local_layout.kv_protocol,
            "; run prefill and decode workers of builds with the same protocol"));
      }
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "KV session ", ref.session_id, ": the receiver's KV compatibility hash is ",
        ref.compat_hash, " but this sender's is ", local_layout.CompatHash(), " (",
        local_layout.Describe(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kvtransfer
