#include "router/admission_queue.h"

#include <algorithm>
#include <utility>

namespace mlaserve::router {

AdmissionQueue::AdmissionQueue() : deadlines_([this] { DeadlineLoop(); }) {}

AdmissionQueue::~AdmissionQueue() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  deadlines_.join();
  std::deque<std::shared_ptr<Waiter>> left;  // dropped outside mu_
  {
    absl::MutexLock l(&mu_);
    left.swap(waiting_);
  }
}

void AdmissionQueue::Add(std::shared_ptr<Waiter> w) {
  absl::MutexLock l(&mu_);
  waiting_.push_back(std::move(w));
  changed_ = true;
}

void AdmissionQueue::DeadlineLoop() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& w : waiting_) next = std::min(next, w->queue_deadline());
    changed_ = false;
    auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || changed_; };
    if (mu_.AwaitWithDeadline(absl::Condition(&woken), next)) continue;
    mu_.Unlock();
    Kick();  // ends the calls whose wait is over (and admits any that fit)
    mu_.Lock();
  }
}

int AdmissionQueue::size() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(waiting_.size());
}

bool AdmissionQueue::AwaitSize(int n, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto reached = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(waiting_.size()) == n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

void AdmissionQueue::Kick() {
  {
    absl::MutexLock l(&mu_);
    if (kicking_) {
      again_ = true;
      return;
    }
    kicking_ = true;
  }
  while (true) {
    std::deque<std::shared_ptr<Waiter>> batch;
    {
      absl::MutexLock l(&mu_);
      again_ = false;
      batch.swap(waiting_);
    }
    // Calls run outside mu_: admitting or failing one starts gRPC work and may end calls
    // whose AfterEnd kicks again (that Kick only sets again_).
    const absl::Time now = absl::Now();
    std::deque<std::shared_ptr<Waiter>> keep;
    bool blocked = false;
    for (std::shared_ptr<Waiter>& w : batch) {
      bool waits;
      if (!blocked) {
        waits = w->RetryAdmission(now) == Waiter::Outcome::kStillWaiting;
        blocked = waits;
      } else {
        waits = !w->ExpireIfDue(now);
      }
      if (waits) keep.push_back(std::move(w));
    }
    batch.clear();  // the calls that left are let go outside mu_
    absl::MutexLock l(&mu_);
    // Calls that arrived during this round queue behind the ones kept.
    keep.insert(keep.end(), waiting_.begin(), waiting_.end());
    waiting_.swap(keep);
    changed_ = true;
    if (!again_) {
      kicking_ = false;
      return;
    }
  }
}

}  // namespace mlaserve::router
