// mlaserve-tune's cell logic on the CPU: a fake PathTimer whose cuDNN MHA is faster in some
// cells and ours in others; the profile must record, per cell, the faster provider and the
// threshold fitted against it.
#include "profiles/tune/tuner.h"

#include <map>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiles/attention_path_policy.h"
#include "profiles/engine_path.h"

namespace mlaserve::profiles::tune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Times as smooth functions of the batch: MLA grows fastest with se, so MHA wins above some se.
// cuDNN's MHA is cheaper than ours in the Σprefix bucket starting at 0 and dearer elsewhere,
// and the two MHA times cross MLA at different se, so the fitted thresholds differ too.
class FakePathTimer final : public PathTimer {
 public:
  explicit FakePathTimer(bool time_cudnn) : time_cudnn_(time_cudnn) {}

  static double MlaUs(int64_t se) { return 1.0 + se / 1000.0; }
  static double OursUs(int64_t se) { return 50.0 + se / 4000.0; }  // = MLA at se ~ 65333
  // Below Σprefix 128: = MLA at se ~ 1143 (well past the provider margin in those cells);
  // above: twice ours.
  static double CudnnUs(int64_t sum_prefix, int64_t se) {
    return sum_prefix < 128 ? 2.0 + se / 8000.0 : 2.0 * OursUs(se);
  }

  absl::StatusOr<BatchTimes> Time(const std::vector<SequenceShape>& batch) override {
    const BatchStats st = ComputeBatchStats(batch);
    BatchTimes t;
    t.se = st.se;
    t.mha_ours_us = OursUs(st.se);
    if (time_cudnn_) t.mha_cudnn_us = CudnnUs(st.sum_prefix, st.se);
    t.mla_us = MlaUs(st.se);
    calls.push_back({st, t});
    return t;
  }
  std::vector<MhaPrefillProvider> mha_providers() const override {
    if (!time_cudnn_) return {MhaPrefillProvider::kOurs};
    return {MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn};
  }
  std::string cudnn_note() const override {
    return time_cudnn_ ? "cuDNN 9.99.0" : "not timed: fake without cuDNN";
  }
  absl::StatusOr<double> TimeDecodeStep(int, int) override { return 200.0; }
  absl::StatusOr<double> TimeDenseGemm(int m) override { return m * 0.01; }
  absl::StatusOr<DeviceFacts> MeasureDevice() override {
    return DeviceFacts{"Fake GPU", "9.0", 132, 232448, 3000.0, 790.0};
  }
  absl::StatusOr<DecodeSplit> PlanDecode(int batch, int context) override {
    return DecodeSplit{batch, context, 1, 0};
  }

  std::vector<std::pair<BatchStats, BatchTimes>> calls;

 private:
  const bool time_cudnn_;
};

const AttentionShape kShape{128, 128, 64, 128, 512, "bf16"};

// Prefix buckets [0, 128) (cuDNN faster) and [128, 192] (ours faster); extend buckets [0, 64)
// and [64, 96]: se from ~1 to ~38000, around both crossings of MHA on cuDNN and MLA.
TuneOptions SmallGrid(int samples = 12) {
  TuneOptions o;
  o.grid.max_batch = 2;
  o.grid.prefix_edges = {0, 128};
  o.grid.extend_edges = {0, 64};
  o.batches = {1, 2};
  o.samples = samples;
  o.progress = false;
  return o;
}

using CellKey = std::tuple<int, int64_t, int64_t>;

// The samples each measured cell was fitted on: the first cells x samples timings, in the
// tuner's order, grouped by the cell their sums fall in.
std::map<CellKey, std::vector<BatchTimes>> SamplesByCell(const FakePathTimer& timer,
                                                         const MhaMlaTable& t, size_t count) {
  std::map<CellKey, std::vector<BatchTimes>> out;
  for (size_t i = 0; i < count; ++i) {
    const auto& [st, times] = timer.calls[i];
    out[{t.BatchBucket(st.batch), t.prefix_edges[t.PrefixBucket(st.sum_prefix)],
         t.extend_edges[t.ExtendBucket(st.sum_extend)]}]
        .push_back(times);
  }
  return out;
}

