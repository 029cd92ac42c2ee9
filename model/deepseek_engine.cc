// DeepseekEngine: creation (composing its parts), Forward (plan -> step -> sample) and the
// layer loop.
#include "model/deepseek_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/embedding/api.h"
#include "kernels/gemm/api.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mla_prefill/api.h"
#include "model/forward_ops.h"
#include "model/loader/weight_store.h"

namespace mlaserve::model {

absl::StatusOr<std::unique_ptr<DeepseekEngine>> DeepseekEngine::Create(
    const EngineOptions& options) {
  if (options.num_kv_pages <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_kv_pages is ", options.num_kv_pages, "; it must be positive"));
  }
  if (options.max_batch_tokens <= 0 || options.max_batch_seqs <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_tokens is ", options.max_batch_tokens, " and max_batch_seqs is ",
        options.max_batch_seqs, "; both must be positive"));
  }
  RETURN_IF_ERROR(kernels::CheckMhaPrefillProvider(options.mha_provider, options.backend));
  std::unique_ptr<DeepseekEngine> e(new DeepseekEngine());
  e->options_ = options;
  ASSIGN_OR_RETURN(e->config_, LoadModelConfig(options.model_dir));
  const ModelConfig& c = e->config_;
  const bool cuda = options.backend == kernels::Backend::kCuda;
  if (c.has_indexer) {
    if (!c.q_lora_rank.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: model_type ", c.model_type_name, " has an indexer but no q_lora_rank; the "
          "indexer's queries are projected from the q LoRA residual"));
    }
    e->index_key_dim_ = c.index_head_dim;
    if (cuda) {
      // The CUDA indexer kernel takes key widths 64 and 128, <= 64 heads and top-k <= 4096.
      if (c.index_head_dim > 128 || c.index_n_heads > 64 || c.index_topk > 4096) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: index_head_dim ", c.index_head_dim, ", index_n_heads ", c.index_n_heads,
            ", index_topk ", c.index_topk, "; the CUDA indexer takes head_dim <= 128, <= 64 heads "
            "and top-k <= 4096"));
      }
      e->index_key_dim_ = c.index_head_dim <= 64 ? 64 : 128;
    }
  }
  ASSIGN_OR_RETURN(const KvCacheFormat cache_format, ResolveKvCacheFormat(options, c));
  RETURN_IF_ERROR(UseDevice(options.backend, options.device));
  ASSIGN_OR_RETURN(e->num_sms_, MultiprocessorCount(options.backend, options.device));
  ASSIGN_OR_RETURN(e->stream_, Stream::Create(options.backend));
  e->ctx_.backend = options.backend;
  e->ctx_.device = options.device;
  e->ctx_.stream = e->stream_.get();
  e->ops_.kernel = e->ctx_;
  e->ops_.dtype = StorageDType(options.backend);
  if (c.hidden_act != "silu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: hidden_act '", c.hidden_act, "' is not supported (DeepSeek uses silu)"));
  }
  if (c.num_key_value_heads != c.num_attention_heads) {
    // HF repeats K/V for GQA, but every DeepSeek MLA checkpoint has one KV head per head.
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: num_key_value_heads ", c.num_key_value_heads, " differs from num_attention_heads ",
        c.num_attention_heads, "; MLA expects them equal"));
  }
  ASSIGN_OR_RETURN(e->layout_, ResolveParallelLayout(c, options.parallel));
  e->comm_ = options.parallel.comm;
  e->attn_heads_ = e->layout_.heads.count;
  RETURN_IF_ERROR(e->ChooseAttentionForms());
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::Open(options.model_dir, c));
  ASSIGN_OR_RETURN(e->weights_, LoadDeepseekWeights(c, *store, options.backend, &e->layout_));
  ASSIGN_OR_RETURN(e->rope_, BuildRopeTable(c));
  if (cuda && c.has_indexer) RETURN_IF_ERROR(e->PadIndexerWeights());
  if (cuda) {
    ASSIGN_OR_RETURN(e->rope_dev_, DeviceBuffer::FromHost(options.backend,
                                                          std::span<const float>(e->rope_.cos_sin)));
  }
  KvPoolOptions po;
  po.backend = options.backend;
  po.dtype = e->ops_.dtype;
  po.cache_format = cache_format;
  po.num_layers = c.num_hidden_layers;
  po.num_pages = options.num_kv_pages;
  po.latent_dim = e->dims_.latent();
  po.index_dim = c.has_indexer ? e->index_key_dim_ : 0;
  ASSIGN_OR_RETURN(e->pool_, KvPool::Create(po));
  LatentKvCacheContext cache;
  cache.ops = e->ops_;
  cache.pool = e->pool_.get();
  cache.scratch = &e->scratch_;
  cache.dims = e->dims_;
  cache.index_key_dim = c.has_indexer ? e->index_key_dim_ : 0;
  cache.heads = e->attn_heads_;
  cache.max_batch_tokens = options.max_batch_tokens;
  ASSIGN_OR_RETURN(e->cache_, LatentKvCache::Create(cache_format, cache));
  int32_t padding_page = -1;
  if (cuda) {  // the page that padded rows of decode graphs read (decode_graph_runner.h)
    ASSIGN_OR_RETURN(std::vector<int32_t> padding, e->pool_->Allocate(1));
    padding_page = padding[0];
  }
  e->max_pages_per_seq_ = std::min(
      options.num_kv_pages, (c.max_position_embeddings + kernels::kPageSize - 1) / kernels::kPageSize);
  if (cuda && c.has_indexer) {
    // Score rows for up to kIndexerWorkspaceTarget bytes at the longest context (at least one
    // row, at most one per batch token); RunIndexerKernel chunks the queries to fit.
    constexpr size_t kIndexerWorkspaceTarget = size_t{64} << 20;
    const size_t row = IndexerRowBytes(static_cast<int64_t>(e->max_pages_per_seq_) * kernels::kPageSize);
    const size_t rows = std::clamp<size_t>(kIndexerWorkspaceTarget / row, 1,
                                           std::max(options.max_batch_tokens, options.max_batch_seqs));
    e->indexer_ws_bytes_ = rows * row;
  }
  const BatchLimits limits{options.max_batch_tokens, options.max_batch_seqs,
                           e->pool_->total_pages()};
  e->planner_ = BatchPlanner(e->config_, limits);
  ASSIGN_OR_RETURN(const size_t scratch_bytes, e->ForwardScratchBytes());
  ASSIGN_OR_RETURN(e->scratch_, StepScratch::Create(e->ctx_, e->ops_.dtype, scratch_bytes, limits,
                                                    e->max_pages_per_seq_));
  e->sampling_ = SamplingStep(e->ctx_, &e->scratch_, c.vocab_size);
  e->decode_graphs_ = DecodeGraphRunner(e->ctx_, cuda && !e->layout_.sharded(),
                                        options.max_batch_seqs, e->max_pages_per_seq_, padding_page);
  if (cuda) {
    // Weight uploads and the pool's zeroing ran on the legacy stream, which the engine's
    // non-blocking stream does not wait for.
    RETURN_IF_ERROR(Synchronize(kernels::KernelContext{options.backend, nullptr, options.device}));
  }
  return e;
}

