// Device memory for the model runtime: owning buffers in the engine's backend, pinned host
// staging, and a scratch arena planned once per engine so that a forward step never allocates.
//
// Why: the forward is written once against kernels/*/api.h, whose pointers are buffers of the
// KernelContext's backend. On kCpu those are host memory; on kCuda they are device memory that
// must be allocated up front (cudaMalloc inside a step would serialise the GPU and break CUDA
// graph capture). These types give the runtime one vocabulary for both:
//   DeviceBuffer   owning bytes in a backend (host heap on kCpu, cudaMalloc on kCuda)
//   PinnedBuffer   page-locked host bytes (plain host memory on kCpu) for per-step uploads of
//                  token ids / positions / page tables and the download of logits
//   StagedDownload device bytes into pageable host memory through two pinned slots (the
//                  logits rows a step returns; a copy into pageable memory would go through
//                  the driver's own staging at a fraction of the DMA rate), copied out of the
//                  slots by several threads (ParallelHostCopy)
//   ScratchArena   a bump allocator over one DeviceBuffer; the engine sizes it from its limits
//                  (max_batch_tokens, max_batch_seqs) at Create, Reset()s it at each step, and
//                  every activation of the step is carved from it. Running out is a planning
//                  bug and is reported as INTERNAL naming the request, never papered over.
//   CopyBytes / Copy2D  stream-ordered copies in the backend (cudaMemcpyAsync / cudaMemcpy2DAsync).
//
// Threads: none of these are thread-safe; an engine owns its buffers and steps one at a time.
// (ParallelHostCopy runs helper threads of its own, inside one call.)
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "model/kv_pool_sizing.h"

