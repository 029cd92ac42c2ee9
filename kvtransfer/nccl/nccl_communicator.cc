#include "kvtransfer/nccl/nccl_communicator.h"

#include <cstring>
#include <deque>
#include <vector>
#include <thread>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/strings/str_cat.h"
#include "parallel/nccl_common.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("nccl transport: ", what, ": ", cudaGetErrorString(err)));
}

// Status mapping shared with the worker's collectives (parallel/nccl_common.h).
absl::Status NcclStatus(ncclResult_t r, const char* what) {
  return parallel::NcclStatus(r, "nccl transport", what);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, int device,
                   absl::Duration enqueue_timeout)
      : comm_(comm), stream_(stream), rank_(rank), device_(device),
        enqueue_timeout_(enqueue_timeout) {}
  ~NcclCommunicator() override {
    Abort();
    cudaSetDevice(device_);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : pending_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  void* stream() const override { return stream_; }

  absl::Status Send(const void* buf, size_t bytes) override {
    if (!error_.ok()) return error_;
    return Enqueue(ncclSend(buf, bytes, ncclUint8, 1 - rank_, comm_, stream_), "ncclSend");
  }
  absl::Status Recv(void* buf, size_t bytes) override {
    if (!error_.ok()) return error_;
    return Enqueue(ncclRecv(buf, bytes, ncclUint8, 1 - rank_, comm_, stream_), "ncclRecv");
  }

  absl::Status WaitAll(absl::Duration no_progress) override {
    if (!error_.ok()) return error_;
    absl::Time last_progress = absl::Now();
    while (!pending_.empty()) {
      const cudaError_t q = cudaEventQuery(pending_.front());
      if (q == cudaSuccess) {
        free_events_.push_back(pending_.front());
        pending_.pop_front();
        last_progress = absl::Now();
        continue;
      }
      if (q != cudaErrorNotReady) return Fail(CudaStatus(q, "transfer stream"));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Fail(NcclStatus(async, "peer or network failure"));
      }
      if (absl::Now() - last_progress > no_progress) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            "nccl transport rank ", rank_, ": no progress for ", absl::FormatDuration(no_progress),
            " with ", pending_.size(), " operations pending (peer stalled or gone)")));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return absl::OkStatus();
  }

  void Abort() override {
    if (comm_ == nullptr) return;
    cudaSetDevice(device_);
    ncclCommAbort(comm_);  // local; outstanding operations are dropped
    comm_ = nullptr;
    if (error_.ok()) error_ = absl::FailedPreconditionError("nccl transport: communicator aborted");
  }

  bool usable() const override { return comm_ != nullptr && error_.ok(); }

 private:
  absl::Status Fail(absl::Status s) {
    if (error_.ok()) error_ = s;
    return s;
  }

  // Non-blocking NCCL may answer ncclInProgress while it enqueues (the first operation to a
  // peer connects to it, which needs the peer to post its matching operation): finish that
  // before the next call, within enqueue_timeout_ (a peer that never posts is a stalled peer),
  // then record an event so WaitAll can see per-operation progress.
  absl::Status Enqueue(ncclResult_t r, const char* what) {
    const absl::Time deadline = absl::Now() + enqueue_timeout_;
    while (r == ncclInProgress) {
      if (absl::Now() > deadline) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            "nccl transport rank ", rank_, ": ", what, " could not be enqueued within ",
            absl::FormatDuration(enqueue_timeout_), " (peer stalled or gone)")));
      }
      std::this_thread::yield();
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess) return Fail(NcclStatus(r, what));
    cudaEvent_t e = nullptr;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else if (auto s = CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
               !s.ok()) {
      return Fail(s);
    }
    if (auto s = CudaStatus(cudaEventRecord(e, stream_), "record"); !s.ok()) return Fail(s);
    pending_.push_back(e);
    return absl::OkStatus();
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  const int rank_;
  const int device_;
  const absl::Duration enqueue_timeout_;
  absl::Status error_;
  std::deque<cudaEvent_t> pending_;
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace

absl::StatusOr<CommId> NewNcclCommId() { return parallel::NewNcclUniqueId(); }

CommunicatorFactory NcclCommunicatorFactory(int device, absl::Duration enqueue_timeout) {
  return [device, enqueue_timeout](const CommId& id, int rank,
                  absl::Time deadline) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    absl::StatusOr<ncclComm_t> joined =
        parallel::InitNcclComm(id, 2, rank, device, deadline, "nccl transport");
    if (!joined.ok()) return joined.status();
    ncclComm_t comm = *joined;
    cudaStream_t stream = nullptr;
    if (auto s = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        !s.ok()) {
      ncclCommAbort(comm);
      return s;
    }
    return std::unique_ptr<Communicator>(
        new NcclCommunicator(comm, stream, rank, device, enqueue_timeout));
  };
}

std::string NcclVersionString() { return parallel::NcclVersionString(); }

}  // namespace mlaserve::kvtransfer::nccl
