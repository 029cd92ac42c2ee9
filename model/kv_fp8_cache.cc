// DeepseekEngine over the KV pool's two storage formats: the cache writes, and what attention
// and the indexer read. See deepseek_model.h ("KV cache formats").
//
// kNative: rows of the activation dtype are copied into the pool and kernels read it in place.
//
// kFp8Ds (DeepSeek's layouts, kernels/kv_fp8): the writer quantizes every new token's latent
// row (512 e4m3 + 4 power-of-two scales + 64 bf16 rope) and indexer key (e4m3 + one scale).
// Every value a kernel reads afterwards is the dequantized one, including the chunk's own keys
// in the MHA form (RoundTripLatent), so a prompt prefilled in chunks sees exactly the keys a
// one-shot prefill sees. Readers:
//   kCuda: sparse_fwd / sparse_decode take the fp8 latent cache and the indexer the fp8 keys
//          directly (FlashMLA-style dequantization on load). The dense absorbed kernels
//          (mla_prefill / mla_decode) and the MHA prefix gather have no fp8 input, so Forward
//          runs every batch that reads cached latents in sparse form (with fewer cached tokens
//          than index_topk the indexer lists all of them and sparse equals dense).
//   kCpu:  the CPU kernels take no fp8 input: before a read, the pages the batch references
//          are dequantized (kv_fp8's dequantizer) into f32 views shaped like the pool, which
//          the kernels read through the batch's own block table.
// A model whose kv_lora_rank / rope dim are below 512 / 64 (the test fixtures) zero-pads into
// the 656-byte entry: the latent at [0, L), its rope at [512, 512 + rope). A zero tail leaves
// the 128-value block scales, the dot products and the (discarded) extra output columns exact.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/kv_cache/api.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/api.h"
#include "model/deepseek_model.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

constexpr int kFp8Row = kernels::kFp8LatentRank + kernels::kFp8RopeDim;  // 576

absl::StatusOr<DeviceBuffer> ZeroedBuffer(kernels::Backend backend, size_t bytes) {
  const std::vector<uint8_t> zeros(bytes, 0);
  return DeviceBuffer::FromHost(backend, zeros.data(), bytes);
}

// The native (activation-dtype) cache: rows of `dim` values written at the plan's slots.
kernels::CacheWriteParams NativeCacheWrite(kernels::DType dtype, const BatchPlan& plan,
                                           const void* src, int dim, void* cache,
                                           int num_pages) {
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

}  // namespace

absl::StatusOr<KvCacheFormat> DeepseekEngine::ResolveCacheFormat(const EngineOptions& options,
                                                                 const ModelConfig& c) {
  KvCacheDtype want = options.kv_cache_dtype;
  if (want == KvCacheDtype::kAuto) {
    want = c.has_indexer && options.backend == kernels::Backend::kCuda ? KvCacheDtype::kFp8
                                                                       : KvCacheDtype::kNative;
  }
  if (want == KvCacheDtype::kNative) return KvCacheFormat::kNative;
  if (!c.has_indexer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype fp8: model_type ", c.model_type_name, " has no DSA indexer; the fp8 KV "
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

absl::Status DeepseekEngine::InitFp8Cache() {
  const ModelConfig& c = config_;
  kv_fp8_ = true;
  fp8_padded_ = dims_.rank != kernels::kFp8LatentRank || dims_.rope != kernels::kFp8RopeDim;
  if (index_key_dim_ % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype fp8: index_head_dim ", c.index_head_dim,
        " is not a multiple of 16, which the fp8 indexer key layout needs"));
  }
  const kernels::Backend backend = options_.backend;
  const size_t es = ops_.elem();
  const size_t T = options_.max_batch_tokens;
  if (fp8_padded_) {
    ASSIGN_OR_RETURN(fp8_rows_, ZeroedBuffer(backend, T * kFp8Row * es));
    if (backend == kernels::Backend::kCuda) {
      ASSIGN_OR_RETURN(fp8_q_, ZeroedBuffer(backend, T * attn_heads_ * kFp8Row * es));
    }
  }
  if (backend == kernels::Backend::kCpu) {
    const size_t slots = static_cast<size_t>(options_.num_kv_pages) * kernels::kPageSize;
    ASSIGN_OR_RETURN(latent_view_, ZeroedBuffer(backend, slots * dims_.latent() * sizeof(float)));
    ASSIGN_OR_RETURN(index_view_, ZeroedBuffer(backend, slots * index_key_dim_ * sizeof(float)));
    page_rows_.assign(static_cast<size_t>(kernels::kPageSize) * kFp8Row, 0.0f);
  }
  return absl::OkStatus();
}

