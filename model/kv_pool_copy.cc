// KvPool's batched page copies (see kv_pool.h): host buffers, copy fences, and the copy lanes.
//
// CUDA: a copy lane is a non-blocking stream of the pool's own plus a device staging buffer
// that holds up to kernels::kMaxPageCopyPages layer pages. A read gathers the pages into the
// staging buffer (kernels/kv_pack KvPageCopy, page ids by value) and copies it to the host in
// one DMA. A write first copies the caller's bytes into the lane's page-locked host buffer
// (so the caller may reuse them at once and the DMA is truly asynchronous), then DMAs them to
// the device staging buffer and scatters them. A lane is held only while work is enqueued on
// it: stream order alone keeps a later batch from overwriting a device staging buffer that an
// earlier copy still reads (the host buffer, which the CPU writes, waits for an event), so an
// asynchronous copy hands its lane back at once and only its fence outlives the call.
// CPU: the same gather / scatter, on host memory, done on return.
//
// Replica sync (SyncReplicas on CUDA): a tensor-parallel rank's replica has the same layout,
// so a run of consecutive pages is one contiguous range in both pools and moves with one
// cudaMemcpyPeerAsync per layer and plane, GPU to GPU (NVLink / PCIe P2P where peer access
// is on; the driver stages it otherwise), never through a host buffer of ours.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/kv_pack/api.h"
#include "model/kv_pool.h"

#if defined(MLASERVE_MODEL_HAS_CUDA)
#include <cuda_runtime.h>
#endif

namespace mlaserve::model {
namespace {

constexpr size_t kHostAlignment = 64;
// Concurrent batched copies per pool (the receiver's RPC threads, the prefill shipper).
constexpr int kMaxCopyLanes = 4;
// How long a copy may take before it is reported stuck (a healthy one takes milliseconds).
constexpr absl::Duration kCopyDeadline = absl::Seconds(60);
constexpr absl::Duration kFencePoll = absl::Microseconds(20);

#if defined(MLASERVE_MODEL_HAS_CUDA)
absl::Status CudaError(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("KvPool: ", what, ": ", cudaGetErrorString(err)));
}

// Polls `event` until it completed or `deadline` passed (a host wait that cannot hang).
absl::Status WaitEvent(cudaEvent_t event, absl::Time deadline, const char* what) {
  while (true) {
    const cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return absl::OkStatus();
    if (err != cudaErrorNotReady) return CudaError(err, what);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("KvPool: ", what, " did not complete by its deadline"));
    }
    absl::SleepFor(kFencePoll);
  }
}

// Runs [first, first + count) of consecutive pool pages covering `pages` (distinct ids).
std::vector<std::pair<int32_t, int32_t>> PageRuns(std::span<const int32_t> pages) {
  std::vector<int32_t> sorted(pages.begin(), pages.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<int32_t, int32_t>> runs;
  for (int32_t p : sorted) {
    if (!runs.empty() && runs.back().first + runs.back().second == p) {
      ++runs.back().second;
    } else {
      runs.emplace_back(p, 1);
    }
  }
  return runs;
}

// Makes the pool's device current for a scope (RPC threads start on device 0).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      switched_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~ScopedDevice() {
    if (switched_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};
#endif

}  // namespace

// ---------------------------------------------------------------------------------------------
KvHostBuffer& KvHostBuffer::operator=(KvHostBuffer&& o) noexcept {
  if (this != &o) {
    this->~KvHostBuffer();
    backend_ = o.backend_;
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

KvHostBuffer::~KvHostBuffer() {
  if (data_ == nullptr) return;
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (backend_ == kernels::Backend::kCuda) {
    cudaFreeHost(data_);
    data_ = nullptr;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
}

absl::StatusOr<KvHostBuffer> KvPool::AllocateHostBuffer(size_t bytes) const {
  KvHostBuffer b;
  b.backend_ = options_.backend;
  b.size_ = bytes;
  if (bytes == 0) return b;
  if (options_.backend == kernels::Backend::kCuda) {
#if defined(MLASERVE_MODEL_HAS_CUDA)
    void* p = nullptr;
    // Portable: page-locked for every device, so a TP replica's copies use it too.
    if (cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); err != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "KvPool: cudaHostAlloc of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
    }
    b.data_ = static_cast<uint8_t*>(p);
    return b;
#else
    return absl::FailedPreconditionError("KvPool: no CUDA support in this build");
#endif
  }
  const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  b.data_ = static_cast<uint8_t*>(std::aligned_alloc(kHostAlignment, rounded));
  if (b.data_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KvPool: host allocation of ", bytes, " bytes failed"));
  }
  return b;
}

// ---------------------------------------------------------------------------------------------
KvCopyFence& KvCopyFence::operator=(KvCopyFence&& o) noexcept {
  if (this != &o) {
    this->~KvCopyFence();
    event_ = std::exchange(o.event_, nullptr);
    device_ = o.device_;
  }
  return *this;
}

KvCopyFence::~KvCopyFence() {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (event_ != nullptr) {
    ScopedDevice on(device_);
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));  // released once the copy completed
  }
#endif
  event_ = nullptr;
}

