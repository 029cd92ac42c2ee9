// DeepseekEngine: creation, batch planning and validation, and the layer loop.
#include "model/deepseek_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/embedding/api.h"
#include "kernels/gemm/api.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mla_prefill/api.h"
#include "model/forward_ops.h"
#include "model/parallel_engine.h"
#include "model/weights.h"

namespace mlaserve::model {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  // A worker's multi-GPU engine: the ranks and their communicators are made here.
  if (options.parallel.size > 1 && options.parallel.comm == nullptr) {
    return ParallelEngine::Create(options);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DeepseekEngine> engine, DeepseekEngine::Create(options));
  return std::unique_ptr<Engine>(std::move(engine));
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngineForBackend(
    EngineOptions options, std::string_view backend,
    const std::function<void(const absl::Status&)>& on_fallback) {
  if (backend == "cpu" || backend == "cuda") {
    options.backend = backend == "cpu" ? kernels::Backend::kCpu : kernels::Backend::kCuda;
    return Engine::Create(options);
  }
  if (backend != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend ", std::string(backend), " is not one of auto, cpu, cuda"));
  }
  if (options.kv_cache_dtype == KvCacheDtype::kFp8) {
    // A cache the model cannot use is the caller's error on every backend: say so once,
    // not as a reason to leave the GPU.
    ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig(options.model_dir));
    RETURN_IF_ERROR(DeepseekEngine::ResolveCacheFormat(options, config).status());
  }
  options.backend = kernels::Backend::kCuda;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(options);
  if (engine.ok()) return engine;
  if (on_fallback) on_fallback(engine.status());
  options.backend = kernels::Backend::kCpu;
  return Engine::Create(options);
}

absl::StatusOr<KvCacheDtype> ParseKvCacheDtype(std::string_view flag) {
  if (flag == "auto") return KvCacheDtype::kAuto;
  if (flag == "bf16") return KvCacheDtype::kNative;
  if (flag == "fp8") return KvCacheDtype::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-cache-dtype ", std::string(flag), " is not one of auto, bf16, fp8"));
}

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
  ASSIGN_OR_RETURN(const KvCacheFormat cache_format, ResolveCacheFormat(options, c));
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
  if (cache_format == KvCacheFormat::kFp8Ds) RETURN_IF_ERROR(e->InitFp8Cache());
  if (cuda) {  // the page that padded rows of decode graphs write into (decode_graphs.cc)
    ASSIGN_OR_RETURN(std::vector<int32_t> padding, e->pool_->Allocate(1));
    e->padding_page_ = padding[0];
  }
  e->max_pages_per_seq_ = std::min(
      options.num_kv_pages, kernels::PagesFor(c.max_position_embeddings));
  if (cuda && c.has_indexer) {
    // Score rows for up to kIndexerWorkspaceTarget bytes at the longest context (at least one
    // row, at most one per batch token); RunIndexerKernel chunks the queries to fit.
    constexpr size_t kIndexerWorkspaceTarget = size_t{64} << 20;
    const size_t row = IndexerRowBytes(static_cast<int64_t>(e->max_pages_per_seq_) * kernels::kPageSize);
    const size_t rows = std::clamp<size_t>(kIndexerWorkspaceTarget / row, 1,
                                           std::max(options.max_batch_tokens, options.max_batch_seqs));
    e->indexer_ws_bytes_ = rows * row;
  }
  ASSIGN_OR_RETURN(const size_t scratch_bytes, e->ForwardScratchBytes());
  ASSIGN_OR_RETURN(e->scratch_, ScratchArena::Create(options.backend, scratch_bytes));
  if (cuda) {
    ASSIGN_OR_RETURN(e->staging_, PinnedBuffer::Allocate(options.backend, e->PlanStagingBytes()));
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

absl::StatusOr<BatchPlan> DeepseekEngine::PlanBatch(std::span<const SequenceChunk> batch) const {
  const ModelConfig& c = config_;
  if (batch.empty()) return absl::InvalidArgumentError("Forward: the batch has no sequences");
  if (static_cast<int>(batch.size()) > options_.max_batch_seqs) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: the batch has ", batch.size(),
                                                   " sequences; this engine accepts ",
                                                   options_.max_batch_seqs, " (max_batch_seqs)"));
  }
  BatchPlan plan;
  plan.batch = static_cast<int>(batch.size());
  plan.cu_seqlens_q.push_back(0);
  plan.all_single_token = true;
  const int num_pages = pool_->total_pages();
  for (int b = 0; b < plan.batch; ++b) {
    const SequenceChunk& ch = batch[b];
    const int n = static_cast<int>(ch.tokens.size());
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat("chunk ", b, " has no tokens"));
    if (ch.start_pos < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", b, " has start_pos ", ch.start_pos, "; it must be >= 0"));
    }
    const int end = ch.start_pos + n;
    if (end > c.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", b, " reaches position ", end - 1, "; this model accepts positions below ",
          c.max_position_embeddings, " (max_position_embeddings)"));
    }
    const int pages_needed = kernels::PagesFor(end);
    if (static_cast<int>(ch.pages.size()) < pages_needed) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", b, " covers ", end, " tokens, which need ", pages_needed,
                       " KV pages of ", kernels::kPageSize, ", but it has ", ch.pages.size()));
    }
    for (int i = 0; i < pages_needed; ++i) {
      if (ch.pages[i] < 0 || ch.pages[i] >= num_pages) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", b, " page ", i, " is ",
                                                       ch.pages[i], "; the pool has pages [0, ",
                                                       num_pages, ")"));
      }
    }
    for (int i = 0; i < n; ++i) {
      const int32_t id = ch.tokens[i];
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", b, " token ", i, " has id ", id,
                                                       "; the vocabulary is [0, ", c.vocab_size,
                                                       ")"));
      }
      const int pos = ch.start_pos + i;
      plan.token_ids.push_back(id);
      plan.positions.push_back(pos);
      plan.slots.push_back(static_cast<int64_t>(ch.pages[pos / kernels::kPageSize]) *
                               kernels::kPageSize +
                           pos % kernels::kPageSize);
    }
    if (ch.want_logits) plan.logit_rows.push_back(plan.cu_seqlens_q.back() + n - 1);
    plan.cu_seqlens_q.push_back(plan.cu_seqlens_q.back() + n);
    plan.start.push_back(ch.start_pos);
    plan.seqlens_k.push_back(end);
    plan.max_pages_per_seq = std::max(plan.max_pages_per_seq, pages_needed);
    plan.max_seqlen_q = std::max(plan.max_seqlen_q, n);
    plan.max_seqlen_k = std::max(plan.max_seqlen_k, end);
    plan.max_prefix = std::max(plan.max_prefix, ch.start_pos);
    plan.all_single_token = plan.all_single_token && n == 1;
  }
  plan.total_tokens = plan.cu_seqlens_q.back();
  if (plan.total_tokens > options_.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: the batch has ", plan.total_tokens,
                                                   " tokens; this engine accepts ",
                                                   options_.max_batch_tokens,
                                                   " (max_batch_tokens)"));
  }
  plan.block_table.assign(static_cast<size_t>(plan.batch) * plan.max_pages_per_seq, -1);
  for (int b = 0; b < plan.batch; ++b) {
    const int pages = kernels::PagesFor(plan.seqlens_k[b]);
    std::copy_n(batch[b].pages.begin(), pages,
                plan.block_table.begin() + static_cast<size_t>(b) * plan.max_pages_per_seq);
  }
  plan.sparse = c.has_indexer && plan.max_seqlen_k > c.index_topk;
  return plan;
}

