// ParallelEngine: one worker's Engine over N GPUs of one host, one thread per GPU
// (docs/parallel.md argues threads over processes). Each rank is a DeepseekEngine holding its
// shard of the model (parallel_layout.h) on its own device and stream, joined by a
// Collective: NCCL on kCuda, the in-process fake on kCpu (so the CPU backend serves a
// multi-rank layout too, which is how CI runs it).
//
// Serving code sees one Engine.
//   Tensor-parallel attention: Forward runs the batch on every rank at once (every rank the
//   same batch) and returns rank 0's logits (ForwardInto: rank 0 writes the caller's result).
//   kv_pool() is rank 0's pool; the latent cache is replicated, so every page written into it
//   (a KV import) is written into every rank's pool as well (KvPool::AddReplica), and reading
//   rank 0's pages (a KV export) reads what every rank holds. data_ranks() is 1.
//   Data-parallel attention: data_ranks() is N and every rank has a pool of its own
//   (rank_pool(r)). Forward splits the batch by SequenceChunk::rank, each rank runs its own
//   chunks (a rank without any joins the step's collectives with an empty batch), and the
//   rows come back in batch order (ForwardInto gathers them into the caller's result). The
//   scheduler decides which rank a request lives on.
//
// ForwardInto is the step; Forward wraps it. The engine keeps each rank's chunks and result
// from step to step, so a step that fits the rows of an earlier one allocates no host storage
// for its result: not the ranks' (reused here), not the caller's (reused by the caller).
//
// on_layer_done runs on rank 0's thread while the scheduler thread waits in Forward (tensor
// attention), or on the calling thread for every layer after the step (data attention).
// ForwardStreamingRanks (data attention) instead runs on_rank_layer_done(r, l) on rank r's
// thread as soon as rank r enqueued layer l, so each rank's pages can leave while its later
// layers compute; callbacks of different ranks run at once. If a callback fails, the other
// ranks still finish the step (the collectives must match), and the call returns the
// callback's error (the first rank's, in rank order). Any other failure after the batch was
// checked leaves the collectives unusable: Forward aborts the group and every later Forward
// fails.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deepseek_engine.h"
#include "model/engine.h"
#include "parallel/collective.h"

namespace mlaserve::model {

class ParallelEngine final : public Engine {
 public:
  // options.parallel.size ranks (>= 2) with options.parallel's attention and MoE layouts;
  // rank r on device options.device + r (kCuda). options.parallel.rank and .comm are ignored
  // (the engine makes one communicator per rank). Every rank's pool has
  // options.num_kv_pages pages; with 0, the fewest that any rank's device fits
  // (model/kv_pool_sizing.h).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~ParallelEngine() override;

  const ModelConfig& config() const override { return ranks_[0]->config(); }
  kernels::Backend backend() const override { return ranks_[0]->backend(); }
  KvPool& kv_pool() override { return ranks_[0]->kv_pool(); }
  int data_ranks() const override { return layout().attention_dp() ? ranks() : 1; }
  KvPool& rank_pool(int rank) override { return ranks_[rank]->kv_pool(); }
  void* device_stream() const override { return ranks_[0]->device_stream(); }
  void* rank_stream(int rank) const override { return ranks_[rank]->device_stream(); }
  int ranks() const { return static_cast<int>(ranks_.size()); }
  const ParallelLayout& layout() const { return ranks_[0]->layout(); }

  // Tensor attention: every rank scores the same rows, its LM head's collectives in step with
  // the others'; data attention: refused (DeepseekEngine::CheckPromptLogprobs).
  absl::Status CheckPromptLogprobs() const override { return ranks_[0]->CheckPromptLogprobs(); }
  absl::StatusOr<ForwardResult> Forward(std::span<const SequenceChunk> batch,
                                        AttentionPath path = AttentionPath::kAuto,
                                        const LayerDoneFn& on_layer_done = nullptr) override;
  absl::Status ForwardInto(std::span<const SequenceChunk> batch, AttentionPath path,
                           const LayerDoneFn& on_layer_done, ForwardResult* result) override;
  absl::StatusOr<ForwardResult> ForwardStreamingRanks(
      std::span<const SequenceChunk> batch, AttentionPath path,
      const RankLayerDoneFn& on_rank_layer_done) override;

  // Rank r's engine (diagnostics and tests; the ranks step only through Forward).
  DeepseekEngine& rank_engine(int r) { return *ranks_[r]; }
  // The storage rank r's last step wrote its result into (tests: it is kept from step to
  // step). Under tensor attention rank 0 writes the caller's result, not this one.
  const ForwardResult& rank_result(int r) const { return rank_results_[r]; }
  // CUDA graphs for decode steps on every rank (on by default on kCuda; parallel_graph_plan.h).
  void set_decode_graphs(bool on) {
    for (auto& r : ranks_) r->set_decode_graphs(on);
  }
  // Steps every rank ran as a graph step (padded to one bucket), since Create.
  int64_t graph_steps() const { return graph_steps_; }

  class RankThread;  // parallel_engine.cc

 private:
  ParallelEngine() = default;
  // FAILED_PRECONDITION naming broken_ once the group's collectives are unusable.
  absl::Status CheckUsable() const;
  // Runs job(r) on every rank's thread and waits for all.
  void OnRanks(const std::function<void(int)>& job);
  // Runs batches[r] on rank r into *results[r] with layer callback layer_done[r] (may be
  // null), every rank at once; the first rank error (not the aborts it caused) breaks the
  // group.
  absl::Status StepRanks(const std::vector<std::span<const SequenceChunk>>& batches,
                         AttentionPath path, const std::vector<LayerDoneFn>& layer_done,
                         const std::vector<ForwardResult*>& results);
  // After a graph step: where some ranks captured the step's graph and others could not, every
  // rank runs that key eagerly from now on, so the ranks keep enqueueing their collectives
  // alike (a replaying rank enqueues none from the host).
  void AgreeOnCapture();
  // Data attention: `after_step` sees every layer once the step is done on every rank;
  // `per_rank` sees each rank's layers on that rank's thread (at most one of them is set).
  // The rows go into *result in batch order.
  absl::Status ForwardData(std::span<const SequenceChunk> batch, AttentionPath path,
                           const LayerDoneFn& after_step, const RankLayerDoneFn& per_rank,
                           ForwardResult* result);
  // Data attention, after a step: rank_results_' rows into *out in batch order (its storage
  // kept where the rows fit).
  void GatherRows(std::span<const SequenceChunk> batch, bool sampled, ForwardResult* out) const;

  std::vector<std::unique_ptr<RankThread>> threads_;
  std::vector<std::unique_ptr<parallel::Collective>> comms_;
  std::vector<std::unique_ptr<DeepseekEngine>> ranks_;
  // Kept across steps for their storage (only the stepping thread touches them): under data
  // attention each rank's chunks and result; under tensor attention ranks 1.. write their
  // (unused) results here, rank 0 the caller's.
  std::vector<std::vector<SequenceChunk>> rank_chunks_;
  std::vector<ForwardResult> rank_results_;
  absl::Status broken_;  // sticky: why the group's collectives are unusable
  int max_batch_seqs_ = 0;
  int64_t graph_steps_ = 0;
};

}  // namespace mlaserve::model
