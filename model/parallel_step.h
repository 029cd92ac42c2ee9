// ParallelStep: the collectives of a sharded layout (parallel_layout.h, docs/parallel.md) around
// the single-rank blocks of a DeepseekEngine step. With one rank every function is the
// single-rank block itself: no communicator call, no extra copy.
//
// Tensor-parallel attention: every rank has the step's T tokens. o_proj and the feed-forward
// block produce partial sums, all-reduced in place.
// Data-parallel attention: rank r has its own T_r tokens. The feed-forward input of every rank
// is all-gathered into [size, T_max, hidden] (padded rows zero), every rank computes its partial
// sums for all of them, and a reduce-scatter hands each rank the sums of its own rows.
// Expert parallel with --moe-dispatch all-to-all: an MoE block runs on each rank's own rows
// (data attention: its tokens; tensor attention: its 1/size slice of the shared rows, the
// complete outputs then all-gathered) and exchanges them with the ranks of their experts.
// Decode-sized steps (at most max_batch_seqs rows a rank) and every graph step
// (set_static_tokens) exchange fixed-capacity blocks, which need no count on the host
// (FeedForward::ForwardAllToAllFixed); larger eager steps (prefill) exchange exactly the
// routed rows, their counts through the host (FeedForward::ForwardAllToAll).
// The LM head is vocab parallel under both: logits [rows, vocab_rows] per rank, all-gathered,
// and each rank's rows copied out of every shard.
//
// Per-step state (the ranks' token and row counts, the gathered buffer) is set by BeginStep and
// read by the other calls of the same step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deepseek_weights.h"
#include "model/layers/feed_forward.h"
#include "model/layers/layer_context.h"
#include "parallel/collective.h"

namespace mlaserve::model {

class ParallelStep {
 public:
  ParallelStep() = default;
  // `context` outlives this; `comm` is this rank's communicator (null with one rank).
  ParallelStep(const LayerContext* context, parallel::Collective* comm)
      : ctx_(context), comm_(comm) {}

  // Step scratch of the collectives at most (sharded layouts only).
  static size_t ScratchBytes(const LayerContext& context);

  // Start of a step: with data-parallel attention, every rank's token and logit-row counts, and
  // the gathered feed-forward input (its padding rows zero).
  absl::Status BeginStep(const BatchPlan& plan);
  // A graph step (parallel_graph_plan.h): every rank's plan is padded to `tokens` rows, all of
  // them logit rows, so BeginStep takes the counts as known instead of exchanging them (the
  // exchange syncs with the host, which a CUDA graph cannot contain). 0: exchange them (eager).
  void set_static_tokens(int tokens) { static_tokens_ = tokens; }
  // out [T, hidden]: o_proj's partial sums, all-reduced under tensor-parallel attention.
  absl::Status ReduceAttentionOutput(int T, void* out);
  // The feed-forward block over this rank's T tokens, with its collectives (all-reduce, or
  // all-gather of every rank's tokens and reduce-scatter of the sums).
  absl::Status RunFeedForward(FeedForward& block, int T, const void* y, void* out);
  // MoE layers run through each all-to-all exchange since the engine was made (tests).
  struct AllToAllLayers {
    int64_t fixed = 0;    // fixed-capacity blocks
    int64_t counted = 0;  // exact rows, counts through the host
  };
  const AllToAllLayers& all_to_all_layers() const { return a2a_layers_; }
  // logits [rows, vocab] f32 of `picked` [rows, hidden]: the vocab-parallel LM head.
  absl::Status LmHead(const LinearWeight& lm_head, const void* picked, int rows, float* logits);

 private:
  absl::Status RunAllToAll(FeedForward& block, int T, const void* y, void* out);
  // Whether blocks of `capacity` rows (the largest share of any rank, the same on every rank)
  // go through the fixed-capacity exchange: always in a graph step, else when they are
  // decode-sized (at most max_batch_seqs rows), where the counted exchange's host sync per
  // layer would cost more than the padding.
  bool FixedCapacity(int capacity) const;
  // `rows` of this rank through the exchange FixedCapacity(capacity) picks.
  absl::Status DispatchAllToAll(FeedForward& block, int rows, int capacity, const void* x,
                                void* out);
  const LayerContext* ctx_ = nullptr;
  parallel::Collective* comm_ = nullptr;
  // Data-parallel attention: every rank's tokens and logit rows in the current step, and the
  // largest of each (the padded row count of the gathered buffers).
  std::vector<int32_t> step_tokens_;
  std::vector<int32_t> step_rows_;
  int step_max_tokens_ = 0;
  int step_max_rows_ = 0;
  void* dp_gathered_ = nullptr;  // [size * step_max_tokens_, hidden] for the current step
  int static_tokens_ = 0;
  AllToAllLayers a2a_layers_;
};

}  // namespace mlaserve::model
