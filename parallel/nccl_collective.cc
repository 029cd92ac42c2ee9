#include "parallel/nccl_collective.h"

#include <cuda_runtime_api.h>

#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "parallel/nccl_common.h"

namespace mlaserve::parallel {
namespace {

constexpr char kWho[] = "nccl collective";

ncclDataType_t ToNccl(kernels::DType t) {
  switch (t) {
    case kernels::DType::kBF16: return ncclBfloat16;
    case kernels::DType::kI32: return ncclInt32;
    default: return ncclFloat32;
  }
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(ncclComm_t comm, int rank, int size, int device, int32_t* barrier_word,
                 absl::Duration enqueue_timeout, std::shared_ptr<RankRendezvous> in_process)
      : comm_(comm), rank_(rank), size_(size), device_(device), barrier_word_(barrier_word),
        enqueue_timeout_(enqueue_timeout), in_process_(std::move(in_process)) {}
  ~NcclCollective() override {
    Abort();
    cudaSetDevice(device_);
    cudaFree(barrier_word_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Each operation's `enqueue` runs under mu_ (Post).
  absl::Status AllReduceSum(const void* send, void* recv, int64_t count, kernels::DType dtype,
                            void* stream) override {
    if (auto s = CheckCollectiveDType(dtype); !s.ok()) return s;
    auto enqueue = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return Enqueue(ncclAllReduce(send, recv, static_cast<size_t>(count), ToNccl(dtype), ncclSum,
                                   comm_, Stream(stream)),
                     "ncclAllReduce");
    };
    return Post(Call(CollectiveOp::kAllReduce, count, dtype), enqueue);
  }

  absl::Status AllGather(const void* send, void* recv, int64_t count, kernels::DType dtype,
                         void* stream) override {
    if (auto s = CheckCollectiveDType(dtype); !s.ok()) return s;
    auto enqueue = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return Enqueue(ncclAllGather(send, recv, static_cast<size_t>(count), ToNccl(dtype), comm_,
                                   Stream(stream)),
                     "ncclAllGather");
    };
    return Post(Call(CollectiveOp::kAllGather, count, dtype), enqueue);
  }

  absl::Status ReduceScatterSum(const void* send, void* recv, int64_t count,
                                kernels::DType dtype, void* stream) override {
    if (auto s = CheckCollectiveDType(dtype); !s.ok()) return s;
    auto enqueue = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return Enqueue(ncclReduceScatter(send, recv, static_cast<size_t>(count), ToNccl(dtype),
                                       ncclSum, comm_, Stream(stream)),
                     "ncclReduceScatter");
    };
    return Post(Call(CollectiveOp::kReduceScatter, count, dtype), enqueue);
  }

  // NCCL has no all-to-all-v: one group of point-to-point sends and receives, which NCCL
  // runs concurrently.
  absl::Status AllToAllV(const void* send, std::span<const int64_t> send_counts,
                         std::span<const int64_t> send_offsets, void* recv,
                         std::span<const int64_t> recv_counts,
                         std::span<const int64_t> recv_offsets, kernels::DType dtype,
                         void* stream) override {
    if (auto s = CheckCollectiveDType(dtype); !s.ok()) return s;
    const size_t n = static_cast<size_t>(size_);
    if (send_counts.size() != n || send_offsets.size() != n || recv_counts.size() != n ||
        recv_offsets.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllToAllV: counts and offsets need one entry per rank (", n, ")"));
    }
    CollectiveCall call = Call(CollectiveOp::kAllToAllV, 0, dtype);
    call.send_counts.assign(send_counts.begin(), send_counts.end());
    call.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    auto enqueue = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const size_t es = kernels::DTypeSize(dtype);
      const ncclDataType_t t = ToNccl(dtype);
      cudaStream_t s = Stream(stream);
      if (auto st = Enqueue(ncclGroupStart(), "ncclGroupStart"); !st.ok()) return st;
      absl::Status posted;
      for (int p = 0; p < size_ && posted.ok(); ++p) {
        if (send_counts[p] > 0) {
          posted = Enqueue(ncclSend(static_cast<const char*>(send) + send_offsets[p] * es,
                                    static_cast<size_t>(send_counts[p]), t, p, comm_, s),
                           "ncclSend");
        }
        if (recv_counts[p] > 0 && posted.ok()) {
          posted = Enqueue(ncclRecv(static_cast<char*>(recv) + recv_offsets[p] * es,
                                    static_cast<size_t>(recv_counts[p]), t, p, comm_, s),
                           "ncclRecv");
        }
      }
      // Closed whatever happened inside: a group left open would hold back every later NCCL
      // call of this thread.
      const absl::Status closed = Enqueue(ncclGroupEnd(), "ncclGroupEnd");
      return posted.ok() ? closed : posted;
    };
    return Post(std::move(call), enqueue);
  }

