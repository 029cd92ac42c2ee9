// Random batch splits and the se-threshold fit.
#include "profiles/threshold_fit.h"

#include "gtest/gtest.h"
#include "profiles/cost_model.h"

namespace mlaserve::profiles {
namespace {

TEST(SplitBatch, KeepsSumsAndMinimums) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int bs = 1 + trial % 12;
    const int64_t sp = trial * 37 % 5000, se = bs + trial * 53 % 7000;
    const auto batch = SplitBatch(rng, bs, sp, se);
    ASSERT_EQ(static_cast<int>(batch.size()), bs);
    const BatchStats st = ComputeBatchStats(batch);
    EXPECT_EQ(st.sum_prefix, sp);
    EXPECT_EQ(st.sum_extend, se);
    for (const SequenceShape& s : batch) {
      EXPECT_GE(s.prefix, 0);
      EXPECT_GE(s.extend, 1);
    }
  }
}

TEST(SplitBatch, ProducesUnevenSplits) {
  std::mt19937_64 rng(11);
  int lopsided = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const auto batch = SplitBatch(rng, 4, 0, 4000);
    int64_t biggest = 0;
    for (const SequenceShape& s : batch) biggest = std::max(biggest, s.extend);
    lopsided += biggest > 2000;
  }
  EXPECT_GT(lopsided, 5);
  EXPECT_LT(lopsided, 95);
}

TEST(DrawCellBatch, SumsStayInTheirBuckets) {
  const MhaMlaTable t = DefaultTableGrid();
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int b = 1 + trial % t.max_batch;
    const int pi = trial % static_cast<int>(t.prefix_edges.size());
    const int ei = 1 + trial % (static_cast<int>(t.extend_edges.size()) - 1);
    const BatchStats st = ComputeBatchStats(DrawCellBatch(rng, t, b, pi, ei));
    EXPECT_EQ(t.PrefixBucket(st.sum_prefix), pi);
    EXPECT_EQ(t.ExtendBucket(st.sum_extend), ei);
    EXPECT_EQ(t.BatchBucket(st.batch), b);
    if (b == t.max_batch) {
      EXPECT_GE(st.batch, t.max_batch);
      EXPECT_LE(st.batch, 2 * t.max_batch);
    }
  }
}

TEST(FitSeThreshold, FindsTheBoundary) {
  std::vector<TimedSample> s;
  for (int64_t se = 100; se <= 2000; se += 100) {
    // MHA is 20% faster from se = 1000 on, 20% slower below.
    s.push_back({se, se >= 1000 ? 80.0 : 120.0, 100.0});
  }
  const ThresholdFit f = FitSeThreshold(s);
  EXPECT_GT(f.se_threshold, 900);
  EXPECT_LE(f.se_threshold, 1000);
  EXPECT_EQ(f.hits, 20);
  EXPECT_EQ(f.above_total, 11);
  EXPECT_EQ(f.above_mha_wins, 11);
  EXPECT_EQ(f.below_total, 9);
  EXPECT_EQ(f.below_mha_wins, 0);
}

TEST(FitSeThreshold, AllOneWay) {
  std::vector<TimedSample> mha_wins = {{10, 1.0, 2.0}, {20, 1.0, 2.0}, {30, 1.0, 2.0}};
  EXPECT_EQ(FitSeThreshold(mha_wins).se_threshold, 0);
  std::vector<TimedSample> mla_wins = {{10, 3.0, 2.0}, {20, 3.0, 2.0}, {30, 3.0, 2.0}};
  EXPECT_EQ(FitSeThreshold(mla_wins).se_threshold, kNeverMha);
  EXPECT_EQ(FitSeThreshold({}).se_threshold, kNeverMha);
}