absl::Status DeepseekEngine::WriteLatentCache(int layer, const BatchPlan& plan, const void* kv) {
  const int T = plan.total_tokens;
  const int E = dims_.latent();
  if (!kv_fp8_) {
    return kernels::CacheWrite(
        NativeCacheWrite(ops_.dtype, plan, kv, E, pool_->latent(layer), pool_->total_pages()),
        ctx_);
  }
  const void* src = kv;
  if (fp8_padded_) {  // fp8_rows_ keeps zeros outside [0, L) and [512, 512 + rope)
    RETURN_IF_ERROR(ops::Copy2D(ops_, fp8_rows_.data(), kFp8Row, kv, E, dims_.rank, T));
    RETURN_IF_ERROR(ops::Copy2D(ops_, ops_.at(fp8_rows_.data(), kernels::kFp8LatentRank), kFp8Row,
                                ops_.at(kv, dims_.rank), E, dims_.rope, T));
    src = fp8_rows_.data();
  }
  kernels::Fp8CacheWriteParams w;
  w.kind = kernels::Fp8CacheKind::kLatent;
  w.dtype = ops_.dtype;
  w.num_tokens = T;
  w.src = src;
  w.src_stride = kFp8Row;
  w.slot_mapping = plan.dev.slots;
  w.cache = pool_->latent(layer);
  w.num_pages = pool_->total_pages();
  return kernels::Fp8CacheWrite(w, ctx_);
}

absl::Status DeepseekEngine::RoundTripLatent(int layer, const BatchPlan& plan, void* kv) {
  if (!kv_fp8_) return absl::OkStatus();
  const int T = plan.total_tokens;
  const int E = dims_.latent();
  // Dequantizing writes zeros into fp8_rows_'s padding columns, so they stay zero.
  kernels::Fp8CacheReadParams r;
  r.kind = kernels::Fp8CacheKind::kLatent;
  r.dtype = ops_.dtype;
  r.num_tokens = T;
  r.cache = pool_->latent(layer);
  r.num_pages = pool_->total_pages();
  r.slot_mapping = plan.dev.slots;
  r.dst = fp8_padded_ ? fp8_rows_.data() : kv;
  r.dst_stride = kFp8Row;
  RETURN_IF_ERROR(kernels::Fp8CacheRead(r, ctx_));
  if (!fp8_padded_) return absl::OkStatus();
  RETURN_IF_ERROR(ops::Copy2D(ops_, kv, E, fp8_rows_.data(), kFp8Row, dims_.rank, T));
  return ops::Copy2D(ops_, ops_.at(kv, dims_.rank), E,
                     ops_.at(fp8_rows_.data(), kernels::kFp8LatentRank), kFp8Row, dims_.rope, T);
}

std::vector<int32_t> DeepseekEngine::ReferencedPages(const BatchPlan& plan) const {
  std::vector<uint8_t> seen(pool_->total_pages(), 0);
  std::vector<int32_t> pages;
  for (int b = 0; b < plan.batch; ++b) {
    const int n = kernels::PagesFor(plan.seqlens_k[b]);
    for (int i = 0; i < n; ++i) {
      const int32_t p = plan.block_table[static_cast<size_t>(b) * plan.max_pages_per_seq + i];
      if (p >= 0 && !seen[p]) {
        seen[p] = 1;
        pages.push_back(p);
      }
    }
  }
  return pages;
}

absl::StatusOr<const void*> DeepseekEngine::LatentCacheForRead(int layer, const BatchPlan& plan) {
  if (!kv_fp8_) return static_cast<const void*>(pool_->latent(layer));
  if (ctx_.backend != kernels::Backend::kCpu) {
    return absl::InternalError(
        "fp8 KV cache on CUDA: a dense read of the latent cache was planned; Forward runs every "
        "batch that reads cached latents in sparse form");
  }
  const int E = dims_.latent();
  const int L = dims_.rank;
  const int dr = dims_.rope;
  float* view = latent_view_.as<float>();
  std::vector<int64_t> slots(kernels::kPageSize);
  for (int32_t page : ReferencedPages(plan)) {
    for (int i = 0; i < kernels::kPageSize; ++i) slots[i] = int64_t{page} * kernels::kPageSize + i;
    float* dst = view + static_cast<size_t>(page) * kernels::kPageSize * E;
    kernels::Fp8CacheReadParams r;
    r.kind = kernels::Fp8CacheKind::kLatent;
    r.dtype = kernels::DType::kF32;
    r.num_tokens = kernels::kPageSize;
    r.cache = pool_->latent(layer);
    r.num_pages = pool_->total_pages();
    r.slot_mapping = slots.data();
    r.dst = fp8_padded_ ? page_rows_.data() : dst;
    r.dst_stride = kFp8Row;
    RETURN_IF_ERROR(kernels::Fp8CacheRead(r, ctx_));
    if (!fp8_padded_) continue;
    for (int i = 0; i < kernels::kPageSize; ++i) {
      const float* row = page_rows_.data() + static_cast<size_t>(i) * kFp8Row;
      std::copy_n(row, L, dst + static_cast<size_t>(i) * E);
      std::copy_n(row + kernels::kFp8LatentRank, dr, dst + static_cast<size_t>(i) * E + L);
    }
  }
  return static_cast<const void*>(view);
}