absl::Status DeepseekEngine::ChooseAttentionForms() {
  const ModelConfig& c = config_;
  dims_ = StoredMlaDims(c);
  const kernels::Backend b = options_.backend;
  mha_runs_ = kernels::MhaPrefillSupportsHeadDims(b, dims_.qk(), dims_.v);
  latent_runs_ = kernels::LatentAttentionSupportsDims(b, dims_.rank, dims_.rope);
  const auto widths = [&] {
    return absl::StrCat("qk_nope_head_dim ", c.qk_nope_head_dim, ", qk_rope_head_dim ",
                        c.qk_rope_head_dim, ", v_head_dim ", c.v_head_dim, ", kv_lora_rank ",
                        c.kv_lora_rank, " (stored as ", dims_.nope, "/", dims_.rope, "/", dims_.v,
                        "/", dims_.rank, ")");
  };
  if (!mha_runs_ && !latent_runs_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", widths(), " fit neither attention form on ", kernels::BackendName(b),
        ": MHA takes head dims up to ", kernels::kMhaPrefillCudaMaxHeadDim,
        ", the latent form kv_lora_rank up to ", kernels::kLatentCudaMaxRank, " and rope up to ",
        kernels::kLatentCudaMaxRopeDim));
  }
  if (c.has_indexer && !latent_runs_) {  // sparse attention exists in latent form only
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", c.model_type_name, " with ", widths(), ": DSA's sparse attention on ",
        kernels::BackendName(b), " takes kv_lora_rank up to ", kernels::kLatentCudaMaxRank,
        " and rope up to ", kernels::kLatentCudaMaxRopeDim));
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> DeepseekEngine::Forward(std::span<const SequenceChunk> batch,
                                                      AttentionPath path,
                                                      const LayerDoneFn& on_layer_done) {
  ASSIGN_OR_RETURN(BatchPlan plan, planner_.Plan(batch));
  const ModelConfig& c = config_;
  const AttentionForm form = ResolveForm(&plan, path);

  ForwardResult result;
  result.path_used = form == AttentionForm::kMha ? AttentionPath::kMha : AttentionPath::kMla;
  result.rows = static_cast<int>(plan.logit_rows.size());
  const std::vector<const SampleRow*> samples = RequestedSamples(batch);
  const bool device_sample = sampling_.CanSampleOnDevice(samples);
  const std::span<const SampleRow* const> device_samples =
      device_sample ? std::span<const SampleRow* const>(samples) : std::span<const SampleRow* const>();
  if (!device_sample) result.logits.resize(static_cast<size_t>(result.rows) * c.vocab_size);
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  // Decode batches replay a CUDA graph per (batch bucket, page-table width) when they can;
  // everything else runs eagerly.
  if (decode_graphs_.Applies(plan, form == AttentionForm::kMlaDecode, on_layer_done != nullptr)) {
    DecodeGraphRunner::Step step;
    step.prepare = [&](BatchPlan* padded) -> absl::StatusOr<float*> {
      scratch_.Reset();
      RETURN_IF_ERROR(scratch_.UploadPlan(padded));
      ASSIGN_OR_RETURN(void* logits, Scratch(padded->batch * vocab * sizeof(float), "logits"));
      return static_cast<float*>(logits);
    };
    step.run = [&](const BatchPlan& padded, float* logits) {
      return RunStep(padded, form, nullptr, logits);
    };
    step.finish = [&](const float* logits) { return DeliverRows(logits, device_samples, &result); };
    RETURN_IF_ERROR(decode_graphs_.Run(std::move(plan), step));
  } else {
    scratch_.Reset();
    RETURN_IF_ERROR(scratch_.UploadPlan(&plan));
    float* logits = result.logits.data();
    if (ctx_.backend != kernels::Backend::kCpu && result.rows > 0) {
      ASSIGN_OR_RETURN(void* dev, Scratch(result.rows * vocab * sizeof(float), "logits"));
      logits = static_cast<float*>(dev);
    }
    RETURN_IF_ERROR(RunStep(plan, form, on_layer_done, logits));
    RETURN_IF_ERROR(DeliverRows(logits, device_samples, &result));
  }
  if (!samples.empty() && !device_sample) RETURN_IF_ERROR(sampling_.SampleOnHost(samples, &result));
  return result;
}

