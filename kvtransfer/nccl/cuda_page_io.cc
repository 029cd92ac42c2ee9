#include "kvtransfer/nccl/cuda_page_io.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kvtransfer/nccl/page_gather.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

absl::Status CudaCheck(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("nccl page io: ", what, ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaPageIo>> CudaPageIo::Create(model::KvPool* pool,
                                                               cudaStream_t comm_stream,
                                                               int num_slots, size_t slot_bytes) {
  if (pool->options().backend != kernels::Backend::kCuda) {
    return absl::InvalidArgumentError("CudaPageIo needs a CUDA KV pool");
  }
  if (num_slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CudaPageIo: ", num_slots, " slots"));
  }
  std::unique_ptr<CudaPageIo> io(new CudaPageIo(pool, comm_stream));
  if (auto s = CudaCheck(cudaStreamCreateWithFlags(&io->io_, cudaStreamNonBlocking), "stream");
      !s.ok()) {
    return s;
  }
  io->slot_bytes_ = slot_bytes;
  for (int i = 0; i < num_slots; ++i) {
    void* p = nullptr;
    if (auto s = CudaCheck(cudaMalloc(&p, slot_bytes), "staging slot"); !s.ok()) return s;
    io->slots_.push_back(p);
    cudaEvent_t a, b;
    if (auto s = CudaCheck(cudaEventCreateWithFlags(&a, cudaEventDisableTiming), "event");
        !s.ok()) {
      return s;
    }
    io->filled_.push_back(a);
    if (auto s = CudaCheck(cudaEventCreateWithFlags(&b, cudaEventDisableTiming), "event");
        !s.ok()) {
      return s;
    }
    io->freed_.push_back(b);
  }
  if (auto s = io->UploadLayerBases(); !s.ok()) return s;
  if (auto s = CudaCheck(cudaMalloc(&io->header_, 64), "header"); !s.ok()) return s;
  if (auto s = CudaCheck(cudaMallocHost(&io->host_header_, 64), "pinned header"); !s.ok()) {
    return s;
  }
  return io;
}

CudaPageIo::~CudaPageIo() {
  if (io_ != nullptr) cudaStreamSynchronize(io_);
  for (void* p : slots_) cudaFree(p);
  for (cudaEvent_t e : filled_) cudaEventDestroy(e);
  for (cudaEvent_t e : freed_) cudaEventDestroy(e);
  if (layer_bases_ != nullptr) cudaFree(layer_bases_);
  if (page_ids_ != nullptr) cudaFree(page_ids_);
  if (host_page_ids_ != nullptr) cudaFreeHost(host_page_ids_);
  if (header_ != nullptr) cudaFree(header_);
  if (host_header_ != nullptr) cudaFreeHost(host_header_);
  if (io_ != nullptr) cudaStreamDestroy(io_);
}

absl::Status CudaPageIo::UploadLayerBases() {
  const int layers = pool_->options().num_layers;
  std::vector<uint8_t*> bases;
  for (int l = 0; l < layers; ++l) bases.push_back(static_cast<uint8_t*>(pool_->latent(l)));
  if (pool_->index_page_bytes() > 0) {
    for (int l = 0; l < layers; ++l) bases.push_back(static_cast<uint8_t*>(pool_->index_keys(l)));
  }
  for (size_t i = 0; i < bases.size(); ++i) {
    if (reinterpret_cast<uintptr_t>(bases[i]) % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CudaPageIo: the pool's ", i < static_cast<size_t>(layers) ? "latent" : "indexer",
          " buffer of layer ", i % layers, " is not 16-byte aligned"));
    }
  }
  void* table = nullptr;
  if (auto s = CudaCheck(cudaMalloc(&table, bases.size() * sizeof(uint8_t*)), "layer table");
      !s.ok()) {
    return s;
  }
  layer_bases_ = static_cast<uint8_t**>(table);
  // Once per io (the pool's buffers never move): a synchronous copy is fine here.
  return CudaCheck(cudaMemcpy(layer_bases_, bases.data(), bases.size() * sizeof(uint8_t*),
                              cudaMemcpyHostToDevice),
                   "layer table upload");
}

