#include "bench/engine_bench/gpu_timeline.h"

#if MLASERVE_HAS_CUPTI

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace mlaserve::bench {
namespace {

// The records a traced Forward needs. Not CUPTI_ACTIVITY_KIND_GRAPH_TRACE: with it, a replayed
// graph becomes one record instead of one per kernel node, and the gaps inside it disappear.
// CONCURRENT_KERNEL, unlike KERNEL, does not serialize the kernels it records.
struct TracedKind {
  CUpti_ActivityKind kind;
  const char* name;  // for error messages
};
constexpr TracedKind kKinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},
    {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
};

// About 40k kernel records (~200 bytes each): more than one Forward of a 61-layer model makes.
constexpr size_t kBufferBytes = 8 << 20;
// Buffers allocated and their pages faulted in before tracing starts, so that work does not
// land inside the traced window (more are allocated there if CUPTI asks for more).
constexpr size_t kReadyBuffers = 2;

absl::Status CuptiError(const std::string& call, CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown";
  return absl::InternalError(
      absl::StrCat(call, " failed: ", text, " (CUptiResult ", static_cast<int>(result), ")"));
}

// State shared with CUPTI's buffer callbacks, which run on CUPTI's own thread as well as inside
// cuptiActivityFlushAll. Lives for the whole process: CUPTI may call back until exit.
struct Collector {
  absl::Mutex mu;
  bool timeline_exists ABSL_GUARDED_BY(mu) = false;
  bool callbacks_registered ABSL_GUARDED_BY(mu) = false;
  std::vector<uint8_t*> free_buffers ABSL_GUARDED_BY(mu);  // reused, never freed
  std::vector<ActivityRecord> records ABSL_GUARDED_BY(mu);
  absl::Status error ABSL_GUARDED_BY(mu);  // the first failure while reading buffers
  size_t dropped ABSL_GUARDED_BY(mu) = 0;
};

Collector& TheCollector() {
  static Collector* const collector = new Collector;
  return *collector;
}

// "void ns::Kernel<64, true>(ns::Params)" -> "ns::Kernel<64, true>": the return type and
// parameter list say nothing about where time goes and make the tables unreadable.
std::string KernelName(const char* mangled) {
  if (mangled == nullptr) return "(unnamed kernel)";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  constexpr std::string_view kVoid = "void ";
  if (name.starts_with(kVoid)) name.erase(0, kVoid.size());
  return name;
}

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel".
std::string RuntimeCallName(CUpti_CallbackId cbid) {
  const char* raw = nullptr;
  if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &raw) != CUPTI_SUCCESS ||
      raw == nullptr) {
    return absl::StrCat("runtime call ", cbid);
  }
  std::string name = raw;
  const size_t version = name.rfind("_v");
  if (version != std::string::npos && version + 2 < name.size() &&
      name.find_first_not_of("0123456789", version + 2) == std::string::npos) {
    name.resize(version);
  }
  return name;
}

CopyDirection DirectionOf(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return CopyDirection::kHostToDevice;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return CopyDirection::kDeviceToHost;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return CopyDirection::kDeviceToDevice;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return CopyDirection::kHostToHost;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return CopyDirection::kPeer;
    default: return CopyDirection::kOther;
  }
}

std::string SyncName(CUpti_ActivitySynchronizationType type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "sync: event synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "sync: stream wait event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "sync: stream synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "sync: context synchronize";
    default: return "sync: other";
  }
}

// The record types are those of this CUPTI's header (CUDA 13: Kernel10, Memcpy6, Memset4,
// Synchronization2); the binary carries the libcupti it was built with (tools/device/bundle.sh).
std::optional<ActivityRecord> Convert(const CUpti_Activity& activity) {
  ActivityRecord r;
  uint64_t start = 0, end = 0;
  switch (activity.kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(activity);
      r.kind = ActivityKind::kKernel;
      r.name = KernelName(k.name);
      start = k.start;
      end = k.end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(activity);
      r.kind = ActivityKind::kMemcpy;
      r.direction = DirectionOf(m.copyKind);
      r.pageable = m.srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE ||
                   m.dstKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
      r.bytes = m.bytes;
      r.name = absl::StrFormat("memcpy %s%s", CopyDirectionName(r.direction),
                               r.pageable ? " (pageable)" : "");
      start = m.start;
      end = m.end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(activity);
      r.kind = ActivityKind::kMemset;
      r.bytes = m.bytes;
      r.name = "memset";
      start = m.start;
      end = m.end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto& s = reinterpret_cast<const CUpti_ActivitySynchronization2&>(activity);
      r.kind = ActivityKind::kSync;
      r.name = SyncName(s.type);
      start = s.start;
      end = s.end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const auto& a = reinterpret_cast<const CUpti_ActivityAPI&>(activity);
      r.kind = ActivityKind::kRuntimeApi;
      r.name = RuntimeCallName(a.cbid);
      start = a.start;
      end = a.end;
      break;
    }
    default: return std::nullopt;
  }
  if (start == 0 && end == 0) return std::nullopt;  // CUPTI could not time it
  r.start_ns = static_cast<int64_t>(start);
  r.end_ns = static_cast<int64_t>(end);
  return r;
}

