// Test helpers: waitable probes for the two asynchronous verdicts of a KV session, the
// receiver's (KvReceiver::DoneFn) and the sender's Complete callback. Waits are bounded.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kvtransfer/receiver.h"

namespace mlaserve::kvtransfer::testing {

// The receiving session's outcome. The callback holds the state, not the probe: the probe
// may go out of scope as soon as Wait() returned while the notifying thread is still inside
// Notify() (whose lock it releases after the waiter could already see the flag).
struct DoneProbe {
  struct State {
    absl::Notification done;
    std::optional<absl::StatusOr<KvReceivedKv>> result;
  };
  std::shared_ptr<State> state = std::make_shared<State>();
  absl::Notification& done = state->done;
  std::optional<absl::StatusOr<KvReceivedKv>>& result = state->result;
  KvReceiver::DoneFn fn() {
    return [s = state](absl::StatusOr<KvReceivedKv> r) {
      s->result = std::move(r);
      s->done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

// The sender's Complete verdict (same ownership rule).
struct Verdict {
  struct State {
    absl::Notification done;
    absl::Status status;
  };
  std::shared_ptr<State> state = std::make_shared<State>();
  absl::Notification& done = state->done;
  absl::Status& status = state->status;
  std::function<void(absl::Status)> fn() {
    return [s = state](absl::Status st) {
      s->status = std::move(st);
      s->done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

}  // namespace mlaserve::kvtransfer::testing
