// The attention-path policy benchmark: total prefill attention time of one mixed workload
// under several path policies, scored on the same timed batches.
//
// Every batch of the workload is timed once on both paths (MHA on each provider timed, and
// MLA); a policy's cost on the batch is the time of the path it picks, MHA on the provider it
// picks. So all policies see identical batches and identical timings, and their totals differ
// only by their choices. Policies compared:
//   always MLA          - absorbed attention for every batch;
//   fixed rule          - SGLang's DeepSeek dispatch with its default
//                         chunked_prefix_cache_threshold 8192: MHA when Σprefix == 0 or
//                         Σprefix >= 8192, MLA otherwise; MHA on the engine's default provider
//                         (auto: cuDNN where it was timed);
//   tuned (<profile>)   - AttentionPathPolicy over a GPU profile (one row per profile given),
//                         MHA on each cell's provider (auto for profiles that record none);
//                         a split choice is charged the split's time (below);
//   tuned, no split     - the same policy with PolicyOptions::split_fresh_prompts = false (one
//                         row per profile), to show what the split rule gains;
//   best per batch      - the fastest path and provider of every batch, the split included
//                         (the lower bound no policy beats).
// A batch that can split (SplitPoint > 0: prefixed or one-token requests, then fresh prompts)
// is also timed split: its leading part on the latent path plus its fresh part on MHA on the
// engine's default provider, each part timed with the same timer, summed (as the engine runs
// model::AttentionPath::kSplit).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "profiles/attention_path_policy.h"
#include "profiles/batch_shape.h"
#include "profiles/threshold_fit.h"

namespace mlaserve::profiles {

struct MixedWorkloadOptions {
  int max_batch = 8;         // batch size uniform in [1, max_batch]
  int64_t max_prefix = 8192;  // each sequence's cached prefix uniform in [0, max_prefix]
  int64_t max_extend = 8192;  // each sequence's extend uniform in [1, max_extend]
  // The chunked-prefill token budget: requests join the batch in order until Σextend reaches
  // it; the one that crosses it is cut to the remaining budget and later ones wait (as a
  // chunked-prefill scheduler fills a step, e.g. SGLang's chunked_prefill_size).
  int64_t max_batch_tokens = 16384;
  uint64_t seed = 20261122;
  // The probability that a request is a fresh prompt (prefix 0). 0 (the default) draws the
  // workload as before, every prefix uniform; above 0 the batch lists its prefixed (and
  // one-token) requests first, as the prefill scheduler orders a step, so that batches can split.
  double fresh_fraction = 0.0;
};

// One random batch of the mixed workload: a batch size, then per request a cached prefix and
// an extend (unrelated cache hits and prompt lengths), cut to the token budget; with
// fresh_fraction > 0, some prefixes 0 and the prefixed requests first.
std::vector<SequenceShape> DrawMixedBatch(std::mt19937_64& rng, const MixedWorkloadOptions& o);

// SGLang's fixed rule (deepseek_v2.py, chunked_prefix_cache_threshold = 8192 by default).
inline constexpr int64_t kSglangChunkedPrefixThreshold = 8192;
PrefillPath FixedRulePath(const BatchStats& stats);

struct TunedPolicy {
  std::string label;  // e.g. the profile's file name
  std::shared_ptr<AttentionPathPolicy> policy;
};

struct PolicyBenchOptions {
  MixedWorkloadOptions workload;
  int batches = 200;    // batches to draw (in order; a budget may stop earlier)
  double budget_s = 0;  // stop timing after this many seconds (0 = no limit)
  bool progress = false;
};

struct PolicyRow {
  std::string name;
  double total_us = 0.0;
  int mha = 0, mla = 0;  // batches on each path
  int split = 0;         // batches charged the split's time (lead latent, fresh prompts MHA)
  int mha_cudnn = 0;     // of the MHA batches, those charged cuDNN's time
};

struct PolicyBenchReport {
  int batches = 0;  // batches timed
  int splittable = 0;  // of them, those that can split (timed split too)
  // always MLA, fixed rule, per profile tuned and tuned no split, best per batch
  std::vector<PolicyRow> rows;
  std::string table;            // rows with totals and the gains of each tuned policy
};

// Times the workload with `time_batch` (every path and provider of one batch) and scores every
// policy (a splittable batch's two parts are timed with it too). The tuned policies must be
// dense-model policies (no indexer). Errors from time_batch are returned as they are.
using BatchTimer = std::function<absl::StatusOr<BatchTimes>(const std::vector<SequenceShape>&)>;
absl::StatusOr<PolicyBenchReport> RunPolicyBenchmark(const BatchTimer& time_batch,
                                                     const std::vector<TunedPolicy>& tuned,
                                                     const PolicyBenchOptions& options);

}  // namespace mlaserve::profiles
