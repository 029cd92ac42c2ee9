// Types shared by every kernel family: dtypes, backends, the per-launch context.
//
// Below this line there are no proto, gRPC or model types: a kernel entry point takes a POD
// params struct (raw pointers + shapes + strides, normalised once on the host) and a
// KernelContext saying where to run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/page.h"  // kPageSize, PagesFor

namespace mlaserve::kernels {

enum class DType : uint8_t { kF32, kBF16, kF16, kFP8E4M3, kI32, kI64, kU8 };

inline size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kFP8E4M3: case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  return 0;
}

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

enum class Backend : uint8_t { kCpu, kCuda };

inline const char* BackendName(Backend b) { return b == Backend::kCpu ? "cpu" : "cuda"; }

// Where a kernel runs. For kCuda, `stream` is a cudaStream_t. Launches never allocate and
// never synchronise with the host, so CUDA backends can capture them in graphs.
struct KernelContext {
  Backend backend = Backend::kCpu;
  void* stream = nullptr;
  int device = 0;
};

}  // namespace mlaserve::kernels
