// Test support: a PageIo that records what the engine asks of it (the blocks it gathers and
// scatters, the fences it is told to wait for, in call order) and moves the bytes through a
// HostPageIo. Not production code.
#pragma once

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/nccl/page_io.h"

namespace mlaserve::kvtransfer::testing {

struct PageIoCall {
  enum class Kind { kGather, kScatter, kWaitFence };
  Kind kind = Kind::kGather;
  nccl::SlotBlock block;        // kGather / kScatter
  void* fence = nullptr;  // kWaitFence
};

// The calls of every RecordingPageIo made by one factory, in call order (the sender's pair
// thread or the receiver's thread appends; tests read once the transfer is over).
class PageIoLog {
 public:
  void Add(PageIoCall c) {
    absl::MutexLock l(&mu_);
    calls_.push_back(c);
  }
  std::vector<PageIoCall> calls() const {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  // The blocks of the calls of `kind`, in order.
  std::vector<nccl::SlotBlock> blocks(PageIoCall::Kind kind) const {
    std::vector<nccl::SlotBlock> out;
    for (const PageIoCall& c : calls()) {
      if (c.kind == kind) out.push_back(c.block);
    }
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<PageIoCall> calls_ ABSL_GUARDED_BY(mu_);
};

class RecordingPageIo final : public nccl::PageIo {
 public:
  RecordingPageIo(model::KvPool* pool, int num_slots, size_t slot_bytes, PageIoLog* log)
      : io_(pool, num_slots, slot_bytes), log_(log) {}
  int num_slots() const override { return io_.num_slots(); }
  void* slot(int i) override { return io_.slot(i); }
  size_t slot_bytes() const override { return io_.slot_bytes(); }
  absl::Status SetPages(std::span<const int32_t> pages) override { return io_.SetPages(pages); }
  absl::Status Gather(const nccl::SlotBlock& b) override {
    log_->Add({PageIoCall::Kind::kGather, b, nullptr});
    return io_.Gather(b);
  }
  absl::Status StageHeader(int i, const void* host, size_t bytes) override {
    return io_.StageHeader(i, host, bytes);
  }
  absl::Status AfterSend(int i) override { return io_.AfterSend(i); }
  absl::Status BeforeRecv(int i) override { return io_.BeforeRecv(i); }
  absl::Status Scatter(const nccl::SlotBlock& b) override {
    log_->Add({PageIoCall::Kind::kScatter, b, nullptr});
    return io_.Scatter(b);
  }
  absl::Status KeepHeader(int i, size_t bytes) override { return io_.KeepHeader(i, bytes); }
  absl::Status TakenHeader(void* host, size_t bytes) override {
    return io_.TakenHeader(host, bytes);
  }
  absl::Status Drain(absl::Time deadline) override { return io_.Drain(deadline); }
  bool host_synchronous() const override { return io_.host_synchronous(); }
  absl::Status WaitFence(void* fence) override {
    log_->Add({PageIoCall::Kind::kWaitFence, {}, fence});
    return io_.WaitFence(fence);
  }

 private:
  nccl::HostPageIo io_;
  PageIoLog* const log_;
};

// For NcclTransportOptions / KvNcclServiceOptions: RecordingPageIos with two slots logging to
// `log` (which must outlive them).
inline nccl::PageIoFactory RecordingPageIoFactory(PageIoLog* log) {
  return [log](model::KvPool* pool, nccl::Communicator*,
               size_t slot_bytes) -> absl::StatusOr<std::unique_ptr<nccl::PageIo>> {
    return std::unique_ptr<nccl::PageIo>(new RecordingPageIo(pool, 2, slot_bytes, log));
  };
}

}  // namespace mlaserve::kvtransfer::testing