absl::Status KvCopyFence::Wait(absl::Time deadline) const {
  if (event_ == nullptr) return absl::OkStatus();
#if defined(MLASERVE_MODEL_HAS_CUDA)
  ScopedDevice on(device_);
  return WaitEvent(static_cast<cudaEvent_t>(event_), deadline, "a batched page copy");
#else
  (void)deadline;
  return absl::OkStatus();
#endif
}

bool KvCopyFence::Ready() const {
  if (event_ == nullptr) return true;
#if defined(MLASERVE_MODEL_HAS_CUDA)
  ScopedDevice on(device_);
  return cudaEventQuery(static_cast<cudaEvent_t>(event_)) != cudaErrorNotReady;
#else
  return true;
#endif
}

// ---------------------------------------------------------------------------------------------
struct KvPool::CopyLane {
  void* stream = nullptr;   // cudaStream_t
  void* staging = nullptr;  // device
  size_t capacity = 0;
  void* host = nullptr;     // page-locked: writes stage the caller's bytes here
  size_t host_capacity = 0;
  void* host_free = nullptr;  // cudaEvent_t recorded after the last DMA that read `host`
  bool busy = false;          // guarded by lanes_mu_
};

absl::StatusOr<KvPool::CopyLane*> KvPool::AcquireLane(size_t staging_bytes, size_t host_bytes,
                                                      int64_t lane_key) const {
  CopyLane* lane = nullptr;
  {
    absl::MutexLock lock(&lanes_mu_);
    if (lanes_.empty()) lanes_.assign(kMaxCopyLanes, nullptr);
    const absl::Time deadline = absl::Now() + kCopyDeadline;
    while (true) {
      // A keyed copy takes its own lane (ordered after the key's earlier copies); any other
      // the first free one, or a new one while there are fewer than kMaxCopyLanes.
      int pick = -1;
      if (lane_key >= 0) {
        const int i = static_cast<int>(lane_key % kMaxCopyLanes);
        if (lanes_[i] == nullptr || !lanes_[i]->busy) pick = i;
      } else {
        for (int i = 0; i < kMaxCopyLanes && pick < 0; ++i) {
          if (lanes_[i] != nullptr && !lanes_[i]->busy) pick = i;
        }
        for (int i = 0; i < kMaxCopyLanes && pick < 0; ++i) {
          if (lanes_[i] == nullptr) pick = i;
        }
      }
      if (pick >= 0) {
        if (lanes_[pick] == nullptr) lanes_[pick] = new CopyLane;
        lane = lanes_[pick];
        lane->busy = true;
        break;
      }
      if (lane_free_.WaitWithDeadline(&lanes_mu_, deadline)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "KvPool: no copy lane came free in ", absl::FormatDuration(kCopyDeadline)));
      }
    }
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  absl::Status s;
  if (lane->stream == nullptr) {
    cudaStream_t st = nullptr;
    s = CudaError(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    lane->stream = st;
  }
  if (s.ok() && lane->host_free == nullptr) {
    cudaEvent_t ev = nullptr;
    s = CudaError(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    lane->host_free = ev;
  }
  if (s.ok() && (lane->capacity < staging_bytes || lane->host_capacity < host_bytes)) {
    // Work still queued on the lane may read the old buffers: let it finish first.
    s = CudaError(cudaStreamSynchronize(static_cast<cudaStream_t>(lane->stream)),
                  "cudaStreamSynchronize");
  }
  if (s.ok() && lane->capacity < staging_bytes) {
    if (lane->staging != nullptr) cudaFree(lane->staging);
    lane->staging = nullptr;
    lane->capacity = 0;
    s = CudaError(cudaMalloc(&lane->staging, staging_bytes), "cudaMalloc of a staging buffer");
    if (s.ok()) lane->capacity = staging_bytes;
  }
  if (s.ok() && lane->host_capacity < host_bytes) {
    if (lane->host != nullptr) cudaFreeHost(lane->host);
    lane->host = nullptr;
    lane->host_capacity = 0;
    s = CudaError(cudaHostAlloc(&lane->host, host_bytes, cudaHostAllocPortable),
                  "cudaHostAlloc of a staging buffer");
    if (s.ok()) lane->host_capacity = host_bytes;
  }
  if (!s.ok()) {
    ReleaseLane(lane);
    return s;
  }
#else
  (void)staging_bytes;
  (void)host_bytes;
#endif
  return lane;
}

void KvPool::ReleaseLane(CopyLane* lane) const {
  absl::MutexLock lock(&lanes_mu_);
  lane->busy = false;
  lane_free_.SignalAll();  // a keyed waiter may want this very lane
}

void KvPool::DestroyLanes() {
  absl::MutexLock lock(&lanes_mu_);
#if defined(MLASERVE_MODEL_HAS_CUDA)
  ScopedDevice on(device_);
#endif
  for (CopyLane* lane : lanes_) {
    if (lane == nullptr) continue;
#if defined(MLASERVE_MODEL_HAS_CUDA)
    if (lane->stream != nullptr) {
      cudaStreamSynchronize(static_cast<cudaStream_t>(lane->stream));
      cudaStreamDestroy(static_cast<cudaStream_t>(lane->stream));
    }
    if (lane->staging != nullptr) cudaFree(lane->staging);
    if (lane->host != nullptr) cudaFreeHost(lane->host);
    if (lane->host_free != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(lane->host_free));
#endif
    delete lane;
  }
  lanes_.clear();
}

absl::Status KvPool::CopyPages(int layer, std::span<const int32_t> pages, void* host,
                               bool to_host, void* after_stream, KvCopyFence* fence,
                               int64_t lane_key) const {
  if (pages.empty()) return absl::OkStatus();
  const size_t page_bytes = layer_page_bytes();
  kernels::KvPageCopyParams p;
  p.planes[0] = {latent_[layer], static_cast<int64_t>(latent_page_bytes())};
  if (index_page_bytes() > 0) {
    p.planes[1] = {index_[layer], static_cast<int64_t>(index_page_bytes())};
    p.num_planes = 2;
  }
  p.to_staging = to_host;
  auto* bytes = static_cast<uint8_t*>(host);
  auto chunk = [&](size_t first, size_t n) {
    p.num_pages = static_cast<int>(n);
    std::copy(pages.begin() + first, pages.begin() + first + n, p.page_ids);
  };
  const size_t step = kernels::kMaxPageCopyPages;
  if (options_.backend == kernels::Backend::kCpu) {
    for (size_t first = 0; first < pages.size(); first += step) {
      chunk(first, std::min(step, pages.size() - first));
      p.staging = bytes + first * page_bytes;
      if (absl::Status s = kernels::KvPageCopy(p, kernels::KernelContext{}); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  ScopedDevice on(device_);
  const size_t staging_bytes = std::min(step, pages.size()) * page_bytes;
  auto lane_or = AcquireLane(staging_bytes, to_host ? 0 : staging_bytes, lane_key);
  if (!lane_or.ok()) return lane_or.status();
  CopyLane* lane = *lane_or;
  absl::Cleanup release = [&] { ReleaseLane(lane); };
  auto stream = static_cast<cudaStream_t>(lane->stream);
  if (after_stream != nullptr) {
    cudaEvent_t ready = nullptr;
    absl::Status s = CudaError(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                               "cudaEventCreate");
    if (s.ok()) s = CudaError(cudaEventRecord(ready, static_cast<cudaStream_t>(after_stream)),
                              "cudaEventRecord");
    if (s.ok()) s = CudaError(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    if (ready != nullptr) cudaEventDestroy(ready);
    if (!s.ok()) return s;
  }
  p.staging = lane->staging;
  const kernels::KernelContext ctx{kernels::Backend::kCuda, stream, device_};
  for (size_t first = 0; first < pages.size(); first += step) {
    const size_t n = std::min(step, pages.size() - first);
    chunk(first, n);
    absl::Status s;
    if (!to_host) {
      // The host staging buffer is free once the lane's previous write DMA read it.
      auto host_free = static_cast<cudaEvent_t>(lane->host_free);
      s = WaitEvent(host_free, absl::Now() + kCopyDeadline, "a page write's host staging");
      if (s.ok()) {
        std::memcpy(lane->host, bytes + first * page_bytes, n * page_bytes);
        s = CudaError(cudaMemcpyAsync(lane->staging, lane->host, n * page_bytes,
                                      cudaMemcpyHostToDevice, stream),
                      "cudaMemcpyAsync to the device");
      }
      if (s.ok()) s = CudaError(cudaEventRecord(host_free, stream), "cudaEventRecord");
    }
    if (s.ok()) s = kernels::KvPageCopy(p, ctx);
    if (s.ok() && to_host) {
      s = CudaError(cudaMemcpyAsync(bytes + first * page_bytes, lane->staging, n * page_bytes,
                                    cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync to the host");
    }
    if (!s.ok()) return s;
  }
  KvCopyFence done;
  cudaEvent_t event = nullptr;
  if (absl::Status s = CudaError(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                 "cudaEventCreate");
      !s.ok()) {
    return s;
  }
  done.event_ = event;
  done.device_ = device_;
  if (absl::Status s = CudaError(cudaEventRecord(event, stream), "cudaEventRecord"); !s.ok()) {
    return s;
  }
  if (fence != nullptr) {
    *fence = std::move(done);
    return absl::OkStatus();
  }
  // Synchronous: the bytes must be in place before a kernel on another stream reads them.
  return done.Wait(absl::Now() + kCopyDeadline);
#else
  (void)after_stream;
  (void)fence;
  (void)lane_key;
  return absl::FailedPreconditionError("KvPool: no CUDA support in this build");
#endif
}

// ---------------------------------------------------------------------------------------------
absl::Status KvPool::EnablePeerCopies(const KvPool& replica) {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (replica.device_ == device_) return absl::OkStatus();  // ranks sharing a GPU (tests)
  int can = 0;
  RETURN_IF_ERROR(CudaError(cudaDeviceCanAccessPeer(&can, device_, replica.device_),
                            "cudaDeviceCanAccessPeer"));
  if (can == 0) return absl::OkStatus();  // cudaMemcpyPeerAsync stages through the host itself
  ScopedDevice on(device_);
  const cudaError_t err = cudaDeviceEnablePeerAccess(replica.device_, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {  // another pool (or NCCL) did it already
    cudaGetLastError();
    return absl::OkStatus();
  }
  return CudaError(err, "cudaDeviceEnablePeerAccess");
#else
  (void)replica;
  return absl::FailedPreconditionError("KvPool: no CUDA support in this build");
#endif
}

absl::Status KvPool::CopyToReplicasOnDevice(std::span<const int32_t> pages) {
#if defined(MLASERVE_MODEL_HAS_CUDA)
  const std::vector<std::pair<int32_t, int32_t>> runs = PageRuns(pages);
  ScopedDevice on(device_);
  ASSIGN_OR_RETURN(CopyLane * lane, AcquireLane(0, 0, /*lane_key=*/-1));
  absl::Cleanup release = [&] { ReleaseLane(lane); };
  auto stream = static_cast<cudaStream_t>(lane->stream);
  const size_t plane_bytes[2] = {latent_page_bytes(), index_page_bytes()};
  for (KvPool* replica : replicas_) {
    for (int layer = 0; layer < options_.num_layers; ++layer) {
      for (int plane = 0; plane < 2; ++plane) {
        if (plane_bytes[plane] == 0) continue;
        const auto* src = static_cast<const uint8_t*>(plane == 0 ? latent_[layer] : index_[layer]);
        auto* dst = static_cast<uint8_t*>(plane == 0 ? replica->latent_[layer]
                                                     : replica->index_[layer]);
        for (const auto& [first, count] : runs) {
          const size_t offset = static_cast<size_t>(first) * plane_bytes[plane];
          RETURN_IF_ERROR(CudaError(
              cudaMemcpyPeerAsync(dst + offset, replica->device_, src + offset, device_,
                                  static_cast<size_t>(count) * plane_bytes[plane], stream),
              "cudaMemcpyPeerAsync to a replica"));
        }
      }
    }
  }
  KvCopyFence done;
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(CudaError(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                            "cudaEventCreate"));
  done.event_ = event;
  done.device_ = device_;
  RETURN_IF_ERROR(CudaError(cudaEventRecord(event, stream), "cudaEventRecord"));
  return done.Wait(absl::Now() + kCopyDeadline);
#else
  (void)pages;
  return absl::FailedPreconditionError("KvPool: no CUDA support in this build");
#endif
}

}  // namespace mlaserve::model
