// DeepseekEngine (deepseek_engine.h): Create composes the parts; Forward is plan -> step ->
// sample; the step is the layer loop over the blocks.
#include "model/deepseek_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/embedding/api.h"
#include "kernels/mha_prefill/api.h"
#include "model/layers/dsa_indexer.h"
#include "model/loader/weight_store.h"

namespace mlaserve::model {
namespace {

// Upper bound of the number of scratch allocations in one Forward, each rounded up to the
// arena's alignment.
constexpr size_t kMaxAllocationsPerStep = 64;

absl::Status CheckLimits(const EngineOptions& options) {
  if (options.num_kv_pages < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_kv_pages is ", options.num_kv_pages, "; it must be positive, or 0 to size the pool"));
  }
  if (options.max_batch_tokens <= 0 || options.max_batch_seqs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens is ", options.max_batch_tokens, " and max_batch_seqs is ",
                     options.max_batch_seqs, "; both must be positive"));
  }
  return kernels::CheckMhaPrefillProvider(options.mha_provider, options.backend);
}

// What the forward assumes of every DeepSeek MLA checkpoint.
absl::Status CheckArchitecture(const ModelConfig& c) {
  if (c.num_key_value_heads != c.num_attention_heads) {
    // HF repeats K/V for GQA, but every DeepSeek MLA checkpoint has one KV head per head.
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: num_key_value_heads ", c.num_key_value_heads,
        " differs from num_attention_heads ", c.num_attention_heads, "; MLA expects them equal"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeepseekEngine>> DeepseekEngine::Create(
    const EngineOptions& options) {
  RETURN_IF_ERROR(CheckLimits(options));
  std::unique_ptr<DeepseekEngine> e(new DeepseekEngine());
  e->options_ = options;
  ASSIGN_OR_RETURN(e->config_, LoadModelConfig(options.model_dir));
  const ModelConfig& c = e->config_;
  const bool cuda = options.backend == kernels::Backend::kCuda;
  LayerContext& lc = e->layer_ctx_;
  if (c.has_indexer) {
    ASSIGN_OR_RETURN(lc.index_key_dim, DsaIndexer::KeyDim(c, options.backend));
  }
  ASSIGN_OR_RETURN(const KvCacheFormat cache_format, ResolveKvCacheFormat(options, c));
  RETURN_IF_ERROR(UseDevice(options.backend, options.device));
  ASSIGN_OR_RETURN(lc.num_sms, MultiprocessorCount(options.backend, options.device));
  lc.dram_bytes_per_sm_clock = DramBytesPerSmClock(options.backend, options.device);
  ASSIGN_OR_RETURN(e->stream_, Stream::Create(options.backend));
  e->ctx_.backend = options.backend;
  e->ctx_.device = options.device;
  e->ctx_.stream = e->stream_.get();
  e->ops_.kernel = e->ctx_;
  e->ops_.dtype = StorageDType(options.backend);
  RETURN_IF_ERROR(CheckArchitecture(c));
  ASSIGN_OR_RETURN(e->layout_, ResolveParallelLayout(c, options.parallel));
  lc.dims = StoredMlaDims(c);
  lc.widths = StoredWidths(c, e->layout_);
  ASSIGN_OR_RETURN(e->forms_, AttentionForms::Choose(c, lc.dims, options.backend));

  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::Open(options.model_dir, c));
  ASSIGN_OR_RETURN(e->weights_, LoadDeepseekWeights(c, *store, options.backend, &e->layout_));
  ASSIGN_OR_RETURN(e->rope_, BuildRopeTable(c));
  if (cuda && c.has_indexer) {
    RETURN_IF_ERROR(PadIndexerWeights(e->ctx_, c, lc.index_key_dim, &e->weights_));
  }
  if (cuda) {
    ASSIGN_OR_RETURN(e->rope_dev_, DeviceBuffer::FromHost(
                                       options.backend, std::span<const float>(e->rope_.cos_sin)));
  }

  KvPoolOptions po;
  po.backend = options.backend;
  po.dtype = e->ops_.dtype;
  po.cache_format = cache_format;
  po.num_layers = c.num_hidden_layers;
  po.latent_dim = lc.dims.latent();
  po.index_dim = c.has_indexer ? lc.index_key_dim : 0;
  ASSIGN_OR_RETURN(po.num_pages, e->SizeKvPool(po));
  e->options_.num_kv_pages = po.num_pages;  // what BuildLayers and every later reader see
  ASSIGN_OR_RETURN(e->pool_, KvPool::Create(po));
  LatentKvCacheContext cache;
  cache.ops = e->ops_;
  cache.pool = e->pool_.get();
  cache.scratch = &e->scratch_;
  cache.dims = lc.dims;
  cache.index_key_dim = po.index_dim;
  cache.heads = e->layout_.heads.count;
  cache.max_batch_tokens = options.max_batch_tokens;
  ASSIGN_OR_RETURN(e->cache_, LatentKvCache::Create(cache_format, cache));
  int32_t padding_page = -1;
  if (cuda) {  // the page that padded rows of decode graphs read (decode_graph_runner.h)
    ASSIGN_OR_RETURN(std::vector<int32_t> padding, e->pool_->Allocate(1));
    padding_page = padding[0];
  }
  e->BuildLayers();
  if (absl::Status built = e->BuildStep(padding_page); !built.ok()) {
    // The step's buffers come after the pool: a pool sized from memory may have left too little.
    if (options.num_kv_pages == 0 && built.code() == absl::StatusCode::kResourceExhausted) {
      return absl::ResourceExhaustedError(absl::StrCat(
          built.message(), " (after a KV pool of ", po.num_pages, " pages sized by mem_fraction_static ",
          options.mem_fraction_static, ": lower --mem-fraction-static or set --num-kv-pages)"));
    }
    return built;
  }
  if (cuda && !e->layout_.sharded()) RETURN_IF_ERROR(e->BuildPrefetch());
  if (cuda) {
    // Weight uploads and the pool's zeroing ran on the legacy stream, which the engine's
    // non-blocking stream does not wait for.
    RETURN_IF_ERROR(Synchronize(kernels::KernelContext{options.backend, nullptr, options.device}));
  }
  return e;
}

absl::StatusOr<int> DeepseekEngine::SizeKvPool(const KvPoolOptions& po) const {
  const EngineOptions& o = options_;
  if (o.num_kv_pages > 0) return o.num_kv_pages;
  int pages = kDefaultCpuKvPages;
  if (o.backend == kernels::Backend::kCuda) {
    // At least one batch of max_batch_tokens tokens in one sequence, plus the decode graphs'
    // padding page.
    const int min_pages = static_cast<int>(kernels::PagesFor(o.max_batch_tokens)) + 1;
    ASSIGN_OR_RETURN(const DeviceMemoryInfo memory, QueryDeviceMemory(o.backend));
    // No more than the engine can ever hold: every sequence of a batch at the longest context
    // (and the padding page).
    const int64_t max_pages =
        int64_t{o.max_batch_seqs} * kernels::PagesFor(int64_t{config_.max_position_embeddings}) + 1;
    ASSIGN_OR_RETURN(pages, KvPagesForMemory(memory, o.mem_fraction_static,
                                             KvPool::PageBytes(po), min_pages, max_pages));
  }
  // A rank that fails before it offers abandons the agreement (ParallelEngine::Create).
  if (o.kv_pages_rendezvous) return AgreeOnFewestPages(*o.kv_pages_rendezvous, o.parallel.rank, pages);
  return pages;
}

absl::Status DeepseekEngine::BuildPrefetch() {
  ASSIGN_OR_RETURN(prefetch_, WeightPrefetch::Create(ctx_, WeightPrefetch::ModeFromEnv(), config_.num_hidden_layers));
  if (!prefetch_.active()) return absl::OkStatus();
  const int mode = prefetch_.mode();
  // A weight whose start is not 16-byte aligned (a view into a larger tensor) is left out: a
  // prefetch is never a reason for a step to fail.
  const auto range_of = [](const LinearWeight& w) {
    const WeightTensor& t = w.weight;
    if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) return kernels::L2PrefetchRange{};
    return kernels::L2PrefetchRange{t.data(), static_cast<size_t>(t.numel) * kernels::DTypeSize(t.dtype) / 16 * 16};
  };
  // What does not fit in L2 is left out, in order (kernels/prefetch/api.h: FitL2PrefetchRanges):
  // V2-Lite's o_proj is 8 MB, DeepSeek-V3's 235 MB.
  const size_t budget = kernels::L2PrefetchCacheBytes(ctx_);
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    kernels::L2PrefetchParams p;
    p.ranges[p.num_ranges++] = range_of(w.attn.o_proj);
    if (w.is_moe && !w.moe.shared.gate_up.empty()) {
      if (mode >= 2) p.ranges[p.num_ranges++] = range_of(w.moe.shared.gate_up);
      if (mode >= 3) p.ranges[p.num_ranges++] = range_of(w.moe.shared.down);
    }
    kernels::FitL2PrefetchRanges(&p, budget);
    p.evict_last = mode == 3;
    prefetch_.SetLayer(l, p);
  }
  layer_ctx_.prefetch = &prefetch_;
  return absl::OkStatus();
}