absl::Status CudaPageIo::SetPages(std::span<const int32_t> pages) {
  session_pages_ = 0;  // no block is valid until this session's list is up
  for (int32_t p : pages) {
    if (p < 0 || p >= pool_->total_pages()) {
      return absl::OutOfRangeError(absl::StrCat("CudaPageIo: page id ", p, " outside the pool's ",
                                                pool_->total_pages()));
    }
  }
  // The previous session's copies may still read the old list.
  if (auto s = CudaCheck(cudaStreamSynchronize(io_), "drain"); !s.ok()) return s;
  if (pages.size() > page_capacity_) {
    if (page_ids_ != nullptr) cudaFree(page_ids_);
    if (host_page_ids_ != nullptr) cudaFreeHost(host_page_ids_);
    page_ids_ = nullptr;
    host_page_ids_ = nullptr;
    page_capacity_ = 0;
    void* ids = nullptr;
    if (auto s = CudaCheck(cudaMalloc(&ids, pages.size() * sizeof(int32_t)), "page ids");
        !s.ok()) {
      return s;
    }
    page_ids_ = static_cast<int32_t*>(ids);
    if (auto s = CudaCheck(cudaMallocHost(&ids, pages.size() * sizeof(int32_t)),
                           "pinned page ids");
        !s.ok()) {
      return s;
    }
    host_page_ids_ = static_cast<int32_t*>(ids);
    page_capacity_ = pages.size();
  }
  // io_ is idle (synchronised above), so the pinned copy is free to overwrite; the upload (the
  // session's one page-id copy) is ordered before this session's gathers/scatters on io_.
  std::memcpy(host_page_ids_, pages.data(), pages.size() * sizeof(int32_t));
  if (auto s = CudaCheck(cudaMemcpyAsync(page_ids_, host_page_ids_,
                                         pages.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                         io_),
                         "page ids upload");
      !s.ok()) {
    return s;
  }
  session_pages_ = pages.size();
  return absl::OkStatus();
}

absl::Status CudaPageIo::Check(const SlotBlock& b) const {
  return CheckSlotBlock(b, *pool_, session_pages_, num_slots(), slot_bytes_, "CudaPageIo");
}

absl::Status CudaPageIo::Launch(const SlotBlock& b, bool to_staging) {
  PageCopyParams p;
  // Opaque bytes per plane: the pool's own page sizes (the fp8 cache format is not
  // latent_dim x dtype size).
  const int64_t lb = static_cast<int64_t>(pool_->latent_page_bytes());
  const int64_t ib = static_cast<int64_t>(pool_->index_page_bytes());
  p.planes[0] = {layer_bases_, lb, 0};
  p.num_planes = 1;
  if (ib > 0) {
    p.planes[1] = {layer_bases_ + pool_->options().num_layers, ib, lb};
    p.num_planes = 2;
  }
  p.first_layer = b.first_layer;
  p.num_layers = b.num_layers;
  p.page_ids = page_ids_ + b.first_page;
  p.num_pages = b.num_pages;
  p.staging = static_cast<uint8_t*>(slots_[b.slot]) + b.offset;
  p.staging_page_bytes = lb + ib;
  p.to_staging = to_staging;
  return CudaCheck(LaunchPageCopy(p, io_), "page copy launch");
}

absl::Status CudaPageIo::Gather(const SlotBlock& b) {
  if (auto s = Check(b); !s.ok()) return s;
  if (ready_ != nullptr) {
    if (auto s = CudaCheck(cudaStreamWaitEvent(io_, ready_, 0), "wait ready"); !s.ok()) return s;
    ready_ = nullptr;
  }
  const int i = b.slot;
  // Reusing the slot: its previous send must have completed (no-op for a never-recorded event).
  if (auto s = CudaCheck(cudaStreamWaitEvent(io_, freed_[i], 0), "wait slot"); !s.ok()) return s;
  if (auto s = Launch(b, true); !s.ok()) return s;
  if (auto s = CudaCheck(cudaEventRecord(filled_[i], io_), "record gather"); !s.ok()) return s;
  return CudaCheck(cudaStreamWaitEvent(comm_, filled_[i], 0), "comm waits gather");
}