std::vector<TimedSample> On(const std::vector<BatchTimes>& samples, MhaPrefillProvider p) {
  std::vector<TimedSample> out;
  for (const BatchTimes& s : samples) out.push_back(s.With(p));
  return out;
}

TEST(TuneProfile, RecordsTheFasterMhaProviderAndItsThresholdPerCell) {
  FakePathTimer timer(/*time_cudnn=*/true);
  const TuneOptions o = SmallGrid();
  auto p = TuneProfile(timer, kShape, o);
  ASSERT_TRUE(p.ok()) << p.status();
  const MhaMlaTable& t = p->mha_mla;
  EXPECT_THAT(t.mha_providers, ElementsAre(MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn));
  EXPECT_EQ(t.cudnn_version, "cuDNN 9.99.0");
  ASSERT_EQ(t.cells.size(), 8u);  // 2 batch buckets x 2 x 2, all measured
  const auto by_cell = SamplesByCell(timer, t, t.cells.size() * o.samples);
  bool thresholds_differ = false;
  for (const MhaMlaCell& c : t.cells) {
    SCOPED_TRACE(::testing::Message() << "cell bs=" << c.batch << " prefix=" << c.prefix
                                      << " extend=" << c.extend);
    const std::vector<BatchTimes>& samples = by_cell.at({c.batch, c.prefix, c.extend});
    ASSERT_EQ(samples.size(), static_cast<size_t>(o.samples));
    const MhaPrefillProvider faster =
        c.prefix == 0 ? MhaPrefillProvider::kCudnn : MhaPrefillProvider::kOurs;
    EXPECT_EQ(c.mha_provider, faster);
    // The threshold is the one fitted against the recorded provider's MHA times.
    const ThresholdFit own = FitSeThreshold(On(samples, faster));
    EXPECT_EQ(c.se_threshold, own.se_threshold);
    EXPECT_EQ(c.above_total, own.above_total);
    EXPECT_EQ(c.below_mha_wins, own.below_mha_wins);
    const MhaPrefillProvider other =
        faster == MhaPrefillProvider::kOurs ? MhaPrefillProvider::kCudnn : MhaPrefillProvider::kOurs;
    thresholds_differ |= FitSeThreshold(On(samples, other)).se_threshold != c.se_threshold;
    // Mean MHA times of both providers, informational.
    double ours = 0, cudnn = 0;
    for (const BatchTimes& s : samples) {
      ours += s.mha_ours_us;
      cudnn += *s.mha_cudnn_us;
    }
    ASSERT_TRUE(c.mha_ours_us.has_value() && c.mha_cudnn_us.has_value());
    EXPECT_NEAR(*c.mha_ours_us, ours / o.samples, 1e-9);
    EXPECT_NEAR(*c.mha_cudnn_us, cudnn / o.samples, 1e-9);
    EXPECT_EQ(*c.mha_cudnn_us < *c.mha_ours_us, faster == MhaPrefillProvider::kCudnn);
  }
  EXPECT_TRUE(thresholds_differ) << "the fake's providers should cross MLA at different se";

  // The profile saves as version 2 and loads back with the providers per cell.
  auto back = ProfileFromJson(ProfileToJson(*p));
  ASSERT_TRUE(back.ok()) << back.status();
  for (size_t i = 0; i < t.cells.size(); ++i) {
    EXPECT_EQ(back->mha_mla.cells[i].mha_provider, t.cells[i].mha_provider) << i;
    EXPECT_EQ(back->mha_mla.cells[i].se_threshold, t.cells[i].se_threshold) << i;
  }
}

