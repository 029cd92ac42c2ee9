// DeepseekEngine: the Engine for model_type deepseek_v2 / deepseek_v3 / deepseek_v32, written
// once against kernels/*/api.h.
//
// Forward (Hugging Face semantics, see docs/model.md): embed -> per layer [input RMSNorm ->
// MLA attention over the paged latent cache -> residual -> post-attention RMSNorm -> dense
// MLP or MoE (routed + shared experts) -> residual] -> final RMSNorm -> lm_head on the rows
// whose logits are wanted.
//
// Attention forms (same function, tests hold them to each other):
//   MHA:  decompress latents through kv_b_proj; the chunk attends its own keys causally and
//         its cached prefix in bounded prefix pieces, merged by LSE.
//   MLA:  absorbed; q_nope.W_UK per head, attend in latent space over the cache, then W_UV.
//         Batches where every chunk is one token use the decode kernel (mla_decode).
//   DSA (V3.2): the indexer picks top-k cached positions per query; when any sequence is
//         longer than index_topk, attention runs sparse (sparse_fwd / sparse_decode) in MLA
//         form whatever form was asked for; otherwise sparse equals dense.
//
// KV cache formats (EngineOptions::kv_cache_dtype, kv_cache/latent_kv_cache.h): the native cache holds
// rows of the activation dtype; the fp8 cache (deepseek_v32 only) holds DeepSeek's 656-byte
// latent entries and fp8 indexer keys, written by kv_fp8's quantizer. With the fp8 cache every
// batch that reads cached latents attends in sparse MLA form (the fp8-reading kernels), and
// the MHA form reads the chunk's own keys back through the cache, so chunked prefill equals
// one-shot prefill.
//
// Backends: kCpu (f32 activations, weights converted to f32 at load) and kCuda (bf16 weights
// and activations in device memory, f32 router/LM-head logits; V3.2 runs its indexer, sparse_fwd
// and sparse_decode on the GPU, docs/cuda_engine.md). Every step's
// activations come from one scratch arena sized at Create from max_batch_tokens and
// max_batch_seqs (ForwardScratchBytes); nothing is allocated inside a step.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "kernels/indexer/api.h"
#include "kernels/moe/api.h"
#include "kernels/sparse_fwd/api.h"
#include "model/loader/config.h"
#include "model/deepseek_weights.h"
#include "model/device_memory.h"
#include "model/engine.h"
#include "model/forward_ops.h"
#include "model/kv_cache/latent_kv_cache.h"
#include "model/kv_pool.h"
#include "model/mla_dims.h"
#include "model/rope.h"
#include "model/step/batch_plan.h"
#include "model/step/decode_graph_runner.h"
#include "model/step/sampling_step.h"
#include "model/step/step_scratch.h"

namespace mlaserve::model {

namespace testing {
class DeepseekEngineTestPeer;
}  // namespace testing

enum class AttentionForm : uint8_t { kMha, kMla, kMlaDecode };

class DeepseekEngine final : public Engine {
 public:
  // Diagnostics that read a step's intermediate values (model/deepseek_engine_probe.h); not used in
  // serving.
  friend class DeepseekEngineProbe;
  // Tests' access to the launch knobs and probes (model/testing/deepseek_engine_test_peer.h).
  friend class testing::DeepseekEngineTestPeer;

  static absl::StatusOr<std::unique_ptr<DeepseekEngine>> Create(const EngineOptions& options);
  const ModelConfig& config() const override { return config_; }
  const ParallelLayout& layout() const { return layout_; }
  kernels::Backend backend() const override { return ctx_.backend; }
  KvPool& kv_pool() override { return *pool_; }
  void* device_stream() const override { return ctx_.stream; }

  absl::StatusOr<ForwardResult> Forward(std::span<const SequenceChunk> batch,
                                        AttentionPath path = AttentionPath::kAuto,
                                        const LayerDoneFn& on_layer_done = nullptr) override;
  // The input checks of Forward alone (INVALID_ARGUMENT naming the bad value), run before the
  // ranks of a ParallelEngine start a step they must all finish.
  absl::Status CheckBatch(std::span<const SequenceChunk> batch) const {
    return planner_.Plan(batch).status();
  }

