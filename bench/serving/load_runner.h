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
//
// Conversations (multi-turn, conversation.h): a spec with follow_ups > 0 is a conversation's
// turn. When it succeeds, `next_turn` builds the turn after it from its record (the answer's
// token ids), and the dispatcher sends that at once in the slot the finished turn held: so
// --max-concurrency bounds the conversations in progress, a conversation's turns go strictly
// one after the other, and never wait behind conversations not yet started. The arrival times
// are those of the conversations' first turns. A turn that fails ends its conversation: its
// follow-ups are counted as not sent after a failure; at the time bound the follow-ups of
// cancelled turns and of conversations not finished count as not started.
#pragma once

#include <functional>
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

// Builds a conversation's next turn from the turn `sent` and its successful `record`
// (output_token_ids filled). Called on the thread that completed the call, under the
// runner's lock (so Run() cannot return meanwhile): it should only copy ids.
using NextTurnFn = std::function<RequestSpec(const RequestSpec& sent, const RequestRecord& record)>;

struct LoadResult {
  std::vector<RequestRecord> records;  // every request sent and finished, by index
  int not_started = 0;                 // never sent: the time bound ran out first
  int not_sent_after_failure = 0;      // later turns of conversations whose turn failed
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
  // `next_turn` is needed when a spec has follow_ups > 0 (a conversation's first turn).
  LoadResult Run(const std::vector<RequestSpec>& specs,
                 const std::vector<double>& arrival_offsets_s, NextTurnFn next_turn = nullptr);

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
