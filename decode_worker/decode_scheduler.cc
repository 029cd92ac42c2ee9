#include "decode_worker/decode_scheduler.h"

#include <algorithm>

#include "profiles/batch_shape.h"

namespace mlaserve::decode {

std::optional<DecodeFinish> CheckStop(const StopRules& rules, int32_t token, int generated) {
  auto in = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  if (in(rules.stop_token_ids) || (!rules.ignore_eos && in(rules.eos_token_ids))) {
    DecodeFinish f;
    f.reason = FinishReason::kStop;
    f.matched_token = token;
    return f;
  }
  if (generated >= rules.max_new_tokens) {
    DecodeFinish f;
    f.reason = FinishReason::kLength;
    return f;
  }
  return std::nullopt;
}

void DecodeScheduler::Add(std::shared_ptr<DecodeSequence> seq) {
  running_.push_back(std::move(seq));
}

std::shared_ptr<DecodeSequence> DecodeScheduler::Remove(const std::string& id) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& s) { return s->id == id; });
  if (it == running_.end()) return nullptr;
  auto s = std::move(*it);
  running_.erase(it);
  return s;
}

int DecodeScheduler::num_running(int rank) const {
  return static_cast<int>(std::count_if(running_.begin(), running_.end(),
                                        [rank](const auto& s) { return s->rank == rank; }));
}

std::vector<DecodeChunk> DecodeScheduler::Schedule() const {
  std::vector<DecodeChunk> batch;
  std::vector<int> budget(options_.ranks, options_.max_batch_tokens);
  for (const auto& s : running_) {
    if (s->prefilling() || budget[s->rank] == 0) continue;
    batch.push_back(DecodeChunk{s.get(), s->num_computed, 1, true});
    budget[s->rank] -= 1;
  }
  const size_t decode_rows = batch.size();
  for (const auto& s : running_) {
    if (!s->prefilling() || budget[s->rank] == 0) continue;
    const int remaining = s->prefill_len - s->num_computed;
    const int len = std::min({remaining, options_.chunk_size, budget[s->rank]});
    batch.push_back(DecodeChunk{s.get(), s->num_computed, len, len == remaining});
    budget[s->rank] -= len;
  }
  // Prompts' later chunks (and one-token chunks) before the fresh prompts, in running order
  // within each kind: the engine attends a batch whose fresh prompts come last in two forms,
  // its fresh prompts in the cheaper MHA form (model::AttentionForm::kSplit).
  std::stable_partition(batch.begin() + static_cast<std::ptrdiff_t>(decode_rows), batch.end(),
                        [](const DecodeChunk& c) { return !profiles::IsFreshPrompt({c.start, c.len}); });
  return batch;
}

}  // namespace mlaserve::decode
