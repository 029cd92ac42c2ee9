// RunBenchmark: one whole mlaserve-bench run, everything main() does after parsing flags
// (so tests drive it in-process against a fake server): ask the server for its model, build
// the dataset and the arrival schedule, warm up, run the timed load, print the table, write
// the files.
//
// Exit codes: 0 the run finished and every request succeeded (requests cancelled or never
// started because of --max-duration-s are not failures); 1 the run finished but some
// requests failed; 2 the run could not be done (bad options, server unreachable, dataset or
// output file problems).
#pragma once

#include <cstdio>

#include "bench/serving/bench_options.h"

namespace mlaserve::bench {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRequestsFailed = 1;
inline constexpr int kExitCannotRun = 2;

// The table goes to `out`, progress and diagnostics to `err`.
int RunBenchmark(const BenchOptions& options, std::FILE* out, std::FILE* err);

}  // namespace mlaserve::bench
