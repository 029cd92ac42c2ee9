#include "prefill_worker/prefill_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/common/page.h"
#include "profiles/batch_shape.h"

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

PrefillScheduler::PrefillScheduler(PrefillSchedulerOptions options,
                                   std::vector<model::KvPool*> pools)
    : options_(options), pools_(std::move(pools)) {}

PrefillScheduler::~PrefillScheduler() {
  for (auto& s : running_) pools_[s->rank]->Free(s->pages);
}

int PrefillScheduler::num_running(int rank) const {
  return static_cast<int>(std::count_if(running_.begin(), running_.end(),
                                        [rank](const auto& s) { return s->rank == rank; }));
}


void PrefillScheduler::Add(std::shared_ptr<PrefillSequence> seq) {
  waiting_.push_back(std::move(seq));
}

bool PrefillScheduler::Remove(const std::string& id) {
  for (auto* q : {&running_, &waiting_}) {
    auto it = std::find_if(q->begin(), q->end(), [&](const auto& s) { return s->id == id; });
    if (it != q->end()) {
      pools_[(*it)->rank]->Free((*it)->pages);
      (*it)->pages.clear();
      q->erase(it);
      return true;
    }
  }
  return false;
}

std::vector<PrefillChunk> PrefillScheduler::Schedule() {
  std::vector<PrefillChunk> batch;
  const int ranks = this->ranks();
  std::vector<int> budget(ranks, options_.max_batch_tokens), seqs(ranks, 0);
  auto has_room = [&](int r) { return budget[r] > 0 && seqs[r] < options_.max_batch_seqs; };
  auto take = [&](const std::shared_ptr<PrefillSequence>& s) {
    const int remaining = static_cast<int>(s->tokens.size()) - s->num_computed;
    const int len = std::min({remaining, options_.chunk_size, budget[s->rank]});
    batch.push_back(PrefillChunk{s, s->num_computed, len, len == remaining});
    budget[s->rank] -= len;
    seqs[s->rank] += 1;
  };
  for (auto& s : running_) {
    if (has_room(s->rank)) take(s);
  }
  while (!waiting_.empty()) {
    auto& s = waiting_.front();
    const int n = static_cast<int>(s->tokens.size());
    const int need = kernels::PagesFor(n);
    const int max_cached = model::KvPool::MaxReusedPages(n);
    int rank = -1, rank_cached = 0;
    for (int r = 0; r < ranks; ++r) {
      int held = 0;  // cached pages other prompts hold: taking them costs no free page
      const int cached = pools_[r]->CachedPrefixPages(s->tokens, max_cached, s->cache_salt, &held);
      const int free = pools_[r]->free_pages();
      if (!has_room(r) || free < need - held) continue;
      if (rank < 0 || cached > rank_cached ||
          (cached == rank_cached &&
           (free > pools_[rank]->free_pages() ||
            (free == pools_[rank]->free_pages() && num_running(r) < num_running(rank))))) {
        rank = r;
        rank_cached = cached;
      }
    }
    // None: wait for running prompts to finish and free theirs (or for the next step's budget).
    if (rank < 0) break;
    std::vector<int32_t> pages =
        pools_[rank]->AcquirePrefix(s->tokens, max_cached, s->cache_salt);
    auto rest = pools_[rank]->Allocate(need - static_cast<int>(pages.size()));
    if (!rest.ok()) {  // the pool changed since it was counted (a held page came free)
      pools_[rank]->Free(pages);
      break;
    }
    pages.insert(pages.end(), rest->begin(), rest->end());
    s->cached = static_cast<int>(pages.size() - rest->size()) * kernels::kPageSize;
    s->num_computed = s->cached;
    s->pages = std::move(pages);
    s->rank = rank;
    running_.push_back(std::move(s));
    waiting_.pop_front();
    take(running_.back());
  }
  // Prompts' later chunks (and one-token prompts) before the fresh prompts, in the order above
  // within each kind (the budget was given in that order): the attention-path policy and the
  // engine can then attend the fresh prompts in the cheaper MHA form while the chunks that read
  // a prefix stay in latent form (profiles::PrefillPath::kSplit, model::AttentionPath::kSplit).
  std::stable_partition(batch.begin(), batch.end(), [](const PrefillChunk& c) {
    return !profiles::IsFreshPrompt({c.start, c.len});
  });
  return batch;
}

std::vector<std::shared_ptr<PrefillSequence>> PrefillScheduler::Advance(
    const std::vector<PrefillChunk>& chunks) {
  // Each chunk's whole pages are published as soon as it computed them, so a prompt with the
  // same start that arrives while this one is still being prefilled takes them (a removed
  // sequence has no pages left: nothing to publish).
  for (const PrefillChunk& c : chunks) {
    c.seq->num_computed = c.start + c.len;
    Publish(*c.seq);
  }
  std::vector<std::shared_ptr<PrefillSequence>> finished;
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->done()) {
      pools_[(*it)->rank]->Free((*it)->pages);
      (*it)->pages.clear();
      finished.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return finished;
}

void PrefillScheduler::Publish(PrefillSequence& seq) {
  pools_[seq.rank]->PublishPrefix(seq.tokens, seq.pages, seq.num_computed / kernels::kPageSize,
                                  seq.cache_salt, &seq.published);
}

int64_t PrefillScheduler::pending_tokens() const {
  int64_t n = 0;
  for (const auto* q : {&running_, &waiting_}) {
    for (const auto& s : *q) n += static_cast<int64_t>(s->tokens.size()) - s->num_computed;
  }
  return n;
}

}  // namespace mlaserve::prefill
