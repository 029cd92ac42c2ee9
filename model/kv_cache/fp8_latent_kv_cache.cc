// LatentKvCache in DeepSeek's fp8 layouts (latent_kv_cache.h).
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
#include "model/kv_cache/fp8_latent_kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/api.h"

namespace mlaserve::model {
namespace {

constexpr int kFp8Row = kernels::kFp8LatentRank + kernels::kFp8RopeDim;  // 576

absl::StatusOr<DeviceBuffer> ZeroedBuffer(kernels::Backend backend, size_t bytes) {
  const std::vector<uint8_t> zeros(bytes, 0);
  return DeviceBuffer::FromHost(backend, zeros.data(), bytes);
}

// kCpu: *slots = the kPageSize slots of `page` (a dequantizing read covers one page).
void PageSlots(int32_t page, std::vector<int64_t>* slots) {
  for (int i = 0; i < kernels::kPageSize; ++i) (*slots)[i] = int64_t{page} * kernels::kPageSize + i;
}

class Fp8LatentKvCache final : public LatentKvCache {
 public:
  explicit Fp8LatentKvCache(const LatentKvCacheContext& context)
      : LatentKvCache(KvCacheFormat::kFp8Ds, context),
        padded_(context.dims.rank != kernels::kFp8LatentRank ||
                context.dims.rope != kernels::kFp8RopeDim) {}

  // The buffers of Create (see the members).
  absl::Status Init();

  bool ReadsNeedSparseForm() const override { return true; }
  size_t ScratchBytes() const override {
    // Zero-padded model on kCuda: sparse attention's 512-wide output (SparseAttend).
    if (!padded_) return 0;
    return static_cast<size_t>(context_.max_batch_tokens) * context_.heads *
           kernels::kFp8LatentRank * context_.ops.elem();
  }
  absl::Status WriteLatent(int layer, const BatchPlan& plan, const void* kv) override;
  absl::Status WriteIndexKeys(int layer, const BatchPlan& plan, const void* k) override;
  absl::Status RoundTripLatent(int layer, const BatchPlan& plan, void* kv) override;
  absl::StatusOr<const void*> LatentForRead(int layer, const BatchPlan& plan) override;
  absl::Status SetIndexKeysForRead(int layer, const BatchPlan& plan,
                                   kernels::IndexerParams* p) override;
  absl::Status SparseAttend(int layer, const BatchPlan& plan, kernels::SparseMlaParams p,
                            bool decode) override;

 private:
  bool cpu() const { return context_.ops.kernel.backend == kernels::Backend::kCpu; }

  // The model's latent is narrower than the layout's 512 + 64: rows are zero-padded through
  // rows_ ([max_batch_tokens, 576], the padding columns always zero) and, on kCuda, queries
  // through q_ ([max_batch_tokens * heads, 576]).
  const bool padded_;
  DeviceBuffer rows_;
  DeviceBuffer q_;
  // kCpu: f32 images of the pool's pages as dequantized for the current read, and one page
  // of 576-wide rows.
  DeviceBuffer latent_view_;
  DeviceBuffer index_view_;
  std::vector<float> page_rows_;
};

absl::Status Fp8LatentKvCache::Init() {
  const LatentKvCacheContext& x = context_;
  if (x.index_key_dim % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-dtype fp8: index_head_dim ", x.index_key_dim,
                     " is not a multiple of 16, which the fp8 indexer key layout needs"));
  }
  const kernels::Backend backend = x.ops.kernel.backend;
  const size_t es = x.ops.elem();
  const size_t T = x.max_batch_tokens;
  if (padded_) {
    ASSIGN_OR_RETURN(rows_, ZeroedBuffer(backend, T * kFp8Row * es));
    if (backend == kernels::Backend::kCuda) {
      ASSIGN_OR_RETURN(q_, ZeroedBuffer(backend, T * x.heads * kFp8Row * es));
    }
  }
  if (backend == kernels::Backend::kCpu) {
    const size_t slots = static_cast<size_t>(num_pages()) * kernels::kPageSize;
    ASSIGN_OR_RETURN(latent_view_, ZeroedBuffer(backend, slots * x.dims.latent() * sizeof(float)));
    ASSIGN_OR_RETURN(index_view_, ZeroedBuffer(backend, slots * x.index_key_dim * sizeof(float)));
    page_rows_.assign(static_cast<size_t>(kernels::kPageSize) * kFp8Row, 0.0f);
  }
  return absl::OkStatus();
}

