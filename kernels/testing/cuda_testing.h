// Test helpers for the CUDA kernels: device buffers that round-trip host float vectors
// through bf16, poisoning (NaN) of device outputs, and the bf16 rounding of host inputs so the
// CPU reference sees exactly the values the GPU kernel reads.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels::testing {

#define MLASERVE_CUDA_ASSERT(expr)                                               \
  do {                                                                           \
    const cudaError_t mlaserve_err_ = (expr);                                    \
    ASSERT_EQ(mlaserve_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(mlaserve_err_); \
  } while (0)

// Rounds every value to bf16 (in place), so the f32 CPU reference uses the GPU's inputs.
inline void RoundToBf16(std::vector<float>& v) {
  for (auto& x : v) x = Bf16ToFloat(FloatToBf16(x));
}

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

inline std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
  return out;
}

// An owning device allocation (bytes), freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  DeviceBuffer buf(host.size() * sizeof(T));
  if (buf.get() != nullptr && !host.empty())
    cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return buf;
}

// bf16 device copy of float host values.
inline DeviceBuffer ToDeviceBf16(const std::vector<float>& host) { return ToDevice(ToBf16(host)); }

// A device buffer of n bf16 values, every one NaN (0x7fc0).
inline DeviceBuffer PoisonedBf16(size_t n) {
  return ToDevice(std::vector<uint16_t>(n, 0x7fc0));
}
inline DeviceBuffer PoisonedF32(size_t n) {
  return ToDevice(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
}

template <typename T>
std::vector<T> ToHost(const DeviceBuffer& buf, size_t n) {
  std::vector<T> host(n);
  if (n > 0) cudaMemcpy(host.data(), buf.get(), n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

inline std::vector<float> ToHostBf16(const DeviceBuffer& buf, size_t n) {
  return FromBf16(ToHost<uint16_t>(buf, n));
}

// Number of NaN entries (unwritten outputs keep the poison).
inline size_t CountNan(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += std::isnan(x) ? 1 : 0;
  return n;
}

}  // namespace mlaserve::kernels::testing

namespace mlaserve::kernels::testing {

// Relative error of LSEs where finite; -inf entries (rows without keys) must match exactly,
// else +inf. NaN anywhere gives +inf.
inline double LseErrorOrInf(std::vector<float> got, std::vector<float> want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) return std::numeric_limits<double>::infinity();
      got[i] = want[i] = 0.0f;
    }
  }
  return RelativeError(got, want);
}

}  // namespace mlaserve::kernels::testing
