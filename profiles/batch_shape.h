// The shape of a prefill batch as the attention-path choice sees it: per sequence, how many
// tokens are already cached (prefix) and how many this step computes (extend).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

namespace mlaserve::profiles {

struct SequenceShape {
  int64_t prefix = 0;  // cached positions [0, prefix)
  int64_t extend = 0;  // positions [prefix, prefix + extend) computed now (>= 1)
};

// A fresh prompt: nothing cached and more than one token (a one-token chunk attends like a
// decode row). Schedulers list a step's fresh prompts after its other chunks, so the attention
// can split there (model::AttentionForm::kSplit; the policy's SplitPoint).
inline bool IsFreshPrompt(const SequenceShape& q) { return q.prefix == 0 && q.extend >= 2; }

struct BatchStats {
  int batch = 0;
  int64_t sum_prefix = 0;
  int64_t sum_extend = 0;  // = query rows of the batch
  // se = Σ seq_len · extend_len with seq_len = prefix + extend (SGLang PR 9551's statistic).
  int64_t se = 0;
  int64_t max_seq_len = 0;
};

inline BatchStats ComputeBatchStats(std::span<const SequenceShape> batch) {
  BatchStats s;
  s.batch = static_cast<int>(batch.size());
  for (const SequenceShape& q : batch) {
    s.sum_prefix += q.prefix;
    s.sum_extend += q.extend;
    s.se += (q.prefix + q.extend) * q.extend;
    s.max_seq_len = std::max(s.max_seq_len, q.prefix + q.extend);
  }
  return s;
}

}  // namespace mlaserve::profiles
