// embedding CUDA backend: a row gather, one 16-byte vector per thread when rows allow it (else
// one element). An id outside [0, vocab) cannot be reported without a host sync, so its row is
// written as zeros; callers validate ids (api.h), and the CPU backend refuses them. Launched
// with PDL (kernels/common/pdl.cuh).
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/embedding/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

// Unit: the copied element type (uint4 = 16 bytes, or one dtype element).
template <typename Unit>
__global__ void __launch_bounds__(kThreads)
    EmbeddingKernel(const int32_t* ids, const Unit* table, Unit* out, int num_tokens,
                    int units_per_row, int vocab) {
  const int64_t total = static_cast<int64_t>(num_tokens) * units_per_row;
  cuda::PdlEnter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / units_per_row;
    const int c = static_cast<int>(i - t * units_per_row);
    const int32_t id = ids[t];
    Unit v{};
    if (id >= 0 && id < vocab) v = table[static_cast<int64_t>(id) * units_per_row + c];
    out[i] = v;
  }
}

}  // namespace

absl::Status EmbeddingCuda(const EmbeddingParams& p, void* stream) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding: the CUDA backend supports dtype=bf16 or f32, got ", DTypeName(p.dtype)));
  }
  const size_t row_bytes = static_cast<size_t>(p.dim) * DTypeSize(p.dtype);
  const bool vec = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(p.table) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
  cuda::LaunchShape shape;
  shape.block = dim3(kThreads);
  shape.stream = static_cast<cudaStream_t>(stream);
  if (vec) {
    const int units = static_cast<int>(row_bytes / 16);
    shape.grid = dim3(cuda::GridFor(static_cast<int64_t>(p.num_tokens) * units, kThreads));
    return cuda::LaunchPdl("embedding", shape, EmbeddingKernel<uint4>, p.ids,
                           static_cast<const uint4*>(p.table), static_cast<uint4*>(p.out),
                           p.num_tokens, units, p.vocab);
  }
  shape.grid = dim3(cuda::GridFor(static_cast<int64_t>(p.num_tokens) * p.dim, kThreads));
  if (p.dtype == DType::kBF16) {
    return cuda::LaunchPdl("embedding", shape, EmbeddingKernel<uint16_t>, p.ids,
                           static_cast<const uint16_t*>(p.table), static_cast<uint16_t*>(p.out),
                           p.num_tokens, p.dim, p.vocab);
  }
  return cuda::LaunchPdl("embedding", shape, EmbeddingKernel<float>, p.ids,
                         static_cast<const float*>(p.table), static_cast<float*>(p.out),
                         p.num_tokens, p.dim, p.vocab);
}

}  // namespace mlaserve::kernels