// Buffers reach CUPTI zeroed, and CUPTI is told so
// (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER): otherwise it zeroes each one itself on the
// thread that records, inside the traced window (on an H200 that put 0.35-0.5 ms into the first
// kernel launch of each window). calloc zeroes without a memset where the pages are fresh, and
// aligns for max_align_t, more than the 8 bytes CUPTI's records need.
uint8_t* NewBuffer() { return static_cast<uint8_t*>(std::calloc(1, kBufferBytes)); }

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  Collector& c = TheCollector();
  {
    absl::MutexLock lock(&c.mu);
    if (!c.free_buffers.empty()) {
      *buffer = c.free_buffers.back();
      c.free_buffers.pop_back();
    } else {
      *buffer = nullptr;
    }
  }
  if (*buffer == nullptr) *buffer = NewBuffer();  // a null buffer makes CUPTI drop records
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  std::vector<ActivityRecord> records;
  absl::Status error;
  CUpti_Activity* activity = nullptr;
  while (true) {
    const CUptiResult result = cuptiActivityGetNextRecord(buffer, valid_bytes, &activity);
    if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the buffer's end
    if (result != CUPTI_SUCCESS) {
      error = CuptiError("cuptiActivityGetNextRecord", result);
      break;
    }
    if (std::optional<ActivityRecord> r = Convert(*activity)) records.push_back(std::move(*r));
  }
  size_t dropped = 0;
  // The context and stream arguments are ignored since CUDA 6: the count is process-wide.
  const CUptiResult dropped_result = cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  if (dropped_result != CUPTI_SUCCESS && error.ok()) {
    error = CuptiError("cuptiActivityGetNumDroppedRecords", dropped_result);
  }
  // Zeroed for its next use (see NewBuffer) here, in Stop's flush or on CUPTI's own thread: not
  // on the thread being traced.
  std::memset(buffer, 0, kBufferBytes);
  Collector& c = TheCollector();
  absl::MutexLock lock(&c.mu);
  c.free_buffers.push_back(buffer);
  for (ActivityRecord& r : records) c.records.push_back(std::move(r));
  if (c.error.ok()) c.error = error;
  c.dropped += dropped;
}

class CuptiTimeline final : public GpuTimeline {
 public:
  ~CuptiTimeline() override {
    if (started_) Stop().IgnoreError();  // leave CUPTI disabled for whoever comes next
    Collector& c = TheCollector();
    absl::MutexLock lock(&c.mu);
    c.timeline_exists = false;
  }

