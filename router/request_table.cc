#include "router/request_table.h"

#include "common/request_limits.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::router {

absl::Status RequestTable::Insert(const std::string& id, AbortableCall* call) {
  absl::MutexLock lock(&mu_);
  if (!calls_.emplace(id, call).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("request id '", common::IdForMessages(id),
                     "' is already in use by a running request"));
  }
  return absl::OkStatus();
}

void RequestTable::Erase(const std::string& id, AbortableCall* call) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(id);
  if (it != calls_.end() && it->second == call) calls_.erase(it);
}

absl::Status RequestTable::Abort(const std::string& id) {
  AbortableCall* call = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) {
      return absl::NotFoundError(absl::StrCat("no running request with id '", common::IdForMessages(id), "'"));
    }
    call = it->second;
    call->Ref();  // keeps it alive after the lock is released
  }
  call->Abort();
  call->Unref();
  return absl::OkStatus();
}

size_t RequestTable::size() const {
  absl::MutexLock lock(&mu_);
  return calls_.size();
}

}  // namespace mlaserve::router