  absl::Status Barrier(void* stream) override {
    auto enqueue = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      cudaMemsetAsync(barrier_word_, 0, sizeof(int32_t), Stream(stream));
      return Enqueue(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_,
                                   Stream(stream)),
                     "barrier");
    };
    if (absl::Status s = Post(Call(CollectiveOp::kBarrier, 1, kernels::DType::kI32), enqueue);
        !s.ok()) {
      return s;
    }
    if (const cudaError_t e = cudaStreamSynchronize(Stream(stream)); e != cudaSuccess) {
      absl::MutexLock l(&mu_);
      return Fail(absl::InternalError(absl::StrCat(kWho, ": barrier: ", cudaGetErrorString(e))));
    }
    absl::MutexLock l(&mu_);
    ncclResult_t async = ncclSuccess;
    if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      return Fail(NcclStatus(async, kWho, "peer or network failure"));
    }
    return error_;
  }

  void Abort() override {
    absl::MutexLock l(&mu_);
    (void)Fail(absl::AbortedError(absl::StrCat(kWho, ": aborted")));
  }

 private:
  static cudaStream_t Stream(void* s) { return static_cast<cudaStream_t>(s); }
  static CollectiveCall Call(CollectiveOp op, int64_t count, kernels::DType dtype) {
    CollectiveCall c;
    c.op = op;
    c.count = count;
    c.dtype = dtype;
    return c;
  }

  // One operation: `enqueue` (the NCCL calls) runs under mu_ unless the collective has failed.
  // Ranks on threads of one process run it between their two meetings (rank_rendezvous.h says
  // why: without them, a rank that blocks on its device after a collective can deadlock the
  // process). Any failure fails this collective.
  absl::Status Post(CollectiveCall call, const std::function<absl::Status()>& enqueue) {
    auto locked = [&]() -> absl::Status {
      absl::MutexLock l(&mu_);
      if (!error_.ok()) return error_;
      const absl::Status s = enqueue();
      return s.ok() ? s : Fail(s);
    };
    if (in_process_ == nullptr) return locked();
    const absl::Status s = in_process_->PostTogether(rank_, std::move(call), locked);
    if (!s.ok()) {
      absl::MutexLock l(&mu_);
      (void)Fail(s);  // s stays this call's result; the collective keeps its first error
    }
    return s;
  }

  // Records the first error and aborts the communicator, so that no kernel of this rank waits
  // on the device for a peer that will not post its side (and the in-process peers leave their
  // meeting instead of waiting for this rank). Idempotent.
  absl::Status Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error_.ok()) error_ = s;
    if (in_process_ != nullptr) in_process_->Abort(rank_);
    if (comm_ != nullptr) {
      // Any thread may abort (ParallelEngine aborts every rank when one fails): on this
      // communicator's device, the caller's device left as it was.
      int caller_device = device_;
      cudaGetDevice(&caller_device);
      cudaSetDevice(device_);
      ncclCommAbort(comm_);  // local; the peers' own calls fail or reach their deadline
      cudaSetDevice(caller_device);
      comm_ = nullptr;
    }
    return s;
  }
  // Completes an NCCL call this rank made (nccl_common.h: FinishEnqueue).
  absl::Status Enqueue(ncclResult_t r, const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return FinishEnqueue(comm_, r, absl::Now() + enqueue_timeout_, kWho, what);
  }

  absl::Mutex mu_;  // serialises calls with Abort (which another thread may make)
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);
  const int rank_;
  const int size_;
  const int device_;
  int32_t* barrier_word_;  // one device int the barrier all-reduces
  const absl::Duration enqueue_timeout_;
  // The rendezvous of the ranks on threads of this process (null for a rank of its own process).
  const std::shared_ptr<RankRendezvous> in_process_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const std::string& id, int rank, int size, int device, absl::Time deadline,
    absl::Duration enqueue_timeout, std::shared_ptr<RankRendezvous> in_process) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": rank ", rank, " is not in a group of ", size));
  }
  if (in_process != nullptr && in_process->size() != size) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": the in-process rendezvous has ",
                                                   in_process->size(), " ranks, the group ",
                                                   size));
  }
  absl::StatusOr<ncclComm_t> comm = InitNcclComm(id, size, rank, device, deadline, kWho);
  if (!comm.ok()) return comm.status();
  int32_t* word = nullptr;
  if (const cudaError_t e = cudaMalloc(&word, sizeof(int32_t)); e != cudaSuccess) {
    ncclCommAbort(*comm);
    return absl::ResourceExhaustedError(
        absl::StrCat(kWho, ": cudaMalloc of the barrier word: ", cudaGetErrorString(e)));
  }
  cudaMemset(word, 0, sizeof(int32_t));
  return std::unique_ptr<Collective>(
      new NcclCollective(*comm, rank, size, device, word, enqueue_timeout, std::move(in_process)));
}

}  // namespace mlaserve::parallel