absl::Status DeepseekEngine::DeliverRows(const float* logits,
                                         std::span<const SampleRow* const> device_samples,
                                         ForwardResult* result) {
  if (!device_samples.empty()) return sampling_.SampleOnDevice(logits, device_samples, result);
  if (ctx_.backend == kernels::Backend::kCpu) return absl::OkStatus();  // logits is result's
  RETURN_IF_ERROR(CopyBytes(ctx_, result->logits.data(), logits,
                            result->logits.size() * sizeof(float), CopyKind::kDeviceToHost));
  // Also before the next step reuses the pinned staging buffer.
  return Synchronize(ctx_);
}

AttentionForm DeepseekEngine::ResolveForm(BatchPlan* plan, AttentionPath path) const {
  // Path policy: kAuto -> MHA without a cached prefix, else MLA. Sparse DSA batches run in
  // MLA form (the indexer's selection is expressed over cache positions).
  AttentionPath resolved = path;
  if (resolved == AttentionPath::kAuto) {
    resolved = plan->max_prefix == 0 ? AttentionPath::kMha : AttentionPath::kMla;
  }
  // fp8 cache: a batch that reads cached latents (a prefix, or the MLA form) attends sparsely,
  // through the kernels that read fp8 (kv_cache/fp8_latent_kv_cache.cc); it is the same function.
  if (cache_->ReadsNeedSparseForm() && (plan->max_prefix > 0 || resolved == AttentionPath::kMla)) plan->sparse = true;
  if (plan->sparse) resolved = AttentionPath::kMla;
  // A form the backend's kernels cannot run at this model's widths gives way to the other
  // (ChooseAttentionForms; sparse batches always have the latent form).
  if (resolved == AttentionPath::kMha && !mha_runs_) resolved = AttentionPath::kMla;
  if (resolved == AttentionPath::kMla && !latent_runs_) resolved = AttentionPath::kMha;
  if (resolved == AttentionPath::kMha) return AttentionForm::kMha;
  return plan->all_single_token ? AttentionForm::kMlaDecode : AttentionForm::kMla;
}

