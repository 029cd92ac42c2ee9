// DeepseekEngine: the Engine for model_type deepseek_v2 / deepseek_v3 / deepseek_v32, written
// once against kernels/*/api.h.
//
// Forward (Hugging Face semantics, see docs/model.md) in three beats:
//   plan:   BatchPlanner checks the batch and flattens it (step/batch_plan.h); AttentionForms
//           picks the attention form (layers/attention_forms.h).
//   run:    one step over the uploaded plan: embed -> per layer [input RMSNorm -> MlaAttention
//           (with the V3.2 DsaIndexer) over the paged cache -> residual -> post-attention
//           RMSNorm -> FeedForward (dense MLP or MoE) -> residual] -> final RMSNorm -> LM head
//           on the rows whose logits are wanted. Decode steps replay CUDA graphs when they can
//           (step/decode_graph_runner.h); a sharded layout adds its collectives (ParallelStep).
//   sample: SamplingStep draws the rows that carry a SampleRow where the logits are.
//
// The engine composes its parts and owns what they share: the weights, the KvPool and its
// format (kv_cache/latent_kv_cache.h), the step scratch (step/step_scratch.h, sized at Create
// from max_batch_tokens and max_batch_seqs as the sum of every part's ScratchBytes: nothing is
// allocated inside a step) and the LayerContext every block reads (layers/layer_context.h).
//
// Backends: kCpu (f32 activations, weights converted to f32 at load) and kCuda (bf16 weights
// and activations in device memory, f32 router/LM-head logits; docs/cuda_engine.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "model/deepseek_weights.h"
#include "model/device_memory.h"
#include "model/engine.h"
#include "model/forward_ops.h"
#include "model/kv_cache/latent_kv_cache.h"
#include "model/kv_pool.h"
#include "model/layers/attention_forms.h"
#include "model/layers/feed_forward.h"
#include "model/layers/layer_context.h"
#include "model/layers/mla_attention.h"
#include "model/loader/config.h"
#include "model/parallel_graph_plan.h"
#include "model/parallel_layout.h"
#include "model/parallel_step.h"
#include "model/rope.h"
#include "model/step/batch_plan.h"
#include "model/step/decode_graph_runner.h"
#include "model/step/sampling_step.h"
#include "model/step/step_scratch.h"
#include "model/step/weight_prefetch.h"

namespace mlaserve::model {

namespace testing {
class DeepseekEngineTestPeer;
}  // namespace testing

class DeepseekEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<DeepseekEngine>> Create(const EngineOptions& options);

  const ModelConfig& config() const override { return config_; }
  const ParallelLayout& layout() const { return layout_; }
  kernels::Backend backend() const override { return ctx_.backend; }
  KvPool& kv_pool() override { return *pool_; }
  void* device_stream() const override { return ctx_.stream; }

  // OK on both backends (the scored rows' logits go through the LM head of the step and are
  // scored where they are, a slice at a time); FAILED_PRECONDITION for a rank of a data-parallel
  // attention layout, whose LM head steps in lockstep with ranks that score other rows.
  absl::Status CheckPromptLogprobs() const override;
  absl::StatusOr<ForwardResult> Forward(std::span<const SequenceChunk> batch,
                                        AttentionPath path = AttentionPath::kAuto,
                                        const LayerDoneFn& on_layer_done = nullptr) override;
  absl::Status ForwardInto(std::span<const SequenceChunk> batch, AttentionPath path,
                           const LayerDoneFn& on_layer_done, ForwardResult* result) override;
  // The input checks of Forward alone (INVALID_ARGUMENT naming the bad value), run before the
  // ranks of a ParallelEngine start a step they must all finish. A DeepseekEngine is one rank:
  // every chunk's rank is 0. A data-parallel rank takes an empty batch: it joins the step's
  // collectives for the other ranks' tokens (the MoE and LM head need every rank every step).
  absl::Status CheckBatch(std::span<const SequenceChunk> batch) const;
  // Waits for everything queued on the engine's stream (kCuda; nothing on kCpu).
  absl::Status SynchronizeStream() const;

