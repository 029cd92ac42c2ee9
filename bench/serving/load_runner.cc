#include "bench/serving/load_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mlaserve::bench {

struct LoadRunner::State {
  mutable absl::Mutex mu;
  std::vector<RequestRecord> records ABSL_GUARDED_BY(mu);
  std::vector<bool> done ABSL_GUARDED_BY(mu);
  LoadProgress progress ABSL_GUARDED_BY(mu);
  int peak_in_flight ABSL_GUARDED_BY(mu) = 0;
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

// Sleeps until BenchClock reads `due` or later.
void SleepUntil(BenchClock::time_point due) {
  while (BenchClock::now() < due) std::this_thread::sleep_until(due);
}

}  // namespace

LoadResult LoadRunner::Run(const std::vector<RequestSpec>& specs,
                           const std::vector<double>& arrival_offsets_s) {
  const int n = static_cast<int>(std::min(specs.size(), arrival_offsets_s.size()));
  State& st = *state_;
  {
    absl::MutexLock lock(&st.mu);
    st.done.assign(n, false);
    st.progress.total = n;
  }
  calls_.resize(n);

  const BenchClock::time_point run_start = BenchClock::now();
  const BenchClock::time_point bound =
      options_.max_duration == absl::InfiniteDuration()
          ? BenchClock::time_point::max()
          : run_start + std::chrono::duration_cast<BenchClock::duration>(
                            absl::ToChronoNanoseconds(options_.max_duration));
  const int limit = options_.max_concurrency > 0 ? options_.max_concurrency : n + 1;
  bool bound_hit = false;

  int sent = 0;
  for (; sent < n; ++sent) {
    const BenchClock::time_point due =
        run_start + std::chrono::duration_cast<BenchClock::duration>(
                        std::chrono::duration<double>(arrival_offsets_s[sent]));
    if (due >= bound) {
      bound_hit = true;
      break;
    }
    // Pacing the arrivals is this thread's job, so it sleeps until the request is due.
    SleepUntil(due);
    {
      absl::MutexLock lock(&st.mu);
      auto slot_free = [&st, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
        return st.progress.in_flight < limit;
      };
      if (!AwaitUntil(st.mu, absl::Condition(&slot_free), bound)) {
        bound_hit = true;
        break;
      }
      ++st.progress.in_flight;
      ++st.progress.started;
      st.peak_in_flight = std::max(st.peak_in_flight, st.progress.in_flight);
    }
    const int index = sent;
    std::shared_ptr<State> shared = state_;
    calls_[index] = factory_(
        specs[index], absl::StrCat(options_.request_id_prefix, "-", index), options_.call,
        run_start, [shared, index](RequestRecord record) {
          absl::MutexLock lock(&shared->mu);
          if (record.outcome == Outcome::kFailed) ++shared->progress.failed;
          ++shared->progress.finished;
          --shared->progress.in_flight;
          shared->done[index] = true;
          shared->records.push_back(std::move(record));
        });
    calls_[index]->Start();
  }

  auto all_done = [&st]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
    return st.progress.in_flight == 0;
  };
  if (!bound_hit) {
    absl::MutexLock lock(&st.mu);
    bound_hit = !AwaitUntil(st.mu, absl::Condition(&all_done), bound);
  }
  if (bound_hit) {
    // Cancelling a call that already finished is a no-op, so no lock is needed here (and
    // none may be held: a cancelled call's completion takes the lock).
    for (int i = 0; i < sent; ++i) calls_[i]->CancelAtBound();
    absl::MutexLock lock(&st.mu);
    AwaitUntil(st.mu, absl::Condition(&all_done),
               BenchClock::now() + std::chrono::duration_cast<BenchClock::duration>(
                                       absl::ToChronoNanoseconds(options_.cancel_grace)));
  }

  LoadResult result;
  result.duration_s = std::chrono::duration<double>(BenchClock::now() - run_start).count();
  result.time_bound_hit = bound_hit;
  result.not_started = n - sent;
  absl::MutexLock lock(&st.mu);
  for (int i = 0; i < sent; ++i) {
    if (!st.done[i]) {
      // Still owned by gRPC: keep it alive for good rather than free it under a live call.
      static_cast<void>(calls_[i].release());
      ++result.abandoned;
    }
  }
  result.peak_in_flight = st.peak_in_flight;
  result.records = std::move(st.records);
  st.records.clear();
  std::sort(result.records.begin(), result.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  return result;
}

}  // namespace mlaserve::bench