  absl::Status Start() override {
    if (started_) return absl::FailedPreconditionError("GpuTimeline::Start: already started");
    Collector& c = TheCollector();
    {
      absl::MutexLock lock(&c.mu);
      if (!c.callbacks_registered) {
        uint8_t zeroed = 1;  // see NewBuffer
        size_t zeroed_size = sizeof(zeroed);
        if (const CUptiResult r = cuptiActivitySetAttribute(
                CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &zeroed_size, &zeroed);
            r != CUPTI_SUCCESS) {
          return CuptiError("cuptiActivitySetAttribute(ZEROED_OUT_ACTIVITY_BUFFER)", r);
        }
        const CUptiResult r = cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted);
        if (r != CUPTI_SUCCESS) return CuptiError("cuptiActivityRegisterCallbacks", r);
        c.callbacks_registered = true;
      }
      while (c.free_buffers.size() < kReadyBuffers) {
        uint8_t* buffer = NewBuffer();
        if (buffer == nullptr) {
          return absl::ResourceExhaustedError(absl::StrCat("GpuTimeline: no host memory for a ",
                                                           kBufferBytes, "-byte CUPTI buffer"));
        }
        std::memset(buffer, 0, kBufferBytes);  // faults the pages in
        c.free_buffers.push_back(buffer);
      }
      c.records.clear();
      c.error = absl::OkStatus();
      c.dropped = 0;
    }
    for (const TracedKind& k : kKinds) {
      const CUptiResult r = cuptiActivityEnable(k.kind);
      if (r != CUPTI_SUCCESS) {
        const absl::Status error = CuptiError(absl::StrCat("cuptiActivityEnable(", k.name, ")"), r);
        DisableAll().IgnoreError();
        return error;
      }
    }
    uint64_t now = 0;
    if (const CUptiResult r = cuptiGetTimestamp(&now); r != CUPTI_SUCCESS) {
      DisableAll().IgnoreError();
      return CuptiError("cuptiGetTimestamp", r);
    }
    window_begin_ns_ = static_cast<int64_t>(now);
    started_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<TimelineTrace> Stop() override {
    if (!started_) return absl::FailedPreconditionError("GpuTimeline::Stop: not started");
    started_ = false;
    uint64_t now = 0;
    absl::Status status;
    if (const CUptiResult r = cuptiGetTimestamp(&now); r != CUPTI_SUCCESS) {
      status = CuptiError("cuptiGetTimestamp", r);
    }
    // cuptiActivityFlushAll does not wait for the device: a kernel still running would arrive
    // without its end. The sync is after the window's end, so it is outside the trace's wall.
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess && status.ok()) {
      status = absl::InternalError(
          absl::StrCat("GpuTimeline::Stop: cudaDeviceSynchronize: ", cudaGetErrorString(e)));
    }
    // After the sync every record is complete, so the default flush delivers them all. Not a
    // forced one: after it, the next cudaGraphLaunch took 0.3-0.6 ms longer on an H200, which
    // would land in the next window.
    if (const CUptiResult r = cuptiActivityFlushAll(0); r != CUPTI_SUCCESS && status.ok()) {
      status = CuptiError("cuptiActivityFlushAll", r);
    }
    if (absl::Status s = DisableAll(); !s.ok() && status.ok()) status = s;
    TimelineTrace trace;
    trace.window_begin_ns = window_begin_ns_;
    trace.window_end_ns = static_cast<int64_t>(now);
    Collector& c = TheCollector();
    absl::MutexLock lock(&c.mu);
    if (status.ok()) status = c.error;
    if (status.ok() && c.dropped > 0) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("CUPTI dropped ", c.dropped, " activity records; the trace is incomplete"));
    }
    if (!status.ok()) {
      c.records.clear();
      return status;
    }
    // This Stop's own sync is not the window's, nor is anything from before it (CUPTI delivers
    // late). Device work that ends after the window's end is: the traced code queued it.
    for (ActivityRecord& r : c.records) {
      const bool device = r.kind == ActivityKind::kKernel || r.kind == ActivityKind::kMemcpy ||
                          r.kind == ActivityKind::kMemset;
      if (r.end_ns >= trace.window_begin_ns && (device || r.start_ns <= trace.window_end_ns)) {
        trace.records.push_back(std::move(r));
      }
    }
    c.records.clear();
    return trace;
  }

 private:
  static absl::Status DisableAll() {
    absl::Status status;
    for (const TracedKind& k : kKinds) {
      const CUptiResult r = cuptiActivityDisable(k.kind);
      if (r != CUPTI_SUCCESS && status.ok()) {
        status = CuptiError(absl::StrCat("cuptiActivityDisable(", k.name, ")"), r);
      }
    }
    return status;
  }

  bool started_ = false;
  int64_t window_begin_ns_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuTimeline>> GpuTimeline::Create() {
  Collector& c = TheCollector();
  absl::MutexLock lock(&c.mu);
  if (c.timeline_exists) {
    return absl::FailedPreconditionError(
        "a GpuTimeline exists already; CUPTI's activity records are process-wide, so one at a "
        "time");
  }
  c.timeline_exists = true;
  return std::make_unique<CuptiTimeline>();
}

}  // namespace mlaserve::bench

#else  // !MLASERVE_HAS_CUPTI

namespace mlaserve::bench {

absl::StatusOr<std::unique_ptr<GpuTimeline>> GpuTimeline::Create() {
  return absl::UnimplementedError(
      "built without CUPTI: CMake found no CUDA::cupti (libcupti of the CUDA toolkit) when it "
      "configured this build, so there is no GPU timeline; reconfigure where CUPTI is installed");
}

}  // namespace mlaserve::bench

#endif  // MLASERVE_HAS_CUPTI