  // A ParallelEngine's step on this rank (parallel_graph_plan.h). ShapeOf: how this rank's
  // share looks (host planning only). ForwardRankInto: ForwardInto, as a graph step padded to
  // `graph` (the same on every rank: graph.bucket rows, a page table of at least graph.pages
  // pages, the sparse form if graph.sparse) when graph.bucket > 0, eagerly when 0; kOwnBucket
  // (one GPU): a graph step at the batch's own bucket and width where the graph runner takes
  // it.
  static constexpr int kOwnBucket = -1;
  absl::StatusOr<RankStepShape> ShapeOf(std::span<const SequenceChunk> batch, AttentionPath path,
                                        bool layer_callback) const;
  absl::Status ForwardRankInto(std::span<const SequenceChunk> batch, AttentionPath path,
                               const LayerDoneFn& on_layer_done, const GraphStepShape& graph,
                               ForwardResult* result);
  // Whether the last graph step captured its graph (true), tried and failed (false: that key
  // stays eager), or captured nothing (a replay, an eager step). KeepLastKeyEager: the last
  // step's key runs eagerly from now on (a ParallelEngine whose ranks disagree on a capture
  // makes them all eager for that key, so they keep enqueueing their collectives alike).
  std::optional<bool> last_graph_capture() const { return decode_graphs_.last_capture(); }
  void KeepLastGraphKeyEager() { decode_graphs_.KeepLastKeyEager(); }

  // CUDA graphs for decode steps (kCuda; on by default; decode_graph_runner.h). Benchmarks
  // turn them off to time eager steps on the same engine.
  void set_decode_graphs(bool on) { decode_graphs_.set_enabled(on); }
  int decode_graphs_captured() const { return decode_graphs_.captured(); }
  int64_t decode_graph_replays() const { return decode_graphs_.replays(); }
  int64_t decode_graph_steps() const { return decode_graphs_.steps(); }  // padded steps run

 private:
  // Diagnostics that read a step's intermediate values (deepseek_engine_probe.h); not used in
  // serving. It runs the step through the functions below.
  friend class DeepseekEngineProbe;
  // Tests' access to the launch limits and the indexer probe (testing/deepseek_engine_test_peer.h).
  friend class testing::DeepseekEngineTestPeer;

  // One decoder layer's blocks (their weights are weights_.layers[l]).
  struct DecoderLayer {
    MlaAttention attention;
    FeedForward feed_forward;
  };
  // The step's running activations [T, hidden] at the stored width (model_widths.h; buffers of
  // the backend, in the step scratch): the residual stream, its normed copy (the next block's
  // input), a block's output.
  struct StepActivations {
    void* residual = nullptr;
    void* normed = nullptr;
    void* block_out = nullptr;
  };

  DeepseekEngine() = default;

  // Create's parts (deepseek_engine.cc): the model's blocks over the loaded weights, and the
  // step machinery sized for them.
  void BuildLayers();
  absl::Status BuildStep(int32_t padding_page);
  // The L2 prefetch of each layer's weights after its attention (one GPU, CUDA).
  absl::Status BuildPrefetch();
  // The pool's page count: options_.num_kv_pages, or with 0 the pages the device's memory fits
  // (model/kv_pool_sizing.h; kDefaultCpuKvPages on kCpu), agreed with the other ranks.
  absl::StatusOr<int> SizeKvPool(const KvPoolOptions& po) const;
  // Bytes of scratch one Forward needs at most, for the engine's limits.
  absl::StatusOr<size_t> ForwardScratchBytes() const;

