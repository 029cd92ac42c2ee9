// MoePrepareExpertWeights on CUDA (api.h): the one-time rewrite of the routed experts' gate_up
// stack from the checkpoint's stacked rows into MoeGateUpLayout::kInterleaved8, where the
// fused gate_up GEMM epilogue (moe_gemm_sm90_direct.cuh) runs, i.e. on Hopper.
//
// The rows of one expert are permuted among themselves, so the experts are staged through a
// scratch copy (at most kStagingBytes, a batch of whole experts at a time) and written back
// permuted.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels {
namespace {

constexpr int kInterleaveRows = 8;  // kInterleaved8's block of gate (or up) rows
constexpr size_t kStagingBytes = size_t{256} << 20;
constexpr int kThreads = 256;

// dst row 16j + i (i < 8) <- src gate row 8j + i; dst row 16j + 8 + i <- src up row inter + 8j + i;
// for `experts` consecutive experts of [2*inter, hidden] rows, 16-byte chunks.
__global__ void InterleaveGateUpKernel(const uint4* src, uint4* dst, int experts, int inter, int hidden) {
  const int row_chunks = hidden / cuda::kBf16PerChunk;
  const int64_t rows = static_cast<int64_t>(experts) * 2 * inter;
  const int64_t total = rows * row_chunks;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / row_chunks;
    const int c = static_cast<int>(idx - row * row_chunks);
    const int64_t expert = row / (2 * inter);
    const int r = static_cast<int>(row - expert * 2 * inter);
    const int block = r / (2 * kInterleaveRows), i = r % (2 * kInterleaveRows);
    const int src_r = i < kInterleaveRows ? block * kInterleaveRows + i
                                          : inter + block * kInterleaveRows + (i - kInterleaveRows);
    dst[idx] = src[(expert * 2 * inter + src_r) * row_chunks + c];
  }
}

}  // namespace

absl::StatusOr<MoeGateUpLayout> MoePrepareExpertWeightsCuda(const MoePrepareParams& p, void* stream) {
  const bool fits = p.dtype == DType::kBF16 && p.inter % kInterleaveRows == 0 && p.hidden % cuda::kBf16PerChunk == 0;
  const MoeGateUpLayout want =
      p.layout.value_or(fits && moe_cuda::Sm90Available() ? MoeGateUpLayout::kInterleaved8 : MoeGateUpLayout::kStacked);
  if (want == MoeGateUpLayout::kStacked) return want;
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_prepare: layout=interleaved8 on CUDA needs dtype=bf16, inter % 8 == 0 and hidden % 8 == 0; got dtype=",
        DTypeName(p.dtype), " inter=", p.inter, " hidden=", p.hidden));
  }
  RETURN_IF_ERROR(cuda::RequireVectorAligned("moe_prepare", "gate_up", p.gate_up));
  auto s = static_cast<cudaStream_t>(stream);
  const size_t expert_bytes = size_t{2} * p.inter * p.hidden * sizeof(__nv_bfloat16);
  const int batch = static_cast<int>(std::clamp<size_t>(kStagingBytes / expert_bytes, 1, p.num_experts));
  void* staging = nullptr;
  RETURN_IF_ERROR(cuda::CudaStatus(cudaMallocAsync(&staging, batch * expert_bytes, s),
                                   "moe_prepare: allocating the staging buffer"));
  auto interleave_all = [&]() -> absl::Status {
    for (int e0 = 0; e0 < p.num_experts; e0 += batch) {
      const int n = std::min(batch, p.num_experts - e0);
      char* at = static_cast<char*>(p.gate_up) + e0 * expert_bytes;
      RETURN_IF_ERROR(cuda::CudaStatus(cudaMemcpyAsync(staging, at, n * expert_bytes, cudaMemcpyDeviceToDevice, s),
                                       "moe_prepare: staging experts"));
      const int64_t items = static_cast<int64_t>(n) * 2 * p.inter * (p.hidden / cuda::kBf16PerChunk);
      InterleaveGateUpKernel<<<cuda::GridFor(items, kThreads), kThreads, 0, s>>>(
          static_cast<const uint4*>(staging), reinterpret_cast<uint4*>(at), n, p.inter, p.hidden);
      RETURN_IF_ERROR(cuda::LaunchStatus("moe_prepare interleave"));
    }
    return absl::OkStatus();
  };
  const absl::Status interleaved = interleave_all();
  const absl::Status freed = cuda::CudaStatus(cudaFreeAsync(staging, s), "moe_prepare: freeing the staging buffer");
  const absl::Status synced = cuda::CudaStatus(cudaStreamSynchronize(s), "moe_prepare: synchronising");
  RETURN_IF_ERROR(interleaved);
  RETURN_IF_ERROR(freed);
  RETURN_IF_ERROR(synced);
  return want;
}

}  // namespace mlaserve::kernels
