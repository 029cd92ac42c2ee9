#include "bench/engine_bench/timeline_summary.h"

#include <algorithm>
#include <limits>
#include <map>
#include <queue>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace mlaserve::bench {
namespace {

// Names longer than this are cut in the tables: demangled template kernels run to hundreds of
// characters, and the start (namespace, kernel, first template arguments) tells them apart.
constexpr size_t kMaxNameChars = 90;
// Host call names listed per idle gap; the rest are counted.
constexpr size_t kMaxHostCallsPerGap = 4;

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
double Us(int64_t ns) { return static_cast<double>(ns) / 1e3; }
double Percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

bool IsDeviceWork(ActivityKind kind) {
  return kind == ActivityKind::kKernel || kind == ActivityKind::kMemcpy ||
         kind == ActivityKind::kMemset;
}

// A record whose end precedes its start (a tracer glitch) counts as an instant.
int64_t EndOf(const ActivityRecord& r) { return std::max(r.start_ns, r.end_ns); }

struct Gap {
  int64_t begin_ns;
  int64_t end_ns;
  const ActivityRecord* previous;
  const ActivityRecord* next;
};

// The gap's host calls by name, and how much of the gap lies outside all of them.
IdleGap DescribeGap(const Gap& gap, int64_t window_begin_ns,
                    const std::vector<const ActivityRecord*>& host) {
  IdleGap g;
  g.begin_ms = Ms(gap.begin_ns - window_begin_ns);
  g.duration_ms = Ms(gap.end_ns - gap.begin_ns);
  g.previous = gap.previous->name;
  g.next = gap.next->name;
  std::map<std::string, size_t> index_of;            // name -> position in host_calls
  std::vector<std::pair<int64_t, int64_t>> covered;  // the calls' parts inside the gap
  for (const ActivityRecord* r : host) {
    const int64_t begin = std::max(r->start_ns, gap.begin_ns);
    const int64_t end = std::min(EndOf(*r), gap.end_ns);
    if (end <= begin) continue;
    covered.emplace_back(begin, end);
    auto [it, inserted] = index_of.try_emplace(r->name, g.host_calls.size());
    if (inserted) g.host_calls.push_back({r->name, 0, 0});
    g.host_calls[it->second].calls += 1;
    g.host_calls[it->second].overlap_us += Us(end - begin);
  }
  std::sort(g.host_calls.begin(), g.host_calls.end(),
            [](const HostCallsInGap& a, const HostCallsInGap& b) {
              return a.overlap_us != b.overlap_us ? a.overlap_us > b.overlap_us : a.name < b.name;
            });
  // Calls nest and overlap (a sync record inside its cudaStreamSynchronize): count time once.
  std::sort(covered.begin(), covered.end());
  int64_t outside = gap.end_ns - gap.begin_ns, reached = gap.begin_ns;
  for (const auto& [begin, end] : covered) {
    if (end <= reached) continue;
    outside -= end - std::max(begin, reached);
    reached = end;
  }
  g.outside_calls_us = Us(outside);
  return g;
}

// Markdown table cell: '|' escaped, long names cut.
std::string Cell(std::string_view name) {
  std::string cut(name.substr(0, kMaxNameChars));
  if (name.size() > kMaxNameChars) cut += "...";
  return absl::StrReplaceAll(cut, {{"|", "\\|"}});
}

std::string HostCallsCell(const IdleGap& gap) {
  std::string cell;
  for (size_t i = 0; i < gap.host_calls.size() && i < kMaxHostCallsPerGap; ++i) {
    const HostCallsInGap& c = gap.host_calls[i];
    absl::StrAppendFormat(&cell, "%s x%d %.1f us; ", Cell(c.name), c.calls, c.overlap_us);
  }
  if (gap.host_calls.size() > kMaxHostCallsPerGap) {
    absl::StrAppendFormat(&cell, "%d more; ", gap.host_calls.size() - kMaxHostCallsPerGap);
  }
  absl::StrAppendFormat(&cell, "outside CUDA calls %.1f us", gap.outside_calls_us);
  return cell;
}

// Splits the union of the device work's intervals at every start and end and gives each piece to
// the record that is running there and ends first (ties: the later start). `device` is sorted by
// start. Returns the time per record, indexed as `device`.
std::vector<int64_t> ExclusiveNs(const std::vector<const ActivityRecord*>& device) {
  std::vector<int64_t> exclusive(device.size(), 0);
  std::vector<int64_t> cuts;
  cuts.reserve(2 * device.size());
  for (const ActivityRecord* r : device) {
    cuts.push_back(r->start_ns);
    cuts.push_back(EndOf(*r));
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // Running records, the first to end on top (then the latest start).
  auto later = [&](size_t a, size_t b) {
    const int64_t ea = EndOf(*device[a]), eb = EndOf(*device[b]);
    return ea != eb ? ea > eb : device[a]->start_ns < device[b]->start_ns;
  };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> running(later);
  size_t next = 0;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int64_t begin = cuts[c], end = cuts[c + 1];
    while (next < device.size() && device[next]->start_ns <= begin) running.push(next++);
    while (!running.empty() && EndOf(*device[running.top()]) <= begin) running.pop();
    if (!running.empty()) exclusive[running.top()] += end - begin;
  }
  return exclusive;
}

// How far each record's end lies past the latest end of the records that started before it (and
// past its own start): KernelTime::path_ms. `device` is sorted by start.
std::vector<int64_t> PathNs(const std::vector<const ActivityRecord*>& device) {
  std::vector<int64_t> path(device.size(), 0);
  int64_t latest_end = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < device.size(); ++i) {
    const int64_t from = std::max(latest_end, device[i]->start_ns);
    path[i] = std::max<int64_t>(0, EndOf(*device[i]) - from);
    latest_end = std::max(latest_end, EndOf(*device[i]));
  }
  return path;
}

}  // namespace