absl::Status DeepseekEngine::WriteIndexKeys(int layer, const BatchPlan& plan, const void* k) {
  const int T = plan.total_tokens;
  if (!kv_fp8_) {
    return kernels::CacheWrite(NativeCacheWrite(ops_.dtype, plan, k, index_key_dim_,
                                                pool_->index_keys(layer), pool_->total_pages()),
                               ctx_);
  }
  kernels::Fp8CacheWriteParams w;
  w.kind = kernels::Fp8CacheKind::kIndexK;
  w.dtype = ops_.dtype;
  w.num_tokens = T;
  w.head_dim = index_key_dim_;
  w.src = k;
  w.src_stride = index_key_dim_;
  w.slot_mapping = plan.dev.slots;
  w.cache = pool_->index_keys(layer);
  w.num_pages = pool_->total_pages();
  return kernels::Fp8CacheWrite(w, ctx_);
}

absl::Status DeepseekEngine::SetIndexKeysForRead(int layer, const BatchPlan& plan,
                                                 kernels::IndexerParams* p) {
  p->k_cache = pool_->index_keys(layer);
  if (!kv_fp8_) return absl::OkStatus();
  if (ctx_.backend != kernels::Backend::kCpu) {
    p->k_cache_dtype = kernels::DType::kFP8E4M3;  // the CUDA indexer reads fp8 keys itself
    return absl::OkStatus();
  }
  const int dk = index_key_dim_;
  float* view = index_view_.as<float>();
  std::vector<int64_t> slots(kernels::kPageSize);
  for (int32_t page : ReferencedPages(plan)) {
    for (int i = 0; i < kernels::kPageSize; ++i) slots[i] = int64_t{page} * kernels::kPageSize + i;
    kernels::Fp8CacheReadParams r;
    r.kind = kernels::Fp8CacheKind::kIndexK;
    r.dtype = kernels::DType::kF32;
    r.num_tokens = kernels::kPageSize;
    r.head_dim = dk;
    r.cache = pool_->index_keys(layer);
    r.num_pages = pool_->total_pages();
    r.slot_mapping = slots.data();
    r.dst = view + static_cast<size_t>(page) * kernels::kPageSize * dk;
    r.dst_stride = dk;
    RETURN_IF_ERROR(kernels::Fp8CacheRead(r, ctx_));
  }
  p->k_cache = view;
  return absl::OkStatus();
}

absl::Status DeepseekEngine::SparseAttendFp8Cuda(int layer, const BatchPlan& plan,
                                                 kernels::SparseMlaParams p, bool decode) {
  const int L = dims_.rank;
  const int dr = dims_.rope;
  const int E = dims_.latent();
  const int64_t rows = static_cast<int64_t>(plan.total_tokens) * attn_heads_;
  p.cache_dtype = kernels::DType::kFP8E4M3;
  p.kv_cache = pool_->latent(layer);
  if (!fp8_padded_) {
    return decode ? kernels::SparseDecode(p, ctx_) : kernels::SparseFwd(p, ctx_);
  }
  // Zero-padded to the layout's 512 + 64: q into fp8_q_ (its padding stays zero), the output
  // through a 512-wide scratch whose first L columns are the answer.
  ScratchScope scope(scratch_);
  void* out = p.out;
  RETURN_IF_ERROR(ops::Copy2D(ops_, fp8_q_.data(), kFp8Row, p.q, E, L, rows));
  RETURN_IF_ERROR(ops::Copy2D(ops_, ops_.at(fp8_q_.data(), kernels::kFp8LatentRank), kFp8Row,
                              ops_.at(p.q, L), E, dr, rows));
  ASSIGN_OR_RETURN(void* wide, ScratchAct(rows * kernels::kFp8LatentRank, "fp8 sparse output"));
  p.q = fp8_q_.data();
  p.q_head_stride = kFp8Row;
  p.q_token_stride = static_cast<int64_t>(attn_heads_) * kFp8Row;
  p.kv_lora_rank = kernels::kFp8LatentRank;
  p.rope_dim = kernels::kFp8RopeDim;
  p.out = wide;
  RETURN_IF_ERROR(decode ? kernels::SparseDecode(p, ctx_) : kernels::SparseFwd(p, ctx_));
  return ops::Copy2D(ops_, out, L, wide, kernels::kFp8LatentRank, L, rows);
}

}  // namespace mlaserve::model
