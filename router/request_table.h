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

// What the table holds for a running call. The call keeps itself alive while registered.
class AbortableCall {
 public:
  virtual ~AbortableCall() = default;
  // Ends the call with finish reason ABORT and tells its workers. Idempotent.
  virtual void Abort() = 0;
  // Reference counting so Abort can run after the table lock is released.
  virtual void Ref() = 0;
  virtual void Unref() = 0;
};

class RequestTable {
 public:
  // ALREADY_EXISTS naming the id when it is taken.
  absl::Status Insert(const std::string& id, AbortableCall* call);
  void Erase(const std::string& id, AbortableCall* call);
  // NOT_FOUND naming the id when no such request runs.
  absl::Status Abort(const std::string& id);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, AbortableCall*> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::router
