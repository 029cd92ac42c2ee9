// mlaserve-tune's procedures: fit the MHA/MLA table cell by cell, measure the scalar settings,
// and validate a profile on held-out batches.
#include "profiles/tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/sparse_fwd/api.h"
#include "profiles/attention_path_policy.h"
#include "profiles/cost_model.h"
#include "profiles/threshold_fit.h"

namespace mlaserve::profiles::tune {
namespace {

using Clock = std::chrono::steady_clock;

// "[##########..........] 120/480 tuning V3 cells, 42 s left" on one stderr line.
class ProgressBar {
 public:
  ProgressBar(std::string what, int total, bool enabled)
      : what_(std::move(what)), total_(std::max(total, 1)), enabled_(enabled),
        start_(Clock::now()) {}
  void Update(int done) {
    if (!enabled_) return;
    constexpr int kWidth = 30;
    const int filled = kWidth * done / total_;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double left = done > 0 ? elapsed * (total_ - done) / done : 0.0;
    std::fprintf(stderr, "\r[%s%s] %d/%d %s, %.0f s left   ", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), done, total_, what_.c_str(), left);
    if (done >= total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
  void Finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  std::string what_;
  int total_;
  bool enabled_;
  Clock::time_point start_;
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string NowUtc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Copies cells of the nearest measured batch bucket (the lower one on ties) into buckets that
// were not measured, with samples = 0 to mark them as copies.
void FillUnmeasuredBuckets(MhaMlaTable& t, const std::vector<int>& measured) {
  std::vector<MhaMlaCell> copies;
  for (int b = 1; b <= t.max_batch; ++b) {
    if (std::find(measured.begin(), measured.end(), b) != measured.end()) continue;
    int src = -1;
    for (int m : measured) {
      if (src < 0 || std::abs(m - b) < std::abs(src - b)) src = m;
    }
    for (const MhaMlaCell& c : t.cells) {
      if (c.batch != src) continue;
      MhaMlaCell copy = c;  // threshold and provider
      copy.batch = b;
      copy.samples = copy.above_mha_wins = copy.above_total = 0;
      copy.below_mha_wins = copy.below_total = 0;
      copy.mha_ours_us = copy.mha_cudnn_us = std::nullopt;
      copy.split_samples = copy.split_wins = 0;  // the split threshold is copied
      copies.push_back(copy);
    }
  }
  t.cells.insert(t.cells.end(), copies.begin(), copies.end());
}

// Least squares t(L) = a·L + b·L² through the origin.
std::pair<double, double> FitLinearQuadratic(const std::vector<std::pair<double, double>>& pts) {
  double s11 = 0, s12 = 0, s22 = 0, t1 = 0, t2 = 0;
  for (auto [l, t] : pts) {
    s11 += l * l;
    s12 += l * l * l;
    s22 += l * l * l * l;
    t1 += l * t;
    t2 += l * l * t;
  }
  const double det = s11 * s22 - s12 * s12;
  if (std::abs(det) < 1e-30) return {pts.empty() ? 0.0 : t1 / s11, 0.0};
  double a = (t1 * s22 - t2 * s12) / det;
  double b = (s11 * t2 - s12 * t1) / det;
  if (b < 0) {  // keep the estimate monotone: fall back to linear
    a = t1 / s11;
    b = 0;
  }
  return {std::max(a, 0.0), b};
}

MhaMlaCell CellFromFit(int batch, int64_t prefix, int64_t extend, const CellFit& f, int samples) {
  MhaMlaCell c;
  c.batch = batch;
  c.prefix = prefix;
  c.extend = extend;
  c.se_threshold = f.fit.se_threshold;
  c.mha_provider = f.mha_provider;
  c.mha_ours_us = f.mha_ours_us;
  c.mha_cudnn_us = f.mha_cudnn_us;
  c.samples = samples;
  c.above_mha_wins = f.fit.above_mha_wins;
  c.above_total = f.fit.above_total;
  c.below_mha_wins = f.fit.below_mha_wins;
  c.below_total = f.fit.below_total;
  return c;
}

// The split threshold of a fresh-prompt cell: per sample a lead (DrawSplitLead) and fresh
// prompts of the cell (DrawFreshBatch), the split (the lead on the latent path plus the fresh
// prompts on MHA on the engine's default provider, each timed alone, as the policy benchmark
// charges it) against the whole batch on the latent path; the threshold on the fresh part's se
// that FitSeThreshold finds over them.
absl::Status FitSplitThreshold(PathTimer& timer, const MhaMlaTable& t, int batch_bucket, int ei,
                               int samples, std::mt19937_64& rng, MhaMlaCell& cell) {
  std::vector<TimedSample> timed;
  int wins = 0;
  for (int i = 0; i < samples; ++i) {
    const std::vector<SequenceShape> lead = DrawSplitLead(rng);
    const std::vector<SequenceShape> fresh = DrawFreshBatch(rng, t, batch_bucket, ei);
    std::vector<SequenceShape> whole = lead;
    whole.insert(whole.end(), fresh.begin(), fresh.end());
    ASSIGN_OR_RETURN(const BatchTimes w, timer.Time(whole));
    ASSIGN_OR_RETURN(const BatchTimes l, timer.Time(lead));
    ASSIGN_OR_RETURN(const BatchTimes f, timer.Time(fresh));
    const double split_us = l.mla_us + f.MhaUs(MhaPrefillProvider::kAuto);
    timed.push_back({ComputeBatchStats(fresh).se, split_us, w.mla_us});
    wins += split_us <= w.mla_us;
  }
  cell.split_se_threshold = FitSeThreshold(timed).se_threshold;
  cell.split_samples = samples;
  cell.split_wins = wins;
  return absl::OkStatus();
}

// "split thresholds: 32 fresh-prompt cells (never 12, always 8, finite 12); the split no slower
// in 70 of 192 samples" on stderr.
void ReportSplitThresholds(const MhaMlaTable& t) {
  int cells = 0, never = 0, always = 0, wins = 0, samples = 0;
  for (const MhaMlaCell& c : t.cells) {
    if (c.samples == 0 || !c.split_se_threshold.has_value()) continue;
    ++cells;
    never += *c.split_se_threshold == kNeverMha;
    always += *c.split_se_threshold == 0;
    wins += c.split_wins;
    samples += c.split_samples;
  }
  if (cells == 0) return;
  std::fprintf(stderr, "split thresholds: %d fresh-prompt cells (never %d, always %d, finite %d); "
               "the split no slower in %d of %d samples\n", cells, never, always,
               cells - never - always, wins, samples);
}

// "MHA provider per measured cell: cudnn 31, ours 9" on stderr.
void ReportProviders(const MhaMlaTable& t) {
  int cudnn = 0, ours = 0;
  for (const MhaMlaCell& c : t.cells) {
    if (c.samples == 0) continue;  // copies
    cudnn += c.mha_provider == MhaPrefillProvider::kCudnn;
    ours += c.mha_provider == MhaPrefillProvider::kOurs;
  }
  std::fprintf(stderr, "MHA provider per measured cell: cudnn %d, ours %d\n", cudnn, ours);
}

absl::Status TuneTable(PathTimer& timer, const TuneOptions& o, MhaMlaTable& t) {
  const int np = static_cast<int>(t.prefix_edges.size());
  const int ne = static_cast<int>(t.extend_edges.size());
  // Smallest cells first, so a budget cut leaves the largest (slowest) ones out.
  std::vector<std::tuple<int64_t, int, int, int>> order;
  for (int b : o.batches) {
    for (int pi = 0; pi < np; ++pi) {
      for (int ei = 0; ei < ne; ++ei) {
        order.push_back({t.prefix_edges[pi] + 2 * t.extend_edges[ei], b, pi, ei});
      }
    }
  }
  std::sort(order.begin(), order.end());
  ProgressBar bar("table cells", static_cast<int>(order.size()), o.progress);
  const auto start = Clock::now();
  int done = 0, skipped = 0;
  for (auto [unused, b, pi, ei] : order) {
    if (o.budget_s > 0 && Seconds(start) > o.budget_s) {
      ++skipped;
      continue;
    }
    std::mt19937_64 rng(o.seed * 1000003 + b * 10007 + pi * 101 + ei);
    std::vector<BatchTimes> samples;
    for (int i = 0; i < o.samples; ++i) {
      ASSIGN_OR_RETURN(BatchTimes bt, timer.Time(DrawCellBatch(rng, t, b, pi, ei)));
      samples.push_back(bt);
    }
    MhaMlaCell cell = CellFromFit(b, t.prefix_edges[pi], t.extend_edges[ei], FitCell(samples),
                                  static_cast<int>(samples.size()));
    if (pi == 0 && o.split_samples > 0) {
      RETURN_IF_ERROR(FitSplitThreshold(timer, t, b, ei, o.split_samples, rng, cell));
    }
    t.cells.push_back(cell);
    bar.Update(++done);
  }
  if (skipped > 0) {
    bar.Finish();
    std::fprintf(stderr, "budget of %.0f s reached: %d of %zu cells not measured (the policy uses "
                 "the nearest measured cell for them)\n", o.budget_s, skipped, order.size());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GpuProfile> TuneProfile(PathTimer& timer, const AttentionShape& shape,
                                       const TuneOptions& o) {
  GpuProfile p;
  p.shape = shape;
  p.origin = "measured";
  p.created = NowUtc();
  ASSIGN_OR_RETURN(p.device, timer.MeasureDevice());
  std::fprintf(stderr, "%s: %d SMs, %lld B opt-in shared memory, copy %.0f GB/s, bf16 %.0f TFLOP/s\n",
               p.device.name.c_str(), p.device.sm_count,
               static_cast<long long>(p.device.smem_optin_bytes), p.device.copy_gbs,
               p.device.matrix_tflops);

  p.mha_mla = o.grid;
  p.mha_mla.cells.clear();
  p.mha_mla.mha_providers = timer.mha_providers();
  p.mha_mla.cudnn_version.clear();
  const bool cudnn = std::find(p.mha_mla.mha_providers.begin(), p.mha_mla.mha_providers.end(),
                               MhaPrefillProvider::kCudnn) != p.mha_mla.mha_providers.end();
  if (cudnn) p.mha_mla.cudnn_version = timer.cudnn_note();
  std::fprintf(stderr, "MHA prefill providers timed: ours%s; cuDNN: %s\n", cudnn ? ", cudnn" : "",
               timer.cudnn_note().c_str());
  RETURN_IF_ERROR(TuneTable(timer, o, p.mha_mla));
  ReportProviders(p.mha_mla);
  ReportSplitThresholds(p.mha_mla);
  FillUnmeasuredBuckets(p.mha_mla, o.batches);

  // Sparse (DSA): the cap follows the device. sparse_fwd vs the decode-style kernel below the
  // cap is not measured here (see docs/profiles.md): sparse-fwd only above the cap.
  p.sparse.decode_max_rows = kernels::SparseDecodeMaxRows(p.device.smem_optin_bytes);
  p.sparse.sparse_fwd_min_rows = p.sparse.decode_max_rows + 1;
  p.sparse.measured = false;

  for (int b : {1, 8, 32, 128}) {
    for (int ctx : {1024, 4096, 16384, 65536}) {
      ASSIGN_OR_RETURN(DecodeSplit d, timer.PlanDecode(b, ctx));
      p.decode_splits.push_back(d);
    }
  }

  // Single fresh sequences: the prefill estimate and the local-prefill threshold.
  // The fastest path and provider of each: what the policy aims for.
  std::map<int, double> single;
  const int64_t max_extend = o.grid.extend_edges.back() + o.grid.extend_edges.back() / 2;
  for (int l = 16; l <= 8192 && l <= max_extend; l *= 2) {
    ASSIGN_OR_RETURN(const BatchTimes bt, timer.Time({SequenceShape{0, l}}));
    single[l] = bt.BestUs();
  }
  ASSIGN_OR_RETURN(const double decode_us, timer.TimeDecodeStep(o.decode_batch, o.decode_context));
  p.local_prefill_threshold = ChooseLocalPrefillThreshold(
      [&](int l) {
        auto it = single.find(l);
        return it == single.end() ? 1e30 : it->second;
      },
      decode_us);
  std::vector<std::pair<double, double>> pts;
  for (auto [l, us] : single) {
    if (l >= 1024) pts.push_back({double(l), us});
  }
  std::tie(p.prefill_estimate.attn_us_per_token, p.prefill_estimate.attn_us_per_token_sq) =
      FitLinearQuadratic(pts);

  // Chunk size: the smallest token count (>= 2048) at which the reference dense GEMM reaches
  // 90% of its best rate, capped by the sparse cap so a DSA chunk never exceeds it.
  std::map<int, double> gemm_us;
  double best_rate = 0;
  for (int m = 512; m <= 16384; m *= 2) {
    ASSIGN_OR_RETURN(gemm_us[m], timer.TimeDenseGemm(m));
    best_rate = std::max(best_rate, m / gemm_us[m]);
  }
  p.prefill_estimate.dense_us_per_token = gemm_us[4096] / 4096.0;
  p.chunk_size = 16384;
  for (auto [m, us] : gemm_us) {
    if (m >= 2048 && m / us >= 0.9 * best_rate) {
      p.chunk_size = m;
      break;
    }
  }
  p.chunk_size = std::min(p.chunk_size, std::max(p.sparse.decode_max_rows, 1));
  std::fprintf(stderr, "decode step (%d x %d) %.0f us -> local prefill threshold %d; chunk %d\n",
               o.decode_batch, o.decode_context, decode_us, p.local_prefill_threshold,
               p.chunk_size);
  RETURN_IF_ERROR(ValidateProfile(p));
  return p;
}

absl::StatusOr<ValidationReport> ValidateOnDevice(PathTimer& timer, const GpuProfile& profile,
                                                  const ValidationOptions& o) {
  // cuDNN cells count as ours where this timer does not time cuDNN, as they would run.
  const std::vector<MhaPrefillProvider> timed = timer.mha_providers();
  PolicyOptions policy_options;
  policy_options.cudnn_available =
      std::find(timed.begin(), timed.end(), MhaPrefillProvider::kCudnn) != timed.end();
  ASSIGN_OR_RETURN(auto policy,
                   AttentionPathPolicy::Create(profile, "validate", {}, policy_options));
  const MhaMlaTable& t = profile.mha_mla;
  struct Acc {
    std::vector<TimedSample> samples;  // MHA on the provider the policy ran it on
    MhaPrefillProvider provider = MhaPrefillProvider::kAuto;
    int hits = 0;
  };
  std::map<std::tuple<int, int64_t, int64_t>, Acc> cells;  // by the batch's own cell
  ValidationReport report;
  std::mt19937_64 rng(o.seed);
  std::vector<int> buckets = o.batch_buckets;
  if (buckets.empty()) {
    for (int b = 1; b <= t.max_batch; ++b) buckets.push_back(b);
  }
  for (int b : buckets) {
    if (b < 1 || b > t.max_batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("validation batch bucket ", b, " is outside [1, ", t.max_batch, "]"));
    }
  }
  ProgressBar bar("validation batches", int(buckets.size()) * o.samples_per_family, o.progress);
  const auto start = Clock::now();
  int done = 0;
  for (int i = 0; i < o.samples_per_family; ++i) {
    for (int b : buckets) {
      if (o.budget_s > 0 && Seconds(start) > o.budget_s) break;
      const int pi = std::uniform_int_distribution<int>(0, int(t.prefix_edges.size()) - 1)(rng);
      const int ei = std::uniform_int_distribution<int>(0, int(t.extend_edges.size()) - 1)(rng);
      const std::vector<SequenceShape> batch = DrawCellBatch(rng, t, b, pi, ei);
      ASSIGN_OR_RETURN(const BatchTimes bt, timer.Time(batch));
      const PathChoice c = policy->Choose(batch);
      // MHA on the provider the batch's cell names, whichever path this batch took.
      const MhaPrefillProvider provider = policy->MhaProviderFor(c.stats);
      const TimedSample s = bt.With(provider);
      // A hit: within the tolerance of the fastest path on the fastest provider.
      const double chosen = c.path == PrefillPath::kMha ? s.mha_us : s.mla_us;
      const bool hit = chosen <= bt.BestUs() * (1.0 + o.tolerance);
      Acc& a = cells[{b, t.prefix_edges[t.PrefixBucket(c.stats.sum_prefix)],
                      t.extend_edges[t.ExtendBucket(c.stats.sum_extend)]}];
      a.samples.push_back(s);
      a.provider = provider;
      a.hits += hit;
      report.hits += hit;
      ++report.samples;
      bar.Update(++done);
    }
  }
  bar.Finish();
  std::string& out = report.table;
  absl::StrAppendFormat(&out, "%-4s %-7s %-7s %-12s %-6s %-12s %-12s %s\n", "bs", "prefix",
                        "extend", "se thresh", "mha on", ">=thresh", "<thresh", "hit rate");
  for (const auto& [key, a] : cells) {
    const auto [b, pre, ext] = key;
    const MhaMlaCell* cell = t.Find(b, pre, ext);
    const int64_t thr = cell == nullptr ? kNeverMha : cell->se_threshold;
    const ThresholdFit f = ScoreThreshold(a.samples, thr, o.tolerance);
    absl::StrAppendFormat(&out, "%-4s %-7d %-7d %-12s %-6s %-12s %-12s %.1f%% (%d/%zu)\n",
                          b == t.max_batch ? absl::StrCat(b, "+") : absl::StrCat(b), pre, ext,
                          thr == kNeverMha ? std::string("never") : absl::StrCat(thr),
                          kernels::MhaPrefillProviderName(a.provider),
                          absl::StrCat(f.above_mha_wins, "/", f.above_total),
                          absl::StrCat(f.below_mha_wins, "/", f.below_total),
                          100.0 * a.hits / a.samples.size(), a.hits, a.samples.size());
  }
  absl::StrAppendFormat(&out,
                        "overall: %d/%d = %.1f%% of held-out batches chose the faster path or one "
                        "within %.0f%% of it (MHA on the faster provider)\n(mha on: the cell's MHA "
                        "provider; >=thresh / <thresh: batches where MHA on it was no slower than "
                        "MLA / batches on that side of the threshold)\n",
                        report.hits, report.samples, 100.0 * report.hit_rate(),
                        100.0 * o.tolerance);
  return report;
}

}  // namespace mlaserve::profiles::tune
