// CudaPageIo: PageIo for a CUDA KV pool. Gathers/scatters run the page_gather kernel on a copy
// stream of their own, one launch per SlotBlock whatever its number of layers (the kernel reads
// the pool's per-layer base pointers from a device table uploaded once at Create); events order
// them with the communicator's stream, so the gather of message k + 1 overlaps the send of
// message k and neither blocks the compute stream. Optionally the next gather waits on a `ready`
// event recorded by the compute stream (the block's layers' KV written).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/nccl/page_io.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer::nccl {

class CudaPageIo final : public PageIo {
 public:
  // `comm_stream`: the communicator's stream. `slot_bytes`: TransferPlan::max_step_bytes().
  static absl::StatusOr<std::unique_ptr<CudaPageIo>> Create(model::KvPool* pool,
                                                            cudaStream_t comm_stream,
                                                            int num_slots, size_t slot_bytes);
  ~CudaPageIo() override;

  int num_slots() const override { return static_cast<int>(slots_.size()); }
  void* slot(int i) override { return slots_[i]; }
  size_t slot_bytes() const override { return slot_bytes_; }
  absl::Status SetPages(std::span<const int32_t> pages) override;
  absl::Status Gather(const SlotBlock& b) override;
  absl::Status StageHeader(int i, const void* host, size_t bytes) override;
  absl::Status AfterSend(int i) override;
  absl::Status BeforeRecv(int i) override;
  absl::Status Scatter(const SlotBlock& b) override;
  absl::Status KeepHeader(int i, size_t bytes) override;
  absl::Status TakenHeader(void* host, size_t bytes) override;
  absl::Status Drain(absl::Time deadline) override;
  bool host_synchronous() const override { return false; }

  // The next Gather waits for `ready` (recorded on the compute stream) first.
  void WaitFor(cudaEvent_t ready) { ready_ = ready; }
  absl::Status WaitFence(void* fence) override {
    WaitFor(static_cast<cudaEvent_t>(fence));
    return absl::OkStatus();
  }

 private:
  CudaPageIo(model::KvPool* pool, cudaStream_t comm_stream) : pool_(pool), comm_(comm_stream) {}
  // Uploads the pool's per-layer plane bases (latent, then indexer keys) to layer_bases_.
  absl::Status UploadLayerBases();
  // CheckSlotBlock against this io's slots and the current session.
  absl::Status Check(const SlotBlock& b) const;
  // Enqueues the copy of a checked block on io_ (one kernel launch).
  absl::Status Launch(const SlotBlock& b, bool to_staging);

  model::KvPool* const pool_;
  const cudaStream_t comm_;
  cudaStream_t io_ = nullptr;
  std::vector<void*> slots_;
  size_t slot_bytes_ = 0;
  std::vector<cudaEvent_t> filled_;  // io stream: the slot's gather / comm stream: recv done
  std::vector<cudaEvent_t> freed_;   // comm stream: send done / io stream: scatter done
  // Device: [num_layers] latent bases, then [num_layers] indexer key bases (DSA pools).
  uint8_t** layer_bases_ = nullptr;
  int32_t* page_ids_ = nullptr;      // device copy of the session's page list
  int32_t* host_page_ids_ = nullptr;  // pinned staging of it (async upload on io_)
  size_t page_capacity_ = 0;
  size_t session_pages_ = 0;         // the current session's page count
  void* header_ = nullptr;           // device: the received header, kept by KeepHeader
  void* host_header_ = nullptr;      // pinned
  cudaEvent_t ready_ = nullptr;
};

// For NcclKvTransport / KvNcclServiceImpl: a CudaPageIo on the communicator's stream, built with
// `device` current (the calling pair thread keeps it current for its later gathers/scatters).
PageIoFactory CudaPageIoFactory(int device, int num_slots = 2);

// For NcclTransportOptions::layer_fence: records a cudaEvent_t on `compute_stream` (device
// `device`), destroyed when the last owner drops it.
LayerFenceFactory CudaLayerFence(int device, void* compute_stream);

}  // namespace mlaserve::kvtransfer::nccl
