// Summary statistics of a run: counts, throughput and latency distributions, computed from
// the per-request records (latencies over successful requests only).
//
// Definitions (seconds internally; reports print milliseconds):
//  - TTFT: call start -> first token; E2E: call start -> final status.
//  - ITL: the per-token gaps of StreamTally, pooled over all successful requests.
//  - TPOT: per request with >= 2 output tokens, (last token - first token) / (tokens - 1),
//    i.e. the mean of that request's ITL entries; the distribution is over requests.
//  - Percentiles interpolate linearly between order statistics (numpy's default).
//  - Throughput: successful requests and their tokens divided by the run's duration.
//  - Prefix cache hit rate: the successful requests' cached prompt tokens over their input
//    tokens (0 when the server reports no cached tokens).
//  - Multi-turn runs: the same TTFT over conversations' first turns and over their later
//    turns, and the later turns' own hit rate (what a cache that keeps answers is for).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/serving/load_runner.h"
#include "bench/serving/request_record.h"

namespace mlaserve::bench {

struct Distribution {
  int count = 0;
  double mean = 0;
  double median = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// `q` in [0, 100]; `sorted` ascending and non-empty.
double Percentile(const std::vector<double>& sorted, double q);
Distribution Describe(std::vector<double> values);

struct FailureClass {
  int count = 0;
  int status_code = 0;        // the gRPC code (0 for client-side checks)
  std::string first_error;    // the first message seen, as an example
};

struct BenchSummary {
  int num_requests = 0;       // the dataset's size
  int completed = 0;          // successful
  int failed = 0;
  int cancelled_at_bound = 0;
  int not_started = 0;
  int abandoned = 0;
  double duration_s = 0;
  bool time_bound_hit = false;
  int peak_in_flight = 0;
  int64_t total_input_tokens = 0;   // of successful requests
  int64_t total_output_tokens = 0;  // of successful requests
  int64_t total_cached_prompt_tokens = 0;  // of successful requests' input tokens
  double prefix_cache_hit_rate = 0;        // total_cached_prompt_tokens / total_input_tokens
  double request_throughput = 0;    // requests/s
  double input_throughput = 0;      // tokens/s
  double output_throughput = 0;     // tokens/s
  Distribution ttft, tpot, itl, e2e;
  // Multi-turn runs (records with a conversation); empty / 0 otherwise.
  int not_sent_after_failure = 0;   // later turns of conversations whose turn failed
  Distribution ttft_first_turn, ttft_later_turns;
  int64_t later_turns_input_tokens = 0;
  int64_t later_turns_cached_prompt_tokens = 0;
  double later_turns_hit_rate = 0;  // later_turns_cached_prompt_tokens / ..._input_tokens
  std::map<std::string, FailureClass> failures;  // by error_class
};

BenchSummary Summarize(const LoadResult& result, int num_requests);

}  // namespace mlaserve::bench
