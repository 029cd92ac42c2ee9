// BenchCall: one timed request of a run, whatever carries it: the gRPC Generate stream
// (TimedGenerateCall) or the OpenAI HTTP API with server-sent events (TimedOpenAiCall).
// LoadRunner starts calls through a BenchCallFactory and cancels them at the time bound.
//
// Contract of every implementation: Start() does not block; `on_done` (given at
// construction) runs exactly once, on a thread of the implementation's choosing, once the
// request ended; CancelAtBound() may be called from any thread at any time, also after the
// call finished (then it is a no-op). The owner keeps the object until the run ends.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "bench/serving/request_record.h"

namespace mlaserve::bench {

// Per-request settings shared by every request of a run.
struct CallSettings {
  absl::Duration timeout = absl::Seconds(600);  // deadline of each request
  std::optional<float> temperature;             // unset: the server's default
  std::optional<float> top_p;                   // unset: the server's default
  // Sent only with a RequestSpec whose sends_knobs is set (BenchOptions::knobs_fraction).
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<int> logprobs;
  bool ignore_eos = true;
  bool include_text = true;  // ask the router to detokenize too, as a real client would
};

using BenchClock = std::chrono::steady_clock;

class BenchCall {
 public:
  using DoneCallback = std::function<void(RequestRecord)>;
  virtual ~BenchCall() = default;
  virtual void Start() = 0;
  virtual void CancelAtBound() = 0;
};

using BenchCallFactory = std::function<std::unique_ptr<BenchCall>(
    const RequestSpec& spec, std::string request_id, const CallSettings& settings,
    BenchClock::time_point run_start, BenchCall::DoneCallback on_done)>;

}  // namespace mlaserve::bench