  // CUDA graphs for decode steps (kCuda; on by default; decode_graph_runner.h). Benchmarks
  // turn them off to time eager steps on the same engine.
  void set_decode_graphs(bool on) { decode_graphs_.set_enabled(on); }
  int decode_graphs_captured() const { return decode_graphs_.captured(); }
  int64_t decode_graph_replays() const { return decode_graphs_.replays(); }

 private:
  DeepseekEngine() = default;

  // Create: dims_ from the config, and which attention forms the backend runs at them
  // (INVALID_ARGUMENT naming the widths when no form can serve the model).
  absl::Status ChooseAttentionForms();
  // The form `plan` runs in when `path` is asked (kAuto: the policy); marks DSA / fp8-cache
  // batches sparse.
  AttentionForm ResolveForm(BatchPlan* plan, AttentionPath path) const;

  // attention.cc. x: normed hidden [T, hidden]; out: [T, hidden].
  // One step on the device from the uploaded plan: embedding, layers, final norm and the LM
  // head over plan.logit_rows into `logits` ([rows, vocab] f32, a buffer of the backend).
  absl::Status RunStep(const BatchPlan& plan, AttentionForm form, const LayerDoneFn& on_layer_done,
                       float* logits);
  // After the step on the device: `logits` [rows, vocab] (a buffer of the backend) drawn on
  // the device when `device_samples` is not empty, else copied into result->logits (kCuda).
  absl::Status DeliverRows(const float* logits, std::span<const SampleRow* const> device_samples,
                           ForwardResult* result);

  // Activations (x, out, q, kv, attn) are in ops_.dtype.
  absl::Status Attention(int layer, const BatchPlan& plan, AttentionForm form, const void* x,
                         void* out);
  absl::Status AttendMha(int layer, const BatchPlan& plan, const void* q, const void* kv,
                         void* attn);
  absl::Status AttendLatent(int layer, const BatchPlan& plan, AttentionForm form, const void* q,
                            const int32_t* topk_indices, void* attn);
  // indexer.cc (V3.2): writes the layer's indexer keys; fills topk [T, index_topk] (a buffer
  // of the backend) when `need_topk`.
  absl::Status RunIndexer(int layer, const BatchPlan& plan, const void* x, const void* q_resid,
                          bool need_topk, int32_t* topk);
  // indexer.cc: the indexer launches of one layer, in query chunks whose f32 score rows fit
  // the workspace planned at Create (kCuda; kCpu needs none and runs one call).
  absl::Status RunIndexerKernel(const BatchPlan& plan, kernels::IndexerParams p);
  // indexer.cc, kCuda: zero-pads wq_b / wk per head to index_key_dim_ rows (Create).
  absl::Status PadIndexerWeights();
  // Bytes of one f32 score row of the CUDA indexer over `max_seqlen_k` keys.
  static size_t IndexerRowBytes(int64_t max_seqlen_k) {
    return static_cast<size_t>((max_seqlen_k + 3) / 4 * 4) * sizeof(float);
  }

  // moe_layer.cc. x: normed hidden [rows, hidden]; out: [rows, hidden] (this rank's partial
  // sums when the layout shards the MLP).
  absl::Status Mlp(int layer, int rows, const void* x, void* out);
  // The routing of MoE layer `layer` over router logits [num_tokens, n_routed_experts] (f32)
  // into ids / weights [num_tokens, num_experts_per_tok] (global expert ids).
  kernels::MoeRoutingParams RoutingParams(int layer, int num_tokens, const float* logits,
                                          int32_t* ids, float* weights) const;
  // expert_shard.cc: the routed experts of MoeExperts params `e` (global expert ids, this
  // rank's intermediate slice), through this rank's shard of the experts.
  absl::Status RunRoutedExperts(kernels::MoeExpertsParams e);

  // parallel_step.cc: the collectives of a sharded layout around the single-rank blocks.
  // Every one is a no-op (no communicator call) when the layout has one rank.
  // Start of a step: with data-parallel attention, every rank's token and logit-row counts.
  absl::Status GatherStepCounts(const BatchPlan& plan);
  // out [T, hidden]: o_proj's partial sums, all-reduced under tensor-parallel attention.
  absl::Status ReduceAttentionOutput(int T, void* out);
  // The feed-forward block over this rank's T tokens: Mlp plus the collectives (all-reduce,
  // or all-gather of every rank's tokens and reduce-scatter of the sums).
  absl::Status ParallelMlp(int layer, int T, const void* y, void* out);
  // logits [rows, vocab] f32 of `picked` [rows, hidden]: the vocab-parallel LM head.
  absl::Status LmHead(const void* picked, int rows, float* logits);

