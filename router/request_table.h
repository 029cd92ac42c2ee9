// RequestTable: the Generate calls running on this router, by request id, so the public
// Abort can reach them. Thread-safe (mu_).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace mlaserve::router {

// What the table holds for a running call.
class AbortableCall {
 public:
  virtual ~AbortableCall() = default;
  // Ends the call with finish reason ABORT and tells its workers. Idempotent.
  virtual void Abort() = 0;
};

// The table holds weak references (common/self_owned.h): it does not keep a call alive, and
// Abort holds a strong one while it runs, after the table's lock is released.
class RequestTable {
 public:
  // ALREADY_EXISTS naming the id when it is taken.
  absl::Status Insert(const std::string& id, std::weak_ptr<AbortableCall> call);
  // Removes `call`'s entry (not a newer call's under the same id).
  void Erase(const std::string& id, const AbortableCall* call);
  // NOT_FOUND naming the id when no such request runs.
  absl::Status Abort(const std::string& id);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  struct Entry {
    const AbortableCall* call;  // identity, for Erase
    std::weak_ptr<AbortableCall> ref;
  };
  std::map<std::string, Entry> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::router
