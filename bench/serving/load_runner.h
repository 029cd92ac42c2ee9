// LoadRunner: sends a dataset's requests at their arrival times, at most max_concurrency at
// once, and collects one RequestRecord per request sent.
//
// The calling thread dispatches: it waits for a request's arrival time, then for a free
// concurrency slot (a request that arrives while all slots are busy waits for one, as in the
// usual serving benchmarks; its TTFT counts from the moment it is sent), then starts the call.
// Calls complete on gRPC threads. With a time bound, dispatch stops at the bound and every
// call still running is cancelled and recorded as kCancelledAtBound; requests not yet sent
// are counted as not started. Nothing waits without a deadline: calls carry their own
// deadline, and calls that do not end within `cancel_grace` of being cancelled are abandoned
// (counted; their memory is kept alive, never freed under gRPC's feet).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/serving/request_record.h"
#include "bench/serving/timed_generate_call.h"
#include "mlaserve/v1/api.grpc.pb.h"

namespace mlaserve::bench {

struct LoadOptions {
  int max_concurrency = 0;                           // 0 = unlimited
  absl::Duration max_duration = absl::InfiniteDuration();  // of the whole run
  CallSettings call;
  std::string request_id_prefix = "bench";           // ids are "<prefix>-<index>"
  absl::Duration cancel_grace = absl::Seconds(30);
};

struct LoadProgress {
  int total = 0;
  int started = 0;
  int finished = 0;
  int failed = 0;
  int in_flight = 0;
};

struct LoadResult {
  std::vector<RequestRecord> records;  // every request sent and finished, by index
  int not_started = 0;                 // never sent: the time bound ran out first
  int abandoned = 0;                   // cancelled but never finished within cancel_grace
  int peak_in_flight = 0;
  double duration_s = 0;               // start of dispatch -> last call finished
  bool time_bound_hit = false;
};

class LoadRunner {
 public:
  // Requests over the gRPC Generate API; `stub` must outlive Run().
  LoadRunner(v1::Generation::StubInterface* stub, LoadOptions options);
  // Requests made by `factory` (e.g. over the OpenAI HTTP API).
  LoadRunner(BenchCallFactory factory, LoadOptions options);
  ~LoadRunner();

  // Blocks until every request finished (or the bound ran out). `arrival_offsets_s[i]` is
  // when specs[i] is due, in seconds from the start; sizes must match. Call once.
  LoadResult Run(const std::vector<RequestSpec>& specs,
                 const std::vector<double>& arrival_offsets_s);

  // Thread-safe snapshot, for progress display while Run() blocks.
  LoadProgress Progress() const;

 private:
  struct State;
  BenchCallFactory factory_;
  LoadOptions options_;
  std::shared_ptr<State> state_;  // shared with the calls' completion callbacks
  std::vector<std::unique_ptr<BenchCall>> calls_;  // dispatcher thread only
};

}  // namespace mlaserve::bench
