#include "profiles/policy_bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "profiles/testing/test_profiles.h"

namespace mlaserve::profiles {
namespace {

using ::testing::HasSubstr;

TEST(MixedWorkload, DrawsWithinBoundsAndRepeatsForASeed) {
  MixedWorkloadOptions o;
  std::mt19937_64 a(o.seed), b(o.seed);
  for (int i = 0; i < 200; ++i) {
    const auto x = DrawMixedBatch(a, o);
    const auto y = DrawMixedBatch(b, o);
    ASSERT_GE(x.size(), 1u);
    ASSERT_LE(x.size(), 8u);
    ASSERT_EQ(x.size(), y.size());
    int64_t tokens = 0;
    for (const SequenceShape& q : x) tokens += q.extend;
    EXPECT_LE(tokens, o.max_batch_tokens);
    for (size_t k = 0; k < x.size(); ++k) {
      EXPECT_GE(x[k].prefix, 0);
      EXPECT_LE(x[k].prefix, 8192);
      EXPECT_GE(x[k].extend, 1);
      EXPECT_LE(x[k].extend, 8192);
      EXPECT_EQ(x[k].prefix, y[k].prefix);
      EXPECT_EQ(x[k].extend, y[k].extend);
    }
  }
}

TEST(FixedRule, IsSglangsChunkedPrefixDispatch) {
  const auto path = [](std::vector<SequenceShape> b) {
    return FixedRulePath(ComputeBatchStats(b));
  };
  EXPECT_EQ(path({{0, 100}, {0, 5}}), PrefillPath::kMha);      // no prefix
  EXPECT_EQ(path({{4000, 100}, {4191, 5}}), PrefillPath::kMla);  // Σprefix 8191
  EXPECT_EQ(path({{4000, 100}, {4192, 5}}), PrefillPath::kMha);  // Σprefix 8192
}

// Fake timings: MHA costs 10 us per batch, MLA costs 1 us per prefix token / 1000 + 1, so MLA
// wins below Σprefix 9000 and MHA above. A policy that always says MHA must be charged exactly
// the MHA totals, and "best" must not exceed any other row.
TEST(PolicyBenchmark, ChargesEachPolicyThePathItPicks) {
  GpuProfile p = testing::SmallProfile();
  for (MhaMlaCell& c : p.mha_mla.cells) c.se_threshold = 0;  // always MHA
  auto policy = AttentionPathPolicy::Create(p, "test", {});
  ASSERT_TRUE(policy.ok()) << policy.status();
  std::vector<TunedPolicy> tuned{{"all-mha", std::move(*policy)}};
  double mha_total = 0, mla_total = 0;
  int calls = 0;
  BatchTimer timer = [&](const std::vector<SequenceShape>& b) -> absl::StatusOr<BatchTimes> {
    const BatchStats st = ComputeBatchStats(b);
    BatchTimes s{st.se, 10.0, std::nullopt, 1.0 + st.sum_prefix / 1000.0};
    mha_total += s.mha_ours_us;
    mla_total += s.mla_us;
    ++calls;
    return s;
  };
  PolicyBenchOptions o;
  o.batches = 50;
  auto r = RunPolicyBenchmark(timer, tuned, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->batches, 50);
  EXPECT_EQ(calls, 50);
  ASSERT_EQ(r->rows.size(), 5u);  // always MLA, fixed, tuned, tuned no split, best
  EXPECT_EQ(r->splittable, 0);     // the default workload: no fresh prompts
  EXPECT_DOUBLE_EQ(r->rows[0].total_us, mla_total);  // always MLA
  EXPECT_EQ(r->rows[0].mla, 50);
  EXPECT_DOUBLE_EQ(r->rows[2].total_us, mha_total);  // tuned: all MHA
  EXPECT_EQ(r->rows[2].mha, 50);
  EXPECT_DOUBLE_EQ(r->rows[3].total_us, mha_total);  // no split: the same here
  for (const PolicyRow& row : r->rows) {
    EXPECT_LE(r->rows[4].total_us, row.total_us + 1e-9) << row.name;
    EXPECT_EQ(row.mha + row.mla, 50) << row.name;
    EXPECT_EQ(row.split, 0) << row.name;
  }
  EXPECT_THAT(r->table, HasSubstr("tuned, no split: all-mha"));
  EXPECT_THAT(r->table, ::testing::Not(HasSubstr("fresh prompts:")));
  EXPECT_THAT(r->table, HasSubstr("tuned: all-mha"));
  EXPECT_THAT(r->table, HasSubstr("vs fixed rule"));
}

// MHA on two providers: cuDNN costs 4 us below Σprefix 256 and 40 us above, ours 10 us
// everywhere; MLA 20 us. Every policy is charged the provider it picks: a tuned profile whose
// cells name cuDNN below 256 and ours above pays 4 or 10; an old profile (no provider, kAuto)
// and the fixed rule pay cuDNN's time wherever cuDNN was timed, as the engine's default runs it.
TEST(PolicyBenchmark, ChargesMhaOnTheProviderEachPolicyPicks) {
  GpuProfile mixed = testing::SmallProfile();
  mixed.mha_mla.mha_providers = {MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn};
  for (MhaMlaCell& c : mixed.mha_mla.cells) {
    c.se_threshold = 0;  // always MHA
    c.mha_provider = c.prefix < 256 ? MhaPrefillProvider::kCudnn : MhaPrefillProvider::kOurs;
  }
  GpuProfile old = testing::SmallProfile();
  for (MhaMlaCell& c : old.mha_mla.cells) c.se_threshold = 0;
  PolicyOptions with_cudnn;
  with_cudnn.cudnn_available = true;
  auto tuned_mixed = AttentionPathPolicy::Create(mixed, "mixed", {}, with_cudnn);
  auto tuned_old = AttentionPathPolicy::Create(old, "old", {}, with_cudnn);
  ASSERT_TRUE(tuned_mixed.ok() && tuned_old.ok());
  std::vector<TunedPolicy> tuned{{"mixed", std::move(*tuned_mixed)}, {"old", std::move(*tuned_old)}};
  std::vector<std::vector<SequenceShape>> calls;
  BatchTimer timer = [&](const std::vector<SequenceShape>& b) -> absl::StatusOr<BatchTimes> {
    calls.push_back(b);
    const BatchStats st = ComputeBatchStats(b);
    return BatchTimes{st.se, 10.0, st.sum_prefix < 256 ? 4.0 : 40.0, 20.0};
  };
  PolicyBenchOptions o;
  o.batches = 300;
  o.workload.max_prefix = 200;  // some batches below Σprefix 256, some above
  auto r = RunPolicyBenchmark(timer, tuned, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // The batches among the calls (a batch that can split, fresh prompts last by chance, is
  // followed by its two parts' calls; its split, >= 24 us, never beats MHA here).
  double expect_mixed = 0, expect_old = 0, expect_best = 0;
  int low_prefix = 0, batches = 0;
  for (size_t i = 0; i < calls.size(); ++i, ++batches) {
    const bool low = ComputeBatchStats(calls[i]).sum_prefix < 256;
    expect_mixed += low ? 4.0 : 10.0;
    expect_old += low ? 4.0 : 40.0;
    expect_best += low ? 4.0 : 10.0;
    low_prefix += low;
    if (SplitPoint(calls[i]) > 0) i += 2;
  }
  ASSERT_EQ(batches, 300);
  ASSERT_GT(low_prefix, 0);
  ASSERT_LT(low_prefix, batches);
  ASSERT_EQ(r->rows.size(), 7u);  // ..., mixed, mixed no split, old, old no split, best
  EXPECT_DOUBLE_EQ(r->rows[2].total_us, expect_mixed);
  EXPECT_EQ(r->rows[2].mha, batches);
  EXPECT_EQ(r->rows[2].mha_cudnn, low_prefix);
  EXPECT_DOUBLE_EQ(r->rows[3].total_us, expect_mixed);
  EXPECT_DOUBLE_EQ(r->rows[4].total_us, expect_old);
  EXPECT_EQ(r->rows[4].mha_cudnn, batches);
  EXPECT_DOUBLE_EQ(r->rows[6].total_us, expect_best);  // best: the faster provider per batch
  EXPECT_EQ(r->rows[6].mha_cudnn, low_prefix);
  EXPECT_THAT(r->table, HasSubstr("cuDNN"));

  // A process without cuDNN: the mixed profile's cuDNN cells are charged (and run) as ours.
  PolicyOptions without;
  without.cudnn_available = false;
  auto fallback = AttentionPathPolicy::Create(mixed, "mixed", {}, without);
  ASSERT_TRUE(fallback.ok());
  std::vector<TunedPolicy> one{{"mixed-no-cudnn", std::move(*fallback)}};
  BatchTimer ours_only = [](const std::vector<SequenceShape>& b) -> absl::StatusOr<BatchTimes> {
    return BatchTimes{ComputeBatchStats(b).se, 10.0, std::nullopt, 20.0};
  };
  auto r2 = RunPolicyBenchmark(ours_only, one, o);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_DOUBLE_EQ(r2->rows[2].total_us, 10.0 * 300);
  EXPECT_EQ(r2->rows[2].mha_cudnn, 0);
}

TEST(MixedWorkload, FreshFractionDrawsFreshPromptsAfterPrefixedOnes) {
  MixedWorkloadOptions o;
  o.fresh_fraction = 0.5;
  std::mt19937_64 rng(o.seed);
  int splittable = 0, fresh = 0, requests = 0;
  for (int i = 0; i < 200; ++i) {
    const std::vector<SequenceShape> b = DrawMixedBatch(rng, o);
    bool seen_fresh = false;
    for (const SequenceShape& q : b) {
      const bool is_fresh = q.prefix == 0 && q.extend >= 2;
      EXPECT_TRUE(is_fresh || !seen_fresh) << "a prefixed request after a fresh prompt";
      seen_fresh = seen_fresh || is_fresh;
      fresh += is_fresh;
      ++requests;
    }
    splittable += SplitPoint(b) > 0;
  }
  EXPECT_GT(splittable, 0);
  // About half the requests are fresh (the binomial's sd is ~3% of ~900 requests).
  EXPECT_GT(fresh, requests * 2 / 5);
  EXPECT_LT(fresh, requests * 3 / 5);
}

// Fake timings: MHA 10 us + Σextend/1000, MLA 1 us + (Σprefix + 4·Σextend)/1000. The profile
// says MHA for every cell without a prefix (Σprefix < 256, the first prefix bucket) and MLA for
// the others, so a batch that can split splits where its lead has a prefix of 256 or more (the
// fresh prompts alone say MHA), and runs MHA whole where its lead has less. The tuned row is
// charged the lead's MLA time plus the fresh part's MHA time for a split, the no-split row the
// whole batch's choice, and the best row the least of the three.
TEST(PolicyBenchmark, ChargesTheSplitWhereThePolicyPicksIt) {
  GpuProfile p = testing::SmallProfile();
  for (MhaMlaCell& c : p.mha_mla.cells) c.se_threshold = c.prefix == 0 ? 0 : kNeverMha;
  auto policy = AttentionPathPolicy::Create(p, "test", {});
  ASSERT_TRUE(policy.ok()) << policy.status();
  std::vector<TunedPolicy> tuned{{"mla-with-prefix", std::move(*policy)}};
  const auto mha_us = [](const BatchStats& st) { return 10.0 + st.sum_extend / 1000.0; };
  const auto mla_us = [](const BatchStats& st) {
    return 1.0 + (st.sum_prefix + 4.0 * st.sum_extend) / 1000.0;
  };
  const auto table_mha = [](const BatchStats& st) { return st.sum_prefix < 256; };
  const auto table_us = [&](const BatchStats& st) { return table_mha(st) ? mha_us(st) : mla_us(st); };
  std::vector<std::vector<SequenceShape>> calls;
  BatchTimer timer = [&](const std::vector<SequenceShape>& b) -> absl::StatusOr<BatchTimes> {
    calls.push_back(b);
    const BatchStats st = ComputeBatchStats(b);
    return BatchTimes{st.se, mha_us(st), std::nullopt, mla_us(st)};
  };
  PolicyBenchOptions o;
  o.batches = 100;
  o.workload.fresh_fraction = 0.5;
  auto r = RunPolicyBenchmark(timer, tuned, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // The calls: each batch, then its lead and fresh part where it can split.
  double tuned_us = 0, no_split_us = 0, best_us = 0;
  int batches = 0, splittable = 0, splits = 0, tuned_mha = 0;
  for (size_t i = 0; i < calls.size(); ++i, ++batches) {
    const BatchStats st = ComputeBatchStats(calls[i]);
    const double whole = std::min(mha_us(st), mla_us(st));
    no_split_us += table_us(st);
    if (SplitPoint(calls[i]) == 0) {
      tuned_us += table_us(st);
      tuned_mha += table_mha(st);
      best_us += whole;
      continue;
    }
    ASSERT_LT(i + 2, calls.size());
    const BatchStats lead = ComputeBatchStats(calls[i + 1]), fresh = ComputeBatchStats(calls[i + 2]);
    EXPECT_EQ(calls[i + 1].size() + calls[i + 2].size(), calls[i].size());
    EXPECT_TRUE(table_mha(fresh));
    const double split = mla_us(lead) + mha_us(fresh);
    if (table_mha(lead)) {  // both parts MHA: the whole batch in MHA
      tuned_us += mha_us(st);
      ++tuned_mha;
    } else {
      tuned_us += split;
      ++splits;
    }
    best_us += std::min(whole, split);
    ++splittable;
    i += 2;
  }
  EXPECT_EQ(batches, 100);
  EXPECT_GT(splits, 0);
  EXPECT_EQ(r->splittable, splittable);
  ASSERT_EQ(r->rows.size(), 5u);
  EXPECT_EQ(r->rows[2].split, splits);
  EXPECT_EQ(r->rows[2].mha, tuned_mha);
  EXPECT_EQ(r->rows[2].mla, 100 - splits - tuned_mha);
  EXPECT_NEAR(r->rows[2].total_us, tuned_us, 1e-6);
  EXPECT_EQ(r->rows[3].split, 0);
  EXPECT_NEAR(r->rows[3].total_us, no_split_us, 1e-6);
  EXPECT_NEAR(r->rows[4].total_us, best_us, 1e-6);
  for (const PolicyRow& row : r->rows) {
    EXPECT_LE(r->rows[4].total_us, row.total_us + 1e-9) << row.name;
    EXPECT_EQ(row.mha + row.mla + row.split, 100) << row.name;
  }
  EXPECT_THAT(r->table, HasSubstr("fresh prompts: each request prefix 0 with probability 0.50"));
  EXPECT_THAT(r->table, HasSubstr("tuned, no split: mla-with-prefix"));
  o.workload.fresh_fraction = 1.5;
  EXPECT_EQ(RunPolicyBenchmark(timer, tuned, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PolicyBenchmark, PassesTimerErrorsOn) {
  BatchTimer timer = [](const std::vector<SequenceShape>&) -> absl::StatusOr<BatchTimes> {
    return absl::ResourceExhaustedError("out of memory");
  };
  auto r = RunPolicyBenchmark(timer, {}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  PolicyBenchOptions o;
  o.batches = 0;
  EXPECT_EQ(RunPolicyBenchmark(timer, {}, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::profiles