TEST(FitSeThreshold, NoisyBoundaryMaximisesHits) {
  // One outlier below the boundary where MHA wins: the fit keeps the boundary at 500.
  std::vector<TimedSample> s = {{100, 120, 100}, {200, 90, 100}, {300, 120, 100},
                                {400, 120, 100}, {500, 80, 100}, {600, 80, 100},
                                {700, 80, 100}};
  const ThresholdFit f = FitSeThreshold(s);
  EXPECT_EQ(f.se_threshold, 450);
  EXPECT_EQ(f.hits, 6);
  EXPECT_EQ(f.below_mha_wins, 1);
}

TEST(IsHit, ToleranceIsRelativeToTheFasterPath) {
  EXPECT_TRUE(IsHit({0, 102.0, 100.0}, /*chose_mha=*/true, 0.03));
  EXPECT_FALSE(IsHit({0, 104.0, 100.0}, /*chose_mha=*/true, 0.03));
  EXPECT_TRUE(IsHit({0, 104.0, 100.0}, /*chose_mha=*/false, 0.03));
  const ThresholdFit f = ScoreThreshold(std::vector<TimedSample>{{10, 102, 100}, {20, 110, 100}}, 0);
  EXPECT_EQ(f.hits, 1);
  EXPECT_EQ(f.above_total, 2);
}

// MHA on cuDNN beats MLA from se ~267 on, ours from ~433: cuDNN's fit wins and brings its
// threshold (the midpoints of the samples around each crossing: 250 and 450).
TEST(FitCell, KeepsTheProviderWhoseThresholdCostsLeastWithThatThreshold) {
  std::vector<BatchTimes> s;
  for (int64_t se = 100; se <= 800; se += 100) {
    s.push_back({se, /*ours=*/650.0 - se / 2.0, /*cudnn=*/400.0 - se / 2.0, /*mla=*/double(se)});
  }
  const CellFit f = FitCell(s);
  EXPECT_EQ(f.mha_provider, MhaPrefillProvider::kCudnn);
  EXPECT_EQ(f.fit.se_threshold, 250);
  std::vector<TimedSample> ours;
  for (const BatchTimes& b : s) ours.push_back(b.With(MhaPrefillProvider::kOurs));
  EXPECT_EQ(FitSeThreshold(ours).se_threshold, 450);  // what ours alone would have given
  ASSERT_TRUE(f.mha_ours_us.has_value() && f.mha_cudnn_us.has_value());
  EXPECT_DOUBLE_EQ(*f.mha_ours_us, 650.0 - 225.0);
  EXPECT_DOUBLE_EQ(*f.mha_cudnn_us, 400.0 - 225.0);
  // Swap the providers' times: ours wins, with the threshold its own times give.
  for (BatchTimes& b : s) std::swap(b.mha_ours_us, *b.mha_cudnn_us);
  const CellFit g = FitCell(s);
  EXPECT_EQ(g.mha_provider, MhaPrefillProvider::kOurs);
  EXPECT_EQ(g.fit.se_threshold, 250);
}

TEST(FitCell, WhereMlaAlwaysWinsTheFasterMhaProviderIsStillNamed) {
  const std::vector<BatchTimes> s = {{10, 50.0, 40.0, 1.0}, {20, 50.0, 40.0, 1.0}};
  const CellFit f = FitCell(s);
  EXPECT_EQ(f.fit.se_threshold, kNeverMha);
  EXPECT_EQ(f.mha_provider, MhaPrefillProvider::kCudnn);  // equal chosen time; less MHA time
  const std::vector<BatchTimes> tie = {{10, 50.0, 50.0, 1.0}};
  EXPECT_EQ(FitCell(tie).mha_provider, MhaPrefillProvider::kOurs);  // full tie: ours
}