absl::StatusOr<ForwardResult> DeepseekEngine::Forward(std::span<const SequenceChunk> batch,
                                                      AttentionPath path,
                                                      const LayerDoneFn& on_layer_done) {
  ASSIGN_OR_RETURN(BatchPlan plan, PlanBatch(batch));
  const ModelConfig& c = config_;
  const AttentionForm form = ResolveForm(&plan, path);

  ForwardResult result;
  result.path_used = form == AttentionForm::kMha ? AttentionPath::kMha : AttentionPath::kMla;
  result.rows = static_cast<int>(plan.logit_rows.size());
  const std::vector<const SampleRow*> samples = RequestedSamples(batch);
  const bool device_sample = CanSampleOnDevice(samples);
  if (!device_sample) result.logits.resize(static_cast<size_t>(result.rows) * c.vocab_size);
  // Decode batches replay a CUDA graph per (batch bucket, page-table width) when they can
  // (decode_graphs.cc); everything else runs eagerly.
  if (UseDecodeGraph(plan, form, on_layer_done)) {
    RETURN_IF_ERROR(ForwardDecodeGraph(std::move(plan), form,
                                       device_sample ? std::span<const SampleRow* const>(samples)
                                                     : std::span<const SampleRow* const>(),
                                       &result));
  } else {
    scratch_.Reset();
    RETURN_IF_ERROR(UploadPlan(&plan));
    float* logits = result.logits.data();
    if (ctx_.backend != kernels::Backend::kCpu && result.rows > 0) {
      ASSIGN_OR_RETURN(void* dev, Scratch(static_cast<size_t>(result.rows) * c.vocab_size * sizeof(float), "logits"));
      logits = static_cast<float*>(dev);
    }
    RETURN_IF_ERROR(RunStep(plan, form, on_layer_done, logits));
    if (device_sample) {
      RETURN_IF_ERROR(SampleOnDevice(logits, samples, &result));
    } else if (ctx_.backend != kernels::Backend::kCpu) {
      RETURN_IF_ERROR(CopyBytes(ctx_, result.logits.data(), logits,
                                result.logits.size() * sizeof(float), CopyKind::kDeviceToHost));
      // Also before the next step reuses the pinned staging buffer.
      RETURN_IF_ERROR(Synchronize(ctx_));
    }
  }
  if (!samples.empty() && !device_sample) RETURN_IF_ERROR(SampleOnHost(samples, &result));
  return result;
}

AttentionForm DeepseekEngine::ResolveForm(BatchPlan* plan, AttentionPath path) const {
  // Path policy: kAuto -> MHA without a cached prefix, else MLA. Sparse DSA batches run in
  // MLA form (the indexer's selection is expressed over cache positions).
  AttentionPath resolved = path;
  if (resolved == AttentionPath::kAuto) {
    resolved = plan->max_prefix == 0 ? AttentionPath::kMha : AttentionPath::kMla;
  }
  // fp8 cache: a batch that reads cached latents (a prefix, or the MLA form) attends sparsely,
  // through the kernels that read fp8 (kv_fp8_cache.cc); it is the same function.
  if (kv_fp8_ && (plan->max_prefix > 0 || resolved == AttentionPath::kMla)) plan->sparse = true;
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
