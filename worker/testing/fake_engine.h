// FakeEngine: a deterministic model::Engine over a real KvPool, for worker tests.
//
// Forward writes, for every token at position p of layer l, a recognisable latent entry
// (token, p, l, ...) into the sequence's pages, and the "logits" of a chunk's last token put
// all mass on NextToken(tokens in the cache), a function of every cached entry: it reads the
// whole prefix back from the pool and checks each entry, so a decode over KV that arrived
// incomplete or wrong fails (INTERNAL naming layer and position) or yields other tokens than
// a local run. Greedy decoding thus has one right answer, computable with ExpectedTokens().
//
// With data_ranks > 1 it plays a data-parallel-attention engine (docs/parallel.md): one pool
// per rank, and each chunk's entries are written to and read from its rank's pool, so KV that
// landed in another rank's pool than the chunk's reads back as corrupt. ForwardStreamingRanks
// then runs each rank's chunks on a thread of its own, handing each rank's layers over as
// it writes them, as a data-parallel ParallelEngine does.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "model/engine.h"

namespace mlaserve::testing {

struct FakeEngineOptions {
  int num_layers = 3;
  int num_pages = 64;
  int vocab_size = 64;
  int max_position_embeddings = 4096;
  std::vector<int32_t> eos_token_ids = {};  // none: tests set stop ids explicitly
  int data_ranks = 1;  // pools of num_pages pages each
};

class FakeEngine final : public model::Engine {
 public:
  static std::unique_ptr<FakeEngine> Create(const FakeEngineOptions& options = {});

  const model::ModelConfig& config() const override { return config_; }
  kernels::Backend backend() const override { return kernels::Backend::kCpu; }
  model::KvPool& kv_pool() override { return *pools_[0]; }
  int data_ranks() const override { return static_cast<int>(pools_.size()); }
  model::KvPool& rank_pool(int rank) override { return *pools_[rank]; }

  // Prompt rows are scored against the fake's one-hot rows (see FinishForward); with data
  // ranks > 1 refused as a data-parallel engine refuses them.
  absl::Status CheckPromptLogprobs() const override;
  absl::StatusOr<model::ForwardResult> Forward(std::span<const model::SequenceChunk> batch,
                                               model::AttentionPath path,
                                               const model::LayerDoneFn& on_layer_done) override;
  absl::StatusOr<model::ForwardResult> ForwardStreamingRanks(
      std::span<const model::SequenceChunk> batch, model::AttentionPath path,
      const model::RankLayerDoneFn& on_rank_layer_done) override;

  // Runs before every Forward (tests block here to hold a step, or count batches).
  void set_before_forward(std::function<void(std::span<const model::SequenceChunk>)> hook);
  // Data ranks > 1, ForwardStreamingRanks: runs on rank `rank`'s thread after each
  // on_rank_layer_done(rank, layer) returned, before the rank writes its next layer (tests
  // hold a rank there to see what left while it computes).
  void set_after_rank_layer(std::function<void(int rank, int layer)> hook);
  int forward_calls() const;
  // Chunk lengths of every Forward so far, one vector per call.
  std::vector<std::vector<int>> batch_shapes() const;
  // The chunks' ranks of every Forward so far, one vector per call.
  std::vector<std::vector<int>> batch_ranks() const;
  // The attention path each Forward so far was asked.
  std::vector<model::AttentionPath> asked_paths() const;

  // The token the fake model predicts after `sequence` (prompt + generated so far).
  static int32_t NextToken(std::span<const int32_t> sequence, int vocab_size);
  // The fake's logits after `sequence`: kPredictedLogit at NextToken, 0 elsewhere.
  static constexpr float kPredictedLogit = 30.0f;
  static std::vector<float> LogitsAfter(std::span<const int32_t> sequence, int vocab_size);
  // Greedy continuation of `prompt`: n tokens.
  static std::vector<int32_t> ExpectedTokens(std::span<const int32_t> prompt, int n,
                                             int vocab_size);

 private:
  FakeEngine() = default;
  // Forward's parts: records the batch, runs the hook and checks the chunks; writes one
  // layer's entries of a chunk; reads every want_logits chunk back into its logits row.
  absl::Status BeginForward(std::span<const model::SequenceChunk> batch);
  absl::Status WriteLayer(const model::SequenceChunk& c, int layer);
  absl::StatusOr<model::ForwardResult> FinishForward(std::span<const model::SequenceChunk> batch,
                                                     model::AttentionPath path);

  model::ModelConfig config_;
  std::vector<std::unique_ptr<model::KvPool>> pools_;
  mutable absl::Mutex mu_;
  std::function<void(std::span<const model::SequenceChunk>)> before_forward_ ABSL_GUARDED_BY(mu_);
  std::function<void(int, int)> after_rank_layer_ ABSL_GUARDED_BY(mu_);
  int forward_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<int>> shapes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int>> ranks_ ABSL_GUARDED_BY(mu_);
  std::vector<model::AttentionPath> paths_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::testing
