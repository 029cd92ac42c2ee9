// The tuning and validation procedures of mlaserve-tune, on top of a PathTimer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "profiles/gpu_profile.h"
#include "profiles/tune/path_timer.h"

namespace mlaserve::profiles::tune {

struct TuneOptions {
  MhaMlaTable grid;          // max_batch and edges; cells are filled in
  std::vector<int> batches;  // batch buckets to measure (others copy the nearest measured)
  int samples = 16;          // random batches per cell
  // Split samples per cell of the first Σprefix bucket (prefix 0): a lead (DrawSplitLead) plus
  // the cell's fresh prompts, timed split and whole on the latent path, which fit the cell's
  // split_se_threshold. 0: none (the split asks each part's own cell).
  int split_samples = 0;
  double budget_s = 0;       // stop measuring cells after this long (0 = no limit)
  uint64_t seed = 1;
  int decode_batch = 64;     // the decode step the local-prefill threshold is weighed against
  int decode_context = 4096;
  bool progress = true;      // progress bar on stderr
};

// Measures everything a profile holds. Cells the budget left unmeasured are omitted (the
// policy falls back to the nearest cell) and reported on stderr.
absl::StatusOr<GpuProfile> TuneProfile(PathTimer& timer, const AttentionShape& shape,
                                       const TuneOptions& options);

struct ValidationOptions {
  int samples_per_family = 500;  // held-out batches per batch bucket
  std::vector<int> batch_buckets;  // the buckets validated; empty = 1..max_batch
  uint64_t seed = 1000003;       // distinct from tuning seeds
  double budget_s = 0;
  double tolerance = 0.03;       // a hit: the chosen path within 3% of the faster one
  bool progress = true;
};

struct ValidationReport {
  std::string table;  // per cell: threshold, >= and < counts as in SGLang PR 9551, hit rate
  int samples = 0;
  int hits = 0;
  double hit_rate() const { return samples > 0 ? double(hits) / samples : 0.0; }
};

// Draws held-out batches (a random cell of each batch bucket per draw), times both paths and
// scores the policy's choice (AttentionPathPolicy over `profile`, dense model).
absl::StatusOr<ValidationReport> ValidateOnDevice(PathTimer& timer, const GpuProfile& profile,
                                                  const ValidationOptions& options);

}  // namespace mlaserve::profiles::tune
