// moe_shard CUDA backend: one thread per assignment; the fixed-capacity dispatch plans each
// destination block in one thread block (a block-wide scan over the tokens).
#include <cub/block/block_scan.cuh>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/moe_shard/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    MoeLocalizeKernel(const int32_t* ids, const float* weights, int32_t* local_ids,
                      float* local_weights, int64_t n, int begin, int local_experts) {
  for (int64_t a = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; a < n;
       a += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int32_t id = ids[a];
    const bool local = id >= begin && id < begin + local_experts;
    local_ids[a] = local ? id - begin : kNotLocal;
    local_weights[a] = local ? weights[a] : 0.0f;
  }
}

// One block per row, threads over the hidden elements.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    MoeGatherRowsKernel(const T* x, const int32_t* rows, T* out, int hidden) {
  const int64_t i = blockIdx.x;
  const T* src = x + static_cast<int64_t>(rows[i]) * hidden;
  T* dst = out + i * hidden;
  for (int h = threadIdx.x; h < hidden; h += kThreads) dst[h] = src[h];
}

// One block per token; each element sums its sources in slot order (deterministic).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    MoeCombineRowsKernel(const T* parts, const int32_t* slots, T* out, int sources, int hidden) {
  const int64_t t = blockIdx.x;
  const int32_t* s = slots + t * sources;
  for (int h = threadIdx.x; h < hidden; h += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < sources; ++j) {
      if (s[j] >= 0) acc += cuda::ToF32(parts[static_cast<int64_t>(s[j]) * hidden + h]);
    }
    out[t * hidden + h] = cuda::FromF32<T>(acc);
  }
}

// One block per destination rank: a token goes to the block if one of its experts is the
// rank's; its row is the running count of such tokens before it (a block-wide exclusive scan
// over tiles of kThreads tokens), then the rest of the block is padding.
__global__ void __launch_bounds__(kThreads)
    MoeDispatchPlanKernel(const int32_t* topk_ids, const float* topk_weights, int32_t* meta,
                          int32_t* slots, int32_t* row_tokens, int tokens, int k, int ranks,
                          int experts_per_rank, int capacity) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int base;
  const int r = blockIdx.x;
  const int begin = r * experts_per_rank;
  const int end = begin + experts_per_rank;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int tile = 0; tile < tokens; tile += kThreads) {
    const int t = tile + threadIdx.x;
    int any = 0;
    if (t < tokens) {
      for (int j = 0; j < k; ++j) {
        const int32_t id = topk_ids[static_cast<int64_t>(t) * k + j];
        any |= (id >= begin && id < end) ? 1 : 0;
      }
    }
    int before = 0, total = 0;
    Scan(scan).ExclusiveSum(any, before, total);
    if (t < tokens) {
      int32_t* slot = slots + static_cast<int64_t>(t) * ranks + r;
      if (any) {
        const int64_t row = static_cast<int64_t>(r) * capacity + base + before;
        *slot = static_cast<int32_t>(row);
        row_tokens[row] = t;
        int32_t* m = meta + row * 2 * k;
        for (int j = 0; j < k; ++j) {
          const int32_t id = topk_ids[static_cast<int64_t>(t) * k + j];
          const bool local = id >= begin && id < end;
          m[j] = local ? id - begin : kNotLocal;
          m[k + j] = __float_as_int(local ? topk_weights[static_cast<int64_t>(t) * k + j] : 0.0f);
        }
      } else {
        *slot = -1;
      }
    }
    __syncthreads();  // every thread read `base` and the scan storage before they change
    if (threadIdx.x == 0) base += total;
    __syncthreads();
  }
  for (int i = base + threadIdx.x; i < capacity; i += kThreads) {
    const int64_t row = static_cast<int64_t>(r) * capacity + i;
    row_tokens[row] = -1;
    int32_t* m = meta + row * 2 * k;
    for (int j = 0; j < k; ++j) {
      m[j] = kNotLocal;
      m[k + j] = 0;
    }
  }
}

