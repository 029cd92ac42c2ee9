// CUDA backend of the logit edits after the token mask (api.h): logit_bias, the presence /
// frequency penalties, and the copy of the raw rows that want logprobs. One block a row walks
// the row's list; ids are distinct within a row (model::LogitEditLists builds them so, the CPU
// ops refuse repeats), so each logit is read and written by one thread and the order of the
// list does not matter. The arithmetic is written with the _rn intrinsics so nvcc cannot contract
// `presence + frequency * c` into an FMA: the CPU backend rounds the product and the sum apart.
// Launched with PDL (kernels/common/pdl.cuh): every CTA waits before its first global access.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/sampling/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kEditThreads = 256;
constexpr int kCopyThreads = 256;
constexpr int kCopyMaxBlocksPerRow = 64;
constexpr int kMaxGridY = 65535;

__global__ void __launch_bounds__(kEditThreads)
    LogitBiasKernel(const __grid_constant__ LogitBiasParams p) {
  cuda::PdlEnter();
  const int b = blockIdx.x;
  float* row = p.logits + static_cast<int64_t>(b) * p.vocab;
  const int32_t end = p.cu_entries[b + 1];
  for (int32_t i = p.cu_entries[b] + threadIdx.x; i < end; i += blockDim.x) {
    const int32_t id = p.token_ids[i];
    if (id < 0 || id >= p.vocab) continue;
    row[id] = __fadd_rn(row[id], p.bias[i]);
  }
}

__global__ void __launch_bounds__(kEditThreads)
    OccurrencePenaltyKernel(const __grid_constant__ OccurrencePenaltyParams p) {
  cuda::PdlEnter();
  const int b = blockIdx.x;
  const float presence = p.presence[b], frequency = p.frequency[b];
  if (presence == 0.0f && frequency == 0.0f) return;
  float* row = p.logits + static_cast<int64_t>(b) * p.vocab;
  const int32_t end = p.cu_tokens[b + 1];
  for (int32_t i = p.cu_tokens[b] + threadIdx.x; i < end; i += blockDim.x) {
    const int32_t id = p.token_ids[i], count = p.counts[i];
    if (count <= 0 || id < 0 || id >= p.vocab) continue;
    const float penalty = __fadd_rn(presence, __fmul_rn(frequency, __int2float_rn(count)));
    row[id] = __fsub_rn(row[id], penalty);
  }
}

// blockIdx.y: the copied row; float4 when every row starts 16-byte aligned.
template <bool kVec4>
__global__ void __launch_bounds__(kCopyThreads)
    CopyLogitRowsKernel(const __grid_constant__ CopyLogitRowsParams p) {
  cuda::PdlEnter();
  const float* src = p.src + static_cast<int64_t>(p.row_ids[blockIdx.y]) * p.vocab;
  float* dst = p.dst + static_cast<int64_t>(blockIdx.y) * p.vocab;
  const int stride = gridDim.x * blockDim.x;
  if constexpr (kVec4) {
    const int n4 = p.vocab / 4;
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* d4 = reinterpret_cast<float4*>(dst);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) d4[i] = s4[i];
  } else {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.vocab; i += stride) dst[i] = src[i];
  }
}

}  // namespace

absl::Status ApplyLogitBiasCuda(const LogitBiasParams& p, void* stream) {
  return cuda::LaunchPdl("logit_bias",
                         cuda::LaunchShape{dim3(p.batch), dim3(kEditThreads), 0,
                                           static_cast<cudaStream_t>(stream)},
                         LogitBiasKernel, p);
}

absl::Status ApplyOccurrencePenaltiesCuda(const OccurrencePenaltyParams& p, void* stream) {
  return cuda::LaunchPdl("occurrence_penalties",
                         cuda::LaunchShape{dim3(p.batch), dim3(kEditThreads), 0,
                                           static_cast<cudaStream_t>(stream)},
                         OccurrencePenaltyKernel, p);
}

absl::Status CopyLogitRowsCuda(const CopyLogitRowsParams& p, void* stream) {
  if (p.rows > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy_logit_rows: rows=", p.rows, " > ", kMaxGridY));
  }
  const bool vec4 = p.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(p.src) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(p.dst) % 16 == 0;
  const int items = vec4 ? p.vocab / 4 : p.vocab;
  const int blocks = std::min((items + kCopyThreads - 1) / kCopyThreads, kCopyMaxBlocksPerRow);
  const cuda::LaunchShape shape{dim3(blocks, p.rows), dim3(kCopyThreads), 0,
                                static_cast<cudaStream_t>(stream)};
  return vec4 ? cuda::LaunchPdl("copy_logit_rows", shape, CopyLogitRowsKernel<true>, p)
              : cuda::LaunchPdl("copy_logit_rows", shape, CopyLogitRowsKernel<false>, p);
}

}  // namespace mlaserve::kernels
