// AdmissionQueue: Generate calls that found no decode worker with room now for their prompt's
// KV pages wait here, first come first served, each until its own deadline, instead of
// failing at once (as vLLM's and SGLang's schedulers queue requests). Room appears when a
// worker's next load report shows pages freed or when one of this router's requests ends, so
// Kick() runs after every worker poll and whenever a call gives its pages back.
//
// Order: Kick retries the waiting calls oldest first and stops at the first that still does
// not fit (the newer ones only get their deadlines checked), so a long prompt is not passed
// over forever by short ones. A thread of its own kicks at the earliest waiting deadline, so
// a call's wait ends on time whatever the poll period.
#pragma once

#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mlaserve::router {

class AdmissionQueue {
 public:
  class Waiter {
   public:
    enum class Outcome { kAdmitted, kStillWaiting, kEnded };
    virtual ~Waiter() = default;
    // Tries to place the call again; past its deadline it fails the call (kEnded), as it
    // does when the call ended meanwhile (client cancel).
    virtual Outcome RetryAdmission(absl::Time now) = 0;
    // Fails the call if its deadline passed; true when the call has ended.
    virtual bool ExpireIfDue(absl::Time now) = 0;
    // When it stops waiting (fixed while it is queued).
    virtual absl::Time queue_deadline() const = 0;
  };

  AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;
  ~AdmissionQueue();  // stops the deadline thread, drops whatever still waits

  // Holds `w` (a strong reference, common/self_owned.h) until it leaves the queue.
  void Add(std::shared_ptr<Waiter> w);
  // Retries the waiting calls (see the order above). Reentrant and thread-safe: a Kick that
  // arrives while another runs makes that one go round again.
  void Kick();
  int size() const;
  // True once size() == n, within `timeout` (tests, and operators' tooling).
  bool AwaitSize(int n, absl::Duration timeout) const;

 private:
  void DeadlineLoop();

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<Waiter>> waiting_ ABSL_GUARDED_BY(mu_);
  bool kicking_ ABSL_GUARDED_BY(mu_) = false;
  bool again_ ABSL_GUARDED_BY(mu_) = false;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // the set of deadlines changed
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread deadlines_;
};

}  // namespace mlaserve::router
