// BatchPlanner: the checks of a Forward's batch and its flattening (batch_plan.h).
#include "model/step/batch_plan.h"

#include <algorithm>

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
  return plan;
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