absl::Status Fp8LatentKvCache::WriteLatent(int layer, const BatchPlan& plan, const void* kv) {
  const ops::OpContext& ops = context_.ops;
  const MlaDims& d = context_.dims;
  const int T = plan.total_tokens;
  const void* src = kv;
  if (padded_) {  // rows_ keeps zeros outside [0, L) and [512, 512 + rope)
    RETURN_IF_ERROR(ops::Copy2D(ops, rows_.data(), kFp8Row, kv, d.latent(), d.rank, T));
    RETURN_IF_ERROR(ops::Copy2D(ops, ops.at(rows_.data(), kernels::kFp8LatentRank), kFp8Row,
                                ops.at(kv, d.rank), d.latent(), d.rope, T));
    src = rows_.data();
  }
  kernels::Fp8CacheWriteParams w;
  w.kind = kernels::Fp8CacheKind::kLatent;
  w.dtype = ops.dtype;
  w.num_tokens = T;
  w.src = src;
  w.src_stride = kFp8Row;
  w.slot_mapping = plan.dev.slots;
  w.cache = context_.pool->latent(layer);
  w.num_pages = num_pages();
  return kernels::Fp8CacheWrite(w, ops.kernel);
}

absl::Status Fp8LatentKvCache::RoundTripLatent(int layer, const BatchPlan& plan, void* kv) {
  const ops::OpContext& ops = context_.ops;
  const MlaDims& d = context_.dims;
  const int T = plan.total_tokens;
  // Dequantizing writes zeros into rows_'s padding columns, so they stay zero.
  kernels::Fp8CacheReadParams r;
  r.kind = kernels::Fp8CacheKind::kLatent;
  r.dtype = ops.dtype;
  r.num_tokens = T;
  r.cache = context_.pool->latent(layer);
  r.num_pages = num_pages();
  r.slot_mapping = plan.dev.slots;
  r.dst = padded_ ? rows_.data() : kv;
  r.dst_stride = kFp8Row;
  RETURN_IF_ERROR(kernels::Fp8CacheRead(r, ops.kernel));
  if (!padded_) return absl::OkStatus();
  RETURN_IF_ERROR(ops::Copy2D(ops, kv, d.latent(), rows_.data(), kFp8Row, d.rank, T));
  return ops::Copy2D(ops, ops.at(kv, d.rank), d.latent(),
                     ops.at(rows_.data(), kernels::kFp8LatentRank), kFp8Row, d.rope, T);
}

absl::StatusOr<const void*> Fp8LatentKvCache::LatentForRead(int layer, const BatchPlan& plan) {
  if (!cpu()) {
    return absl::InternalError(
        "fp8 KV cache on CUDA: a dense read of the latent cache was planned; Forward runs every "
        "batch that reads cached latents in sparse form");
  }
  const int E = context_.dims.latent();
  const int L = context_.dims.rank;
  const int dr = context_.dims.rope;
  float* view = latent_view_.as<float>();
  std::vector<int64_t> slots(kernels::kPageSize);
  for (int32_t page : ReferencedPages(plan, num_pages())) {
    PageSlots(page, &slots);
    float* dst = view + static_cast<size_t>(page) * kernels::kPageSize * E;
    kernels::Fp8CacheReadParams r;
    r.kind = kernels::Fp8CacheKind::kLatent;
    r.dtype = kernels::DType::kF32;
    r.num_tokens = kernels::kPageSize;
    r.cache = context_.pool->latent(layer);
    r.num_pages = num_pages();
    r.slot_mapping = slots.data();
    r.dst = padded_ ? page_rows_.data() : dst;
    r.dst_stride = kFp8Row;
    RETURN_IF_ERROR(kernels::Fp8CacheRead(r, context_.ops.kernel));
    if (!padded_) continue;
    for (int i = 0; i < kernels::kPageSize; ++i) {
      const float* row = page_rows_.data() + static_cast<size_t>(i) * kFp8Row;
      std::copy_n(row, L, dst + static_cast<size_t>(i) * E);
      std::copy_n(row + kernels::kFp8LatentRank, dr, dst + static_cast<size_t>(i) * E + L);
    }
  }
  return static_cast<const void*>(view);
}