void DeepseekEngine::BuildLayers() {
  const ModelConfig& c = config_;
  const EngineOptions& o = options_;
  LayerContext& lc = layer_ctx_;
  lc.config = &config_;
  lc.heads = layout_.heads.count;  // this rank's heads (all of them on one GPU)
  lc.layout = &layout_;
  lc.ops = ops_;
  lc.limits = BatchLimits{o.max_batch_tokens, o.max_batch_seqs, pool_->total_pages()};
  lc.max_pages_per_seq = std::min(
      o.num_kv_pages, kernels::PagesFor(c.max_position_embeddings));
  lc.mha_provider = o.mha_provider;
  if (o.backend == kernels::Backend::kCuda && c.has_indexer) {
    lc.indexer_workspace_bytes = DsaIndexer::WorkspaceBytes(lc.max_pages_per_seq, lc.limits);
  }
  lc.scratch = &scratch_;
  lc.cache = cache_.get();
  lc.rope = &rope_;
  lc.cos_sin = rope_dev_.empty() ? rope_.cos_sin.data() : rope_dev_.as<const float>();

  layers_.reserve(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    std::unique_ptr<DsaIndexer> indexer;
    if (c.has_indexer) indexer = std::make_unique<DsaIndexer>(&lc, l, &w.indexer);
    layers_.push_back(
        DecoderLayer{MlaAttention(&lc, l, &w.attn, std::move(indexer)), FeedForward(&lc, &w)});
  }
  parallel_ = ParallelStep(&lc, options_.parallel.comm);
}

