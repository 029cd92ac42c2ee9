// Random batch splits and se-threshold fitting.
#include "profiles/threshold_fit.h"

#include <algorithm>
#include <numeric>

namespace mlaserve::profiles {
namespace {

// total split into n parts >= min_each, proportional to exponential weights (flat Dirichlet),
// the rounding remainder handed out one by one to random parts.
std::vector<int64_t> RandomParts(std::mt19937_64& rng, int n, int64_t total, int64_t min_each) {
  std::vector<int64_t> parts(n, min_each);
  int64_t rest = total - min_each * n;
  if (rest <= 0) return parts;
  std::exponential_distribution<double> exp1(1.0);
  std::vector<double> w(n);
  for (double& x : w) x = exp1(rng);
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  int64_t given = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t share = static_cast<int64_t>(static_cast<double>(rest) * w[i] / sum);
    parts[i] += share;
    given += share;
  }
  std::uniform_int_distribution<int> pick(0, n - 1);
  for (int64_t left = rest - given; left > 0; --left) ++parts[pick(rng)];
  return parts;
}

int64_t DrawInBucket(std::mt19937_64& rng, const std::vector<int64_t>& edges, int i) {
  const int64_t lo = edges[i];
  const int64_t hi = i + 1 < static_cast<int>(edges.size()) ? edges[i + 1] - 1 : lo + lo / 2;
  return std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng);
}

ThresholdFit Score(std::span<const TimedSample> samples, int64_t threshold, double tolerance) {
  ThresholdFit f;
  f.se_threshold = threshold;
  for (const TimedSample& s : samples) {
    const bool mha = threshold != kNeverMha && s.se >= threshold;
    const bool mha_wins = s.mha_us <= s.mla_us;
    if (mha) {
      ++f.above_total;
      f.above_mha_wins += mha_wins;
    } else {
      ++f.below_total;
      f.below_mha_wins += mha_wins;
    }
    f.hits += IsHit(s, mha, tolerance);
    f.chosen_us += mha ? s.mha_us : s.mla_us;
  }
  return f;
}

}  // namespace

std::vector<SequenceShape> SplitBatch(std::mt19937_64& rng, int batch_size, int64_t sum_prefix,
                                      int64_t sum_extend) {
  const std::vector<int64_t> p = RandomParts(rng, batch_size, sum_prefix, 0);
  const std::vector<int64_t> e = RandomParts(rng, batch_size, sum_extend, 1);
  std::vector<SequenceShape> batch(batch_size);
  for (int i = 0; i < batch_size; ++i) batch[i] = {p[i], e[i]};
  return batch;
}

namespace {

// The batch bucket's size; the last bucket holds larger batches too: max_batch..2·max_batch.
int DrawBatchSize(std::mt19937_64& rng, const MhaMlaTable& table, int batch_bucket) {
  if (batch_bucket < table.max_batch) return batch_bucket;
  return std::uniform_int_distribution<int>(table.max_batch, 2 * table.max_batch)(rng);
}

}  // namespace

std::vector<SequenceShape> DrawCellBatch(std::mt19937_64& rng, const MhaMlaTable& table,
                                         int batch_bucket, int pi, int ei) {
  const int bs = DrawBatchSize(rng, table, batch_bucket);
  const int64_t sp = DrawInBucket(rng, table.prefix_edges, pi);
  const int64_t se = std::max<int64_t>(DrawInBucket(rng, table.extend_edges, ei), bs);
  return SplitBatch(rng, bs, sp, se);
}

std::vector<SequenceShape> DrawSplitLead(std::mt19937_64& rng) {
  const int n = std::uniform_int_distribution<int>(1, kSplitLeadMaxSequences)(rng);
  std::uniform_int_distribution<int64_t> prefix(kSplitLeadMinPrefix, kSplitLeadMaxPrefix);
  std::uniform_int_distribution<int64_t> extend(1, kSplitLeadMaxExtend);
  std::vector<SequenceShape> lead(n);
  for (SequenceShape& s : lead) {
    s.prefix = prefix(rng);
    s.extend = extend(rng);
  }
  return lead;
}

