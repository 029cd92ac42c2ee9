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
  BatchTimer timer = [&](const std::vector<SequenceShape>& b) -> absl::StatusOr<TimedSample> {
    const BatchStats st = ComputeBatchStats(b);
    TimedSample s{st.se, 10.0, 1.0 + st.sum_prefix / 1000.0};
    mha_total += s.mha_us;
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
  ASSERT_EQ(r->rows.size(), 4u);
  EXPECT_DOUBLE_EQ(r->rows[0].total_us, mla_total);  // always MLA
  EXPECT_EQ(r->rows[0].mla, 50);
  EXPECT_DOUBLE_EQ(r->rows[2].total_us, mha_total);  // tuned: all MHA
  EXPECT_EQ(r->rows[2].mha, 50);
  for (const PolicyRow& row : r->rows) {
    EXPECT_LE(r->rows[3].total_us, row.total_us + 1e-9) << row.name;
    EXPECT_EQ(row.mha + row.mla, 50) << row.name;
  }
  EXPECT_THAT(r->table, HasSubstr("tuned: all-mha"));
  EXPECT_THAT(r->table, HasSubstr("vs fixed rule"));
}

TEST(PolicyBenchmark, PassesTimerErrorsOn) {
  BatchTimer timer = [](const std::vector<SequenceShape>&) -> absl::StatusOr<TimedSample> {
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
