// PrefillScheduler: which prompt chunks go into the next prefill forward.
//
// Chunked prefill in the manner of nano-vllm / SGLang: each step takes at most one chunk per
// sequence, at most `chunk_size` tokens each, `max_batch_tokens` in total and `max_batch_seqs`
// sequences. Sequences already started (holding pages) go first, in arrival order, so a long
// prompt keeps moving; then waiting sequences are admitted first-come first-served, each
// allocating the pages of its whole prompt on admission. When the pool cannot hold the next
// waiting prompt, admission stops (no overtaking, so a large prompt is not starved).
//
// Prefix cache (docs/serving.md "Prefix cache"; on where the pools have it enabled): on
// admission a prompt takes from its pool the cached pages of its longest run of leading whole
// pages that another prompt published, at most (length - 1) / 64 of them so that at least one
// token is computed (its logits give the first token), and allocates only the rest; it starts
// computing after them. A prompt publishes its whole pages as its chunks compute them (Advance),
// so a prompt with the same start may take them while the first is still being prefilled.
// Prompts share cached pages only with prompts of the same cache_salt.
//
// Data-parallel attention (docs/parallel.md): one pool per rank. A prompt is admitted to the
// rank with the most free pages that can hold it and still has budget (with a prefix cache:
// first the rank that caches most of its start; then the one running fewer prompts) and stays
// there; the token budget and sequence limit hold per rank, each rank's share of the batch
// being that rank's own batch.
//
// Not thread-safe: owned by the prefill loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/kv_pool.h"

namespace mlaserve::prefill {

struct PrefillSchedulerOptions {
  int max_batch_tokens = 8192;
  int chunk_size = 2048;
  int max_batch_seqs = 64;
};
absl::Status ValidateSchedulerOptions(const PrefillSchedulerOptions& options);

struct PrefillSequence {
  std::string id;
  std::vector<int32_t> tokens;  // the prompt
  // Its prefix-cache partition (api.proto cache_salt; empty: the shared default): it takes and
  // publishes cached pages under this salt only.
  std::string cache_salt;
  std::vector<int32_t> pages;   // all pages of the prompt, taken on admission
  int rank = 0;                 // data-parallel rank whose pool holds `pages` (0: one pool)
  int num_computed = 0;         // prompt tokens whose KV is in the pool
  int cached = 0;               // of those, taken from the prefix cache (whole pages, first)
  // How far the prompt's pages are published (Publish resumes there, not from page 0).
  model::KvPrefixCursor published;
  bool done() const { return num_computed == static_cast<int>(tokens.size()); }
};

struct PrefillChunk {
  // Shared: a request that fails during the step (its KV peer died, say) leaves the scheduler
  // and its runner while the step's chunks are still being processed; the chunk keeps the
  // sequence alive until Advance is done with it.
  std::shared_ptr<PrefillSequence> seq;
  int start = 0;  // first position of the chunk
  int len = 0;
  bool last = false;  // completes the prompt: its logits give the first token
};

class PrefillScheduler {
 public:
  PrefillScheduler(PrefillSchedulerOptions options, model::KvPool* pool)
      : PrefillScheduler(options, std::vector<model::KvPool*>{pool}) {}
  // One pool per data-parallel rank (Engine::rank_pool), same size each.
  PrefillScheduler(PrefillSchedulerOptions options, std::vector<model::KvPool*> pools);
  ~PrefillScheduler();  // frees the pages of every sequence still held

  void Add(std::shared_ptr<PrefillSequence> seq);
  // Drops a sequence (aborted / failed / finished) and frees its pages. False if unknown.
  bool Remove(const std::string& id);

  // schedule(): the next batch. The token budget goes to running sequences, then to newly
  // admitted ones; the batch lists the chunks that continue a prompt (start > 0) or are one
  // token first, then the fresh prompts (start 0, more than one token), each kind in that order
  // (so the policy can split the batch's attention: prefill_runner.cc).
  std::vector<PrefillChunk> Schedule();
  // After the batch ran: advances each chunk's sequence. Finished sequences are removed and
  // their pages freed (their KV has been shipped by then); returned so the caller can answer.
  std::vector<std::shared_ptr<PrefillSequence>> Advance(const std::vector<PrefillChunk>& chunks);
  // Publishes the whole pages a prompt has computed so far to its pool's prefix cache (Advance
  // does it after each chunk; for a caller that takes a prompt's pages before that). The pages'
  // KV writes must be complete or queued on the stream that later forwards follow. Each call
  // hashes only the pages added since the last (seq.published).
  void Publish(PrefillSequence& seq);

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_running(int rank) const;
  int ranks() const { return static_cast<int>(pools_.size()); }
  // Prompt tokens not yet prefilled, waiting and running.
  int64_t pending_tokens() const;

 private:
  const PrefillSchedulerOptions options_;
  const std::vector<model::KvPool*> pools_;
  std::deque<std::shared_ptr<PrefillSequence>> waiting_;
  std::deque<std::shared_ptr<PrefillSequence>> running_;
};

}  // namespace mlaserve::prefill
