// PageIo: moves a plan message's layer pages between a KV pool and a staging slot, ordered with
// the communicator's stream. Pages are scattered in the pool (a request's page ids differ on the
// two sides), NCCL moves contiguous buffers: the sender gathers a message's pages into a slot and
// sends the slot, the receiver receives into a slot and scatters it into its own page ids. The
// staged bytes of page i are its layer page (latent entries, then indexer keys), the same bytes
// the tcp transport ships.
//
// A Gather / Scatter moves one SlotBlock: a run of consecutive layers of the message at once (a
// message of packed layers is one block when its layers are all written; one kernel launch on
// CUDA), or a single layer when layers become ready one at a time (layer-wise streaming). The
// engine (pair_transfer.h) picks the blocks; the io only moves them.
//
// Slots are reused round-robin; the implementation must order a slot's reuse after the
// communicator finished with it (the CUDA one uses events between its copy stream and the
// communicator's stream, so gathers overlap sends). HostPageIo (here) serves CPU pools and the
// fake communicator; CudaPageIo (cuda_page_io.h) runs the gather/scatter kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer::nccl {

// Pages [first_page, first_page + num_pages) (indices into the session's page list) of layers
// [first_layer, first_layer + num_layers), staged layer after layer in slot `slot` from byte
// `offset`: page p of layer first_layer + k at offset + (k * num_pages + p) * layer page bytes.
struct SlotBlock {
  int first_layer = 0;
  int num_layers = 1;
  int first_page = 0;
  int num_pages = 0;
  int slot = 0;
  int64_t offset = 0;
  friend bool operator==(const SlotBlock&, const SlotBlock&) = default;
};

// OK when `b` lies inside `pool`'s layers, a session of `session_pages` pages and slot `b.slot`
// of `num_slots` slots of `slot_bytes` bytes; otherwise INVALID_ARGUMENT (a count or slot that
// is not positive / not there, a block past the slot's end) or OUT_OF_RANGE (layers or pages
// outside the pool / session), naming the values, with `who` first.
absl::Status CheckSlotBlock(const SlotBlock& b, const model::KvPool& pool, size_t session_pages,
                            int num_slots, size_t slot_bytes, const char* who);

class PageIo {
 public:
  virtual ~PageIo() = default;
  virtual int num_slots() const = 0;
  virtual void* slot(int i) = 0;
  virtual size_t slot_bytes() const = 0;
  // The session's page ids (in the request's page order); Gather/Scatter address them by
  // index. Called once per session, before the first Gather/Scatter.
  virtual absl::Status SetPages(std::span<const int32_t> pages) = 0;
  // Sender: gathers block `b` from the pool into its slot, every layer of it at once; a later
  // Send of the slot sees it. The first Gather into a slot after its last send waits for that
  // send. Refuses a block CheckSlotBlock refuses, before anything moves.
  virtual absl::Status Gather(const SlotBlock& b) = 0;
  // Sender: writes `bytes` (<= 64) of `host` at the start of slot `i`, ordered like a Gather.
  virtual absl::Status StageHeader(int i, const void* host, size_t bytes) = 0;
  // Sender: the communicator has enqueued its send from slot `i`.
  virtual absl::Status AfterSend(int i) = 0;
  // Receiver: before enqueueing a recv into slot `i` (waits until its last scatter read it).
  virtual absl::Status BeforeRecv(int i) = 0;
  // Receiver: scatters block `b` of its slot (after the enqueued recv) into the pool, every
  // layer of it at once. Refuses a block CheckSlotBlock refuses, before anything moves.
  virtual absl::Status Scatter(const SlotBlock& b) = 0;
  // Receiver: keeps the first `bytes` (<= 64) of slot `i` (after the enqueued recv) before
  // the slot is reused; TakenHeader() returns them once the communicator's WaitAll returned.
  virtual absl::Status KeepHeader(int i, size_t bytes) = 0;
  virtual absl::Status TakenHeader(void* host, size_t bytes) = 0;
  // Waits for every gather/scatter enqueued so far (DEADLINE_EXCEEDED past `deadline`).
  virtual absl::Status Drain(absl::Time deadline) = 0;
  // True when Gather/Scatter act at once on host memory: the engine must then wait for the
  // communicator before scattering a received slot or overwriting a slot still being sent.
  // False when they are ordered with the communicator's stream on the device.
  virtual bool host_synchronous() const = 0;
  // The next Gather waits for `fence` (a LayerFence's handle: for CUDA a cudaEvent_t recorded on
  // the compute stream after the layer's KV write was enqueued; recorded in layer order on that
  // one stream, so a layer's fence also covers the layers before it, and a block of ready layers
  // waits for its last layer's fence only). Host io: nothing to wait for.
  virtual absl::Status WaitFence(void* fence) {
    (void)fence;
    return absl::OkStatus();
  }
};

// Host pools (CPU backend) through KvPool::ReadPages/WritePages (one call per layer of a block;
// WritePages refuses a page id listed twice); host_synchronous().
class HostPageIo final : public PageIo {
 public:
  HostPageIo(model::KvPool* pool, int num_slots, size_t slot_bytes);
  int num_slots() const override { return static_cast<int>(slots_.size()); }
  void* slot(int i) override { return slots_[i].data(); }
  size_t slot_bytes() const override { return slots_[0].size(); }
  absl::Status SetPages(std::span<const int32_t> pages) override;
  absl::Status Gather(const SlotBlock& b) override;
  absl::Status StageHeader(int i, const void* host, size_t bytes) override;
  absl::Status AfterSend(int) override { return absl::OkStatus(); }
  absl::Status BeforeRecv(int) override { return absl::OkStatus(); }
  absl::Status Scatter(const SlotBlock& b) override;
  absl::Status KeepHeader(int i, size_t bytes) override;
  absl::Status TakenHeader(void* host, size_t bytes) override;
  absl::Status Drain(absl::Time) override { return absl::OkStatus(); }
  bool host_synchronous() const override { return true; }

 private:
  // The session's pages of block `b` and where its layer k starts in its slot.
  std::span<const int32_t> BlockPages(const SlotBlock& b) const;
  uint8_t* LayerStart(const SlotBlock& b, int k);
  model::KvPool* const pool_;
  const size_t page_bytes_;
  std::vector<std::vector<uint8_t>> slots_;
  std::vector<int32_t> pages_;
  uint8_t header_[64] = {};
};

}  // namespace mlaserve::kvtransfer::nccl
