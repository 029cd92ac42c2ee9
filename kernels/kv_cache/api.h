// kv_cache: write rows into, and gather rows out of, a paged cache.
//
// A paged cache is one buffer per layer: [num_pages, kPageSize, entry_dim]. For the latent
// KV cache entry_dim = kv_lora_rank + qk_rope_head_dim (576 for DeepSeek: normalised latent,
// then the roped shared key); for the V3.2 indexer key cache entry_dim = index_head_dim.
// A token at position pos of a sequence lives at slot = block_table[pos / kPageSize] *
// kPageSize + pos % kPageSize.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

// cache[slot_mapping[t]] = src[t] for every t (slot < 0: skip, used for padding).
struct CacheWriteParams {
  DType dtype = DType::kF32;  // of src and cache
  int num_tokens = 0;
  int entry_dim = 0;
  const void* src = nullptr;  // [num_tokens, entry_dim], row stride src_stride
  int64_t src_stride = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  void* cache = nullptr;      // [num_pages, kPageSize, entry_dim]
  int num_pages = 0;
};

// dst[cu_dst[b] + i] = cache[slot of position start[b] + i of sequence b], i < len[b].
struct CacheGatherParams {
  DType dtype = DType::kF32;
  int batch = 0;
  int entry_dim = 0;
  const void* cache = nullptr;          // [num_pages, kPageSize, entry_dim]
  int num_pages = 0;
  const int32_t* block_table = nullptr; // [batch, max_pages_per_seq]
  int max_pages_per_seq = 0;
  const int32_t* start = nullptr;       // [batch] first position to gather
  const int32_t* len = nullptr;         // [batch]
  const int32_t* cu_dst = nullptr;      // [batch + 1] row offsets into dst
  void* dst = nullptr;                  // [cu_dst[batch], entry_dim] contiguous
};

absl::Status CacheWrite(const CacheWriteParams& p, const KernelContext& ctx);
absl::Status CacheWriteCpu(const CacheWriteParams& p);
absl::Status CacheWriteCuda(const CacheWriteParams& p, void* stream);

absl::Status CacheGather(const CacheGatherParams& p, const KernelContext& ctx);
absl::Status CacheGatherCpu(const CacheGatherParams& p);
absl::Status CacheGatherCuda(const CacheGatherParams& p, void* stream);

}  // namespace mlaserve::kernels
