#include "prefill_worker/prefill_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/common/page.h"

namespace mlaserve::prefill {

absl::Status ValidateSchedulerOptions(const PrefillSchedulerOptions& o) {
  if (o.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens is ", o.max_batch_tokens, "; it must be >= 1"));
  }
  if (o.chunk_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_size is ", o.chunk_size, "; it must be >= 1"));
  }
  if (o.max_batch_seqs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_seqs is ", o.max_batch_seqs, "; it must be >= 1"));
  }
  return absl::OkStatus();
}

PrefillScheduler::PrefillScheduler(PrefillSchedulerOptions options, model::KvPool* pool)
    : options_(options), pool_(pool) {}

PrefillScheduler::~PrefillScheduler() {
  for (auto& s : running_) pool_->Free(s->pages);
}


void PrefillScheduler::Add(std::shared_ptr<PrefillSequence> seq) {
  waiting_.push_back(std::move(seq));
}

bool PrefillScheduler::Remove(const std::string& id) {
  for (auto* q : {&running_, &waiting_}) {
    auto it = std::find_if(q->begin(), q->end(), [&](const auto& s) { return s->id == id; });
    if (it != q->end()) {
      pool_->Free((*it)->pages);
      (*it)->pages.clear();
      q->erase(it);
      return true;
    }
  }
  return false;
}

std::vector<PrefillChunk> PrefillScheduler::Schedule() {
  std::vector<PrefillChunk> batch;
  int budget = options_.max_batch_tokens;
  auto take = [&](const std::shared_ptr<PrefillSequence>& s) {
    const int remaining = static_cast<int>(s->tokens.size()) - s->num_computed;
    const int len = std::min({remaining, options_.chunk_size, budget});
    batch.push_back(PrefillChunk{s, s->num_computed, len, len == remaining});
    budget -= len;
  };
  for (auto& s : running_) {
    if (budget == 0 || static_cast<int>(batch.size()) == options_.max_batch_seqs) return batch;
    take(s);
  }
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(batch.size()) < options_.max_batch_seqs) {
    auto& s = waiting_.front();
    auto pages = pool_->Allocate(kernels::PagesFor(static_cast<int>(s->tokens.size())));
    if (!pages.ok()) break;  // wait for running prompts to finish and free theirs
    s->pages = std::move(*pages);
    running_.push_back(std::move(s));
    waiting_.pop_front();
    take(running_.back());
  }
  return batch;
}

std::vector<std::shared_ptr<PrefillSequence>> PrefillScheduler::Advance(
    const std::vector<PrefillChunk>& chunks) {
  for (const PrefillChunk& c : chunks) c.seq->num_computed = c.start + c.len;
  std::vector<std::shared_ptr<PrefillSequence>> finished;
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->done()) {
      pool_->Free((*it)->pages);
      (*it)->pages.clear();
      finished.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return finished;
}

int64_t PrefillScheduler::pending_tokens() const {
  int64_t n = 0;
  for (const auto* q : {&running_, &waiting_}) {
    for (const auto& s : *q) n += static_cast<int64_t>(s->tokens.size()) - s->num_computed;
  }
  return n;
}

}  // namespace mlaserve::prefill
