#include "bench/serving/load_runner.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mlaserve::bench {

struct LoadRunner::State {
  mutable absl::Mutex mu;
  std::vector<RequestRecord> records ABSL_GUARDED_BY(mu);
  std::vector<bool> done ABSL_GUARDED_BY(mu);  // by call, in the order started
  LoadProgress progress ABSL_GUARDED_BY(mu);
  int peak_in_flight ABSL_GUARDED_BY(mu) = 0;
  // Conversations' next turns, built and waiting for the dispatcher; each holds the slot its
  // previous turn had (counted in progress.in_flight). The specs live in follow_up_specs (a
  // deque: references stay valid as it grows) until the run ends.
  std::deque<const RequestSpec*> ready ABSL_GUARDED_BY(mu);
  std::deque<RequestSpec> follow_up_specs ABSL_GUARDED_BY(mu);
  // False once the time bound ran out: a finished turn then gives its slot back instead.
  bool dispatching ABSL_GUARDED_BY(mu) = true;
  int not_sent_after_failure ABSL_GUARDED_BY(mu) = 0;
};

LoadRunner::LoadRunner(v1::Generation::StubInterface* stub, LoadOptions options)
    : LoadRunner(
          [stub](const RequestSpec& spec, std::string id, const CallSettings& settings,
                 BenchClock::time_point run_start, BenchCall::DoneCallback on_done) {
            return std::make_unique<TimedGenerateCall>(stub, spec, std::move(id), settings,
                                                       run_start, std::move(on_done));
          },
          std::move(options)) {}

LoadRunner::LoadRunner(BenchCallFactory factory, LoadOptions options)
    : factory_(std::move(factory)), options_(std::move(options)),
      state_(std::make_shared<State>()) {}

LoadRunner::~LoadRunner() = default;

LoadProgress LoadRunner::Progress() const {
  absl::MutexLock lock(&state_->mu);
  return state_->progress;
}

namespace {

// Waits on `mu` (held) until `cond` holds or BenchClock reaches `deadline`; false on the
// deadline. Every time in a run is read from BenchClock (steady), the clock the records'
// offsets use too, so "not before its arrival" and "not before the bound" hold exactly:
// absl's own deadlines read the wall clock, which drifts against it.
bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond, BenchClock::time_point deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  while (!cond.Eval()) {
    const BenchClock::time_point now = BenchClock::now();
    if (now >= deadline) return false;
    mu.AwaitWithTimeout(cond, absl::FromChrono(deadline - now));
  }
  return true;
}

}  // namespace

