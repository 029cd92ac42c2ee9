// Test helper: poll the router's static workers until every role the test registered can take
// requests, with a deadline. One PollOnce is not enough on a loaded machine: the first GetInfo
// on a server that just started can fail its connect ("tcp handshaker shutdown"), which marks
// the worker unhealthy until the next poll, and the test then fails for the machine's load.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "router/router_context.h"
#include "router/worker_poller.h"

namespace mlaserve::router::testing {

// True when a decode worker (and, with want_prefill, a prefill worker) is routable before
// `timeout`.
inline bool PollUntilRoutable(RouterContext* router, bool want_prefill,
                              absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time until = absl::Now() + timeout;
  WorkerPoller poller(router, nullptr);
  while (true) {
    poller.PollOnce();
    const bool ready = !router->registry().Routable(WorkerRole::kDecode).empty() &&
                       (!want_prefill || !router->registry().Routable(WorkerRole::kPrefill).empty());
    if (ready) return true;
    if (absl::Now() >= until) return false;
  }
}

}  // namespace mlaserve::router::testing
