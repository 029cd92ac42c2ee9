// The cuDNN provider's own kernels (cudnn_sdpa.h): the ragged-batch arrays cuDNN reads and the
// clearing of rows that see no key. Both are tiny next to the attention they surround.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/common/cuda_util.cuh"
#include "kernels/mha_prefill/cudnn_sdpa.h"

namespace mlaserve::kernels::cudnn_sdpa {
namespace {

constexpr size_t kArenaAlign = 256;
constexpr int kBatchThreads = 256;
constexpr int kClearRowsPerBlock = 16;
constexpr int kClearThreads = 128;

size_t AlignUp(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

__global__ void RaggedBatchKernel(const __grid_constant__ MhaPrefillParams p, RaggedBatch r) {
  for (int b = threadIdx.x; b <= p.batch; b += blockDim.x) {
    const int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    r.q_offset[b] = q0 * p.q_token_stride;
    r.k_offset[b] = k0 * p.k_token_stride;
    r.v_offset[b] = k0 * p.v_token_stride;
    r.o_offset[b] = q0 * p.out_token_stride;
    r.stats_offset[b] = q0 * p.num_heads;
    if (b < p.batch) {
      r.seq_len_q[b] = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
      r.seq_len_kv[b] = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    }
  }
}

// Grid (row blocks of kClearRowsPerBlock, batch). Query i of sequence b sees no key when
// lk == 0, or (causal, bottom-right) when i + (lk - lq) < 0.
__global__ void ClearKeylessRowsKernel(const __grid_constant__ MhaPrefillParams p) {
  const int b = blockIdx.y;
  const int q_start = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q_start;
  const int lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  const int keyless = lk == 0 ? lq : (p.causal ? max(0, lq - lk) : 0);  // rows [0, keyless)
  const int row0 = blockIdx.x * kClearRowsPerBlock;
  if (row0 >= keyless) return;
  const int rows = min(kClearRowsPerBlock, keyless - row0);
  const int chunks = p.head_dim_v / cuda::kBf16PerChunk;  // head_dim_v % 8 == 0 (checked)
  const int per_row = p.num_heads * chunks;
  auto* out = static_cast<__nv_bfloat16*>(p.out);
  for (int i = threadIdx.x; i < rows * per_row; i += blockDim.x) {
    const int64_t t = q_start + row0 + i / per_row;
    const int h = i % per_row / chunks, c = i % chunks;
    *reinterpret_cast<uint4*>(out + t * p.out_token_stride + h * p.out_head_stride +
                              c * cuda::kBf16PerChunk) = make_uint4(0, 0, 0, 0);
  }
  if (p.lse == nullptr) return;
  for (int i = threadIdx.x; i < rows * p.num_heads; i += blockDim.x) {
    const int64_t t = q_start + row0 + i / p.num_heads;
    p.lse[t * p.num_heads + i % p.num_heads] = -INFINITY;
  }
}

}  // namespace

size_t RaggedBatchBytes(int batch) {
  return 2 * AlignUp(sizeof(int32_t) * batch) + 5 * AlignUp(sizeof(int64_t) * (batch + 1));
}

RaggedBatch CarveRaggedBatch(void* base, int batch) {
  auto* at = static_cast<char*>(base);
  auto take = [&](size_t bytes) {
    char* p = at;
    at += AlignUp(bytes);
    return p;
  };
  RaggedBatch r;
  r.seq_len_q = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * batch));
  r.seq_len_kv = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * batch));
  for (int64_t** off : {&r.q_offset, &r.k_offset, &r.v_offset, &r.o_offset, &r.stats_offset}) {
    *off = reinterpret_cast<int64_t*>(take(sizeof(int64_t) * (batch + 1)));
  }
  return r;
}

absl::Status LaunchRaggedBatch(const MhaPrefillParams& p, const RaggedBatch& r, cudaStream_t stream) {
  RaggedBatchKernel<<<1, kBatchThreads, 0, stream>>>(p, r);
  return cuda::LaunchStatus("mha_prefill cudnn ragged batch");
}

absl::Status LaunchClearKeylessRows(const MhaPrefillParams& p, cudaStream_t stream) {
  if (p.batch == 0 || p.max_seqlen_q == 0) return absl::OkStatus();
  const dim3 grid((p.max_seqlen_q + kClearRowsPerBlock - 1) / kClearRowsPerBlock, p.batch);
  ClearKeylessRowsKernel<<<grid, kClearThreads, 0, stream>>>(p);
  return cuda::LaunchStatus("mha_prefill cudnn keyless rows");
}

}  // namespace mlaserve::kernels::cudnn_sdpa
