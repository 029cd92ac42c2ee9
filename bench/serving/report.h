// Reports of a run: the table printed on stdout, the summary JSON for scripts (key names
// follow the convention of the common serving benchmarks: mean_ttft_ms, p99_itl_ms,
// output_throughput, ...), and the per-request JSONL records.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/serving/bench_options.h"
#include "bench/serving/request_record.h"
#include "bench/serving/stats.h"
#include "nlohmann/json.hpp"

namespace mlaserve::bench {

// What the run was: printed in the table's header and stored in the summary JSON.
struct RunInfo {
  BenchOptions options;
  std::string model_name;
  int warmup_sent = 0;
  int warmup_failed = 0;
};

std::string FormatSummaryTable(const BenchSummary& summary, const RunInfo& info);
nlohmann::json SummaryToJson(const BenchSummary& summary, const RunInfo& info);
nlohmann::json RecordToJson(const RequestRecord& record);

// Write the files; INTERNAL naming the path when it cannot be written.
absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value);
absl::Status WriteJsonlFile(const std::string& path, const std::vector<RequestRecord>& records);

}  // namespace mlaserve::bench