absl::Status DeepseekEngine::BuildStep(int32_t padding_page) {
  const LayerContext& lc = layer_ctx_;
  planner_ = BatchPlanner(config_, lc.limits);
  ASSIGN_OR_RETURN(const size_t scratch_bytes, ForwardScratchBytes());
  ASSIGN_OR_RETURN(const size_t decode_metadata_bytes, MlaAttention::DecodeMetadataBytes(lc));
  ASSIGN_OR_RETURN(scratch_, StepScratch::Create(ctx_, ops_.dtype, scratch_bytes, lc.limits,
                                                 lc.max_pages_per_seq, decode_metadata_bytes));
  sampling_ = SamplingStep(ctx_, &scratch_, config_.vocab_size);
  ASSIGN_OR_RETURN(logits_download_, StagedDownload::Create(ctx_.backend));
  // Sharded layouts capture their collectives too; their ParallelEngine decides the graph
  // steps for every rank at once (parallel_graph_plan.h).
  decode_graphs_ = DecodeGraphRunner(ctx_, ctx_.backend == kernels::Backend::kCuda,
                                     options_.max_batch_seqs, lc.max_pages_per_seq, padding_page);
  return absl::OkStatus();
}

// Sizing sums the buffers of every part rather than taking their maximum: the parts nest (a
// layer's attention scratch is released before its feed-forward's), so the sum is an upper
// bound that stays correct when a part is reordered, at the cost of some slack.
absl::StatusOr<size_t> DeepseekEngine::ForwardScratchBytes() const {
  const LayerContext& lc = layer_ctx_;
  const size_t T = lc.limits.max_batch_tokens, B = lc.limits.max_batch_seqs;
  const size_t es = ops_.elem(), hidden = lc.widths.hidden;
  const size_t rows = std::min(T, B);  // logit rows: one per sequence at most
  size_t total = StepScratch::PlanStagingBytes(lc.limits, lc.max_pages_per_seq);
  // StepActivations, the picked logit rows and their f32 logits.
  total += 4 * T * hidden * es + rows * hidden * es + rows * config_.vocab_size * sizeof(float);
  ASSIGN_OR_RETURN(const size_t attention, MlaAttention::ScratchBytes(lc));
  total += attention + DsaIndexer::ScratchBytes(lc) + cache_->ScratchBytes();
  total += FeedForward::ScratchBytes(lc);
  total += SamplingStep::ScratchBytes(rows, config_.vocab_size);
  total += ParallelStep::ScratchBytes(lc);
  // Prompt logprobs (ScorePromptRows): every scored row's target, top-n, entries and rank (at
  // most one a token), then one slice at a time: its hidden rows and f32 logits.
  const size_t slice = static_cast<size_t>(PromptSliceRows());
  const size_t entries = (1 + kernels::kMaxLogprobsTop) * sizeof(kernels::LogprobEntry);
  total += T * (2 * sizeof(int32_t) + entries + sizeof(int32_t));
  total += slice * hidden * es + slice * config_.vocab_size * sizeof(float) + 4 * kDeviceAlignment;
  return total + kMaxAllocationsPerStep * kDeviceAlignment;
}

