#include "model/device_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

#if defined(MLASERVE_MODEL_HAS_CUDA)
#include <cuda_runtime.h>

#include "kernels/common/device_arch.h"
#endif

namespace mlaserve::model {
namespace {

#if !defined(MLASERVE_MODEL_HAS_CUDA)
absl::Status NoCuda(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": backend cuda requested but this build has no CUDA support"));
}
#endif

#if defined(MLASERVE_MODEL_HAS_CUDA)
absl::Status CudaError(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}
#endif

}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(kernels::Backend backend, size_t bytes) {
  DeviceBuffer b;
  b.backend_ = backend;
  if (bytes == 0) return b;
  if (backend == kernels::Backend::kCpu) {
    b.ptr_ = std::aligned_alloc(kDeviceAlignment, AlignedBytes(bytes));
    if (b.ptr_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
    }
  } else {
#if defined(MLASERVE_MODEL_HAS_CUDA)
    const cudaError_t err = cudaMalloc(&b.ptr_, bytes);
    if (err != cudaSuccess) {
      b.ptr_ = nullptr;
      return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of ", bytes,
                                                       " bytes failed: ", cudaGetErrorString(err)));
    }
#else
    return NoCuda("DeviceBuffer");
#endif
  }
  b.bytes_ = bytes;
  return b;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::FromHost(kernels::Backend backend, const void* host,
                                                    size_t bytes) {
  absl::StatusOr<DeviceBuffer> b = Allocate(backend, bytes);
  if (!b.ok() || bytes == 0) return b;
  if (backend == kernels::Backend::kCpu) {
    std::memcpy(b->data(), host, bytes);
  } else {
#if defined(MLASERVE_MODEL_HAS_CUDA)
    absl::Status s = CudaError(cudaMemcpy(b->data(), host, bytes, cudaMemcpyHostToDevice),
                               "DeviceBuffer upload");
    if (!s.ok()) return s;
#endif
  }
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    backend_ = o.backend_;
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (ptr_ == nullptr) return;
  if (backend_ == kernels::Backend::kCpu) {
    std::free(ptr_);
  } else {
#if defined(MLASERVE_MODEL_HAS_CUDA)
    cudaFree(ptr_);
#endif
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(kernels::Backend backend, size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return b;
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (backend == kernels::Backend::kCuda) {
    const cudaError_t err = cudaMallocHost(&b.ptr_, bytes);
    if (err != cudaSuccess) {
      b.ptr_ = nullptr;
      return absl::ResourceExhaustedError(absl::StrCat(
          "cudaMallocHost of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
    }
    b.pinned_ = true;
    b.bytes_ = bytes;
    return b;
  }
#else
  if (backend == kernels::Backend::kCuda) return NoCuda("PinnedBuffer");
#endif
  b.ptr_ = std::aligned_alloc(kDeviceAlignment, AlignedBytes(bytes));
  if (b.ptr_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
  }
  b.bytes_ = bytes;
  return b;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    pinned_ = o.pinned_;
  }
  return *this;
}

void PinnedBuffer::Release() {
  if (ptr_ == nullptr) return;
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (pinned_) {
    cudaFreeHost(ptr_);
    ptr_ = nullptr;
    return;
  }
#endif
  std::free(ptr_);
  ptr_ = nullptr;
}

ParallelHostCopy::ParallelHostCopy(int helpers) : parts_(std::max(helpers, 0)) {
  threads_.reserve(parts_.size());
  for (int i = 0; i < static_cast<int>(parts_.size()); ++i) threads_.emplace_back([this, i] { HelperLoop(i); });
}

ParallelHostCopy::~ParallelHostCopy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ParallelHostCopy::HelperLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    Part part;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // No deadline: the only waits are for the next Copy (or destruction) and, in Copy, for
      // memcpys of bounded size, which always complete.
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      part = parts_[index];
    }
    if (part.bytes > 0) std::memcpy(part.dst, part.src, part.bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --busy_;
    }
    done_cv_.notify_one();
  }
}