std::string_view CopyDirectionName(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kHostToDevice: return "HtoD";
    case CopyDirection::kDeviceToHost: return "DtoH";
    case CopyDirection::kDeviceToDevice: return "DtoD";
    case CopyDirection::kHostToHost: return "HtoH";
    case CopyDirection::kPeer: return "PtoP";
    case CopyDirection::kOther: return "other";
  }
  return "other";
}

TimelineSummary Summarize(const TimelineTrace& trace, const SummaryOptions& options) {
  TimelineSummary s;
  s.wall_ms = Ms(trace.window_end_ns - trace.window_begin_ns);

  std::vector<const ActivityRecord*> device, host;
  std::map<std::string, KernelTime> per_kernel;
  for (const ActivityRecord& r : trace.records) {
    const int64_t ns = EndOf(r) - r.start_ns;
    switch (r.kind) {
      case ActivityKind::kKernel: {
        s.kernels += 1;
        KernelTime& k = per_kernel[r.name];
        k.launches += 1;
        k.ms += Ms(ns);
        break;
      }
      case ActivityKind::kMemcpy: {
        CopyTotals& c = s.copies[static_cast<int>(r.direction)];
        c.count += 1;
        c.pageable += r.pageable ? 1 : 0;
        c.bytes += r.bytes;
        c.ms += Ms(ns);
        break;
      }
      case ActivityKind::kMemset: s.memsets += 1; break;
      case ActivityKind::kSync:
      case ActivityKind::kRuntimeApi: {
        // Calls outside the window (the tracer's own flush, say) belong to no Forward.
        if (r.start_ns > trace.window_end_ns || EndOf(r) < trace.window_begin_ns) break;
        if (r.kind == ActivityKind::kSync) {
          s.syncs += 1;
        } else {
          s.runtime_calls += 1;
        }
        break;
      }
    }
    (IsDeviceWork(r.kind) ? device : host).push_back(&r);
  }
  // The device work by start, for the exclusive times, the sequence and the busy sweep.
  std::stable_sort(
      device.begin(), device.end(),
      [](const ActivityRecord* a, const ActivityRecord* b) { return a->start_ns < b->start_ns; });
  const std::vector<int64_t> exclusive = ExclusiveNs(device);
  const std::vector<int64_t> path = PathNs(device);
  for (size_t i = 0; i < device.size(); ++i) {
    if (device[i]->kind == ActivityKind::kKernel) {
      per_kernel[device[i]->name].exclusive_ms += Ms(exclusive[i]);
      per_kernel[device[i]->name].path_ms += Ms(path[i]);
    } else {
      s.exclusive_other_ms += Ms(exclusive[i]);
      s.path_other_ms += Ms(path[i]);
    }
  }
  for (auto& [name, k] : per_kernel) {
    k.name = name;
    s.top_kernels.push_back(std::move(k));
  }
  std::sort(s.top_kernels.begin(), s.top_kernels.end(),
            [](const KernelTime& a, const KernelTime& b) {
              if (a.exclusive_ms != b.exclusive_ms) return a.exclusive_ms > b.exclusive_ms;
              return a.ms != b.ms ? a.ms > b.ms : a.name < b.name;
            });
  if (s.top_kernels.size() > static_cast<size_t>(options.top_kernels)) {
    s.top_kernels.resize(std::max(options.top_kernels, 0));
  }

  if (device.empty()) {
    s.before_first_ms = s.wall_ms;
    return s;
  }
  for (int k = std::max(options.sequence_first, 0);
       k < static_cast<int>(device.size()) &&
       k < std::max(options.sequence_first, 0) + std::max(options.sequence_count, 0);
       ++k) {
    const ActivityRecord& r = *device[k];
    s.sequence.push_back({k, r.name, Us(r.start_ns - device[0]->start_ns),
                          Us(EndOf(r) - r.start_ns), Us(exclusive[k]), Us(path[k])});
  }
  // Sweep the device work by start: a busy run lasts while the next start is not past the
  // run's latest end; a start past it opens a gap after the work that ended the run.
  int64_t busy_ns = 0;
  int64_t run_begin = device[0]->start_ns, run_end = EndOf(*device[0]);
  const ActivityRecord* run_last = device[0];  // the run's work with the latest end
  std::vector<Gap> gaps;
  for (size_t i = 1; i < device.size(); ++i) {
    const ActivityRecord* r = device[i];
    if (r->start_ns > run_end) {
      busy_ns += run_end - run_begin;
      gaps.push_back({run_end, r->start_ns, run_last, r});
      run_begin = r->start_ns;
      run_end = EndOf(*r);
      run_last = r;
    } else if (EndOf(*r) > run_end) {
      run_end = EndOf(*r);
      run_last = r;
    }
  }
  busy_ns += run_end - run_begin;
  const int64_t first_start = device[0]->start_ns;
  const int64_t last_end = run_end;  // runs only move forward: the last run ends last
  s.gpu_span_ms = Ms(last_end - first_start);
  s.busy_ms = Ms(busy_ns);
  s.idle_ms = Ms(last_end - first_start - busy_ns);
  s.idle_gaps = static_cast<int>(gaps.size());
  s.before_first_ms = Ms(first_start - trace.window_begin_ns);
  s.after_last_ms = Ms(trace.window_end_ns - last_end);

  std::stable_sort(gaps.begin(), gaps.end(), [](const Gap& a, const Gap& b) {
    return a.end_ns - a.begin_ns > b.end_ns - b.begin_ns;
  });
  if (gaps.size() > static_cast<size_t>(options.top_gaps))
    gaps.resize(std::max(options.top_gaps, 0));
  for (const Gap& g : gaps) s.largest_gaps.push_back(DescribeGap(g, trace.window_begin_ns, host));
  return s;
}

