// CallbackGuard: lets callbacks held by other components (transports, receivers) reach an
// object only while it is alive. The owner calls Close() in its destructor; a callback runs
// through Run(), which holds the guard's lock, so Close() waits for a running callback and
// later ones do nothing.
#pragma once

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mlaserve::common {

class CallbackGuard {
 public:
  static std::shared_ptr<CallbackGuard> Create() { return std::make_shared<CallbackGuard>(); }

  template <typename F>
  void Run(F&& f) {
    absl::MutexLock lock(&mu_);
    if (open_) std::forward<F>(f)();
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace mlaserve::common
