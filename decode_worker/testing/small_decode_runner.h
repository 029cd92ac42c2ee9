// The setting decode_runner_test.cc and decode_runner_reuse_test.cc share: FakeEngines over a
// 64-token vocabulary, a decode pool of kPages pages (and a prefill pool as large), and a runner
// of at most 4 running requests, 64 tokens a step in prompt chunks of 32.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "decode_worker/decode_runner.h"
#include "decode_worker/testing/decode_runner_harness.h"

namespace mlaserve::decode::testing {

inline constexpr int kVocab = 64;
inline constexpr int kPages = 32;

// `n` token ids of the kVocab-token vocabulary, a different sequence for each salt.
inline std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 5 + salt) % kVocab;
  return p;
}

// At most 4 running requests, 64 tokens a step, prompt chunks of 32.
inline DecodeRunnerOptions SmallRunnerOptions() {
  DecodeRunnerOptions o;
  o.scheduler = {.max_running = 4, .max_batch_tokens = 64, .chunk_size = 32};
  return o;
}

class SmallDecodeRunnerHarness : public DecodeRunnerHarness {
 protected:
  // kPages pages on each side (per rank with `data_ranks` > 1); `o`: the runner's options.
  void Build(DecodeRunnerOptions o = SmallRunnerOptions(), int data_ranks = 1) {
    DecodeRunnerHarness::Build({.num_pages = kPages, .data_ranks = data_ranks}, std::move(o),
                               kPages);
  }
  // The greedy first token; every page shipped with `ship_every_page` (see the harness).
  void PrefillAndShip(const Reservation& r, const std::vector<int32_t>& prompt,
                      bool ship_every_page = false) {
    DecodeRunnerHarness::PrefillAndShip(r, prompt, kVocab, std::nullopt, ship_every_page);
  }
  void RunUntilIdle() { DecodeRunnerHarness::RunUntilIdle(1000); }
};

}  // namespace mlaserve::decode::testing