  // One step on the device from the uploaded plan into `logits` ([rows, vocab] f32, a buffer
  // of the backend) -- Embed, every layer's two halves, LmHead, and ScorePromptRows when
  // `scored` (the batch the plan was made of) asks for prompt logprobs:
  absl::Status RunStep(const BatchPlan& plan, AttentionForm form, const LayerDoneFn& on_layer_done,
                       float* logits, std::span<const SequenceChunk> scored = {},
                       ForwardResult* result = nullptr);
  // The activations, the embedding and layer 0's input norm.
  absl::StatusOr<StepActivations> Embed(const BatchPlan& plan);
  // Attention, then on_layer_done (the layer's KV is in the pool), then residual += attention
  // and the post-attention norm into a.normed.
  absl::Status AttentionHalf(int layer, const BatchPlan& plan, AttentionForm form,
                             const StepActivations& a, const LayerDoneFn& on_layer_done);
  // The feed-forward block, then residual += it and the next layer's input norm (or the final
  // norm) into a.normed.
  absl::Status FeedForwardHalf(int layer, int T, const StepActivations& a);
  // y = RMSNorm of x over the hidden state (T rows at the stored width, divided by the real
  // hidden_size: model_widths.h), with residual: residual += x first and normalised.
  absl::Status NormHidden(const void* x, int T, const WeightTensor& weight, void* y,
                          void* residual);
  // The LM head over plan.logit_rows of a.normed.
  absl::Status LmHead(const BatchPlan& plan, const StepActivations& a, float* logits);
  // Prompt logprobs: the scored rows of every chunk of `batch` with prompt_targets (in chunk
  // order, so a slice may span chunks), PromptSliceRows() rows at a time: the LM head into
  // scratch, then kernels::ComputeLogprobs with ranks on the slice's logits in place (on the
  // device on kCuda; ScorePromptRow's arithmetic on kCpu). The targets and top-n go up in one
  // copy before the first slice; the entries and ranks of every slice come back in one copy
  // after the last (the one host sync), into result->prompt_logprobs.
  absl::Status ScorePromptRows(const BatchPlan& plan, const StepActivations& a,
                               std::span<const SequenceChunk> batch, ForwardResult* result);
  // Rows one LM-head slice of ScorePromptRows takes: a cap by backend (deepseek_engine.cc says
  // why), and no more than the logit rows a step may have, which a sharded LM head's scratch is
  // sized for.
  int PromptSliceRows() const;
  // to's rows [i] = from's rows[i] (hidden states at the stored width), one copy per run of
  // consecutive rows.
  absl::Status CopyHiddenRows(const void* from, std::span<const int32_t> rows, void* to);
  // A data-parallel rank with no requests this step: the collectives of every layer's
  // feed-forward half and of the LM head, over no rows of its own.
  absl::StatusOr<ForwardResult> JoinIdleStep();
  // `plan` padded to `graph` (bucket 0: its own; at least graph.pages pages; sparse if
  // graph.sparse) through the decode graph runner (replayed or captured on kCuda, eager on
  // kCpu), its real rows delivered into *result.
  absl::Status GraphStep(BatchPlan plan, AttentionForm form,
                         std::span<const SampleRow* const> device_samples,
                         const GraphStepShape& graph, ForwardResult* result);
  // After the step: `logits` [rows, vocab] drawn on the device when `device_samples` is not
  // empty, else copied into result->logits (kCuda, through logits_download_'s pinned slots;
  // on kCpu an eager step's logits are result->logits already).
  absl::Status DeliverRows(float* logits, std::span<const SampleRow* const> device_samples,
                           ForwardResult* result);

  EngineOptions options_;
  ModelConfig config_;
  ParallelLayout layout_;  // this rank's shards (parallel_layout.h)
  Stream stream_;          // kCuda: the engine's stream (graphs are captured from it)
  kernels::KernelContext ctx_;
  ops::OpContext ops_;  // ctx_ plus the activation dtype
  DeepseekWeights weights_;
  RopeTable rope_;
  DeviceBuffer rope_dev_;  // kCuda: the cos/sin table on the device
  std::unique_ptr<KvPool> pool_;
  std::unique_ptr<LatentKvCache> cache_;  // pool_ in its format
  // What every block reads; built at Create. Blocks keep pointers to it, to weights_ and to
  // the parts below, which therefore never move (the engine lives behind a unique_ptr).
  LayerContext layer_ctx_;
  AttentionForms forms_;
  std::vector<DecoderLayer> layers_;
  ParallelStep parallel_;
  BatchPlanner planner_;
  StepScratch scratch_;
  SamplingStep sampling_;
  StagedDownload logits_download_;  // kCuda: the logits rows on their way to the host
  DecodeGraphRunner decode_graphs_;
  WeightPrefetch prefetch_;  // kCuda, one GPU: MLASERVE_L2_PREFETCH's weights in L2 (weight_prefetch.h)
};

}  // namespace mlaserve::model