// One block per send row: its token's hidden row, or zeros for padding.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    MoeDispatchRowsKernel(const T* x, const int32_t* row_tokens, T* out, int hidden) {
  const int64_t i = blockIdx.x;
  const int32_t t = row_tokens[i];
  T* dst = out + i * hidden;
  if (t < 0) {
    for (int h = threadIdx.x; h < hidden; h += kThreads) dst[h] = cuda::FromF32<T>(0.0f);
    return;
  }
  const T* src = x + static_cast<int64_t>(t) * hidden;
  for (int h = threadIdx.x; h < hidden; h += kThreads) dst[h] = src[h];
}

__global__ void __launch_bounds__(kThreads)
    MoeUnpackMetaKernel(const int32_t* meta, int32_t* ids, float* weights, int64_t n, int k) {
  for (int64_t a = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; a < n;
       a += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = a / k;
    const int j = static_cast<int>(a % k);
    ids[a] = meta[row * 2 * k + j];
    weights[a] = __int_as_float(meta[row * 2 * k + k + j]);
  }
}

}  // namespace

absl::Status MoeDispatchFixedCuda(const MoeDispatchFixedParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MoeDispatchPlanKernel<<<static_cast<unsigned>(p.num_ranks), kThreads, 0, s>>>(
      p.topk_ids, p.topk_weights, p.send_meta, p.slots, p.row_tokens, p.num_tokens, p.top_k,
      p.num_ranks, p.experts_per_rank, p.capacity);
  if (absl::Status st = cuda::LaunchStatus("moe_dispatch_plan"); !st.ok()) return st;
  const auto blocks = static_cast<unsigned>(static_cast<int64_t>(p.num_ranks) * p.capacity);
  if (p.dtype == DType::kBF16) {
    MoeDispatchRowsKernel<<<blocks, kThreads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(p.x), p.row_tokens,
        static_cast<__nv_bfloat16*>(p.send_rows), p.hidden);
  } else {
    MoeDispatchRowsKernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(p.x),
                                                     p.row_tokens, static_cast<float*>(p.send_rows),
                                                     p.hidden);
  }
  return cuda::LaunchStatus("moe_dispatch_rows");
}

absl::Status MoeUnpackMetaCuda(const MoeUnpackMetaParams& p, void* stream) {
  const int64_t n = p.num_rows * p.top_k;
  MoeUnpackMetaKernel<<<cuda::GridFor(n, kThreads), kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(p.meta, p.ids, p.weights, n,
                                                             p.top_k);
  return cuda::LaunchStatus("moe_unpack_meta");
}

absl::Status MoeGatherRowsCuda(const MoeGatherRowsParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(p.num_rows);
  if (p.dtype == DType::kBF16) {
    MoeGatherRowsKernel<<<blocks, kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(p.x),
                                                   p.rows, static_cast<__nv_bfloat16*>(p.out),
                                                   p.hidden);
  } else {
    MoeGatherRowsKernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(p.x), p.rows,
                                                   static_cast<float*>(p.out), p.hidden);
  }
  return cuda::LaunchStatus("moe_gather_rows");
}

absl::Status MoeCombineRowsCuda(const MoeCombineRowsParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(p.num_tokens);
  if (p.dtype == DType::kBF16) {
    MoeCombineRowsKernel<<<blocks, kThreads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(p.parts), p.slots, static_cast<__nv_bfloat16*>(p.out),
        p.num_sources, p.hidden);
  } else {
    MoeCombineRowsKernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(p.parts),
                                                    p.slots, static_cast<float*>(p.out),
                                                    p.num_sources, p.hidden);
  }
  return cuda::LaunchStatus("moe_combine_rows");
}

absl::Status MoeLocalizeCuda(const MoeLocalizeParams& p, void* stream) {
  MoeLocalizeKernel<<<cuda::GridFor(p.num_assignments, kThreads), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(
      p.topk_ids, p.topk_weights, p.local_ids, p.local_weights, p.num_assignments,
      p.expert_begin, p.local_experts);
  return cuda::LaunchStatus("moe_localize");
}

}  // namespace mlaserve::kernels