  // Scratch of the current step (see ScratchArena); INTERNAL if the plan undercounted.
  absl::StatusOr<void*> Scratch(size_t bytes, const char* what) { return scratch_.Allocate(bytes, what); }
  // Activation scratch of `elements` elements of ops_.dtype.
  absl::StatusOr<void*> ScratchAct(int64_t elements, const char* what) {
    return scratch_.Activations(elements, what);
  }
  // Bytes of scratch one Forward needs at most, for the engine's limits.
  absl::StatusOr<size_t> ForwardScratchBytes() const;
  const float* cos_sin() const {
    return rope_dev_.empty() ? rope_.cos_sin.data() : rope_dev_.as<const float>();
  }

  EngineOptions options_;
  ModelConfig config_;
  // The MLA widths as stored: each rounded up to a multiple of 8 (model/mla_dims.h).
  MlaDims dims_;
  // Whether the backend's kernels take dims_ in MHA form (mha_prefill) and in latent form
  // (mla_prefill, mla_decode, sparse_fwd, sparse_decode). Forward runs a batch in the other
  // form when its form cannot (both compute the same function); Create refuses a model
  // neither can run.
  bool mha_runs_ = true;
  bool latent_runs_ = true;
  kernels::KernelContext ctx_;
  ops::OpContext ops_;  // ctx_ plus the activation dtype
  BatchPlanner planner_;
  StepScratch scratch_;
  SamplingStep sampling_;
  DecodeGraphRunner decode_graphs_;
  DeviceBuffer rope_dev_; // kCuda: the cos/sin table on the device
  int max_pages_per_seq_ = 0;  // bound on BatchPlan::max_pages_per_seq
  int num_sms_ = 0;
  Stream stream_;               // kCuda: the engine's stream (graphs are captured from it)
  DeepseekWeights weights_;
  // This rank's layout (parallel_layout.h); attn_heads_ = the heads this rank attends with.
  ParallelLayout layout_;
  parallel::Collective* comm_ = nullptr;
  int attn_heads_ = 0;
  // Data-parallel attention: every rank's tokens and logit rows in the current step, and
  // the largest of each (the padded row count of the gathered buffers).
  std::vector<int32_t> step_tokens_;
  std::vector<int32_t> step_rows_;
  int step_max_tokens_ = 0;
  int step_max_rows_ = 0;
  void* dp_gathered_ = nullptr;  // [size * step_max_tokens_, hidden] for the current step
  RopeTable rope_;
  std::unique_ptr<KvPool> pool_;
  // Largest prefix piece (tokens per sequence) the MHA path decompresses at once (tests lower
  // it to exercise the multi-piece LSE merge on short prompts).
  int mha_prefix_piece_tokens_ = 4096;
  // DSA: width of an indexer key / query head as stored and given to the kernel: index_head_dim
  // on kCpu; on kCuda index_head_dim rounded up to the CUDA kernel's 64 or 128, the extra
  // values zero (so every score is unchanged).
  int index_key_dim_ = 0;
  size_t indexer_ws_bytes_ = 0;  // kCuda: the indexer's score workspace, planned at Create
  // Caps the query rows of one indexer launch (kCuda; tests lower it to exercise the
  // per-sequence query chunks); 0: as many rows as the workspace holds.
  int indexer_rows_cap_ = 0;
  // Tests: the top-k rows [T, index_topk] the indexer picked in indexer_probe_layer_ (sparse
  // eager steps only) are copied into *indexer_probe_ when it is set.
  int indexer_probe_layer_ = -1;
  std::vector<int32_t>* indexer_probe_ = nullptr;
  // The KV cache in its format (kv_cache/latent_kv_cache.h), over pool_.
  std::unique_ptr<LatentKvCache> cache_;
};

}  // namespace mlaserve::model