// cuDNN takes a cell only where it wins beyond the margin (3% by default): 2% faster keeps
// ours, 4% faster moves it; margin 0 goes back to the strictly faster provider.
TEST(FitCell, CudnnOnlyWhereItWinsBeyondTheMargin) {
  // Both providers' MHA beat MLA everywhere, so both fits say always MHA (threshold 0).
  const auto cell = [](double cudnn_factor) {
    std::vector<BatchTimes> s;
    for (int64_t se = 100; se <= 400; se += 100) {
      const double ours = 10.0 + se / 10.0;
      s.push_back({se, ours, ours * cudnn_factor, 1000.0});
    }
    return s;
  };
  const std::vector<BatchTimes> close = cell(0.98), clear = cell(0.96);
  EXPECT_EQ(FitCell(close).mha_provider, MhaPrefillProvider::kOurs);
  EXPECT_EQ(FitCell(close).fit.se_threshold, 0);
  EXPECT_EQ(FitCell(clear).mha_provider, MhaPrefillProvider::kCudnn);
  EXPECT_EQ(FitCell(close, 0.03, /*cudnn_margin=*/0.0).mha_provider, MhaPrefillProvider::kCudnn);
  EXPECT_EQ(FitCell(close, 0.03, /*cudnn_margin=*/0.01).mha_provider, MhaPrefillProvider::kCudnn);
  // Never MHA on either (MLA faster): the same margin on the MHA totals.
  std::vector<BatchTimes> mla_wins = close;
  for (BatchTimes& b : mla_wins) b.mla_us = 1.0;
  EXPECT_EQ(FitCell(mla_wins).fit.se_threshold, kNeverMha);
  EXPECT_EQ(FitCell(mla_wins).mha_provider, MhaPrefillProvider::kOurs);
  for (BatchTimes& b : mla_wins) *b.mha_cudnn_us = b.mha_ours_us * 0.9;
  EXPECT_EQ(FitCell(mla_wins).mha_provider, MhaPrefillProvider::kCudnn);
  // The means of both providers are recorded whichever is kept.
  const CellFit kept = FitCell(close);
  ASSERT_TRUE(kept.mha_ours_us.has_value() && kept.mha_cudnn_us.has_value());
  EXPECT_NEAR(*kept.mha_cudnn_us, 0.98 * *kept.mha_ours_us, 1e-9);
}

TEST(FitCell, CudnnOnlyWhereEverySampleTimedIt) {
  std::vector<BatchTimes> s = {{10, 5.0, 1.0, 9.0}, {20, 5.0, std::nullopt, 9.0}};
  const CellFit f = FitCell(s);
  EXPECT_EQ(f.mha_provider, MhaPrefillProvider::kOurs);
  EXPECT_FALSE(f.mha_cudnn_us.has_value());
  EXPECT_EQ(f.fit.se_threshold, 0);
  const CellFit empty = FitCell({});
  EXPECT_EQ(empty.mha_provider, MhaPrefillProvider::kOurs);
  EXPECT_EQ(empty.fit.se_threshold, kNeverMha);
}

TEST(BatchTimes, ProviderTimesAsTheEngineRunsThem) {
  const BatchTimes both{0, 10.0, 4.0, 7.0};
  EXPECT_EQ(both.MhaUs(MhaPrefillProvider::kOurs), 10.0);
  EXPECT_EQ(both.MhaUs(MhaPrefillProvider::kCudnn), 4.0);
  EXPECT_EQ(both.MhaUs(MhaPrefillProvider::kAuto), 4.0);  // priced as kPreferCudnn
  EXPECT_EQ(both.MhaUs(MhaPrefillProvider::kPreferCudnn), 4.0);
  EXPECT_EQ(both.BestUs(), 4.0);
  const BatchTimes ours_only{0, 10.0, std::nullopt, 7.0};
  EXPECT_EQ(ours_only.MhaUs(MhaPrefillProvider::kCudnn), 10.0);  // runs on ours
  EXPECT_EQ(ours_only.MhaUs(MhaPrefillProvider::kAuto), 10.0);
  EXPECT_EQ(ours_only.BestUs(), 7.0);
}

}  // namespace
}  // namespace mlaserve::profiles
