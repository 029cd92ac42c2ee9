// Test helpers: waitable probes for the two asynchronous verdicts of a KV session, the
// receiver's (KvReceiver::DoneFn) and the sender's Complete callback. Waits are bounded.
#pragma once

#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kvtransfer/receiver.h"

namespace mlaserve::kvtransfer::testing {

// The receiving session's outcome.
struct DoneProbe {
  absl::Notification done;
  std::optional<absl::StatusOr<KvReceivedKv>> result;
  KvReceiver::DoneFn fn() {
    return [this](absl::StatusOr<KvReceivedKv> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

// The sender's Complete verdict.
struct Verdict {
  absl::Notification done;
  absl::Status status;
  std::function<void(absl::Status)> fn() {
    return [this](absl::Status s) {
      status = s;
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

}  // namespace mlaserve::kvtransfer::testing