absl::Status Fp8LatentKvCache::WriteIndexKeys(int layer, const BatchPlan& plan, const void* k) {
  kernels::Fp8CacheWriteParams w;
  w.kind = kernels::Fp8CacheKind::kIndexK;
  w.dtype = context_.ops.dtype;
  w.num_tokens = plan.total_tokens;
  w.head_dim = context_.index_key_dim;
  w.src = k;
  w.src_stride = context_.index_key_dim;
  w.slot_mapping = plan.dev.slots;
  w.cache = context_.pool->index_keys(layer);
  w.num_pages = num_pages();
  return kernels::Fp8CacheWrite(w, context_.ops.kernel);
}

absl::Status Fp8LatentKvCache::SetIndexKeysForRead(int layer, const BatchPlan& plan,
                                                   kernels::IndexerParams* p) {
  p->k_cache = context_.pool->index_keys(layer);
  if (!cpu()) {
    p->k_cache_dtype = kernels::DType::kFP8E4M3;  // the CUDA indexer reads fp8 keys itself
    return absl::OkStatus();
  }
  const int dk = context_.index_key_dim;
  float* view = index_view_.as<float>();
  std::vector<int64_t> slots(kernels::kPageSize);
  for (int32_t page : ReferencedPages(plan, num_pages())) {
    PageSlots(page, &slots);
    kernels::Fp8CacheReadParams r;
    r.kind = kernels::Fp8CacheKind::kIndexK;
    r.dtype = kernels::DType::kF32;
    r.num_tokens = kernels::kPageSize;
    r.head_dim = dk;
    r.cache = context_.pool->index_keys(layer);
    r.num_pages = num_pages();
    r.slot_mapping = slots.data();
    r.dst = view + static_cast<size_t>(page) * kernels::kPageSize * dk;
    r.dst_stride = dk;
    RETURN_IF_ERROR(kernels::Fp8CacheRead(r, context_.ops.kernel));
  }
  p->k_cache = view;
  return absl::OkStatus();
}

absl::Status Fp8LatentKvCache::SparseAttend(int layer, const BatchPlan& plan,
                                            kernels::SparseMlaParams p, bool decode) {
  const ops::OpContext& ops = context_.ops;
  auto run = [&](const kernels::SparseMlaParams& q) {
    return decode ? kernels::SparseDecode(q, ops.kernel) : kernels::SparseFwd(q, ops.kernel);
  };
  if (cpu()) {  // over the dequantized view, at the activation dtype (set by the caller)
    ASSIGN_OR_RETURN(p.kv_cache, LatentForRead(layer, plan));
    return run(p);
  }
  const int L = context_.dims.rank;
  const int dr = context_.dims.rope;
  const int E = context_.dims.latent();
  const int64_t rows = static_cast<int64_t>(plan.total_tokens) * context_.heads;
  p.cache_dtype = kernels::DType::kFP8E4M3;
  p.kv_cache = context_.pool->latent(layer);
  if (!padded_) return run(p);
  // Zero-padded to the layout's 512 + 64: q into q_ (its padding stays zero), the output
  // through a 512-wide scratch whose first L columns are the answer.
  ScratchScope scope(context_.scratch->arena());
  void* out = p.out;
  RETURN_IF_ERROR(ops::Copy2D(ops, q_.data(), kFp8Row, p.q, E, L, rows));
  RETURN_IF_ERROR(ops::Copy2D(ops, ops.at(q_.data(), kernels::kFp8LatentRank), kFp8Row,
                              ops.at(p.q, L), E, dr, rows));
  ASSIGN_OR_RETURN(void* wide, context_.scratch->Activations(rows * kernels::kFp8LatentRank,
                                                             "fp8 sparse output"));
  p.q = q_.data();
  p.q_head_stride = kFp8Row;
  p.q_token_stride = static_cast<int64_t>(context_.heads) * kFp8Row;
  p.kv_lora_rank = kernels::kFp8LatentRank;
  p.rope_dim = kernels::kFp8RopeDim;
  p.out = wide;
  RETURN_IF_ERROR(run(p));
  return ops::Copy2D(ops, out, L, wide, kernels::kFp8LatentRank, L, rows);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LatentKvCache>> CreateFp8LatentKvCache(
    const LatentKvCacheContext& context) {
  auto cache = std::make_unique<Fp8LatentKvCache>(context);
  RETURN_IF_ERROR(cache->Init());
  return std::unique_ptr<LatentKvCache>(std::move(cache));
}

}  // namespace mlaserve::model
