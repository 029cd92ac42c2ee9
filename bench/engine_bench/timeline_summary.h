// Where a Forward's wall time goes on the GPU: the activity records a GPU tracer collected
// around one Forward (GpuTimeline, from CUPTI), reduced to how long the device was busy, where
// it idled (the largest gaps, with the device work on either side and the host calls that
// overlap each gap), copies by direction and the time per kernel.
//
// Pure C++ on purpose: the tracer converts its records into a TimelineTrace, so the reduction is
// tested on hand-made records without a GPU (timeline_summary_test.cc).
//
// Device work (kernels, copies, memsets) makes up the busy time; kernels that overlap count
// once. Host records (runtime-API calls, synchronizations) never count as busy: they only say
// what the host was doing while the device idled (launching, waiting in a sync, a pageable
// memcpy, or nothing traced at all, i.e. host computation).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::bench {

enum class ActivityKind {
  kKernel,      // device
  kMemcpy,      // device
  kMemset,      // device
  kSync,        // host: a synchronization (stream / event / context) the host waited in
  kRuntimeApi,  // host: a CUDA runtime call (cudaLaunchKernel, cudaMemcpyAsync, ...)
};

enum class CopyDirection {
  kHostToDevice,
  kDeviceToHost,
  kDeviceToDevice,
  kHostToHost,
  kPeer,
  kOther
};
inline constexpr int kNumCopyDirections = 6;

// "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other".
std::string_view CopyDirectionName(CopyDirection direction);

struct ActivityRecord {
  ActivityKind kind = ActivityKind::kKernel;
  // Kernel name, runtime call ("cudaLaunchKernel"), or a label for copies, memsets and syncs.
  std::string name;
  int64_t start_ns = 0;  // in the tracer's clock, the same as TimelineTrace's window
  int64_t end_ns = 0;
  uint64_t bytes = 0;                               // kMemcpy, kMemset
  CopyDirection direction = CopyDirection::kOther;  // kMemcpy
  // kMemcpy with pageable host memory on either side: the driver stages it through a pinned
  // buffer and the host waits for it, whatever the stream.
  bool pageable = false;
};

// One traced Forward: the host window it ran in and everything recorded meanwhile. Records may
// start before or end after the window (work still queued when the call returned).
struct TimelineTrace {
  int64_t window_begin_ns = 0;  // host, right before the Forward was called
  int64_t window_end_ns = 0;    // host, right after it returned
  std::vector<ActivityRecord> records;
};

struct SummaryOptions {
  int top_gaps = 8;
  int top_kernels = 10;
  // Device work in start order from the `sequence_first`-th record (0-based) on, at most
  // `sequence_count` of them (0: no sequence): one layer's launches one by one.
  int sequence_first = 0;
  int sequence_count = 0;
};

// The host calls of one name that overlap an idle gap.
struct HostCallsInGap {
  std::string name;
  int calls = 0;
  double overlap_us = 0;  // summed over the calls, clipped to the gap
};

struct IdleGap {
  double begin_ms = 0;  // from the window's begin
  double duration_ms = 0;
  std::string previous;                    // the device work that ended last before the gap
  std::string next;                        // the device work whose start ends the gap
  std::vector<HostCallsInGap> host_calls;  // longest overlap first
  // The part of the gap inside no traced host call: host work outside CUDA (or in calls of the
  // driver API, which are not traced).
  double outside_calls_us = 0;
};

struct CopyTotals {
  int count = 0;
  int pageable = 0;
  uint64_t bytes = 0;
  double ms = 0;  // summed durations
};

struct KernelTime {
  std::string name;
  int launches = 0;
  double ms = 0;  // summed durations (a name's launches that overlap each other count twice)
  // The busy time during which one of this name's launches was the running device work that
  // ends first. Every busy instant goes to exactly one record, so these sum to busy_ms. In a
  // chain of kernels launched early (PDL) a kernel's duration includes its wait for the one
  // before; this counts only the time from that one's end to its own: what it adds to the step.
  double exclusive_ms = 0;
  // What this name's launches add to the chain: each launch, in start order, counts how far its
  // end lies past every earlier-started record's end (and past its own start, so an idle gap
  // before it is not counted); a launch that ends before an earlier one counts 0. These also sum
  // to busy_ms. They differ from exclusive_ms where a short launch runs inside a longer one (an
  // L2 prefetch under the rope launch and the attention): exclusive charges it the time it
  // overlapped, the path charges it nothing and the longer launch its whole reach.
  double path_ms = 0;
};

// One record of the sequence (SummaryOptions::sequence_*).
struct SequenceEntry {
  int index = 0;  // among the device work in start order
  std::string name;
  double start_us = 0;  // from the first device work's start
  double duration_us = 0;
  double exclusive_us = 0;  // as KernelTime::exclusive_ms
  double path_us = 0;       // as KernelTime::path_ms
};

struct TimelineSummary {
  double wall_ms = 0;      // the host window
  double gpu_span_ms = 0;  // first device work's start to the last one's end
  double busy_ms = 0;      // union of the device work's intervals
  double idle_ms = 0;      // gpu_span_ms - busy_ms: gaps inside the span
  int idle_gaps = 0;       // gaps longer than 0
  // Host time from the window's begin to the first device work, and from the last device
  // work's end to the window's end. Negative when the device work reaches outside the window
  // (after_last_ms < 0: the call returned while the device was still busy). Without device
  // work, before_first_ms is the whole wall and after_last_ms 0.
  double before_first_ms = 0;
  double after_last_ms = 0;
  int kernels = 0;
  int memsets = 0;
  int runtime_calls = 0;  // runtime-API records overlapping the window
  int syncs = 0;          // synchronization records overlapping the window
  std::array<CopyTotals, kNumCopyDirections> copies{};  // indexed by CopyDirection
  std::vector<IdleGap> largest_gaps;                    // longest first, at most top_gaps
  std::vector<KernelTime> top_kernels;  // most exclusive time first, at most top_kernels
  double exclusive_other_ms = 0;        // the busy time that copies and memsets end first
  double path_other_ms = 0;             // copies' and memsets' part of the path (KernelTime::path_ms)
  std::vector<SequenceEntry> sequence;  // SummaryOptions::sequence_*
};

TimelineSummary Summarize(const TimelineTrace& trace, const SummaryOptions& options = {});

// A headline and markdown tables (idle gaps, copies, kernels) under `title`, e.g.
// "timeline prefill 4096". Long names are cut and '|' escaped so the tables stay tables.
std::string FormatSummary(std::string_view title, const TimelineSummary& summary);

}  // namespace mlaserve::bench
