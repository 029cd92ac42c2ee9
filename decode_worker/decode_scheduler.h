// DecodeScheduler: continuous batching over the requests whose KV is complete.
//
// Each step every running request gets one decode token (its last token at the next
// position), and requests that prefill locally get a prompt chunk from what is left of the
// token budget (decode first, so inter-token latency of running requests does not suffer from
// a newcomer's prompt). Requests are admitted up to max_running; their pages were reserved in
// full at Reserve, so a running request never waits for memory and nothing is preempted.
//
// Data-parallel attention (docs/parallel.md): every request lives on one rank
// (DecodeSequence::rank, chosen by the runner at Reserve), and the limits hold per rank, each
// rank's share of the step being that rank's own batch.
//
// Not thread-safe: owned by the decode loop thread.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "decode_worker/decode_sequence.h"

namespace mlaserve::decode {

struct DecodeSchedulerOptions {
  int max_running = 256;        // per rank
  int max_batch_tokens = 8192;  // per rank
  int chunk_size = 2048;
  int ranks = 1;  // data-parallel attention ranks (Engine::data_ranks())
};

struct DecodeChunk {
  DecodeSequence* seq = nullptr;
  int start = 0;  // first position
  int len = 0;
  bool want_logits = false;  // decode tokens, and a local prefill's last chunk
};

class DecodeScheduler {
 public:
  explicit DecodeScheduler(DecodeSchedulerOptions options) : options_(options) {}

  int ranks() const { return options_.ranks; }
  bool has_room(int rank = 0) const { return num_running(rank) < options_.max_running; }
  void Add(std::shared_ptr<DecodeSequence> seq);
  // Takes a sequence out of the running set (finished / aborted); null if unknown.
  std::shared_ptr<DecodeSequence> Remove(const std::string& id);
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_running(int rank) const;
  const std::deque<std::shared_ptr<DecodeSequence>>& running() const { return running_; }

  // schedule(): this step's chunks, decode tokens first, then local prefill chunks, each
  // rank within its own token budget (given out in running order); among the prefill chunks
  // the prompts' later chunks (and one-token chunks) come before the fresh prompts.
  std::vector<DecodeChunk> Schedule() const;

 private:
  const DecodeSchedulerOptions options_;
  std::deque<std::shared_ptr<DecodeSequence>> running_;
};

}  // namespace mlaserve::decode
