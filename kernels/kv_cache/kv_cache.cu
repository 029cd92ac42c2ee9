// kv_cache CUDA backend (bf16): CacheWrite scatters rows into their slots, CacheGather copies
// a range of each sequence's positions out of its pages. Threads move 16-byte vectors when the
// widths and buffers allow it, else single elements. Launched with PDL (kernels/common/pdl.cuh).
//
// Index arrays live on the device, so they cannot be validated on the host: a slot at or past
// the cache's end (or a negative slot) is skipped by CacheWrite, and CacheGather skips pages
// outside [0, num_pages); the CPU backend reports those as INVALID_ARGUMENT.
#include <algorithm>
#include <type_traits>

#include "kernels/common/cuda_util.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/kv_cache/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;
constexpr unsigned kGatherBlocksPerSeq = 32;

template <int kVec>
__global__ void __launch_bounds__(kThreads) CacheWriteKernel(const __grid_constant__ CacheWriteParams p) {
  using Vec = std::conditional_t<kVec == 8, uint4, __nv_bfloat16>;
  const int chunks = p.entry_dim / kVec;
  const int64_t total = static_cast<int64_t>(p.num_tokens) * chunks;
  const int64_t num_slots = static_cast<int64_t>(p.num_pages) * kPageSize;
  const auto* src = static_cast<const Vec*>(p.src);
  auto* cache = static_cast<Vec*>(p.cache);
  cuda::PdlEnter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / chunks;
    const int c = static_cast<int>(i % chunks);
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;
    cache[slot * chunks + c] = src[t * (p.src_stride / kVec) + c];
  }
}

template <int kVec>
__global__ void __launch_bounds__(kThreads) CacheGatherKernel(const __grid_constant__ CacheGatherParams p) {
  using Vec = std::conditional_t<kVec == 8, uint4, __nv_bfloat16>;
  const int b = blockIdx.y;
  const int chunks = p.entry_dim / kVec;
  cuda::PdlEnter();  // len, start and cu_dst are device arrays a previous kernel may write
  const int len = p.len[b], start = p.start[b];
  const int64_t dst_row0 = p.cu_dst[b];
  const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
  const auto* cache = static_cast<const Vec*>(p.cache);
  auto* dst = static_cast<Vec*>(p.dst);
  const int64_t total = static_cast<int64_t>(len) * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / chunks;
    const int c = static_cast<int>(i % chunks);
    const int64_t pos = start + r;
    const int64_t page_index = pos / kPageSize;
    if (page_index >= p.max_pages_per_seq) continue;
    const int32_t page = table[page_index];
    if (page < 0 || page >= p.num_pages) continue;
    const int64_t slot = static_cast<int64_t>(page) * kPageSize + pos % kPageSize;
    dst[(dst_row0 + r) * chunks + c] = cache[slot * chunks + c];
  }
}

bool Aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % cuda::kChunkBytes == 0; }

absl::Status RequireBf16(const char* family, DType t) {
  if (t == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(family, ": the CUDA backend supports dtype=bf16 only, got ", DTypeName(t)));
}

}  // namespace

absl::Status CacheWriteCuda(const CacheWriteParams& p, void* stream) {
  if (auto st = RequireBf16("cache_write", p.dtype); !st.ok()) return st;
  const bool vec = p.entry_dim % 8 == 0 && p.src_stride % 8 == 0 && Aligned(p.src) && Aligned(p.cache);
  const int64_t items = static_cast<int64_t>(p.num_tokens) * (vec ? p.entry_dim / 8 : p.entry_dim);
  const unsigned blocks = static_cast<unsigned>(std::min(kMaxBlocks, (items + kThreads - 1) / kThreads));
  const cuda::LaunchShape shape{dim3(blocks), dim3(kThreads), 0, static_cast<cudaStream_t>(stream)};
  return vec ? cuda::LaunchPdl("CacheWriteKernel", shape, CacheWriteKernel<8>, p)
             : cuda::LaunchPdl("CacheWriteKernel", shape, CacheWriteKernel<1>, p);
}

absl::Status CacheGatherCuda(const CacheGatherParams& p, void* stream) {
  if (auto st = RequireBf16("cache_gather", p.dtype); !st.ok()) return st;
  const bool vec = p.entry_dim % 8 == 0 && Aligned(p.cache) && Aligned(p.dst);
  const dim3 grid(kGatherBlocksPerSeq, static_cast<unsigned>(p.batch));
  const cuda::LaunchShape shape{grid, dim3(kThreads), 0, static_cast<cudaStream_t>(stream)};
  return vec ? cuda::LaunchPdl("CacheGatherKernel", shape, CacheGatherKernel<8>, p)
             : cuda::LaunchPdl("CacheGatherKernel", shape, CacheGatherKernel<1>, p);
}

}  // namespace mlaserve::kernels
