// KvPool: the paged latent KV cache of one model instance, and its page accounting.
//
// Layout: for every layer one buffer [num_pages, kPageSize, entry] where entry =
// kv_lora_rank + qk_rope_head_dim values of the pool's dtype (f32 on the CPU backend, bf16 on
// CUDA); DSA models have a second buffer per layer for the indexer keys [num_pages, kPageSize,
// index_head_dim]. A page id indexes every layer's buffers alike, so a request holds one list
// of page ids for all layers.
//
// With cache_format kFp8Ds the buffers hold DeepSeek's fp8 cache layouts instead
// (kernels/kv_fp8/api.h): the latent plane is [num_pages, kPageSize, 656 bytes] (512 e4m3 +
// 4 f32 scales + 64 bf16 rope; a model with a smaller kv_lora_rank / rope dim zero-pads into
// it), the indexer plane kPageSize * (index_dim + 4) bytes per page (e4m3 keys, then one f32
// scale per token). The pool only stores bytes; the engine quantizes and dequantizes.
//
// Page accounting is thread-safe (workers reserve from RPC threads). Page payloads are moved
// in "layer page" units: the bytes of one page of one layer (latent, then indexer keys).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/common/types.h"

namespace mlaserve::model {

// How a pool stores its pages. kNative: values of KvPoolOptions::dtype. kFp8Ds: DeepSeek's
// fp8 layouts of kernels/kv_fp8 (dtype is then the dtype of the rows the engine quantizes
// from and dequantizes to, not of the stored bytes).
enum class KvCacheFormat : uint8_t { kNative, kFp8Ds };
const char* KvCacheFormatName(KvCacheFormat f);  // "native" / "fp8_ds"

struct KvPoolOptions {
  kernels::Backend backend = kernels::Backend::kCpu;
  kernels::DType dtype = kernels::DType::kF32;
  KvCacheFormat cache_format = KvCacheFormat::kNative;
  int num_layers = 0;
  int num_pages = 0;
  int latent_dim = 0;   // kv_lora_rank + qk_rope_head_dim (kFp8Ds: <= 576)
  int index_dim = 0;    // index_head_dim for DSA models, else 0 (kFp8Ds: a multiple of 16)
};

class KvPool {
 public:
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(const KvPoolOptions& options);
  ~KvPool();

  const KvPoolOptions& options() const { return options_; }

  // Page accounting. Allocate fails with RESOURCE_EXHAUSTED (naming the counts) when fewer
  // than n pages are free; it never allocates part of a request.
  absl::StatusOr<std::vector<int32_t>> Allocate(int n);
  void Free(std::span<const int32_t> pages);
  int free_pages() const;
  int total_pages() const { return options_.num_pages; }

  // Device (or host, on the CPU backend) base pointers of a layer's buffers.
  void* latent(int layer) const { return latent_[layer]; }
  void* index_keys(int layer) const { return index_.empty() ? nullptr : index_[layer]; }

  // Bytes of one layer page (latent + indexer keys), and of each plane's share of it. Code
  // that moves pages (transports) must take sizes from here, never from latent_dim * dtype:
  // the fp8 format's bytes are not a whole number of elements.
  size_t layer_page_bytes() const;
  size_t latent_page_bytes() const;
  size_t index_page_bytes() const;
  // Copy one layer page to / from host memory (dst/src hold layer_page_bytes()).
  absl::Status ReadPage(int layer, int32_t page, void* host_dst) const;
  absl::Status WritePage(int layer, int32_t page, const void* host_src);

  // Tensor-parallel attention replicates the latent cache on every rank (docs/parallel.md):
  // the other ranks' pools, same options, registered here before serving starts, receive
  // every WritePage too (a KV import lands on every rank). Page accounting stays here.
  absl::Status AddReplica(KvPool* replica);

 private:
  explicit KvPool(const KvPoolOptions& options) : options_(options) {}
  KvPoolOptions options_;
  std::vector<void*> latent_;
  std::vector<void*> index_;
  std::vector<KvPool*> replicas_;  // set before use, then read-only
  mutable absl::Mutex mu_;
  std::vector<int32_t> free_list_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> in_use_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::model
