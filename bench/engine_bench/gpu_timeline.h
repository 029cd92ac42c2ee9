// GpuTimeline: an in-process GPU trace of the code between Start() and Stop(), from CUPTI's
// activity API (the GPU machine has no nsys; CUPTI ships with the CUDA toolkit). It records
// kernels (every kernel node of a replayed CUDA graph on its own), copies, memsets, host
// synchronizations and CUDA runtime calls, all in CUPTI's clock, and hands them over as a
// TimelineTrace for Summarize (timeline_summary.h).
//
// CUPTI's activity buffers are process-wide, so one GpuTimeline exists at a time. Tracing costs
// host time per recorded launch (a few us on an H200): walls under a timeline are longer than
// untraced ones, and the bench runs its timelines after its timed runs.
//
// Built without CUPTI (CMake found no CUDA::cupti), Create() returns UNIMPLEMENTED.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/engine_bench/timeline_summary.h"

namespace mlaserve::bench {

class GpuTimeline {
 public:
  // FAILED_PRECONDITION while another GpuTimeline exists. Touches no CUPTI state (the first
  // Start() does), so creating one early, to fail fast, changes nothing until then.
  static absl::StatusOr<std::unique_ptr<GpuTimeline>> Create();

  virtual ~GpuTimeline() = default;

  // Enables the records, then reads CUPTI's clock: the window's begin. Call right before the
  // code to trace.
  virtual absl::Status Start() = 0;

  // Reads CUPTI's clock (the window's end), waits for the device to finish what was queued,
  // flushes CUPTI's buffers (cuptiActivityFlushAll) and disables the records. Returns the
  // window's records: device work that had not ended before the window began (it may end after
  // the window: still queued when the traced code returned) and host calls overlapping it. An
  // error if CUPTI failed or dropped records, as the trace would then mislead.
  virtual absl::StatusOr<TimelineTrace> Stop() = 0;
};

}  // namespace mlaserve::bench