LoadResult LoadRunner::Run(const std::vector<RequestSpec>& specs,
                           const std::vector<double>& arrival_offsets_s, NextTurnFn next_turn) {
  const int n = static_cast<int>(std::min(specs.size(), arrival_offsets_s.size()));
  int total = 0;  // requests of the run, every conversation's later turns included
  for (int i = 0; i < n; ++i) total += 1 + specs[i].follow_ups;
  State& st = *state_;
  {
    absl::MutexLock lock(&st.mu);
    st.progress.total = total;
  }

  const BenchClock::time_point run_start = BenchClock::now();
  const BenchClock::time_point bound =
      options_.max_duration == absl::InfiniteDuration()
          ? BenchClock::time_point::max()
          : run_start + std::chrono::duration_cast<BenchClock::duration>(
                            absl::ToChronoNanoseconds(options_.max_duration));
  const auto due_of = [&](int i) {
    return run_start + std::chrono::duration_cast<BenchClock::duration>(
                           std::chrono::duration<double>(arrival_offsets_s[i]));
  };
  const int limit = options_.max_concurrency > 0 ? options_.max_concurrency : n + 1;
  bool bound_hit = false;

  int next_first = 0;  // the next of `specs` to send
  for (;;) {
    const RequestSpec* spec = nullptr;
    int call_number = 0;
    {
      absl::MutexLock lock(&st.mu);
      // A request due after the bound is never sent.
      const bool firsts_left = next_first < n && due_of(next_first) < bound;
      const BenchClock::time_point due =
          firsts_left ? due_of(next_first) : BenchClock::time_point::max();
      // A conversation's next turn goes first (it holds its slot); then the next request once
      // it is due and a slot is free; with nothing left to send, the end of the last call.
      auto can_act = [&st, firsts_left, due, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
        if (!st.ready.empty()) return true;
        if (!firsts_left) return st.progress.in_flight == 0;
        return st.progress.in_flight < limit && BenchClock::now() >= due;
      };
      // Pacing the arrivals is this thread's job: it waits for the next one to be due.
      const BenchClock::time_point deadline =
          firsts_left && BenchClock::now() < due ? due : bound;
      if (!AwaitUntil(st.mu, absl::Condition(&can_act), deadline)) {
        if (BenchClock::now() >= bound) {
          bound_hit = true;
          break;
        }
        continue;  // the next request became due: look again
      }
      if (!st.ready.empty()) {
        spec = st.ready.front();
        st.ready.pop_front();
      } else if (!firsts_left) {
        break;  // every call ended
      } else {
        spec = &specs[next_first++];
        ++st.progress.in_flight;
        st.peak_in_flight = std::max(st.peak_in_flight, st.progress.in_flight);
      }
      ++st.progress.started;
      call_number = static_cast<int>(st.done.size());
      st.done.push_back(false);
    }
    std::shared_ptr<State> shared = state_;
    calls_.push_back(factory_(
        *spec, absl::StrCat(options_.request_id_prefix, "-", spec->index), options_.call,
        run_start,
        [shared, call_number, spec, follow_ups = spec->follow_ups,
         next_turn](RequestRecord record) {
          absl::MutexLock lock(&shared->mu);
          // Run() clears `dispatching` under this lock before it returns, so while it holds,
          // `spec` and what next_turn refers to are alive (an abandoned call may end later).
          if (follow_ups > 0 && record.outcome == Outcome::kSuccess && next_turn &&
              shared->dispatching) {
            shared->follow_up_specs.push_back(next_turn(*spec, record));
            shared->ready.push_back(&shared->follow_up_specs.back());  // keeps the slot
          } else {
            --shared->progress.in_flight;
          }
          record.output_token_ids = {};  // handed on; the records need only the counts
          if (record.outcome == Outcome::kFailed) {
            ++shared->progress.failed;
            shared->not_sent_after_failure += follow_ups;
          }
          ++shared->progress.finished;
          shared->done[call_number] = true;
          shared->records.push_back(std::move(record));
        }));
    calls_.back()->Start();
  }
  if (next_first < n) bound_hit = true;  // requests due after the bound were cut by it

  auto all_done = [&st]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
    return st.progress.in_flight == 0;
  };
  if (bound_hit) {
    {
      absl::MutexLock lock(&st.mu);
      st.dispatching = false;
      st.progress.in_flight -= static_cast<int>(st.ready.size());  // next turns never sent
      st.ready.clear();
    }
    // Cancelling a call that already finished is a no-op, so no lock is needed here (and
    // none may be held: a cancelled call's completion takes the lock).
    for (const std::unique_ptr<BenchCall>& call : calls_) call->CancelAtBound();
    absl::MutexLock lock(&st.mu);
    AwaitUntil(st.mu, absl::Condition(&all_done),
               BenchClock::now() + std::chrono::duration_cast<BenchClock::duration>(
                                       absl::ToChronoNanoseconds(options_.cancel_grace)));
  }

  LoadResult result;
  result.duration_s = std::chrono::duration<double>(BenchClock::now() - run_start).count();
  result.time_bound_hit = bound_hit;
  const int sent = static_cast<int>(calls_.size());
  absl::MutexLock lock(&st.mu);
  st.dispatching = false;  // a call abandoned now may still end: it must build nothing
  for (int i = 0; i < sent; ++i) {
    if (!st.done[i]) {
      // Still owned by gRPC: keep it alive for good rather than free it under a live call.
      static_cast<void>(calls_[i].release());
      ++result.abandoned;
    }
  }
  result.not_sent_after_failure = st.not_sent_after_failure;
  // The rest never went out: cut by the bound, or turns after one cancelled or abandoned.
  result.not_started = total - sent - st.not_sent_after_failure;
  result.peak_in_flight = st.peak_in_flight;
  result.records = std::move(st.records);
  st.records.clear();
  std::sort(result.records.begin(), result.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  return result;
}

}  // namespace mlaserve::bench