std::string FormatSummary(std::string_view title, const TimelineSummary& s) {
  int copies = 0;
  for (const CopyTotals& c : s.copies) copies += c.count;
  std::string out = absl::StrFormat("%s: wall %.3f ms", title, s.wall_ms);
  if (s.kernels + copies + s.memsets == 0) {
    absl::StrAppendFormat(&out, ", no device work traced; %d runtime calls, %d syncs\n",
                          s.runtime_calls, s.syncs);
    return out;
  }
  absl::StrAppendFormat(&out,
                        ", GPU busy %.3f ms (%.1f%% of wall, %.1f%% of the GPU span of %.3f ms); "
                        "idle in the span %.3f ms in %d gaps; host before the first device work "
                        "%.3f ms, after the last %.3f ms\n",
                        s.busy_ms, Percent(s.busy_ms, s.wall_ms), Percent(s.busy_ms, s.gpu_span_ms),
                        s.gpu_span_ms, s.idle_ms, s.idle_gaps, s.before_first_ms, s.after_last_ms);
  absl::StrAppendFormat(&out, "%d kernels, %d copies, %d memsets, %d runtime calls, %d syncs\n",
                        s.kernels, copies, s.memsets, s.runtime_calls, s.syncs);
  if (!s.largest_gaps.empty()) {
    out +=
        "\n| idle gap | at ms | us | previous device work | next device work | host during the gap "
        "|\n";
    out += "|---:|---:|---:|---|---|---|\n";
    for (size_t i = 0; i < s.largest_gaps.size(); ++i) {
      const IdleGap& g = s.largest_gaps[i];
      absl::StrAppendFormat(&out, "| %d | %.3f | %.1f | %s | %s | %s |\n", i + 1, g.begin_ms,
                            1e3 * g.duration_ms, Cell(g.previous), Cell(g.next), HostCallsCell(g));
    }
  }
  if (copies > 0) {
    out += "\n| copy | count | pageable | MiB | ms |\n|---|---:|---:|---:|---:|\n";
    for (int d = 0; d < kNumCopyDirections; ++d) {
      const CopyTotals& c = s.copies[d];
      if (c.count == 0) continue;
      absl::StrAppendFormat(&out, "| %s | %d | %d | %.3f | %.3f |\n",
                            CopyDirectionName(static_cast<CopyDirection>(d)), c.count, c.pageable,
                            static_cast<double>(c.bytes) / (1 << 20), c.ms);
    }
  }
  if (!s.top_kernels.empty()) {
    // ms: summed durations, which overlap in a PDL chain; exclusive: the busy time the kernel was
    // the first running work to end; on the path: how far its launches' ends reach past the ends
    // of the work started before them (each of the two adds up to the busy time).
    out +=
        "\n| kernel | launches | ms | exclusive ms | us per launch (exclusive) | % of busy "
        "(exclusive) | on the path ms |\n|---|---:|---:|---:|---:|---:|---:|\n";
    for (const KernelTime& k : s.top_kernels) {
      absl::StrAppendFormat(&out, "| %s | %d | %.3f | %.3f | %.2f | %.1f | %.3f |\n", Cell(k.name),
                            k.launches, k.ms, k.exclusive_ms, 1e3 * k.exclusive_ms / k.launches,
                            Percent(k.exclusive_ms, s.busy_ms), k.path_ms);
    }
    if (s.exclusive_other_ms > 0 || s.path_other_ms > 0) {
      absl::StrAppendFormat(&out, "| (copies, memsets) | | | %.3f | | %.1f | %.3f |\n",
                            s.exclusive_other_ms, Percent(s.exclusive_other_ms, s.busy_ms), s.path_other_ms);
    }
  }
  if (!s.sequence.empty()) {
    out += "\n| # | device work in start order | start us | duration us | exclusive us | on the path us |\n"
           "|---:|---|---:|---:|---:|---:|\n";
    for (const SequenceEntry& e : s.sequence) {
      absl::StrAppendFormat(&out, "| %d | %s | %.1f | %.2f | %.2f | %.2f |\n", e.index, Cell(e.name),
                            e.start_us, e.duration_us, e.exclusive_us, e.path_us);
    }
  }
  return out;
}

}  // namespace mlaserve::bench