absl::Status DeepseekEngine::CheckBatch(std::span<const SequenceChunk> batch) const {
  RETURN_IF_ERROR(CheckChunkRanks(batch, 1));
  RETURN_IF_ERROR(CheckPromptTargets(batch, config_.vocab_size));
  if (AnyPromptTargets(batch)) RETURN_IF_ERROR(CheckPromptLogprobs());
  if (batch.empty() && layout_.attention_dp()) return absl::OkStatus();
  return planner_.Plan(batch).status();
}

absl::Status DeepseekEngine::SynchronizeStream() const { return model::Synchronize(ctx_); }

absl::StatusOr<ForwardResult> DeepseekEngine::Forward(std::span<const SequenceChunk> batch,
                                                      AttentionPath path,
                                                      const LayerDoneFn& on_layer_done) {
  ForwardResult result;
  RETURN_IF_ERROR(ForwardInto(batch, path, on_layer_done, &result));
  return result;
}

absl::Status DeepseekEngine::ForwardInto(std::span<const SequenceChunk> batch, AttentionPath path,
                                         const LayerDoneFn& on_layer_done, ForwardResult* result) {
  // One GPU decides its graph steps itself; a rank of a sharded layout only when its
  // ParallelEngine tells every rank alike (ForwardRankInto).
  return ForwardRankInto(batch, path, on_layer_done,
                         GraphStepShape{.bucket = layout_.sharded() ? 0 : kOwnBucket}, result);
}

absl::StatusOr<RankStepShape> DeepseekEngine::ShapeOf(std::span<const SequenceChunk> batch,
                                                      AttentionPath path,
                                                      bool layer_callback) const {
  RETURN_IF_ERROR(CheckChunkRanks(batch, 1));
  RankStepShape shape;
  if (batch.empty() && layout_.attention_dp()) {
    shape.graph_ready = decode_graphs_.available() && !layer_callback;
    return shape;
  }
  ASSIGN_OR_RETURN(BatchPlan plan, planner_.Plan(batch));
  const AttentionForm form = forms_.Resolve(&plan, path, cache_->ReadsNeedSparseForm());
  shape.batch = plan.batch;
  shape.pages = plan.max_pages_per_seq;
  shape.sparse = plan.sparse;
  // Scored prompt rows take LM-head slices of their own, which graphs do not replay.
  shape.graph_ready =
      decode_graphs_.Applies(plan, form == AttentionForm::kMlaDecode, layer_callback) &&
      !AnyPromptTargets(batch);
  return shape;
}

