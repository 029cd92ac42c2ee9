// ResolveKvCacheFormat, the factory of LatentKvCache and the native format (latent_kv_cache.h).
#include "model/kv_cache/latent_kv_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/kv_cache/api.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/sparse_decode/api.h"
#include "model/kv_cache/fp8_latent_kv_cache.h"

namespace mlaserve::model {
namespace {

// The native (activation-dtype) cache: rows of `dim` values written at the plan's slots.
kernels::CacheWriteParams NativeCacheWrite(kernels::DType dtype, const BatchPlan& plan,
                                           const void* src, int dim, void* cache, int num_pages) {
  kernels::CacheWriteParams cw;
  cw.dtype = dtype;
  cw.num_tokens = plan.total_tokens;
  cw.entry_dim = dim;
  cw.src = src;
  cw.src_stride = dim;
  cw.slot_mapping = plan.dev.slots;
  cw.cache = cache;
  cw.num_pages = num_pages;
  return cw;
}

// kNative: rows of the activation dtype, written with CacheWrite and read in place.
class NativeLatentKvCache final : public LatentKvCache {
 public:
  explicit NativeLatentKvCache(const LatentKvCacheContext& context)
      : LatentKvCache(KvCacheFormat::kNative, context) {}

  bool ReadsNeedSparseForm() const override { return false; }
  size_t ScratchBytes() const override { return 0; }

  absl::Status WriteLatent(int layer, const BatchPlan& plan, const void* kv) override {
    const LatentKvCacheContext& x = context_;
    return kernels::CacheWrite(NativeCacheWrite(x.ops.dtype, plan, kv, x.dims.latent(),
                                                x.pool->latent(layer), num_pages()),
                               x.ops.kernel);
  }
  void* LatentRowsInPlace(int layer) override { return context_.pool->latent(layer); }
  absl::Status WriteIndexKeys(int layer, const BatchPlan& plan, const void* k) override {
    const LatentKvCacheContext& x = context_;
    return kernels::CacheWrite(NativeCacheWrite(x.ops.dtype, plan, k, x.index_key_dim,
                                                x.pool->index_keys(layer), num_pages()),
                               x.ops.kernel);
  }
  absl::Status RoundTripLatent(int, const BatchPlan&, void*) override { return absl::OkStatus(); }
  absl::StatusOr<const void*> LatentForRead(int layer, const BatchPlan&) override {
    return static_cast<const void*>(context_.pool->latent(layer));
  }
  absl::Status SetIndexKeysForRead(int layer, const BatchPlan&,
                                   kernels::IndexerParams* p) override {
    p->k_cache = context_.pool->index_keys(layer);
    return absl::OkStatus();
  }
  absl::Status SparseAttend(int layer, const BatchPlan& plan, kernels::SparseMlaParams p,
                            bool decode) override {
    ASSIGN_OR_RETURN(p.kv_cache, LatentForRead(layer, plan));
    const kernels::KernelContext& k = context_.ops.kernel;
    return decode ? kernels::SparseDecode(p, k) : kernels::SparseFwd(p, k);
  }
};

}  // namespace

absl::StatusOr<KvCacheFormat> ResolveKvCacheFormat(const EngineOptions& options,
                                                   const ModelConfig& c) {
  KvCacheDtype want = options.kv_cache_dtype;
  if (want == KvCacheDtype::kAuto) {
    want = c.has_indexer && options.backend == kernels::Backend::kCuda ? KvCacheDtype::kFp8
                                                                       : KvCacheDtype::kNative;
  }
  if (want == KvCacheDtype::kNative) return KvCacheFormat::kNative;
  if (!c.has_indexer) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-dtype fp8: model_type ", c.model_type_name,
                     " has no DSA indexer; the fp8 KV "
                     "cache (DeepSeek's 656-byte layout) is supported for deepseek_v32 only"));
  }
  const MlaDims d = StoredMlaDims(c);  // what the cache rows hold (model/mla_dims.h)
  if (d.rank > kernels::kFp8LatentRank || d.rope > kernels::kFp8RopeDim ||
      (d.rank < kernels::kFp8LatentRank && d.latent() > kernels::kFp8LatentRank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype fp8: kv_lora_rank ", c.kv_lora_rank, " and qk_rope_head_dim ",
        c.qk_rope_head_dim, " do not fit the fp8 layout (512 latent + 64 rope values)"));
  }
  return KvCacheFormat::kFp8Ds;
}

absl::StatusOr<std::unique_ptr<LatentKvCache>> LatentKvCache::Create(
    KvCacheFormat format, const LatentKvCacheContext& context) {
  if (format == KvCacheFormat::kFp8Ds) return CreateFp8LatentKvCache(context);
  return std::unique_ptr<LatentKvCache>(new NativeLatentKvCache(context));
}

}  // namespace mlaserve::model