std::vector<SequenceShape> DrawFreshBatch(std::mt19937_64& rng, const MhaMlaTable& table,
                                          int batch_bucket, int ei) {
  const int bs = DrawBatchSize(rng, table, batch_bucket);
  // A fresh prompt has extend >= 2 (IsFreshPrompt).
  const int64_t sum_extend = std::max<int64_t>(DrawInBucket(rng, table.extend_edges, ei), 2 * bs);
  const std::vector<int64_t> e = RandomParts(rng, bs, sum_extend, 2);
  std::vector<SequenceShape> batch(bs);
  for (int i = 0; i < bs; ++i) batch[i] = {0, e[i]};
  return batch;
}

ThresholdFit ScoreThreshold(std::span<const TimedSample> samples, int64_t se_threshold,
                            double tolerance) {
  return Score(samples, se_threshold, tolerance);
}

double BatchTimes::MhaUs(MhaPrefillProvider p) const {
  if (p == MhaPrefillProvider::kOurs || !mha_cudnn_us.has_value()) return mha_ours_us;
  return *mha_cudnn_us;
}

double BatchTimes::BestUs() const {
  return std::min({mha_ours_us, mha_cudnn_us.value_or(mha_ours_us), mla_us});
}

CellFit FitCell(std::span<const BatchTimes> samples, double tolerance, double cudnn_margin) {
  const bool cudnn_timed =
      !samples.empty() && std::all_of(samples.begin(), samples.end(), [](const BatchTimes& s) {
        return s.mha_cudnn_us.has_value();
      });
  // One provider's fit over the samples, its total MHA time, and the mean recorded in the cell.
  const auto fit_on = [&](MhaPrefillProvider p, double* mha_total) {
    std::vector<TimedSample> timed;
    *mha_total = 0.0;
    for (const BatchTimes& s : samples) {
      timed.push_back(s.With(p));
      *mha_total += s.MhaUs(p);
    }
    return FitSeThreshold(timed, tolerance);
  };
  const auto mean = [&](double total) {
    return samples.empty() ? std::nullopt
                           : std::optional<double>(total / static_cast<double>(samples.size()));
  };
  CellFit cell;
  double ours_total = 0.0;
  cell.fit = fit_on(MhaPrefillProvider::kOurs, &ours_total);
  cell.mha_ours_us = mean(ours_total);
  if (!cudnn_timed) return cell;
  double cudnn_total = 0.0;
  const ThresholdFit cudnn = fit_on(MhaPrefillProvider::kCudnn, &cudnn_total);
  cell.mha_cudnn_us = mean(cudnn_total);
  const double rounding = 1.0 - 1e-12;  // as FitSeThreshold: rounding noise is a tie
  const double beyond = 1.0 - cudnn_margin;
  const bool same_choice_time = cudnn.chosen_us >= cell.fit.chosen_us * rounding &&
                                cudnn.chosen_us <= cell.fit.chosen_us / rounding;
  const bool cudnn_wins = same_choice_time ? cudnn_total < ours_total * beyond * rounding
                                           : cudnn.chosen_us < cell.fit.chosen_us * beyond * rounding;
  if (cudnn_wins) {
    cell.mha_provider = MhaPrefillProvider::kCudnn;
    cell.fit = cudnn;
  }
  return cell;
}

ThresholdFit FitSeThreshold(std::span<const TimedSample> samples, double tolerance) {
  std::vector<int64_t> se;
  for (const TimedSample& s : samples) se.push_back(s.se);
  std::sort(se.begin(), se.end());
  se.erase(std::unique(se.begin(), se.end()), se.end());
  std::vector<int64_t> candidates = {kNeverMha, 0};
  for (size_t i = 1; i < se.size(); ++i) candidates.push_back(se[i - 1] + (se[i] - se[i - 1] + 1) / 2);
  ThresholdFit best = Score(samples, kNeverMha, tolerance);
  for (int64_t c : candidates) {
    ThresholdFit f = Score(samples, c, tolerance);
    // Full ties keep the earlier candidate: never-MHA, then 0, then ascending thresholds.
    const bool better = f.hits > best.hits ||
                        (f.hits == best.hits && f.chosen_us < best.chosen_us * (1.0 - 1e-12));
    if (better) best = f;
  }
  return best;
}

}  // namespace mlaserve::profiles