absl::Status DeepseekEngine::ForwardRankInto(std::span<const SequenceChunk> batch,
                                             AttentionPath path, const LayerDoneFn& on_layer_done,
                                             const GraphStepShape& graph,
                                             ForwardResult* out) {
  const int graph_bucket = graph.bucket;
  RETURN_IF_ERROR(CheckChunkRanks(batch, 1));
  const bool scores_prompt = AnyPromptTargets(batch);
  if (scores_prompt) {
    RETURN_IF_ERROR(CheckPromptTargets(batch, config_.vocab_size));
    RETURN_IF_ERROR(CheckPromptLogprobs());
  }
  // Reused storage (ForwardInto): cleared, not freed.
  ForwardResult& result = *out;
  result.token_ids.clear();
  result.logprobs.clear();
  result.prompt_logprobs.clear();
  result.rows = 0;
  result.path_used = AttentionPath::kMla;
  if (batch.empty() && layout_.attention_dp()) {
    result.logits.clear();
    if (graph_bucket <= 0) {
      // Not assigned: *out keeps its storage for this rank's busy steps (ForwardInto).
      return JoinIdleStep().status();
    }
    // An idle rank of a graph step: padding rows only, in the decode form (with the fp8
    // cache, which only the sparse kernels read, the sparse one).
    BatchPlan idle;
    idle.cu_seqlens_q = {0};
    idle.all_single_token = true;
    idle.max_seqlen_q = 1;
    idle.sparse = cache_->ReadsNeedSparseForm();
    return GraphStep(std::move(idle), AttentionForm::kMlaDecode, {}, graph, &result);
  }
  ASSIGN_OR_RETURN(BatchPlan plan, planner_.Plan(batch));
  const AttentionForm form = forms_.Resolve(&plan, path, cache_->ReadsNeedSparseForm());

  result.path_used = form == AttentionForm::kMha ? AttentionPath::kMha : AttentionPath::kMla;
  result.rows = static_cast<int>(plan.logit_rows.size());
  const std::vector<const SampleRow*> samples = RequestedSamples(batch);
  const bool device_sample = sampling_.CanSampleOnDevice(samples);
  const std::span<const SampleRow* const> device_samples =
      device_sample ? std::span<const SampleRow* const>(samples)
                    : std::span<const SampleRow* const>();
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  // A reused vector of this size keeps its storage (no allocation, no zero fill).
  if (device_sample) {
    result.logits.clear();
  } else {
    result.logits.resize(result.rows * vocab);
  }
  // Decode batches replay a CUDA graph per (batch bucket, page-table width) when they can;
  // everything else runs eagerly.
  const bool as_graph =
      graph_bucket != 0 && !scores_prompt &&
      decode_graphs_.Applies(plan, form == AttentionForm::kMlaDecode, on_layer_done != nullptr);
  if (graph_bucket > 0 && !as_graph) {
    return absl::InternalError(
        "a graph step was chosen for every rank, but this rank's batch cannot take one");
  }
  if (as_graph) {
    GraphStepShape own = graph;
    own.bucket = std::max(graph_bucket, 0);
    RETURN_IF_ERROR(GraphStep(std::move(plan), form, device_samples, own, &result));
  } else {
    scratch_.Reset();
    RETURN_IF_ERROR(scratch_.UploadPlan(&plan));
    float* logits = result.logits.data();
    if (ctx_.backend != kernels::Backend::kCpu && result.rows > 0) {
      ASSIGN_OR_RETURN(void* dev, scratch_.Allocate(result.rows * vocab * sizeof(float), "logits"));
      logits = static_cast<float*>(dev);
    }
    RETURN_IF_ERROR(RunStep(plan, form, on_layer_done, logits,
                            scores_prompt ? batch : std::span<const SequenceChunk>(), &result));
    RETURN_IF_ERROR(DeliverRows(logits, device_samples, &result));
  }
  if (!samples.empty() && !device_sample) RETURN_IF_ERROR(sampling_.SampleOnHost(samples, &result));
  return absl::OkStatus();
}

absl::Status DeepseekEngine::GraphStep(BatchPlan plan, AttentionForm form,
                                       std::span<const SampleRow* const> device_samples,
                                       const GraphStepShape& graph, ForwardResult* result) {
  plan.sparse = plan.sparse || graph.sparse;
  const int bucket = graph.bucket;
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  DecodeGraphRunner::Step step;
  step.prepare = [&](BatchPlan* padded) -> absl::StatusOr<float*> {
    scratch_.Reset();
    RETURN_IF_ERROR(scratch_.UploadPlan(padded));
    ASSIGN_OR_RETURN(void* logits,
                     scratch_.Allocate(padded->batch * vocab * sizeof(float), "logits"));
    return static_cast<float*>(logits);
  };
  step.run = [&](const BatchPlan& padded, float* logits) {
    return RunStep(padded, form, nullptr, logits);
  };
  step.finish = [&](float* logits) { return DeliverRows(logits, device_samples, result); };
  // A sharded graph step's counts are the bucket on every rank (parallel_step.h).
  parallel_.set_static_tokens(bucket);
  const absl::Status ran = decode_graphs_.Run(std::move(plan), step, bucket, graph.pages);
  parallel_.set_static_tokens(0);
  return ran;
}

