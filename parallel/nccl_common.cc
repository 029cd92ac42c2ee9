#include "parallel/nccl_common.h"

#include <chrono>
#include <cstring>
#include <thread>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace mlaserve::parallel {

absl::Status NcclStatus(ncclResult_t r, const char* who, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  const bool remote = r == ncclRemoteError || r == ncclSystemError;
  const std::string msg = absl::StrCat(who, ": ", what, ": ", ncclGetErrorString(r));
  return remote ? absl::UnavailableError(msg) : absl::InternalError(msg);
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  if (auto s = NcclStatus(ncclGetUniqueId(&id), "nccl", "ncclGetUniqueId"); !s.ok()) return s;
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<ncclComm_t> InitNcclComm(const std::string& id, int size, int rank, int device,
                                        absl::Time deadline, const char* who) {
  ncclUniqueId uid;
  if (id.size() != sizeof(uid)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": communicator id of ", id.size(),
                                                   " bytes; NCCL's has ", sizeof(uid)));
  }
  std::memcpy(&uid, id.data(), sizeof(uid));
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat(who, ": cudaSetDevice(", device, "): ",
                                            cudaGetErrorString(e)));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, uid, rank, &config);
  while (r == ncclInProgress) {
    if (absl::Now() > deadline) {
      ncclCommAbort(comm);
      return absl::DeadlineExceededError(absl::StrCat(
          who, ": not every rank joined the communicator (rank ", rank, " of ", size,
          ") by the deadline"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    return NcclStatus(r, who, "ncclCommInitRankConfig");
  }
  return comm;
}

absl::Status FinishEnqueue(ncclComm_t comm, ncclResult_t r, absl::Time deadline,
                           const char* who, const char* what) {
  while (r == ncclInProgress) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          who, ": ", what, " could not be enqueued by the deadline (peer stalled or gone)"));
    }
    std::this_thread::yield();
    ncclCommGetAsyncError(comm, &r);
  }
  return NcclStatus(r, who, what);
}

std::string NcclVersionString() {
  int v = 0;
  ncclGetVersion(&v);
  return absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace mlaserve::parallel