// The policy over the tuned profile hands each batch's cell provider to the engine.
TEST(TuneProfile, PolicyOverTheTunedProfileRunsEachCellOnItsProvider) {
  FakePathTimer timer(/*time_cudnn=*/true);
  auto p = TuneProfile(timer, kShape, SmallGrid());
  ASSERT_TRUE(p.ok()) << p.status();
  PolicyOptions options;
  options.cudnn_available = true;
  options.force = PrefillPath::kMha;  // every batch on MHA, to see the provider of each cell
  auto policy = AttentionPathPolicy::Create(*p, "tuned", {}, options);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const PathChoice low_prefix = (*policy)->Choose(std::vector<SequenceShape>{{10, 80}});
  EXPECT_EQ(low_prefix.mha_provider, MhaPrefillProvider::kCudnn);
  EXPECT_EQ(ToEngineMhaProvider(low_prefix), MhaPrefillProvider::kPreferCudnn);  // cuDNN where it runs
  const PathChoice high_prefix = (*policy)->Choose(std::vector<SequenceShape>{{150, 80}});
  EXPECT_EQ(high_prefix.mha_provider, MhaPrefillProvider::kOurs);
  EXPECT_EQ(ToEngineMhaProvider(high_prefix), MhaPrefillProvider::kOurs);
}

TEST(TuneProfile, WithoutCudnnEveryCellIsOursAndTheProfileSaysSo) {
  FakePathTimer timer(/*time_cudnn=*/false);
  const TuneOptions o = SmallGrid();
  auto p = TuneProfile(timer, kShape, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->mha_mla.mha_providers, ElementsAre(MhaPrefillProvider::kOurs));
  EXPECT_EQ(p->mha_mla.cudnn_version, "");
  const auto by_cell = SamplesByCell(timer, p->mha_mla, p->mha_mla.cells.size() * o.samples);
  for (const MhaMlaCell& c : p->mha_mla.cells) {
    EXPECT_EQ(c.mha_provider, MhaPrefillProvider::kOurs);
    EXPECT_FALSE(c.mha_cudnn_us.has_value());
    EXPECT_EQ(c.se_threshold,
              FitSeThreshold(On(by_cell.at({c.batch, c.prefix, c.extend}),
                                MhaPrefillProvider::kOurs)).se_threshold);
  }
  EXPECT_TRUE(ProfileFromJson(ProfileToJson(*p)).ok());
}

// Cells of the first Σprefix bucket also get a split threshold, fitted on the split (a lead
// in latent form plus the fresh prompts on MHA, each timed alone) against the whole batch in
// latent form. In the fake, MLA = 1 + se/1000 and MHA on cuDNN (Σprefix < 128) = 2 + se/8000,
// and se adds up over sequences: the whole batch pays MLA's fixed 1 us once either way, so the
// split saves the fresh prompts only MLA's per-se cost and pays MHA's fixed 2 us: it wins from
// fresh se 2/(7/8000) ~ 2286 on, while the fresh prompts alone go MHA from ~1143.
TEST(TuneProfile, FreshPromptCellsGetASplitThreshold) {
  FakePathTimer timer(/*time_cudnn=*/true);
  TuneOptions o = SmallGrid(8);
  o.split_samples = 24;
  auto p = TuneProfile(timer, kShape, o);
  ASSERT_TRUE(p.ok()) << p.status();
  const MhaMlaTable& t = p->mha_mla;
  // Each measured cell: `samples` timings, and for prefix-0 cells 3 per split sample after
  // them (whole, lead, fresh).
  size_t prefix0 = 0;
  for (const MhaMlaCell& c : t.cells) prefix0 += c.samples > 0 && c.prefix == 0;
  // (+ 3: single sequences of 16, 32 and 64 tokens for the prefill estimate.)
  EXPECT_EQ(timer.calls.size(), t.cells.size() * o.samples + prefix0 * 3 * o.split_samples + 3);
  for (const MhaMlaCell& c : t.cells) {
    SCOPED_TRACE(::testing::Message() << "cell bs=" << c.batch << " prefix=" << c.prefix
                                      << " extend=" << c.extend);
    if (c.prefix != 0) {
      EXPECT_FALSE(c.split_se_threshold.has_value());
      continue;
    }
    ASSERT_TRUE(c.split_se_threshold.has_value());
    EXPECT_EQ(c.split_samples, o.split_samples);
    EXPECT_LE(c.split_wins, c.split_samples);
  }
  const MhaMlaCell* small = t.Find(1, 0, 10);   // one prompt of 2..63 tokens: se 4..3969
  const MhaMlaCell* large = t.Find(2, 0, 80);   // two prompts, 64..96 tokens: se >= 2048
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  // Short prompts: the split threshold sits above the prompts' own (MHA from ~1143 alone),
  // around ~2286; about a quarter of the samples (e > 47 of 2..63) are past it.
  EXPECT_GT(*small->split_se_threshold, small->se_threshold);
  EXPECT_GT(*small->split_se_threshold, 2000);
  EXPECT_LT(small->split_wins, o.split_samples / 2);
  // The policy over the tuned profile: a lead in latent form (prefix bucket 128, where MHA
  // would need se ~65333) with a fresh prompt of 40 tokens (se 1600: MHA alone, but no split).
  PolicyOptions options;
  options.cudnn_available = true;
  auto policy = AttentionPathPolicy::Create(*p, "tuned", {}, options);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const std::vector<SequenceShape> batch = {{150, 10}, {0, 40}};
  EXPECT_EQ((*policy)->Choose(std::vector<SequenceShape>{{0, 40}}).path, PrefillPath::kMha);
  const PathChoice c = (*policy)->Choose(batch);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_FALSE(c.split.has_value());  // both parts latent, as the whole batch said
  // The same profile without split thresholds splits that batch (the prompt's own cell).
  GpuProfile own = *p;
  for (MhaMlaCell& cell : own.mha_mla.cells) cell.split_se_threshold.reset();
  auto by_own = AttentionPathPolicy::Create(own, "own", {}, options);
  ASSERT_TRUE(by_own.ok()) << by_own.status();
  EXPECT_EQ((*by_own)->Choose(batch).path, PrefillPath::kSplit);
  EXPECT_TRUE(ProfileFromJson(ProfileToJson(*p)).ok());
}

