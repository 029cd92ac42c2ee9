// BatchPlan: one Forward's batch, checked and flattened once on the host (FlashAttention varlen
// conventions), and the BatchPlanner that builds it. Every later stage of a step (the plan
// upload, attention, the KV cache, decode graphs) reads the batch only through the plan.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/engine.h"
#include "model/loader/config.h"

namespace mlaserve::model {

struct BatchPlan {
  int batch = 0;
  int total_tokens = 0;
  std::vector<int32_t> token_ids;     // [T]
  std::vector<int32_t> positions;     // [T]
  std::vector<int64_t> slots;         // [T] cache slot of every new token
  std::vector<int32_t> cu_seqlens_q;  // [B + 1]
  std::vector<int32_t> start;         // [B] cached prefix length
  std::vector<int32_t> seqlens_k;     // [B] start + chunk length
  std::vector<int32_t> block_table;   // [B, max_pages_per_seq], unused entries -1
  int max_pages_per_seq = 0;
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  int max_prefix = 0;
  bool all_single_token = false;
  // DSA: attention runs sparse over the indexer's top-k. The planner sets it when some
  // sequence is longer than index_topk; the attention-form choice may set it too (fp8 cache).
  bool sparse = false;
  // The MHA provider Forward was asked for by kMhaOurs / kMhaCudnn (AttentionForms::Resolve);
  // kAuto: none, the engine's own.
  kernels::MhaPrefillProvider mha_provider = kernels::MhaPrefillProvider::kAuto;
  std::vector<int32_t> logit_rows;  // token rows (in [0, T)) whose logits are returned
  // The first of the trailing chunks that are fresh prompts (start 0, more than one token):
  // chunks [fresh_from, batch) are such, the one before is not (it reads a cached prefix or is
  // a single token); batch when the last chunk is not fresh. A batch with both kinds, the
  // fresh ones last (a decode worker's step with local prefill), may attend in two forms:
  // AttentionForm::kSplit. fresh_cu_seqlens_q: cu_seqlens_q of those chunks alone (rebased to
  // their first row), filled by the planner where 0 < fresh_from < batch and kept by
  // AttentionForms::Resolve only where the step runs kSplit.
  int fresh_from = 0;
  std::vector<int32_t> fresh_cu_seqlens_q;
  // Where fresh_cu_seqlens_q is filled: chunks [0, fresh_from) and the fresh prompts as plans
  // of their own, made once a step by the upload (StepScratch::UploadPlan, SplitAtFreshPrompts),
  // what the layers of an AttentionForm::kSplit step read; empty otherwise.
  std::vector<BatchPlan> parts;

  // The arrays above as the kernels read them: the host vectors on kCpu, a device copy
  // uploaded once per Forward on kCuda (StepScratch::UploadPlan).
  struct Device {
    const int32_t* token_ids = nullptr;
    const int32_t* positions = nullptr;
    const int64_t* slots = nullptr;
    const int32_t* cu_seqlens_q = nullptr;
    const int32_t* seqlens_k = nullptr;
    const int32_t* block_table = nullptr;
    const int32_t* fresh_cu_seqlens_q = nullptr;  // where fresh_cu_seqlens_q is filled
  } dev;
};

// Sets plan->parts, where 0 < plan->fresh_from < plan->batch, from the uploaded plan (its dev
// arrays set): chunks [0, fresh_from) and [fresh_from, batch), each a plan of its own whose rows
// start at its first chunk's (cu_seqlens_q rebased; the block table keeps its row stride,
// max_pages_per_seq), with the maxima over its chunks and the device arrays at the same offsets
// (the fresh part's cu_seqlens_q: dev.fresh_cu_seqlens_q).
void SplitAtFreshPrompts(BatchPlan* plan);

// Sets a paged-attention kernel's view of `plan`'s batch on `p` (MlaParams, SparseMlaParams,
// IndexerParams, ...): batch, block table, cu_seqlens_q, seqlens_k (the kernels' device arrays,
// plan.dev), max_pages_per_seq, max_seqlen_q, and max_seqlen_k where P has it.
template <typename P>
void SetPagedBatch(const BatchPlan& plan, P* p) {
  p->batch = plan.batch;
  p->block_table = plan.dev.block_table;
  p->max_pages_per_seq = plan.max_pages_per_seq;
  p->cu_seqlens_q = plan.dev.cu_seqlens_q;
  p->seqlens_k = plan.dev.seqlens_k;
  p->max_seqlen_q = plan.max_seqlen_q;
  if constexpr (requires { p->max_seqlen_k; }) p->max_seqlen_k = plan.max_seqlen_k;
}

// The engine's bounds a batch is checked against.
struct BatchLimits {
  int max_batch_tokens = 0;
  int max_batch_seqs = 0;
  int num_pages = 0;  // page ids are in [0, num_pages)
};

class BatchPlanner {
 public:
  BatchPlanner() = default;
  // `config` must outlive the planner.
  BatchPlanner(const ModelConfig& config, BatchLimits limits) : config_(&config), limits_(limits) {}

  // The plan of `batch`, or INVALID_ARGUMENT naming the bad value: an empty batch or chunk, a
  // negative start_pos, a token id outside the vocabulary, a position at or past
  // max_position_embeddings, pages that don't cover a chunk or lie outside the pool, more
  // sequences or tokens than the limits. Pure host work: the ranks of a ParallelEngine run it
  // before a step they must all finish.
  absl::StatusOr<BatchPlan> Plan(std::span<const SequenceChunk> batch) const;

 private:
  const ModelConfig* config_ = nullptr;
  BatchLimits limits_;
};

// The distinct pool pages `plan`'s block table references (pages in [0, num_pages)), in the
// order they first appear.
std::vector<int32_t> ReferencedPages(const BatchPlan& plan, int num_pages);

}  // namespace mlaserve::model