void ParallelHostCopy::Copy(void* dst, const void* src, size_t bytes) {
  if (parts_.empty() || bytes < kMinParallelBytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  // Parts of whole 64-byte lines (ways x part >= bytes), the caller's part first.
  const size_t ways = parts_.size() + 1;
  const size_t part = (bytes + ways * 64 - 1) / (ways * 64) * 64;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const size_t mine = std::min(part, bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t at = mine;
    for (Part& p : parts_) {
      const size_t n = std::min(part, bytes - at);
      p = {d + at, s + at, n};
      at += n;
    }
    busy_ = static_cast<int>(parts_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  std::memcpy(d, s, mine);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return busy_ == 0; });
}

namespace {

// Helper threads of a download's copy-out, by the host's cores. A batch-128 step with its 52 MB of
// logits (H200 host of 16 cores, 2026-11-29): 19.8 ms with the caller's thread alone, 15.8 with
// 1 helper, 14.4-14.8 with 3, 13.9 with 7. MLASERVE_PARALLEL_COPY=N sets N helpers (0: the
// caller's thread alone), for timing comparisons.
int DownloadCopyHelpers() {
  constexpr int kMaxHelpers = 15;
  if (const char* v = std::getenv("MLASERVE_PARALLEL_COPY"); v != nullptr && *v != '\0') {
    return std::clamp(std::atoi(v), 0, kMaxHelpers);
  }
  const unsigned cores = std::thread::hardware_concurrency();
  return cores >= 16 ? 7 : cores >= 8 ? 3 : cores >= 4 ? 1 : 0;
}

}  // namespace

absl::StatusOr<StagedDownload> StagedDownload::Create(kernels::Backend backend,
                                                     size_t slot_bytes) {
  StagedDownload d;
  if (backend == kernels::Backend::kCpu) return d;
  if (slot_bytes == 0) return absl::InvalidArgumentError("StagedDownload: slot_bytes is 0");
#if defined(MLASERVE_MODEL_HAS_CUDA)
  absl::StatusOr<PinnedBuffer> slots = PinnedBuffer::Allocate(backend, 2 * slot_bytes);
  if (!slots.ok()) return slots.status();
  d.slots_ = std::move(slots).value();
  d.slot_bytes_ = slot_bytes;
  d.host_copy_ = std::make_unique<ParallelHostCopy>(DownloadCopyHelpers());
  for (void*& e : d.done_) {
    cudaEvent_t ev = nullptr;
    absl::Status s = CudaError(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                               "StagedDownload: cudaEventCreateWithFlags");
    if (!s.ok()) return s;  // d releases what it holds
    e = ev;
  }
  return d;
#else
  return NoCuda("StagedDownload");
#endif
}

StagedDownload& StagedDownload::operator=(StagedDownload&& o) noexcept {
  if (this != &o) {
    Release();
    slots_ = std::move(o.slots_);
    slot_bytes_ = std::exchange(o.slot_bytes_, 0);
    for (int i = 0; i < 2; ++i) done_[i] = std::exchange(o.done_[i], nullptr);
    host_copy_ = std::move(o.host_copy_);
  }
  return *this;
}

void StagedDownload::Release() {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  for (void*& e : done_) {
    if (e != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e));
    e = nullptr;
  }
#endif
}

