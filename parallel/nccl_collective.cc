#include "parallel/nccl_collective.h"

#include <cuda_runtime_api.h>

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
                 absl::Duration enqueue_timeout)
      : comm_(comm), rank_(rank), size_(size), device_(device), barrier_word_(barrier_word),
        enqueue_timeout_(enqueue_timeout) {}
  ~NcclCollective() override {
    Abort();
    cudaSetDevice(device_);
    cudaFree(barrier_word_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceSum(const void* send, void* recv, int64_t count, kernels::DType dtype,
                            void* stream) override {
    if (auto s = CheckCollectiveDType(dtype); !s.ok()) return s;
    absl::MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    return Enqueue(ncclAllReduce(send, recv, static_cast<size_t>(count), ToNccl(dtype), ncclSum,
                                 comm_, Stream(stream)),
                   "ncclAllReduce");
  }

  absl::Status AllGather(const void* send, void* recv, int64_t count, kernels::DType dtype,
                         void* stream) override {
    if (auto s = CheckCollectiveDType(dtype); !s.ok()) return s;
    absl::MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    return Enqueue(ncclAllGather(send, recv, static_cast<size_t>(count), ToNccl(dtype), comm_,
                                 Stream(stream)),
                   "ncclAllGather");
  }

  absl::Status ReduceScatterSum(const void* send, void* recv, int64_t count,
                                kernels::DType dtype, void* stream) override {
    if (auto s = CheckCollectiveDType(dtype); !s.ok()) return s;
    absl::MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    return Enqueue(ncclReduceScatter(send, recv, static_cast<size_t>(count), ToNccl(dtype),
                                     ncclSum, comm_, Stream(stream)),
                   "ncclReduceScatter");
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
    absl::MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    const size_t es = kernels::DTypeSize(dtype);
    const ncclDataType_t t = ToNccl(dtype);
    cudaStream_t s = Stream(stream);
    if (auto st = Enqueue(ncclGroupStart(), "ncclGroupStart"); !st.ok()) return st;
    for (int p = 0; p < size_; ++p) {
      if (send_counts[p] > 0) {
        ncclResult_t r = ncclSend(static_cast<const char*>(send) + send_offsets[p] * es,
                                  static_cast<size_t>(send_counts[p]), t, p, comm_, s);
        if (auto st = Enqueue(r, "ncclSend"); !st.ok()) return st;
      }
      if (recv_counts[p] > 0) {
        ncclResult_t r = ncclRecv(static_cast<char*>(recv) + recv_offsets[p] * es,
                                  static_cast<size_t>(recv_counts[p]), t, p, comm_, s);
        if (auto st = Enqueue(r, "ncclRecv"); !st.ok()) return st;
      }
    }
    return Enqueue(ncclGroupEnd(), "ncclGroupEnd");
  }

  absl::Status Barrier(void* stream) override {
    {
      absl::MutexLock l(&mu_);
      if (!error_.ok()) return error_;
      cudaMemsetAsync(barrier_word_, 0, sizeof(int32_t), Stream(stream));
      if (auto s = Enqueue(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum,
                                         comm_, Stream(stream)),
                           "barrier");
          !s.ok()) {
        return s;
      }
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
    if (comm_ == nullptr) return;
    cudaSetDevice(device_);
    ncclCommAbort(comm_);  // local; the peers' own calls fail or reach their deadline
    comm_ = nullptr;
    if (error_.ok()) error_ = absl::AbortedError(absl::StrCat(kWho, ": aborted"));
  }

 private:
  static cudaStream_t Stream(void* s) { return static_cast<cudaStream_t>(s); }

  absl::Status Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error_.ok()) error_ = s;
    return s;
  }
  absl::Status Enqueue(ncclResult_t r, const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status s = FinishEnqueue(comm_, r, absl::Now() + enqueue_timeout_, kWho, what);
    return s.ok() ? s : Fail(s);
  }

  absl::Mutex mu_;  // serialises calls with Abort (which another thread may make)
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);
  const int rank_;
  const int size_;
  const int device_;
  int32_t* barrier_word_;  // one device int the barrier all-reduces
  const absl::Duration enqueue_timeout_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const std::string& id, int rank, int size, int device, absl::Time deadline,
    absl::Duration enqueue_timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": rank ", rank, " is not in a group of ", size));
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
      new NcclCollective(*comm, rank, size, device, word, enqueue_timeout));
}

}  // namespace mlaserve::parallel