absl::Status DeepseekEngine::RunStep(const BatchPlan& plan, AttentionForm form,
                                     const LayerDoneFn& on_layer_done, float* logits) {
  const ModelConfig& c = config_;
  const int T = plan.total_tokens;
  const int hidden = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  // residual: the running hidden state; y: its normed copy fed to each block; tmp: block output.
  const int64_t act = static_cast<int64_t>(T) * hidden;
  ASSIGN_OR_RETURN(void* residual, ScratchAct(act, "residual"));
  ASSIGN_OR_RETURN(void* y, ScratchAct(act, "normed hidden"));
  ASSIGN_OR_RETURN(void* tmp, ScratchAct(act, "block output"));
  RETURN_IF_ERROR(GatherStepCounts(plan));  // data-parallel attention only
  kernels::EmbeddingParams ep;
  ep.dtype = ops_.dtype;
  ep.num_tokens = T;
  ep.dim = hidden;
  ep.vocab = c.vocab_size;
  ep.ids = plan.dev.token_ids;
  ep.table = weights_.embed.data();
  ep.out = residual;
  RETURN_IF_ERROR(kernels::Embedding(ep, ctx_));
  RETURN_IF_ERROR(ops::RmsNorm(ops_, residual, T, hidden, hidden, weights_.layers[0].input_norm,
                               eps, y, hidden));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = weights_.layers[l];
    RETURN_IF_ERROR(Attention(l, plan, form, y, tmp));
    RETURN_IF_ERROR(ReduceAttentionOutput(T, tmp));  // tensor-parallel attention only
    if (on_layer_done) {
      // The callback reads this layer's KV pages (KvPool::ReadPage, or a transport's own
      // stream): on the GPU the layer's kernels are only queued on our non-blocking stream, so
      // wait for them first. (The NCCL sender also waits on an event; this keeps every reader
      // correct, at the cost of one stream sync per layer only when pages are being shipped.)
      if (ctx_.backend == kernels::Backend::kCuda) RETURN_IF_ERROR(Synchronize(ctx_));
      RETURN_IF_ERROR(on_layer_done(l));
    }
    // residual += attn; y = post_attention_norm(residual)
    RETURN_IF_ERROR(ops::RmsNorm(ops_, tmp, T, hidden, hidden, lw.post_attention_norm, eps, y,
                                 hidden, residual));
    RETURN_IF_ERROR(ParallelMlp(l, T, y, tmp));
    // residual += mlp; y = next layer's input norm (or the final norm) of residual
    const WeightTensor& next_norm = l + 1 < c.num_hidden_layers ? weights_.layers[l + 1].input_norm
                                                                : weights_.final_norm;
    RETURN_IF_ERROR(ops::RmsNorm(ops_, tmp, T, hidden, hidden, next_norm, eps, y, hidden,
                                 residual));
  }

  const int rows = static_cast<int>(plan.logit_rows.size());
  // A data-parallel rank without logit rows still joins the LM head's collectives.
  if (rows == 0 && !layout_.attention_dp()) return absl::OkStatus();
  ASSIGN_OR_RETURN(void* picked, ScratchAct(static_cast<int64_t>(rows) * hidden, "logit rows"));
  for (int r = 0; r < rows; ++r) {
    RETURN_IF_ERROR(ops::Copy2D(ops_, ops_.at(picked, static_cast<int64_t>(r) * hidden), hidden,
                                ops_.at(y, static_cast<int64_t>(plan.logit_rows[r]) * hidden),
                                hidden, hidden, 1));
  }
  // f32 logits whatever the activation dtype.
  return LmHead(picked, rows, logits);
}

}  // namespace mlaserve::model
