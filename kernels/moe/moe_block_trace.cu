// The host side of kernels/moe/block_trace.h: one device buffer of kMaxLaunches regions of
// kMaxBlocks records, handed out in launch order while a trace is started.
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/moe/block_trace.h"
#include "kernels/moe/moe_block_trace.cuh"

namespace mlaserve::kernels::moe_trace {
namespace {

constexpr size_t kRegionWords = static_cast<size_t>(kMaxBlocks) * kRecordWords;

struct Registry {
  std::atomic<bool> started{false};  // buffer set: launches check it without the lock
  std::mutex mu;
  uint64_t* buffer = nullptr;  // kMaxLaunches regions
  int device = -1;
  std::vector<LaunchRecord> launches;  // grid and kernel of each region handed out, no blocks
};

Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: launches may come from any thread
  return *r;
}

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("moe block trace: ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace

absl::Status Start() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.buffer != nullptr) return absl::FailedPreconditionError("moe block trace: already started");
  int device = 0;
  if (absl::Status s = Cuda(cudaGetDevice(&device), "cudaGetDevice"); !s.ok()) return s;
  const size_t bytes = kMaxLaunches * kRegionWords * sizeof(uint64_t);
  void* p = nullptr;
  if (absl::Status s = Cuda(cudaMalloc(&p, bytes), "allocating the record buffer"); !s.ok()) return s;
  if (absl::Status s = Cuda(cudaMemset(p, 0, bytes), "zeroing the record buffer"); !s.ok()) {
    cudaFree(p);
    return s;
  }
  if (absl::Status s = Cuda(cudaDeviceSynchronize(), "zeroing the record buffer"); !s.ok()) {
    cudaFree(p);
    return s;
  }
  r.buffer = static_cast<uint64_t*>(p);
  r.device = device;
  r.started.store(true, std::memory_order_release);
  return absl::OkStatus();
}

bool Started() { return TheRegistry().started.load(std::memory_order_acquire); }

absl::StatusOr<std::vector<LaunchRecord>> Read() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.buffer == nullptr) return absl::FailedPreconditionError("moe block trace: not started");
  if (absl::Status s = Cuda(cudaDeviceSynchronize(), "synchronizing"); !s.ok()) return s;
  std::vector<uint64_t> host(r.launches.size() * kRegionWords);
  if (!host.empty()) {
    if (absl::Status s = Cuda(cudaMemcpy(host.data(), r.buffer, host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
                              "copying the records");
        !s.ok()) {
      return s;
    }
  }
  std::vector<LaunchRecord> out = r.launches;
  for (size_t l = 0; l < out.size(); ++l) {
    LaunchRecord& launch = out[l];
    for (int by = 0; by < launch.grid_y; ++by) {
      for (int bx = 0; bx < launch.grid_x; ++bx) {
        const uint64_t* w = host.data() + l * kRegionWords +
                            kRecordWords * (static_cast<size_t>(by) * launch.grid_x + bx);
        if (w[0] == 0) continue;  // the block did not write its record
        launch.blocks.push_back({static_cast<int>(w[0]) - 1, bx, by, w[1], w[2], w[3]});
      }
    }
  }
  return out;
}

}  // namespace mlaserve::kernels::moe_trace

namespace mlaserve::kernels::moe_cuda {

uint64_t* BlockTraceRegion(const char* kernel, dim3 grid, int shared_slots) {
  if (!moe_trace::Started()) return nullptr;  // every launch asks: no lock while no trace runs
  moe_trace::Registry& r = moe_trace::TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.launches.size() >= static_cast<size_t>(moe_trace::kMaxLaunches)) return nullptr;
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  int device = 0;
  if (grid.z != 1 || blocks > moe_trace::kMaxBlocks || cudaGetDevice(&device) != cudaSuccess || device != r.device) {
    return nullptr;
  }
  moe_trace::LaunchRecord launch;
  launch.kernel = kernel;
  launch.grid_x = static_cast<int>(grid.x);
  launch.grid_y = static_cast<int>(grid.y);
  launch.shared_slots = shared_slots;
  r.launches.push_back(std::move(launch));
  return r.buffer + (r.launches.size() - 1) * moe_trace::kRegionWords;
}

}  // namespace mlaserve::kernels::moe_cuda
