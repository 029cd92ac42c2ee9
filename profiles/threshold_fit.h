// Drawing random batches for a table cell, and fitting the cell's se threshold from timings.
// Shared by mlaserve-tune (measured times) and the cost-model fallback (estimated times), so
// both produce tables the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "profiles/batch_shape.h"
#include "profiles/gpu_profile.h"

namespace mlaserve::profiles {

// Splits the sums into batch_size random parts: every extend >= 1 (sum_extend must be
// >= batch_size), prefixes >= 0. Shares follow a flat Dirichlet, so both near-equal and very
// lopsided splits occur (PR 9551 drew "randomly distributed" lengths with fixed sums).
std::vector<SequenceShape> SplitBatch(std::mt19937_64& rng, int batch_size, int64_t sum_prefix,
                                      int64_t sum_extend);

// A random batch belonging to cell (batch bucket, prefix_edges[pi], extend_edges[ei]): the
// sums are drawn uniformly within their buckets ([edge, next edge); the last bucket spans
// [edge, edge + edge/2] or [0, 0] for a single 0 edge), the batch size is the bucket's, or in
// [max_batch, 2·max_batch] for the top bucket. Σextend is raised to the batch size if needed.
// A split sample's lead (the tuner's split thresholds, MhaMlaCell::split_se_threshold): 1..4
// sequences with a cached prefix of 512..8192 tokens and an extend of 1..512 each, the kind of
// lead the table puts on the latent path (a short turn after a long conversation, a prompt's
// later chunk), listed before the fresh prompts as the prefill scheduler lists them.
inline constexpr int kSplitLeadMaxSequences = 4;
inline constexpr int64_t kSplitLeadMinPrefix = 512;
inline constexpr int64_t kSplitLeadMaxPrefix = 8192;
inline constexpr int64_t kSplitLeadMaxExtend = 512;
std::vector<SequenceShape> DrawSplitLead(std::mt19937_64& rng);

// Fresh prompts (prefix 0 each) for a split sample of the cell (batch_bucket, Σprefix bucket
// 0, Σextend bucket ei): the batch size and Σextend drawn as DrawCellBatch draws them.
std::vector<SequenceShape> DrawFreshBatch(std::mt19937_64& rng, const MhaMlaTable& table,
                                          int batch_bucket, int ei);

std::vector<SequenceShape> DrawCellBatch(std::mt19937_64& rng, const MhaMlaTable& table,
                                         int batch_bucket, int pi, int ei);

struct TimedSample {
  int64_t se = 0;
  double mha_us = 0.0;
  double mla_us = 0.0;
};

// A choice "hits" when the chosen path's time is within `tolerance` of the faster one
// (0.03: no more than 3% slower).
inline bool IsHit(const TimedSample& s, bool chose_mha, double tolerance) {
  const double best = s.mha_us < s.mla_us ? s.mha_us : s.mla_us;
  return (chose_mha ? s.mha_us : s.mla_us) <= best * (1.0 + tolerance);
}

struct ThresholdFit {
  int64_t se_threshold = kNeverMha;
  int hits = 0;  // samples whose choice under the threshold is a hit
  int above_mha_wins = 0, above_total = 0;
  int below_mha_wins = 0, below_total = 0;
  double chosen_us = 0.0;  // total time of the chosen paths
};

// The threshold (MHA when se >= it) with the most hits; ties go to the least total time of
// the chosen paths, then to the earlier candidate in the order kNeverMha, 0, then the
// midpoints between consecutive distinct se values, ascending. Empty input: kNeverMha.
ThresholdFit FitSeThreshold(std::span<const TimedSample> samples, double tolerance = 0.03);

// The fit's counts for an existing threshold (validation of held-out samples).
ThresholdFit ScoreThreshold(std::span<const TimedSample> samples, int64_t se_threshold,
                            double tolerance = 0.03);

// One batch timed on every path the tuner measures: MLA, and the MHA form on each provider.
struct BatchTimes {
  int64_t se = 0;
  double mha_ours_us = 0.0;
  std::optional<double> mha_cudnn_us;  // absent where cuDNN was not timed
  double mla_us = 0.0;

  // The MHA form's time on `p`: kOurs ours; kCudnn and kPreferCudnn cuDNN's, or ours where
  // cuDNN was not timed (the engine runs ours then). kAuto is priced as kPreferCudnn: the
  // samples do not carry what the engine's kAuto rule looks at (the longest key sequence), and
  // the baselines that pass it (always MLA, the fixed rule) price their MHA batches on cuDNN.
  double MhaUs(MhaPrefillProvider p) const;
  // The least of all timings: what no choice of path and provider beats.
  double BestUs() const;
  TimedSample With(MhaPrefillProvider p) const { return {se, MhaUs(p), mla_us}; }
};

// A table cell's provider and threshold.
struct CellFit {
  MhaPrefillProvider mha_provider = MhaPrefillProvider::kOurs;
  ThresholdFit fit;  // against mha_provider's MHA times
  std::optional<double> mha_ours_us, mha_cudnn_us;  // mean MHA time per provider timed
};

// For every provider timed in all samples (ours always; cuDNN where each sample has its time),
// fits the threshold against that provider's MHA times (FitSeThreshold). The cell keeps ours
// unless cuDNN's fitted choice takes less total time over the samples by more than
// `cudnn_margin` (a fraction), or, where both fits choose the same time (e.g. both say never
// MHA), cuDNN's total MHA time is less by that margin: a cell names cuDNN only where it
// wins beyond the samples' noise. A cuDNN cell costs the engine a plan per new batch / length
// class, and on the H200 (2026-12-04) a V3 profile whose cells took cuDNN for a 0.2-2.6% lead
// in the tuning ran the policy benchmark's default workload 1.5% slower than one without them
// (docs/profiles.md, "Running the tuner"). Empty input: ours, never MHA.
inline constexpr double kCudnnProviderMargin = 0.03;
CellFit FitCell(std::span<const BatchTimes> samples, double tolerance = 0.03,
                double cudnn_margin = kCudnnProviderMargin);

}  // namespace mlaserve::profiles