absl::Status CudaPageIo::StageHeader(int i, const void* host, size_t bytes) {
  if (bytes > 64) return absl::InvalidArgumentError("CudaPageIo: header too big");
  if (auto s = CudaCheck(cudaStreamWaitEvent(io_, freed_[i], 0), "wait slot"); !s.ok()) return s;
  // The previous header upload from the pinned buffer is done: SetPages drained io_.
  std::memcpy(host_header_, host, bytes);
  // Ordered before the slot's gathers on io_, whose recorded event the send waits for.
  return CudaCheck(
      cudaMemcpyAsync(slots_[i], host_header_, bytes, cudaMemcpyHostToDevice, io_),
      "header upload");
}

absl::Status CudaPageIo::AfterSend(int i) {
  return CudaCheck(cudaEventRecord(freed_[i], comm_), "record send");
}

absl::Status CudaPageIo::BeforeRecv(int i) {
  return CudaCheck(cudaStreamWaitEvent(comm_, freed_[i], 0), "comm waits scatter");
}

absl::Status CudaPageIo::Scatter(const SlotBlock& b) {
  if (auto s = Check(b); !s.ok()) return s;
  const int i = b.slot;
  if (auto s = CudaCheck(cudaEventRecord(filled_[i], comm_), "record recv"); !s.ok()) return s;
  if (auto s = CudaCheck(cudaStreamWaitEvent(io_, filled_[i], 0), "io waits recv"); !s.ok()) {
    return s;
  }
  if (auto s = Launch(b, false); !s.ok()) return s;
  return CudaCheck(cudaEventRecord(freed_[i], io_), "record scatter");
}

absl::Status CudaPageIo::KeepHeader(int i, size_t bytes) {
  if (bytes > 64) return absl::InvalidArgumentError("CudaPageIo: header too big");
  // On the communicator's stream: after the recv into slot i, before any later recv into it.
  return CudaCheck(cudaMemcpyAsync(header_, slots_[i], bytes, cudaMemcpyDeviceToDevice, comm_),
                   "keep header");
}

absl::Status CudaPageIo::TakenHeader(void* host, size_t bytes) {
  if (bytes > 64) return absl::InvalidArgumentError("CudaPageIo: header too big");
  // After the communicator's WaitAll the receives completed, but KeepHeader's copy may have
  // been enqueued after the last event WaitAll saw (a one-message plan): drain the stream.
  if (auto s = CudaCheck(cudaStreamSynchronize(comm_), "header copy"); !s.ok()) return s;
  if (auto s = CudaCheck(cudaMemcpy(host_header_, header_, bytes, cudaMemcpyDeviceToHost),
                         "header download");
      !s.ok()) {
    return s;
  }
  std::memcpy(host, host_header_, bytes);
  return absl::OkStatus();
}

absl::Status CudaPageIo::Drain(absl::Time deadline) {
  for (;;) {
    const cudaError_t err = cudaStreamQuery(io_);
    if (err == cudaSuccess) return absl::OkStatus();
    if (err != cudaErrorNotReady) return CudaCheck(err, "page copies");
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("nccl page io: gathers/scatters still running");
    }
    std::this_thread::yield();
  }
}

PageIoFactory CudaPageIoFactory(int device, int num_slots) {
  return [device, num_slots](model::KvPool* pool, Communicator* comm,
                             size_t slot_bytes) -> absl::StatusOr<std::unique_ptr<PageIo>> {
    if (auto s = CudaCheck(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
    auto io = CudaPageIo::Create(pool, static_cast<cudaStream_t>(comm->stream()), num_slots,
                                 slot_bytes);
    if (!io.ok()) return io.status();
    return std::unique_ptr<PageIo>(std::move(*io));
  };
}

LayerFenceFactory CudaLayerFence(int device, void* compute_stream) {
  return [device, compute_stream]() -> absl::StatusOr<std::shared_ptr<void>> {
    if (auto s = CudaCheck(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
    cudaEvent_t ev = nullptr;
    if (auto s = CudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "fence event");
        !s.ok()) {
      return s;
    }
    if (auto s = CudaCheck(cudaEventRecord(ev, static_cast<cudaStream_t>(compute_stream)),
                           "fence record");
        !s.ok()) {
      cudaEventDestroy(ev);
      return s;
    }
    return std::shared_ptr<void>(ev,
                                 [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  };
}

}  // namespace mlaserve::kvtransfer::nccl
