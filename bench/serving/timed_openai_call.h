// TimedOpenAiCall: one request over the router's OpenAI HTTP API (POST /v1/completions with
// "stream": true), so the same load can be measured over HTTP and over gRPC.
//
// The stream asks for stream_options.continuous_usage_stats, so every event carries the
// cumulative completion_tokens; each event is turned into the gRPC message it stands for (a
// chunk of that many new tokens, then `complete` with the usage and finish reason) and fed
// to the same StreamTally as gRPC calls, so TTFT / ITL / token checks follow the same rules.
// The usage's prompt_tokens_details.cached_tokens (the prefix cache's share of the prompt)
// becomes `complete`'s cached_prompt_tokens; a server that omits it reports 0.
// HTTP errors map back to gRPC codes (400 INVALID_ARGUMENT, 503 UNAVAILABLE, ...).
//
// Each call runs on its own thread (cpp-httplib's client is blocking); the deadline is the
// client's read timeout (no byte for that long ends the call).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "bench/serving/bench_call.h"
#include "bench/serving/server_target.h"

namespace httplib {
class Client;
}

namespace mlaserve::bench {

class TimedOpenAiCall final : public BenchCall {
 public:
  TimedOpenAiCall(const OpenAiTarget& target, const RequestSpec& spec, std::string request_id,
                  const CallSettings& settings, BenchClock::time_point run_start,
                  DoneCallback on_done);
  ~TimedOpenAiCall() override;  // joins the call's thread

  void Start() override;
  void CancelAtBound() override;

  // The request body for `spec` (exposed for tests).
  static std::string RequestBody(const std::string& model, const RequestSpec& spec,
                                 const CallSettings& settings);

 private:
  void Run();

  const RequestSpec spec_;
  const std::string request_id_;
  const std::string body_;
  const OpenAiTarget target_;
  const BenchClock::time_point run_start_;
  DoneCallback on_done_;
  std::unique_ptr<httplib::Client> client_;
  std::atomic<bool> cancelled_at_bound_{false};
  std::thread thread_;
};

}  // namespace mlaserve::bench