absl::Status DeepseekEngine::DeliverRows(float* logits,
                                         std::span<const SampleRow* const> device_samples,
                                         ForwardResult* result) {
  if (!device_samples.empty()) return sampling_.SampleOnDevice(logits, device_samples, result);
  if (ctx_.backend == kernels::Backend::kCpu) {
    // An eager step wrote result's logits; a padded (graph) step's real rows come first.
    if (logits != result->logits.data() && !result->logits.empty()) {
      std::memcpy(result->logits.data(), logits, result->logits.size() * sizeof(float));
    }
    return absl::OkStatus();
  }
  // Returns once the rows are on the host, so the next step may reuse the plan's pinned
  // staging buffer too.
  return logits_download_.Run(ctx_, result->logits.data(), logits,
                              result->logits.size() * sizeof(float));
}

absl::Status DeepseekEngine::RunStep(const BatchPlan& plan, AttentionForm form,
                                     const LayerDoneFn& on_layer_done, float* logits,
                                     std::span<const SequenceChunk> scored,
                                     ForwardResult* result) {
  ASSIGN_OR_RETURN(const StepActivations a, Embed(plan));
  prefetch_.BeginStep();
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    RETURN_IF_ERROR(AttentionHalf(l, plan, form, a, on_layer_done));
    RETURN_IF_ERROR(FeedForwardHalf(l, plan.total_tokens, a));
  }
  RETURN_IF_ERROR(prefetch_.EndStep());
  RETURN_IF_ERROR(LmHead(plan, a, logits));
  if (scored.empty()) return absl::OkStatus();
  return ScorePromptRows(plan, a, scored, result);
}

absl::StatusOr<DeepseekEngine::StepActivations> DeepseekEngine::Embed(const BatchPlan& plan) {
  const ModelConfig& c = config_;
  const int T = plan.total_tokens;
  const int hidden = layer_ctx_.widths.hidden;  // stored (model_widths.h)
  const int64_t act = static_cast<int64_t>(T) * hidden;
  StepActivations a;
  ASSIGN_OR_RETURN(a.residual, scratch_.Activations(act, "residual"));
  ASSIGN_OR_RETURN(a.normed, scratch_.Activations(act, "normed hidden"));
  ASSIGN_OR_RETURN(a.block_out, scratch_.Activations(act, "block output"));
  RETURN_IF_ERROR(parallel_.BeginStep(plan));  // data-parallel attention only
  kernels::EmbeddingParams ep;
  ep.dtype = ops_.dtype;
  ep.num_tokens = T;
  ep.dim = hidden;
  ep.vocab = c.vocab_size;
  ep.ids = plan.dev.token_ids;
  ep.table = weights_.embed.data();
  ep.out = a.residual;
  RETURN_IF_ERROR(kernels::Embedding(ep, ctx_));
  RETURN_IF_ERROR(NormHidden(a.residual, T, weights_.layers[0].input_norm, a.normed, nullptr));
  return a;
}

absl::Status DeepseekEngine::AttentionHalf(int layer, const BatchPlan& plan, AttentionForm form,
                                           const StepActivations& a,
                                           const LayerDoneFn& on_layer_done) {
  const int T = plan.total_tokens;
  RETURN_IF_ERROR(layers_[layer].attention.Forward(plan, form, a.normed, a.block_out));
  RETURN_IF_ERROR(parallel_.ReduceAttentionOutput(T, a.block_out));  // tensor-parallel only
  if (on_layer_done) {
    // The callback reads this layer's KV pages. On the GPU the layer's kernels are only
    // queued on our stream: as engine.h says, the readers order themselves after it (the
    // tcp shipper's KvPool::ReadPagesAsync and the NCCL sender wait on an event recorded on
    // device_stream()), so the forward does not stop here once per layer.
    RETURN_IF_ERROR(on_layer_done(layer));
  }
  // residual += attn; normed = post_attention_norm(residual)
  return NormHidden(a.block_out, T, weights_.layers[layer].post_attention_norm, a.normed,
                    a.residual);
}