namespace mlaserve::model {

// Alignment of every DeviceBuffer and arena allocation: the CUDA kernels use 16-byte vectors,
// cuBLASLt prefers 256.
inline constexpr size_t kDeviceAlignment = 256;

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // RESOURCE_EXHAUSTED naming the size when the allocation fails; FAILED_PRECONDITION for
  // kCuda in a build without CUDA.
  static absl::StatusOr<DeviceBuffer> Allocate(kernels::Backend backend, size_t bytes);
  // A buffer holding a copy of `host` (synchronous upload; for load time, not for steps).
  static absl::StatusOr<DeviceBuffer> FromHost(kernels::Backend backend, const void* host,
                                               size_t bytes);
  template <typename T>
  static absl::StatusOr<DeviceBuffer> FromHost(kernels::Backend backend, std::span<const T> host) {
    return FromHost(backend, host.data(), host.size_bytes());
  }

  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Release(); }

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  kernels::Backend backend() const { return backend_; }

 private:
  void Release();

  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  kernels::Backend backend_ = kernels::Backend::kCpu;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(kernels::Backend backend, size_t bytes);
  PinnedBuffer(PinnedBuffer&& o) noexcept { *this = std::move(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Release(); }

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void Release();

  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

// memcpy on several threads: the caller's and `helpers` more, each taking one contiguous part.
// One thread's memcpy moved ~13 GB/s on the GPU machine (H200 host, 2026-11-29), so copying a
// batch-128 step's 52 MB of logits out of the pinned slots took ~4 ms, with the GPU's copy
// engine idle most of that time (StagedDownload uses up to 7 helpers, by the host's cores). Copies under kMinParallelBytes stay on the caller's thread.
// Copy is not reentrant: one copy at a time (the owning StagedDownload runs one download at a
// time).
class ParallelHostCopy {
 public:
  static constexpr size_t kMinParallelBytes = 1u << 20;
  explicit ParallelHostCopy(int helpers);
  ~ParallelHostCopy();
  ParallelHostCopy(const ParallelHostCopy&) = delete;
  ParallelHostCopy& operator=(const ParallelHostCopy&) = delete;

  void Copy(void* dst, const void* src, size_t bytes);
  int helpers() const { return static_cast<int>(parts_.size()); }

 private:
  struct Part {
    char* dst = nullptr;
    const char* src = nullptr;
    size_t bytes = 0;
  };
  void HelperLoop(int index);

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::vector<Part> parts_;  // helper i copies parts_[i] of the current copy
  uint64_t generation_ = 0;  // one per Copy that uses the helpers
  int busy_ = 0;             // helpers still copying their part of this generation
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Downloads device bytes into pageable host memory (a std::vector the caller keeps) through a
// pinned staging buffer of two slots: the DMA into one slot overlaps the host copy out of the
// other, so a download runs at about the slower of the two rates, with no per-call allocation
// and at most 2 x slot_bytes of page-locked memory whatever the size. (cudaMemcpy into
// pageable memory stages through the driver's smaller buffers and blocks; the logits of a
// batch-128 decode step are 52 MB.) The copy out of a slot runs on several host threads
// (ParallelHostCopy), since one thread's memcpy is slower than the DMA. kCpu: a plain memcpy.
class StagedDownload {
 public:
  StagedDownload() = default;
  static constexpr size_t kDefaultSlotBytes = 8u << 20;
  static absl::StatusOr<StagedDownload> Create(kernels::Backend backend,
                                               size_t slot_bytes = kDefaultSlotBytes);
  StagedDownload(StagedDownload&& o) noexcept { *this = std::move(o); }
  StagedDownload& operator=(StagedDownload&& o) noexcept;
  StagedDownload(const StagedDownload&) = delete;
  StagedDownload& operator=(const StagedDownload&) = delete;
  ~StagedDownload() { Release(); }

  // dst (host) <- `bytes` at src (device memory of ctx's backend), ordered after the work
  // already queued on ctx's stream; returns once dst holds them (the stream has then run up to
  // the last chunk's copy).
  absl::Status Run(const kernels::KernelContext& ctx, void* dst, const void* src, size_t bytes);
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  void Release();

  PinnedBuffer slots_;  // 2 x slot_bytes_ (kCuda)
  size_t slot_bytes_ = 0;
  void* done_[2] = {nullptr, nullptr};  // cudaEvent_t: slot i's DMA has landed
  std::unique_ptr<ParallelHostCopy> host_copy_;  // kCuda: out of the slots into dst
};

class ScratchArena {
 public:
  ScratchArena() = default;
  static absl::StatusOr<ScratchArena> Create(kernels::Backend backend, size_t bytes);

  // `bytes` (rounded up to kDeviceAlignment) from the arena; INTERNAL naming `what` and the
  // sizes when it does not fit.
  absl::StatusOr<void*> Allocate(size_t bytes, const char* what);
  template <typename T>
  absl::StatusOr<T*> AllocateArray(size_t count, const char* what) {
    absl::StatusOr<void*> p = Allocate(count * sizeof(T), what);
    if (!p.ok()) return p.status();
    return static_cast<T*>(*p);
  }

  // Stack discipline: a Mark taken before a scope's allocations, restored after it, frees
  // them (the scope's results must not outlive it).
  size_t Mark() const { return used_; }
  void Restore(size_t mark) { used_ = mark; }
  void Reset() { used_ = 0; }

  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t capacity() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

// Restores the arena on destruction to where it was at construction: the scratch of one op
// or layer, released when the scope ends (its results must live in the caller's buffers).
class ScratchScope {
 public:
  explicit ScratchScope(ScratchArena& arena) : arena_(arena), mark_(arena.Mark()) {}
  ~ScratchScope() { arena_.Restore(mark_); }
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  ScratchArena& arena_;
  size_t mark_;
};

// An owned non-blocking CUDA stream (kCuda); empty (null, the CPU's "stream") on kCpu. CUDA
// graphs are captured from a stream like this one, never from the legacy default stream.
class Stream {
 public:
  Stream() = default;
  static absl::StatusOr<Stream> Create(kernels::Backend backend);
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { Release(); }
  void* get() const { return stream_; }

 private:
  void Release();
  void* stream_ = nullptr;
};

// A side stream tied to a main stream by two events (kCuda; empty on kCpu, where both calls do
// nothing): Fork makes the side stream wait for what the main stream has queued so far, Join
// makes the main stream wait for what the side stream has queued. Under stream capture the side
// stream's launches between the two become a branch of the graph.
class StreamFork {
 public:
  StreamFork() = default;
  static absl::StatusOr<StreamFork> Create(kernels::Backend backend);
  StreamFork(StreamFork&& o) noexcept
      : side_(std::move(o.side_)),
        forked_(std::exchange(o.forked_, nullptr)),
        joined_(std::exchange(o.joined_, nullptr)) {}
  StreamFork& operator=(StreamFork&& o) noexcept;
  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;
  ~StreamFork() { Release(); }

  absl::Status Fork(void* main) { return Link(forked_, main, side_.get()); }
  absl::Status Join(void* main) { return Link(joined_, side_.get(), main); }
  void* side() const { return side_.get(); }

 private:
  absl::Status Link(void* event, void* from, void* to);
  void Release();
  Stream side_;
  void* forked_ = nullptr;  // cudaEvent_t, recorded on the main stream by Fork
  void* joined_ = nullptr;  // cudaEvent_t, recorded on the side stream by Join
};

// An instantiated CUDA graph captured from a stream (BeginCapture ... EndCapture): replaying
// it re-runs the captured launches with the same pointers and scalars, reading whatever the
// buffers hold at launch.
class CapturedGraph {
 public:
  CapturedGraph() = default;
  // Starts capturing `stream` (thread-local mode: other threads' CUDA calls are unaffected).
  static absl::Status BeginCapture(void* stream);
  // Ends the capture and instantiates it. When `capture_status` is not OK (a launch inside the
  // capture failed) the capture is still ended, and that status is returned.
  static absl::StatusOr<CapturedGraph> EndCapture(void* stream, absl::Status capture_status);
  CapturedGraph(CapturedGraph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  CapturedGraph& operator=(CapturedGraph&& o) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() { Release(); }

  absl::Status Launch(void* stream) const;

 private:
  void Release();
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// Rounds up to kDeviceAlignment: the arena's unit, for sizing it from a list of parts.
inline size_t AlignedBytes(size_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// Stream-ordered copies in `ctx`'s backend. For kCuda, host pointers should be pinned
// (PinnedBuffer) for the copy to be asynchronous; pageable memory works but blocks.
enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };
absl::Status CopyBytes(const kernels::KernelContext& ctx, void* dst, const void* src, size_t bytes,
                       CopyKind kind);
// `rows` rows of `width_bytes` each, with byte pitches; device to device.
absl::Status Copy2DBytes(const kernels::KernelContext& ctx, void* dst, size_t dst_pitch,
                         const void* src, size_t src_pitch, size_t width_bytes, size_t rows);
// Makes `device` current for this thread (kCuda); no-op on kCpu.
absl::Status UseDevice(kernels::Backend backend, int device);
// The device's multiprocessor count (kCuda; 0 on kCpu, which the kernel planners read as
// "CPU").
absl::StatusOr<int> MultiprocessorCount(kernels::Backend backend, int device);
// The device's nominal DRAM bytes per multiprocessor clock (kernels/common/dram_class.h: which
// planners read it), for the current device `device` (UseDevice first); 0 on kCpu or where the
// device cannot be asked (then the planners keep their default choices).
double DramBytesPerSmClock(kernels::Backend backend, int device);
// The current device's total and free memory (cudaMemGetInfo: free counts every process's
// allocations); FAILED_PRECONDITION on kCpu, which has no device memory to measure.
absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory(kernels::Backend backend);

// Waits until everything queued on ctx's stream has run (no-op on kCpu).
absl::Status Synchronize(const kernels::KernelContext& ctx);

}  // namespace mlaserve::model
