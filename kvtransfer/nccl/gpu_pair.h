// Test/bench support: the two ends of an nccl pair in one process, one GPU each (devices 0
// and 1), each with a CUDA KV pool, its communicator and its CudaPageIo. Not production code.
#pragma once

#include <cuda_runtime_api.h>

#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvtransfer/nccl/cuda_page_io.h"
#include "kvtransfer/nccl/nccl_communicator.h"
#include "kvtransfer/nccl/pair_transfer.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer::nccl::gpu_testing {

inline int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

struct Side {
  int device = 0;
  std::unique_ptr<model::KvPool> pool;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<CudaPageIo> io;
};

// Builds both sides (pools of `pool_options` with backend kCuda) and joins the communicator.
inline absl::Status MakePair(model::KvPoolOptions pool_options, int slots, size_t slot_bytes,
                             Side* tx, Side* rx,
                             absl::Duration enqueue_timeout = absl::Seconds(30)) {
  pool_options.backend = kernels::Backend::kCuda;
  absl::StatusOr<CommId> id = NewNcclCommId();
  if (!id.ok()) return id.status();
  auto build = [&](Side* side, int device, int rank) -> absl::Status {
    side->device = device;
    if (cudaSetDevice(device) != cudaSuccess) return absl::InternalError("cudaSetDevice");
    auto pool = model::KvPool::Create(pool_options);
    if (!pool.ok()) return pool.status();
    side->pool = std::move(*pool);
    auto comm = NcclCommunicatorFactory(device, enqueue_timeout)(
        *id, rank, absl::Now() + absl::Seconds(60));
    if (!comm.ok()) return comm.status();
    side->comm = std::move(*comm);
    auto io = CudaPageIo::Create(side->pool.get(), static_cast<cudaStream_t>(side->comm->stream()),
                                 slots, slot_bytes);
    if (!io.ok()) return io.status();
    side->io = std::move(*io);
    return absl::OkStatus();
  };
  auto r = std::async(std::launch::async, [&] { return build(rx, 1, 1); });
  absl::Status t = build(tx, 0, 0);
  absl::Status rs = r.get();
  return t.ok() ? rs : t;
}

// Allocates n pages and shuffles the list so ids are scattered and differ between sides.
inline std::vector<int32_t> ShuffledPages(model::KvPool& pool, int n, std::mt19937& rng) {
  auto all = pool.Allocate(pool.free_pages());
  std::vector<int32_t> pages = *all;
  std::shuffle(pages.begin(), pages.end(), rng);
  pool.Free(std::span<const int32_t>(pages).subspan(n));
  pages.resize(n);
  return pages;
}

}  // namespace mlaserve::kvtransfer::nccl::gpu_testing
