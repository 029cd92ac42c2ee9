// DeepseekEngineTestPeer: what tests change inside a DeepseekEngine, kept off its public
// interface (the Envoy / gRPC "test peer" idiom: a friend class only test code includes).
//
// The knobs change how a step is cut into kernel launches, never what it computes, so tests
// use them to reach code paths that the fixtures' short prompts would not (several MHA prefix
// pieces, indexer query chunks); the probe reads a value inside a step.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

#include "model/deepseek_engine.h"

namespace mlaserve::model::testing {

class DeepseekEngineTestPeer {
 public:
  explicit DeepseekEngineTestPeer(DeepseekEngine& engine) : engine_(engine) {}

  // The largest prefix piece (tokens per sequence) the MHA form decompresses at once
  // (default 4096): lower, a short prefix is merged from several pieces by their LSE.
  void set_mha_prefix_piece_tokens(int tokens) {
    engine_.layer_ctx_.launch.mha_prefix_piece_tokens = tokens;
  }

  // DSA on kCuda: caps the query rows of one indexer launch (at most what the workspace
  // planned at Create holds; 0 = that): lower, one-chunk prefills use per-sequence query chunks.
  void set_indexer_rows_per_call(int rows) {
    engine_.layer_ctx_.launch.indexer_rows_per_launch = rows;
  }

  // The CPU backend runs decode steps as graph steps do, padded to their bucket (an idle
  // data-parallel rank: padding rows only), with a sharded step's counts taken as known
  // (parallel_graph_plan.h), eagerly -- everything of a graph step but the capture. Takes a
  // padding page from the pool, as the CUDA engine does at Create.
  absl::Status PadDecodeStepsOnCpu() {
    absl::StatusOr<std::vector<int32_t>> page = engine_.pool_->Allocate(1);
    if (!page.ok()) return page.status();
    engine_.decode_graphs_ =
        DecodeGraphRunner(engine_.ctx_, /*available=*/true, engine_.options_.max_batch_seqs,
                          engine_.layer_ctx_.max_pages_per_seq, (*page)[0]);
    return absl::OkStatus();
  }

  // --moe-dispatch all-to-all: the MoE layers this rank ran through each exchange (fixed
  // capacity or counted) since Create.
  const ParallelStep::AllToAllLayers& all_to_all_layers() const {
    return engine_.parallel_.all_to_all_layers();
  }

  // At the following eager Forward calls, copies the top-k rows [T, index_topk] the indexer
  // picked in `layer` (sparse batches only) into *out. Null turns the probe off.
  void set_indexer_probe(int layer, std::vector<int32_t>* out) {
    for (int l = 0; l < static_cast<int>(engine_.layers_.size()); ++l) {
      DsaIndexer* indexer = engine_.layers_[l].attention.indexer();
      if (indexer != nullptr) indexer->probe_ = l == layer ? out : nullptr;
    }
  }

 private:
  DeepseekEngine& engine_;
};

}  // namespace mlaserve::model::testing
