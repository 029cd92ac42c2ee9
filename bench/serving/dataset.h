// Datasets of mlaserve-bench and the arrival schedule.
//
// Everything random here comes from std::mt19937_64 (whose output sequence the C++ standard
// fixes) through our own integer/real/exponential transforms (the standard library's
// distributions are implementation-defined), so one --seed gives the same prompts and
// arrival times on every platform and compiler.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "bench/serving/request_record.h"

namespace mlaserve::bench {

// What the random dataset needs to know about the model (from GetModelInfo).
struct VocabInfo {
  int vocab_size = 0;
  int max_context_length = 0;
  // Ids never placed in prompts (EOS, BOS): a random prompt should not contain them.
  absl::flat_hash_set<int32_t> excluded_ids;
};

struct RandomDatasetOptions {
  int num_prompts = 0;
  int input_len = 0;
  int output_len = 0;
  // Lengths are drawn uniformly from [max(1, floor(len * ratio)), len]; 1.0 = fixed lengths.
  double range_ratio = 1.0;
  uint64_t seed = 0;
  // Shared-prefix workload (a prefix cache's test): request i belongs to group
  // i % shared_prefix_groups (interleaved, so a group's requests are never back to back and
  // a cache must keep a prefix while other groups' prompts pass through), and its prompt is
  // the group's prefix of shared_prefix_len random ids followed by its own random part of
  // input_len (drawn as without a prefix). Both 0 = off.
  int shared_prefix_groups = 0;
  int shared_prefix_len = 0;
};

// Prompts of random token ids. INVALID_ARGUMENT naming the value when a length is < 1,
// the ratio is outside [0, 1], the shared-prefix pair is inconsistent (a length without
// groups, groups without a length, a negative value), prefix + input + output exceeds the
// model's context, or the vocabulary has no id left to draw.
//
// Reproducibility: the lengths and each request's own part come from the same streams as
// without a prefix, and the prefixes from a stream of their own, so turning the prefix on
// prepends it to the very prompts the same seed gives without it. Different groups' prefixes
// are independent draws: they differ except with negligible probability (vocab^-len).
absl::StatusOr<std::vector<RequestSpec>> MakeRandomDataset(const RandomDatasetOptions& options,
                                                           const VocabInfo& vocab);

// The draws every random part of a dataset is made of (conversation.cc's too).
// Uniform integer in [lo, hi]. The modulo bias is below 2^-40 for any range we use.
int64_t UniformInt(std::mt19937_64& gen, int64_t lo, int64_t hi);
// The lower end of a length drawn with --random-range-ratio: max(1, floor(len * ratio)).
int LowerLength(int len, double ratio);
// Appends `count` ids drawn uniformly from the vocabulary, skipping the excluded ones.
void AppendRandomIds(std::mt19937_64& gen, int count, const VocabInfo& vocab,
                     std::vector<int32_t>& ids);

// Reads a JSONL file, one object per line: {"text": "...", "output_len": N}. Blank lines are
// skipped. At most `limit` prompts are returned (0 = all). INVALID_ARGUMENT naming the file
// and line for a malformed line; NOT_FOUND when the file cannot be opened.
absl::StatusOr<std::vector<RequestSpec>> LoadPromptsFile(const std::string& path, int limit);

// The seed of the warmup's random prompts: a run's warmup must not send copies of its timed
// prompts, or a server with a prefix cache answers the first timed requests from the cache.
uint64_t WarmupSeed(uint64_t seed);

// Repeats `specs` in order until there are `count` of them, renumbering the copies
// (a prompts file shorter than --num-prompts is cycled, as the usual benchmarks do).
std::vector<RequestSpec> CycleToCount(const std::vector<RequestSpec>& specs, int count);

// Whether request `index` of a run seeded `seed` carries the penalty / logprobs knobs: a
// splitmix64 draw keyed by (seed, index) below `fraction` (1 = every request, 0 = none), so the
// same seed picks the same requests whatever else the run asks.
bool SendsKnobs(uint64_t seed, int index, double fraction);

// Send times in seconds from the start of the run, non-decreasing, the first one 0: a
// Poisson process of `rate` requests/s (exponential gaps), or all 0 when rate is infinite.
// `rate` must be > 0.
std::vector<double> PoissonArrivalOffsets(int count, double rate, uint64_t seed);

}  // namespace mlaserve::bench
