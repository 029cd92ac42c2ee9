// TimedGenerateCall: one Generate RPC driven by the gRPC callback API, with each streamed
// message time-stamped on arrival and handed to a StreamTally.
//
// Lifetime: the owner (LoadRunner) keeps the object until the run ends, so CancelAtBound()
// may be called from any thread at any time, also after the call finished (it is then a
// no-op). `on_done` runs exactly once, on a gRPC thread, after the final status arrived; it
// must not call back into this object except through its record.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "bench/serving/bench_call.h"
#include "bench/serving/request_record.h"
#include "bench/serving/stream_tally.h"
#include "mlaserve/v1/api.grpc.pb.h"

namespace mlaserve::bench {

class TimedGenerateCall : public grpc::ClientReadReactor<v1::GenerateResponse>, public BenchCall {
 public:
  TimedGenerateCall(v1::Generation::StubInterface* stub, const RequestSpec& spec,
                    std::string request_id, const CallSettings& settings,
                    BenchClock::time_point run_start, DoneCallback on_done);

  // Starts the RPC. Call once.
  void Start() override;

  // Cancels the RPC because the run's time bound ran out; the record then says so.
  void CancelAtBound() override;

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  double SecondsSinceStart() const;

  v1::Generation::StubInterface* stub_;
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  absl::Duration timeout_;
  BenchClock::time_point run_start_;
  BenchClock::time_point call_start_;
  std::optional<StreamTally> tally_;  // touched only by Start and the reactions
  DoneCallback on_done_;
  std::atomic<bool> cancelled_at_bound_{false};
  const RequestSpec* spec_;  // valid until Start() returns
  std::string request_id_;
};

}  // namespace mlaserve::bench