absl::Status StagedDownload::Run(const kernels::KernelContext& ctx, void* dst, const void* src,
                                 size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (ctx.backend == kernels::Backend::kCpu) {
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (slot_bytes_ == 0) return absl::FailedPreconditionError("StagedDownload: not created for kCuda");
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const size_t chunks = (bytes + slot_bytes_ - 1) / slot_bytes_;
  auto slot = [&](size_t i) { return static_cast<char*>(slots_.data()) + (i % 2) * slot_bytes_; };
  auto length = [&](size_t i) { return std::min(slot_bytes_, bytes - i * slot_bytes_); };
  // Chunk i lands in slot i % 2; chunk i + 1 is queued before chunk i is copied out, into the
  // slot chunk i - 1 left (already copied out), so the DMA and the host copy overlap.
  auto queue = [&](size_t i) -> absl::Status {
    RETURN_IF_ERROR(CudaError(cudaMemcpyAsync(slot(i), static_cast<const char*>(src) + i * slot_bytes_,
                                              length(i), cudaMemcpyDeviceToHost, stream),
                              "StagedDownload: cudaMemcpyAsync"));
    return CudaError(cudaEventRecord(static_cast<cudaEvent_t>(done_[i % 2]), stream),
                     "StagedDownload: cudaEventRecord");
  };
  RETURN_IF_ERROR(queue(0));
  for (size_t i = 0; i < chunks; ++i) {
    if (i + 1 < chunks) RETURN_IF_ERROR(queue(i + 1));
    RETURN_IF_ERROR(CudaError(cudaEventSynchronize(static_cast<cudaEvent_t>(done_[i % 2])),
                              "StagedDownload: cudaEventSynchronize"));
    host_copy_->Copy(static_cast<char*>(dst) + i * slot_bytes_, slot(i), length(i));
  }
  return absl::OkStatus();
#else
  (void)src;
  (void)dst;
  return NoCuda("StagedDownload");
#endif
}

absl::StatusOr<ScratchArena> ScratchArena::Create(kernels::Backend backend, size_t bytes) {
  ScratchArena a;
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(backend, AlignedBytes(bytes));
  if (!b.ok()) return b.status();
  a.buffer_ = std::move(b).value();
  return a;
}

absl::StatusOr<void*> ScratchArena::Allocate(size_t bytes, const char* what) {
  const size_t need = AlignedBytes(bytes);
  if (used_ + need > buffer_.bytes()) {
    return absl::InternalError(absl::StrCat("scratch arena: ", what, " needs ", need,
                                            " bytes but only ", buffer_.bytes() - used_, " of ",
                                            buffer_.bytes(), " are left (the step plan undercounted)"));
  }
  void* p = static_cast<char*>(buffer_.data()) + used_;
  used_ += need;
  if (used_ > high_water_) high_water_ = used_;
  return p;
}

absl::Status CopyBytes(const kernels::KernelContext& ctx, void* dst, const void* src, size_t bytes,
                       CopyKind kind) {
  if (bytes == 0) return absl::OkStatus();
  if (ctx.backend == kernels::Backend::kCpu) {
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  return CudaError(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(ctx.stream)),
                   "cudaMemcpyAsync");
#else
  (void)kind;
  return NoCuda("CopyBytes");
#endif
}

absl::Status Copy2DBytes(const kernels::KernelContext& ctx, void* dst, size_t dst_pitch,
                         const void* src, size_t src_pitch, size_t width_bytes, size_t rows) {
  if (rows == 0 || width_bytes == 0) return absl::OkStatus();
  if (ctx.backend == kernels::Backend::kCpu) {
    for (size_t r = 0; r < rows; ++r) {
      std::memmove(static_cast<char*>(dst) + r * dst_pitch,
                   static_cast<const char*>(src) + r * src_pitch, width_bytes);
    }
    return absl::OkStatus();
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  return CudaError(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width_bytes, rows,
                                     cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.stream)),
                   "cudaMemcpy2DAsync");
#else
  return NoCuda("Copy2DBytes");
#endif
}

absl::StatusOr<Stream> Stream::Create(kernels::Backend backend) {
  Stream s;
  if (backend == kernels::Backend::kCpu) return s;
#if defined(MLASERVE_MODEL_HAS_CUDA)
  cudaStream_t st = nullptr;
  absl::Status status = CudaError(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking),
                                  "cudaStreamCreateWithFlags");
  if (!status.ok()) return status;
  s.stream_ = st;
  return s;
#else
  return NoCuda("Stream");
#endif
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    Release();
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void Stream::Release() {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
  stream_ = nullptr;
}

