#include "router/request_table.h"

#include "common/request_limits.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::router {

absl::Status RequestTable::Insert(const std::string& id, std::weak_ptr<AbortableCall> call) {
  absl::MutexLock lock(&mu_);
  const AbortableCall* identity = call.lock().get();
  if (!calls_.emplace(id, Entry{identity, std::move(call)}).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("request id '", common::IdForMessages(id),
                     "' is already in use by a running request"));
  }
  return absl::OkStatus();
}

void RequestTable::Erase(const std::string& id, const AbortableCall* call) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(id);
  if (it != calls_.end() && it->second.call == call) calls_.erase(it);
}

absl::Status RequestTable::Abort(const std::string& id) {
  std::shared_ptr<AbortableCall> call;  // keeps it alive after the lock is released
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it != calls_.end()) call = it->second.ref.lock();
  }
  if (call == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no running request with id '", common::IdForMessages(id), "'"));
  }
  call->Abort();
  return absl::OkStatus();
}

size_t RequestTable::size() const {
  absl::MutexLock lock(&mu_);
  return calls_.size();
}

}  // namespace mlaserve::router
