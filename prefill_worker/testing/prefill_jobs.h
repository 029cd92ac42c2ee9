// Test helpers for the prefill runner's tests: prompts, jobs and a waitable outcome.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kvtransfer/transport.h"
#include "prefill_worker/prefill_runner.h"

namespace mlaserve::prefill::testing {

// `n` token ids of a 64-token vocabulary (FakeEngine's), a different sequence for each salt.
inline std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 7 + salt) % 64;
  return p;
}

// A greedy prefill of `tokens` into the KV session `ref`.
inline PrefillJob Job(const std::string& id, std::vector<int32_t> tokens,
                      kvtransfer::KvSessionRef ref) {
  PrefillJob j;
  j.request_id = id;
  j.tokens = std::move(tokens);
  j.sampling.temperature = 0;
  j.session = std::move(ref);
  return j;
}

// What the runner answered a job (its PrefillDoneFn).
struct Outcome {
  absl::Notification done;
  std::optional<absl::StatusOr<PrefillOutcome>> result;
  PrefillDoneFn fn() {
    return [this](absl::StatusOr<PrefillOutcome> o) {
      result = std::move(o);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

}  // namespace mlaserve::prefill::testing