absl::Status DeepseekEngine::FeedForwardHalf(int layer, int T, const StepActivations& a) {
  const ModelConfig& c = config_;
  const WeightTensor& next_norm =
      layer + 1 < c.num_hidden_layers ? weights_.layers[layer + 1].input_norm : weights_.final_norm;
  FeedForward& block = layers_[layer].feed_forward;
  if (!layout_.sharded() && block.is_moe()) {
    // One GPU: the MoE block may end in the residual add and the next norm itself (CUDA
    // decode steps: its combine kernel does both).
    kernels::MoeResidualNorm norm;
    norm.residual = a.residual;
    norm.weight = next_norm.data();
    norm.y = a.normed;
    norm.eps = static_cast<float>(c.rms_norm_eps);
    norm.real_dim = c.hidden_size;  // the rows may be stored padded past it (model_widths.h)
    ASSIGN_OR_RETURN(const bool folded, block.ForwardFolded(T, a.normed, a.block_out, norm));
    if (folded) return absl::OkStatus();
  } else {
    RETURN_IF_ERROR(parallel_.RunFeedForward(block, T, a.normed, a.block_out));
  }
  // residual += mlp; normed = next layer's input norm (or the final norm) of residual
  return NormHidden(a.block_out, T, next_norm, a.normed, a.residual);
}

absl::Status DeepseekEngine::NormHidden(const void* x, int T, const WeightTensor& weight, void* y,
                                        void* residual) {
  // Over the stored rows, dividing by the real hidden_size (the padding is zero: model_widths.h).
  const int hidden = layer_ctx_.widths.hidden;
  return ops::RmsNorm(ops_, x, T, hidden, hidden, weight, static_cast<float>(config_.rms_norm_eps),
                      y, hidden, residual, config_.hidden_size);
}

absl::Status DeepseekEngine::LmHead(const BatchPlan& plan, const StepActivations& a,
                                    float* logits) {
  const int hidden = layer_ctx_.widths.hidden;
  const int rows = static_cast<int>(plan.logit_rows.size());
  // A data-parallel rank without logit rows still joins the LM head's collectives.
  if (rows == 0 && !layout_.attention_dp()) return absl::OkStatus();
  ASSIGN_OR_RETURN(void* picked,
                   scratch_.Activations(static_cast<int64_t>(rows) * hidden, "logit rows"));
  RETURN_IF_ERROR(CopyHiddenRows(a.normed, plan.logit_rows, picked));
  // f32 logits whatever the activation dtype.
  return parallel_.LmHead(weights_.lm_head, picked, rows, logits);
}

absl::Status DeepseekEngine::CopyHiddenRows(const void* from, std::span<const int32_t> rows,
                                            void* to) {
  const int hidden = layer_ctx_.widths.hidden;
  const int n = static_cast<int>(rows.size());
  // One copy per run of consecutive rows: a decode batch's rows are all consecutive, so it
  // copies once instead of once per sequence (and a prompt slice once per chunk it spans).
  for (int r = 0; r < n;) {
    int run = 1;
    while (r + run < n && rows[r + run] == rows[r] + run) ++run;
    RETURN_IF_ERROR(ops::Copy2D(ops_, ops_.at(to, static_cast<int64_t>(r) * hidden), hidden,
                                ops_.at(from, static_cast<int64_t>(rows[r]) * hidden), hidden,
                                hidden, run));
    r += run;
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> DeepseekEngine::JoinIdleStep() {
  scratch_.Reset();
  const BatchPlan none;  // no tokens, no logit rows
  RETURN_IF_ERROR(parallel_.BeginStep(none));
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    RETURN_IF_ERROR(parallel_.RunFeedForward(layers_[l].feed_forward, 0, nullptr, nullptr));
  }
  RETURN_IF_ERROR(parallel_.LmHead(weights_.lm_head, nullptr, 0, nullptr));
  ForwardResult result;
  result.path_used = AttentionPath::kMla;
  return result;
}

}  // namespace mlaserve::model
