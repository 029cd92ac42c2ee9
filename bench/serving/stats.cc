#include "bench/serving/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mlaserve::bench {

double Percentile(const std::vector<double>& sorted, double q) {
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution Describe(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / d.count;
  d.median = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  d.max = values.back();
  return d;
}

BenchSummary Summarize(const LoadResult& result, int num_requests) {
  BenchSummary s;
  s.num_requests = num_requests;
  s.duration_s = result.duration_s;
  s.time_bound_hit = result.time_bound_hit;
  s.peak_in_flight = result.peak_in_flight;
  s.not_started = result.not_started;
  s.abandoned = result.abandoned;
  s.not_sent_after_failure = result.not_sent_after_failure;
  std::vector<double> ttft, tpot, itl, e2e, ttft_first_turn, ttft_later_turns;
  for (const RequestRecord& r : result.records) {
    switch (r.outcome) {
      case Outcome::kCancelledAtBound:
        ++s.cancelled_at_bound;
        continue;
      case Outcome::kFailed: {
        ++s.failed;
        FailureClass& f = s.failures[r.error_class];
        if (f.count++ == 0) {
          f.status_code = r.status_code;
          f.first_error = r.error;
        }
        continue;
      }
      case Outcome::kSuccess:
        break;
    }
    ++s.completed;
    s.total_input_tokens += r.input_len;
    s.total_output_tokens += r.output_len;
    s.total_cached_prompt_tokens += r.cached_prompt_tokens;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    if (r.conversation >= 0) {
      if (r.ttft_s >= 0) (r.turn == 0 ? ttft_first_turn : ttft_later_turns).push_back(r.ttft_s);
      if (r.turn > 0) {
        s.later_turns_input_tokens += r.input_len;
        s.later_turns_cached_prompt_tokens += r.cached_prompt_tokens;
      }
    }
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (r.output_len >= 2 && !r.itl_s.empty()) {
      tpot.push_back(std::accumulate(r.itl_s.begin(), r.itl_s.end(), 0.0) /
                     static_cast<double>(r.itl_s.size()));
    }
  }
  if (s.duration_s > 0) {
    s.request_throughput = s.completed / s.duration_s;
    s.input_throughput = static_cast<double>(s.total_input_tokens) / s.duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / s.duration_s;
  }
  if (s.total_input_tokens > 0) {
    s.prefix_cache_hit_rate = static_cast<double>(s.total_cached_prompt_tokens) /
                              static_cast<double>(s.total_input_tokens);
  }
  if (s.later_turns_input_tokens > 0) {
    s.later_turns_hit_rate = static_cast<double>(s.later_turns_cached_prompt_tokens) /
                             static_cast<double>(s.later_turns_input_tokens);
  }
  s.ttft = Describe(std::move(ttft));
  s.ttft_first_turn = Describe(std::move(ttft_first_turn));
  s.ttft_later_turns = Describe(std::move(ttft_later_turns));
  s.tpot = Describe(std::move(tpot));
  s.itl = Describe(std::move(itl));
  s.e2e = Describe(std::move(e2e));
  return s;
}

}  // namespace mlaserve::bench
