// The timing, table and JSON pieces mlaserve-engine-bench's rows share (bench.h).
#include "bench/engine_bench/bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <cuda_runtime.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace mlaserve::engine_bench {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double UsedGiB() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return static_cast<double>(total_b - free_b) / (1ull << 30);
}

std::string RooflineCells(double work, double scale, const char* unit, double ms, double ceiling, const char* of) {
  if (work <= 0 || ms <= 0 || ceiling <= 0) return "- | - | -";
  const double rate = work / scale / (ms / 1e3);
  return absl::StrFormat("%.2f %s | %.0f %s/s | %.0f%% of %s", work / scale, unit, rate, unit,
                         100.0 * rate / ceiling, of);
}

SequenceChunk Chunk(std::span<const int32_t> tokens, int start, std::span<const int32_t> pages,
                    bool want_logits) {
  SequenceChunk c;
  c.tokens = tokens;
  c.start_pos = start;
  c.pages = pages;
  c.want_logits = want_logits;
  return c;
}

[[noreturn]] void Die(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "mlaserve-engine-bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

void BeginTrace(TracedForward* traced) {
  if (traced == nullptr) return;
  if (absl::Status s = traced->timeline.Start(); !s.ok()) Die("timeline start", s);
}

void EndTrace(TracedForward* traced) {
  if (traced == nullptr) return;
  absl::StatusOr<TimelineTrace> trace = traced->timeline.Stop();
  if (!trace.ok()) Die("timeline stop", trace.status());
  traced->trace = std::move(*trace);
}

nlohmann::json TimelineJson(nlohmann::json id, const TimelineSummary& s) {
  nlohmann::json gaps = nlohmann::json::array(), kernels = nlohmann::json::array();
  nlohmann::json copies = nlohmann::json::object();
  for (const mlaserve::bench::IdleGap& g : s.largest_gaps) {
    nlohmann::json calls = nlohmann::json::array();
    for (const auto& c : g.host_calls) {
      calls.push_back({{"name", c.name}, {"calls", c.calls}, {"overlap_us", c.overlap_us}});
    }
    gaps.push_back({{"begin_ms", g.begin_ms}, {"duration_ms", g.duration_ms},
                    {"previous", g.previous}, {"next", g.next}, {"host_calls", calls},
                    {"outside_calls_us", g.outside_calls_us}});
  }
  for (int d = 0; d < mlaserve::bench::kNumCopyDirections; ++d) {
    const mlaserve::bench::CopyTotals& c = s.copies[d];
    if (c.count == 0) continue;
    const auto direction = static_cast<mlaserve::bench::CopyDirection>(d);
    copies[std::string(mlaserve::bench::CopyDirectionName(direction))] = {
        {"count", c.count}, {"pageable", c.pageable}, {"bytes", c.bytes}, {"ms", c.ms}};
  }
  for (const mlaserve::bench::KernelTime& k : s.top_kernels) {
    kernels.push_back({{"name", k.name},
                       {"launches", k.launches},
                       {"ms", k.ms},
                       {"exclusive_ms", k.exclusive_ms},
                       {"path_ms", k.path_ms}});
  }
  id.update({{"wall_ms", s.wall_ms}, {"gpu_span_ms", s.gpu_span_ms}, {"busy_ms", s.busy_ms},
             {"idle_ms", s.idle_ms}, {"idle_gaps", s.idle_gaps},
             {"before_first_ms", s.before_first_ms}, {"after_last_ms", s.after_last_ms},
             {"kernels", s.kernels}, {"memsets", s.memsets}, {"runtime_calls", s.runtime_calls},
             {"syncs", s.syncs}, {"largest_gaps", gaps}, {"copies", copies},
             {"top_kernels", kernels}});
  return id;
}

}  // namespace mlaserve::engine_bench