// Batch buckets that were not measured copy their neighbour's threshold and provider.
TEST(TuneProfile, UnmeasuredBucketsCopyTheProvider) {
  FakePathTimer timer(/*time_cudnn=*/true);
  TuneOptions o = SmallGrid(4);
  o.grid.max_batch = 3;
  o.batches = {1, 3};
  auto p = TuneProfile(timer, kShape, o);
  ASSERT_TRUE(p.ok()) << p.status();
  for (const MhaMlaCell& c : p->mha_mla.cells) {
    if (c.batch != 2) continue;
    EXPECT_EQ(c.samples, 0);
    const MhaMlaCell* src = nullptr;
    for (const MhaMlaCell& s : p->mha_mla.cells) {
      if (s.batch == 1 && s.prefix == c.prefix && s.extend == c.extend) src = &s;
    }
    ASSERT_NE(src, nullptr);
    EXPECT_EQ(c.mha_provider, src->mha_provider);
    EXPECT_EQ(c.se_threshold, src->se_threshold);
    EXPECT_FALSE(c.mha_ours_us.has_value());
  }
}

// Validation scores MHA on the cell's provider against the fastest path and provider.
TEST(ValidateOnDevice, ScoresTheCellsProviderAgainstTheFastestOption) {
  FakePathTimer timer(/*time_cudnn=*/true);
  auto p = TuneProfile(timer, kShape, SmallGrid(16));
  ASSERT_TRUE(p.ok()) << p.status();
  ValidationOptions v;
  v.samples_per_family = 40;
  v.progress = false;
  auto r = ValidateOnDevice(timer, *p, v);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->samples, 80);
  EXPECT_GE(r->hit_rate(), 0.9) << r->table;
  EXPECT_THAT(r->table, HasSubstr("mha on"));
  EXPECT_THAT(r->table, HasSubstr("cudnn"));
  // The same profile with every cell on ours misses where cuDNN's MHA was the fastest option.
  GpuProfile ours = *p;
  for (MhaMlaCell& c : ours.mha_mla.cells) c.mha_provider = MhaPrefillProvider::kOurs;
  auto worse = ValidateOnDevice(timer, ours, v);
  ASSERT_TRUE(worse.ok()) << worse.status();
  EXPECT_LT(worse->hits, r->hits) << worse->table;
}

}  // namespace
}  // namespace mlaserve::profiles::tune
