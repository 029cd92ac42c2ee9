// Device buffers, uploads and event timing for mlaserve-tune (host code on the CUDA runtime).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "profiles/tune/fill_random.h"

namespace mlaserve::profiles::tune {

inline constexpr size_t kBf16 = 2;

inline absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// A device allocation freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  absl::Status Allocate(size_t bytes, const char* name) {
    bytes_ = std::max<size_t>(bytes, 256);
    if (cudaMalloc(&ptr_, bytes_) != cudaSuccess) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes_ >> 20, " MiB for ", name));
    }
    return absl::OkStatus();
  }
  absl::Status Random(uint64_t seed) {
    return Cuda(static_cast<cudaError_t>(FillRandomBf16(ptr_, bytes_ / kBf16, seed)), "fill");
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
absl::Status Upload(DeviceBuffer& d, const std::vector<T>& h) {
  if (h.size() * sizeof(T) > d.bytes()) return absl::InternalError("metadata buffer too small");
  return Cuda(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
              "upload");
}

// Median microseconds of fn() over reps runs after warmup runs (events around each run).
template <typename Fn>
absl::StatusOr<double> MedianUs(Fn&& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(fn());
  RETURN_IF_ERROR(Cuda(cudaDeviceSynchronize(), "sync"));
  cudaEvent_t start, stop;
  RETURN_IF_ERROR(Cuda(cudaEventCreate(&start), "event"));
  RETURN_IF_ERROR(Cuda(cudaEventCreate(&stop), "event"));
  std::vector<double> us;
  absl::Status st;
  for (int i = 0; i < reps && st.ok(); ++i) {
    cudaEventRecord(start);
    st = fn();
    cudaEventRecord(stop);
    if (st.ok()) st = Cuda(cudaEventSynchronize(stop), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RETURN_IF_ERROR(st);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace mlaserve::profiles::tune
