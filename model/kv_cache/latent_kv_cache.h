// LatentKvCache: the KV cache of the DeepSeek forward in one storage format, as a step writes
// it and as the attention and indexer kernels read it back. The bytes live in the KvPool (per
// layer one latent buffer and, for DSA models, one indexer-key buffer; model/kv_pool.h); this
// class is the format: how new tokens go in, and what a kernel is pointed at to read.
//
// Formats (EngineOptions::kv_cache_dtype, resolved by ResolveKvCacheFormat):
//   kNative: rows of the activation dtype (bf16 on kCuda, f32 on kCpu) are copied in at the
//            plan's slots, and kernels read the pool in place (latent_kv_cache.cc).
//   kFp8Ds:  DeepSeek's layouts (kernels/kv_fp8, FlashMLA's V3.2 format; deepseek_v32 only):
//            656-byte latent entries and fp8 indexer keys, written by kv_fp8's quantizer.
//            Every value a kernel reads afterwards is the dequantized one (fp8_latent_kv_cache.cc
//            says how each backend reads it).
//
// Contract with the attention forms: when ReadsNeedSparseForm() is true, a batch that reads
// cached latents (a cached prefix, or the MLA form) must attend in sparse form, since only the
// sparse kernels read this format (AttentionForms enforces it); LatentForRead may then refuse
// a dense read on kCuda.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/indexer/api.h"
#include "kernels/sparse_fwd/api.h"
#include "model/engine.h"
#include "model/forward_ops.h"
#include "model/kv_pool.h"
#include "model/loader/config.h"
#include "model/mla_dims.h"
#include "model/step/batch_plan.h"
#include "model/step/step_scratch.h"

namespace mlaserve::model {

// The cache format for `options` and the model: INVALID_ARGUMENT naming the model type when fp8
// is asked of a model without an indexer, or the widths when they exceed the fp8 layout.
absl::StatusOr<KvCacheFormat> ResolveKvCacheFormat(const EngineOptions& options,
                                                   const ModelConfig& c);

// What a cache format needs to know of the engine. Pointers are not owned and outlive the cache.
struct LatentKvCacheContext {
  ops::OpContext ops;              // backend, stream, activation dtype
  KvPool* pool = nullptr;          // the pages
  StepScratch* scratch = nullptr;  // the step's scratch
  MlaDims dims;                    // a latent row is [rank | rope] at the stored widths
  int index_key_dim = 0;           // DSA: an indexer key as stored (0 without an indexer)
  int heads = 0;                   // attention heads of this rank
  int max_batch_tokens = 0;
};

class LatentKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<LatentKvCache>> Create(KvCacheFormat format,
                                                               const LatentKvCacheContext& context);
  virtual ~LatentKvCache() = default;

  KvCacheFormat format() const { return format_; }
  int num_pages() const { return context_.pool->total_pages(); }
  // Whether only the sparse kernels read this format (see the contract above).
  virtual bool ReadsNeedSparseForm() const = 0;
  // Step scratch the format takes at most (StepScratch sizing).
  virtual size_t ScratchBytes() const = 0;

  // The new tokens' latent rows kv [T, latent] / indexer keys k [T, index_key_dim] into the
  // layer's pages at plan.dev.slots (slot -1 writes nothing).
  virtual absl::Status WriteLatent(int layer, const BatchPlan& plan, const void* kv) = 0;
  // Where WriteLatent puts the rows when the format stores them as they are (kNative): the
  // layer's cache, so the kernel that finishes the rows stores them itself in the same launch
  // (rope's fused cache store, MlaAttention) instead of WriteLatent. Null for a format that
  // converts them (fp8): call WriteLatent.
  virtual void* LatentRowsInPlace(int layer) { return nullptr; }
  virtual absl::Status WriteIndexKeys(int layer, const BatchPlan& plan, const void* k) = 0;
  // Replaces kv [T, latent] by what the cache now holds for those tokens, so the MHA form
  // attends its own keys as later chunks will see them. No-op for the native cache.
  virtual absl::Status RoundTripLatent(int layer, const BatchPlan& plan, void* kv) = 0;
  // The layer's latent cache as a dense kernel reads it through plan.dev.block_table.
  virtual absl::StatusOr<const void*> LatentForRead(int layer, const BatchPlan& plan) = 0;
  // Points p->k_cache (and k_cache_dtype) at the layer's indexer keys as the indexer reads them.
  virtual absl::Status SetIndexKeysForRead(int layer, const BatchPlan& plan,
                                           kernels::IndexerParams* p) = 0;
  // sparse_fwd (or sparse_decode when `decode`) of `p` (every field but the cache set) over the
  // layer's latent cache.
  virtual absl::Status SparseAttend(int layer, const BatchPlan& plan, kernels::SparseMlaParams p,
                                    bool decode) = 0;

 protected:
  LatentKvCache(KvCacheFormat format, const LatentKvCacheContext& context)
      : format_(format), context_(context) {}

  const KvCacheFormat format_;
  const LatentKvCacheContext context_;
};

}  // namespace mlaserve::model