absl::StatusOr<StreamFork> StreamFork::Create(kernels::Backend backend) {
  StreamFork f;
  if (backend == kernels::Backend::kCpu) return f;
  ASSIGN_OR_RETURN(f.side_, Stream::Create(backend));
#if defined(MLASERVE_MODEL_HAS_CUDA)
  for (void** e : {&f.forked_, &f.joined_}) {
    cudaEvent_t ev = nullptr;
    RETURN_IF_ERROR(CudaError(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    *e = ev;
  }
#endif
  return f;
}

StreamFork& StreamFork::operator=(StreamFork&& o) noexcept {
  if (this != &o) {
    Release();
    side_ = std::move(o.side_);
    forked_ = std::exchange(o.forked_, nullptr);
    joined_ = std::exchange(o.joined_, nullptr);
  }
  return *this;
}

void StreamFork::Release() {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  for (void* e : {forked_, joined_}) {
    if (e != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
#endif
  forked_ = joined_ = nullptr;
}

// `to` waits for what `from` has queued so far, through `event`.
absl::Status StreamFork::Link(void* event, void* from, void* to) {
  if (side_.get() == nullptr) return absl::OkStatus();
#if defined(MLASERVE_MODEL_HAS_CUDA)
  RETURN_IF_ERROR(CudaError(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(from)),
                            "cudaEventRecord (stream fork)"));
  return CudaError(cudaStreamWaitEvent(static_cast<cudaStream_t>(to), static_cast<cudaEvent_t>(event), 0),
                   "cudaStreamWaitEvent (stream fork)");
#else
  (void)event, (void)from, (void)to;
  return NoCuda("StreamFork");
#endif
}

absl::Status CapturedGraph::BeginCapture(void* stream) {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  return CudaError(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream),
                                          cudaStreamCaptureModeThreadLocal),
                   "cudaStreamBeginCapture");
#else
  (void)stream;
  return NoCuda("CapturedGraph");
#endif
}

absl::StatusOr<CapturedGraph> CapturedGraph::EndCapture(void* stream, absl::Status capture_status) {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (!capture_status.ok() || end != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear a capture-invalidation error so later launches are unaffected
    if (!capture_status.ok()) return capture_status;
    return CudaError(end, "cudaStreamEndCapture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) return CudaError(inst, "cudaGraphInstantiate");
  CapturedGraph g;
  g.exec_ = exec;
  return g;
#else
  (void)stream;
  (void)capture_status;
  return NoCuda("CapturedGraph");
#endif
}

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& o) noexcept {
  if (this != &o) {
    Release();
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

void CapturedGraph::Release() {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
#endif
  exec_ = nullptr;
}

absl::Status CapturedGraph::Launch(void* stream) const {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  return CudaError(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                   static_cast<cudaStream_t>(stream)),
                   "cudaGraphLaunch");
#else
  (void)stream;
  return NoCuda("CapturedGraph");
#endif
}

absl::Status UseDevice(kernels::Backend backend, int device) {
  if (backend == kernels::Backend::kCpu) return absl::OkStatus();
#if defined(MLASERVE_MODEL_HAS_CUDA)
  return CudaError(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")").c_str());
#else
  (void)device;
  return NoCuda("UseDevice");
#endif
}

absl::StatusOr<int> MultiprocessorCount(kernels::Backend backend, int device) {
  if (backend == kernels::Backend::kCpu) return 0;
#if defined(MLASERVE_MODEL_HAS_CUDA)
  int sms = 0;
  absl::Status s = CudaError(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                             "cudaDeviceGetAttribute(multiprocessor count)");
  if (!s.ok()) return s;
  return sms;
#else
  (void)device;
  return NoCuda("MultiprocessorCount");
#endif
}

double DramBytesPerSmClock(kernels::Backend backend, int device) {
  if (backend == kernels::Backend::kCpu) return 0;
#if defined(MLASERVE_MODEL_HAS_CUDA)
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) return 0;
  return kernels::cuda::CurrentDeviceDramBytesPerSmClock();
#else
  (void)device;
  return 0;
#endif
}

absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory(kernels::Backend backend) {
  if (backend == kernels::Backend::kCpu) {
    return absl::FailedPreconditionError("the CPU backend has no device memory to measure");
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  DeviceMemoryInfo m;
  absl::Status s = CudaError(cudaMemGetInfo(&m.free_bytes, &m.total_bytes), "cudaMemGetInfo");
  if (!s.ok()) return s;
  return m;
#else
  return NoCuda("QueryDeviceMemory");
#endif
}

absl::Status Synchronize(const kernels::KernelContext& ctx) {
  if (ctx.backend == kernels::Backend::kCpu) return absl::OkStatus();
#if defined(MLASERVE_MODEL_HAS_CUDA)
  return CudaError(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream)),
                   "cudaStreamSynchronize");
#else
  return NoCuda("Synchronize");
#endif
}

}  // namespace mlaserve::model
