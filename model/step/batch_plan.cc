// BatchPlanner: the checks of a Forward's batch and its flattening (batch_plan.h).
#include "model/step/batch_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/types.h"

namespace mlaserve::model {

absl::StatusOr<BatchPlan> BatchPlanner::Plan(std::span<const SequenceChunk> batch) const {
  const ModelConfig& c = *config_;
  if (batch.empty()) return absl::InvalidArgumentError("Forward: the batch has no sequences");
  if (static_cast<int>(batch.size()) > limits_.max_batch_seqs) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: the batch has ", batch.size(),
                                                   " sequences; this engine accepts ",
                                                   limits_.max_batch_seqs, " (max_batch_seqs)"));
  }
  BatchPlan plan;
  plan.batch = static_cast<int>(batch.size());
  plan.cu_seqlens_q.push_back(0);
  plan.all_single_token = true;
  const int num_pages = limits_.num_pages;
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
  if (plan.total_tokens > limits_.max_batch_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: the batch has ", plan.total_tokens, " tokens; this engine accepts ",
                     limits_.max_batch_tokens, " (max_batch_tokens)"));
  }
  plan.block_table.assign(static_cast<size_t>(plan.batch) * plan.max_pages_per_seq, -1);
  for (int b = 0; b < plan.batch; ++b) {
    const int pages = kernels::PagesFor(plan.seqlens_k[b]);
    std::copy_n(batch[b].pages.begin(), pages,
                plan.block_table.begin() + static_cast<size_t>(b) * plan.max_pages_per_seq);
  }
  plan.sparse = c.has_indexer && plan.max_seqlen_k > c.index_topk;
  plan.fresh_from = plan.batch;
  while (plan.fresh_from > 0 && plan.start[plan.fresh_from - 1] == 0 &&
         plan.cu_seqlens_q[plan.fresh_from] - plan.cu_seqlens_q[plan.fresh_from - 1] > 1) {
    --plan.fresh_from;
  }
  if (plan.fresh_from > 0 && plan.fresh_from < plan.batch) {
    const int32_t base = plan.cu_seqlens_q[plan.fresh_from];
    for (int b = plan.fresh_from; b <= plan.batch; ++b) {
      plan.fresh_cu_seqlens_q.push_back(plan.cu_seqlens_q[b] - base);
    }
  }
  return plan;
}

namespace {

// Chunks [first, end) of `plan` as a plan of their own, its rows from the first of theirs: the
// host arrays' parts (cu_seqlens_q rebased; the block table keeps its row stride,
// max_pages_per_seq), the maxima over those chunks, and the device arrays at the same offsets,
// cu_seqlens_q there the leading part of the plan's (first 0) or the rebased copy the upload
// made of the fresh prompts' (first fresh_from, end batch).
BatchPlan ChunkRange(const BatchPlan& plan, int first, int end) {
  const int row0 = plan.cu_seqlens_q[first], row1 = plan.cu_seqlens_q[end];
  const size_t stride = plan.max_pages_per_seq;
  BatchPlan part;
  part.batch = end - first;
  part.token_ids.assign(plan.token_ids.begin() + row0, plan.token_ids.begin() + row1);
  part.positions.assign(plan.positions.begin() + row0, plan.positions.begin() + row1);
  part.slots.assign(plan.slots.begin() + row0, plan.slots.begin() + row1);
  for (int b = first; b <= end; ++b) part.cu_seqlens_q.push_back(plan.cu_seqlens_q[b] - row0);
  part.start.assign(plan.start.begin() + first, plan.start.begin() + end);
  part.seqlens_k.assign(plan.seqlens_k.begin() + first, plan.seqlens_k.begin() + end);
  part.max_pages_per_seq = plan.max_pages_per_seq;
  part.block_table.assign(plan.block_table.begin() + first * stride, plan.block_table.begin() + end * stride);
  part.sparse = plan.sparse;
  part.mha_provider = plan.mha_provider;
  part.total_tokens = row1 - row0;
  part.fresh_from = part.batch;
  part.all_single_token = true;
  for (int b = 0; b < part.batch; ++b) {
    const int n = part.cu_seqlens_q[b + 1] - part.cu_seqlens_q[b];
    part.max_seqlen_q = std::max(part.max_seqlen_q, n);
    part.max_seqlen_k = std::max(part.max_seqlen_k, part.seqlens_k[b]);
    part.max_prefix = std::max(part.max_prefix, part.start[b]);
    part.all_single_token = part.all_single_token && n == 1;
  }
  const BatchPlan::Device& d = plan.dev;
  part.dev.token_ids = d.token_ids + row0;
  part.dev.positions = d.positions + row0;
  part.dev.slots = d.slots + row0;
  part.dev.cu_seqlens_q = first == 0 ? d.cu_seqlens_q : d.fresh_cu_seqlens_q;
  part.dev.seqlens_k = d.seqlens_k + first;
  part.dev.block_table = d.block_table + first * stride;
  return part;
}

}  // namespace

void SplitAtFreshPrompts(BatchPlan* plan) {
  std::vector<BatchPlan> parts;
  parts.push_back(ChunkRange(*plan, 0, plan->fresh_from));
  parts.push_back(ChunkRange(*plan, plan->fresh_from, plan->batch));
  plan->parts = std::move(parts);
}

std::vector<int32_t> ReferencedPages(const BatchPlan& plan, int num_pages) {
  std::vector<uint8_t> seen(num_pages, 0);
  std::vector<int32_t> pages;
  for (int b = 0; b < plan.batch; ++b) {
    const int n = kernels::PagesFor(plan.seqlens_k[b]);
    for (int i = 0; i < n; ++i) {
      const int32_t p = plan.block_table[static_cast<size_t>(b) * plan.max_pages_per_seq + i];
      if (p >= 0 && !seen[p]) {
        seen[p] = 1;
        pages.push_back(p);
      }
    }
  }
  return pages;
}

}  // namespace mlaserve::model
