// WorkerPoller: the router's one background thread. Every poll interval (and at once after
// Wake()) it calls GetInfo on every static / admin worker, in parallel, each with a deadline,
// records the answers in the registry, expires self-registered workers whose heartbeat is
// overdue, and reports readiness: at least one healthy decode and one healthy prefill worker.
#pragma once

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "router/router_context.h"

namespace mlaserve::router {

class WorkerPoller {
 public:
  // `on_readiness(ready)` runs on the poller thread after each round.
  WorkerPoller(RouterContext* router, std::function<void(bool)> on_readiness);
  ~WorkerPoller();  // stops and joins

  void Start();
  void Wake();  // poll now (a worker was added)
  void Stop();

  // One round, on the calling thread (tests).
  void PollOnce();

 private:
  void Run();

  RouterContext* const router_;
  std::function<void(bool)> on_readiness_;
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mlaserve::router
