// Facts about the calling thread's current CUDA device that launchers ask on every launch (is it
// a Hopper GPU, how many multiprocessors, how many blocks of a kernel one holds): looked up once
// per device and remembered. CUDA translation units only.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

namespace mlaserve::kernels::cuda {

// `ask(device)` for the current device, asked once per device (the first 64) and remembered in
// `known`, whose zero value means "not asked yet"; `ask` returns nullopt where the device cannot
// be asked (then `fallback`, not remembered), and never zero. `fallback` also where the current
// device is unknown.
template <typename T, typename Ask>
T RememberedForCurrentDevice(std::array<std::atomic<T>, 64>& known, T fallback, Ask ask) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return fallback;
  const bool cacheable = device >= 0 && device < static_cast<int>(known.size());
  if (cacheable) {
    if (const T k = known[device].load(std::memory_order_relaxed); k != T{}) return k;
  }
  const std::optional<T> value = ask(device);
  if (!value.has_value()) return fallback;
  if (cacheable) known[device].store(*value, std::memory_order_relaxed);
  return *value;
}

// Whether the current device is compute capability 9.0 (H100 / H200).
inline bool CurrentDeviceIsSm90() {
  static std::array<std::atomic<int8_t>, 64> known{};  // 1 = no, 2 = yes
  return RememberedForCurrentDevice<int8_t>(known, 1, [](int device) -> std::optional<int8_t> {
           int major = 0, minor = 0;
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
           return major == 9 && minor == 0 ? 2 : 1;
         }) == 2;
}

// Multiprocessors of the current device (1 if it cannot be asked).
inline int CurrentDeviceSmCount() {
  static std::array<std::atomic<int>, 64> known{};
  return RememberedForCurrentDevice<int>(known, 1, [](int device) -> std::optional<int> {
    int sms = 1;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) sms = 1;
    return sms;
  });
}

// Nominal DRAM bytes the current device moves per multiprocessor clock: 2 transfers a memory
// clock over the bus width, over (multiprocessors x SM clock), from the attributes (no
// measurement), asked once per device. H100 SXM: 2 x 2.619 GHz x 640 B / (132 x 1.98 GHz) = 12.8;
// the H200's wider, faster HBM3e gives more. 0 if it cannot be asked.
inline double CurrentDeviceDramBytesPerSmClock() {
  static std::array<std::atomic<double>, 64> known{};
  return RememberedForCurrentDevice<double>(known, 0, [](int device) -> std::optional<double> {
    int sm_khz = 0, mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess ||
        sm_khz <= 0 || mem_khz <= 0 || bus_bits <= 0) {
      cudaGetLastError();
      return std::nullopt;
    }
    return 2.0 * mem_khz * (bus_bits / 8.0) / (static_cast<double>(sm_khz) * CurrentDeviceSmCount());
  });
}

// Blocks of `kernel` that one multiprocessor of the current device holds at once with `threads`
// threads and `smem` bytes of dynamic shared memory (cudaOccupancyMaxActiveBlocksPerMultiprocessor),
// asked once per (device, kernel, threads, smem) and remembered; 0 where the query fails (its
// error cleared, not remembered). The lock guards the cache only, not the query: that may load the
// kernel's module, which can wait for the device to go idle, and the ranks of a multi-GPU worker
// (threads of one process) must not wait on each other behind it (docs/parallel.md, the two-GPU
// hang).
inline int CurrentDeviceBlocksPerSm(const void* kernel, int threads, size_t smem) {
  using Key = std::tuple<int, const void*, int, size_t>;
  static std::mutex mu;
  static std::map<Key, int> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const Key key{device, kernel, threads, smem};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess || n < 0) {
    cudaGetLastError();
    return 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  known.emplace(key, n);
  return n;
}

}  // namespace mlaserve::kernels::cuda
