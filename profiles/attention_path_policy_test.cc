// AttentionPathPolicy: table choice, DSA rules with the device's shared-memory cap, overrides,
// counters.
#include "profiles/attention_path_policy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiles/testing/test_profiles.h"

namespace mlaserve::profiles {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<AttentionPathPolicy> MakePolicy(GpuProfile p, ModelAttentionTraits m = {},
                                                PolicyOptions o = {}) {
  auto policy = AttentionPathPolicy::Create(std::move(p), "test", m, o);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *std::move(policy) : nullptr;
}

// One sequence per (prefix, extend) pair.
PathChoice Choose(AttentionPathPolicy& policy, std::vector<SequenceShape> batch) {
  return policy.Choose(batch);
}

TEST(AttentionPathPolicy, TableThresholdDecides) {
  GpuProfile p = testing::SmallProfile();
  // Cell (bs 2, prefix bucket 0, extend bucket 512): threshold 2001. Set it to a real value.
  for (MhaMlaCell& c : p.mha_mla.cells) {
    if (c.batch == 2 && c.prefix == 0 && c.extend == 512) c.se_threshold = 400000;
  }
  auto policy = MakePolicy(p);
  // se = 600*600 + 100*100 = 370000 < 400000 -> MLA.
  PathChoice c = Choose(*policy, {{0, 600}, {0, 100}});
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);
  EXPECT_EQ(c.stats.se, 370000);
  EXPECT_EQ(c.se_threshold, 400000);
  // se = 500*500 + 400*400 = 410000 >= 400000 -> MHA.
  c = Choose(*policy, {{0, 500}, {0, 400}});
  EXPECT_EQ(c.path, PrefillPath::kMha);
  EXPECT_EQ(policy->count(PrefillPath::kMla), 1u);
  EXPECT_EQ(policy->count(PrefillPath::kMha), 1u);
  EXPECT_EQ(policy->count(ChoiceReason::kTable), 2u);
  EXPECT_EQ(AttentionPathPolicy::Describe(c),
            "mha (table: bs=2 prefix=0 extend=900 se=410000 >= threshold=400000)");
}

TEST(AttentionPathPolicy, NeverMhaAndBatchAboveTable) {
  GpuProfile p = testing::SmallProfile();
  for (MhaMlaCell& c : p.mha_mla.cells) {
    if (c.batch == 8) c.se_threshold = kNeverMha;
  }
  auto policy = MakePolicy(p);
  std::vector<SequenceShape> big(20, SequenceShape{0, 4000});  // bs 20 -> bucket 8
  const PathChoice c = policy->Choose(big);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);
  EXPECT_THAT(AttentionPathPolicy::Describe(c), HasSubstr("threshold=never"));
}

TEST(AttentionPathPolicy, ThresholdScaleIsAppliedAndValidated) {
  GpuProfile p = testing::SmallProfile();
  for (MhaMlaCell& c : p.mha_mla.cells) c.se_threshold = 1000000;
  auto plain = MakePolicy(p);
  auto halved = MakePolicy(p, {}, {std::nullopt, 0.5});
  const std::vector<SequenceShape> b = {{0, 800}};  // se 640000
  EXPECT_EQ(plain->Choose(b).path, PrefillPath::kMla);
  const PathChoice c = halved->Choose(b);
  EXPECT_EQ(c.path, PrefillPath::kMha);
  EXPECT_EQ(c.se_threshold, 500000);
  for (double bad : {0.0, -1.0, 2e6, std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto r = AttentionPathPolicy::Create(p, "test", {}, {std::nullopt, bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("threshold scale"));
  }
}

TEST(AttentionPathPolicy, ForcedPaths) {
  auto mha = MakePolicy(testing::SmallProfile(), {}, {PrefillPath::kMha, 1.0});
  const PathChoice c = mha->Choose(std::vector<SequenceShape>{{100000, 1}});
  EXPECT_EQ(c.path, PrefillPath::kMha);
  EXPECT_EQ(c.reason, ChoiceReason::kForced);
  auto mla = MakePolicy(testing::SmallProfile(), {}, {PrefillPath::kMla, 1.0});
  EXPECT_EQ(mla->Choose(std::vector<SequenceShape>{{0, 8000}}).path, PrefillPath::kMla);
  // sparse_fwd needs a DSA model.
  auto r = AttentionPathPolicy::Create(testing::SmallProfile(), "test", {},
                                       {PrefillPath::kSparseFwd, 1.0});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("sparse_fwd"));
  EXPECT_FALSE(AttentionPathPolicy::Create(testing::SmallProfile(), "t", {true, 0}).ok());
}

TEST(AttentionPathPolicy, ParsePrefillPath) {
  EXPECT_EQ(*ParsePrefillPath("auto"), std::nullopt);
  EXPECT_EQ(*ParsePrefillPath("mha"), PrefillPath::kMha);
  EXPECT_EQ(*ParsePrefillPath("sparse-fwd"), PrefillPath::kSparseFwd);
  auto bad = ParsePrefillPath("flash");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'flash'"));
  EXPECT_FALSE(ParsePrefillPath("split").ok());  // the policy's choice, not a path to force
  auto forced_split = AttentionPathPolicy::Create(testing::SmallProfile(), "t", {},
                                                  {PrefillPath::kSplit, 1.0});
  ASSERT_FALSE(forced_split.ok());
  EXPECT_THAT(std::string(forced_split.status().message()), HasSubstr("cannot be forced"));
}

constexpr ModelAttentionTraits kDsa{true, 2048};

// The split rule's batches: [prefixed or single-token | fresh prompts], and the cells it reads.
constexpr int64_t kLeadPrefix = 4096;  // prefix bucket 1024
// The fresh prompts' cells: one or two prompts without a prefix.
GpuProfile SplitProfile(GpuProfile p, int64_t whole_threshold, int64_t lead_threshold,
                        int64_t fresh_threshold = 400000) {
  for (MhaMlaCell& c : p.mha_mla.cells) {
    if (c.batch == 3 && c.prefix == 1024) c.se_threshold = whole_threshold;
    if (c.batch == 1 && c.prefix == 1024 && c.extend == 512) c.se_threshold = lead_threshold;
    if (c.batch == 2 && c.prefix == 1024 && c.extend == 0) c.se_threshold = lead_threshold;
    if (c.batch <= 2 && c.prefix == 0) c.se_threshold = fresh_threshold;
  }
  return p;
}

TEST(AttentionPathPolicy, SplitPoint) {
  EXPECT_EQ(SplitPoint(std::vector<SequenceShape>{{kLeadPrefix, 512}, {0, 600}, {0, 300}}), 1);
  EXPECT_EQ(SplitPoint(std::vector<SequenceShape>{{0, 1}, {7, 1}, {0, 5}}), 2);  // one-token lead
  EXPECT_EQ(SplitPoint(std::vector<SequenceShape>{{10, 5}}), 0);            // no fresh prompt
  EXPECT_EQ(SplitPoint(std::vector<SequenceShape>{{0, 5}, {0, 6}}), 0);     // no lead
  EXPECT_EQ(SplitPoint(std::vector<SequenceShape>{{10, 5}, {0, 1}}), 0);    // a one-token prompt
  EXPECT_EQ(SplitPoint(std::vector<SequenceShape>{{10, 5}, {0, 5}, {3, 1}}), 0);  // not last
  EXPECT_EQ(SplitPoint(std::vector<SequenceShape>{{0, 5}, {10, 5}, {0, 5}}), 0);  // fresh first
  EXPECT_EQ(SplitPoint({}), 0);
}

TEST(AttentionPathPolicy, SplitWhenTheLeadSaysMlaAndTheFreshPromptsMha) {
  // Whole batch: bs=3, prefix 4096, extend 1412, se = 4608*512 + 600^2 + 300^2 = 2809296,
  // never MHA. Lead: bs=1, prefix 4096, extend 512, se 2359296 < 3000000: MLA. Fresh prompts:
  // bs=2, prefix 0, extend 900, se 450000 >= 400000: MHA. -> the split.
  auto policy = MakePolicy(SplitProfile(testing::SmallProfile(), kNeverMha, 3000000));
  const PathChoice c = Choose(*policy, {{kLeadPrefix, 512}, {0, 600}, {0, 300}});
  EXPECT_EQ(c.path, PrefillPath::kSplit);
  EXPECT_EQ(c.reason, ChoiceReason::kSplitLead);
  EXPECT_EQ(c.stats.se, 2809296);
  ASSERT_TRUE(c.split.has_value());
  EXPECT_EQ(c.split->lead, 1);
  EXPECT_EQ(c.split->lead_stats.se, 2359296);
  EXPECT_EQ(c.split->lead_path, PrefillPath::kMla);
  EXPECT_EQ(c.split->lead_threshold, 3000000);
  EXPECT_EQ(c.split->fresh_stats.batch, 2);
  EXPECT_EQ(c.split->fresh_stats.sum_extend, 900);
  EXPECT_EQ(c.split->fresh_path, PrefillPath::kMha);
  EXPECT_EQ(c.split->fresh_threshold, 400000);
  EXPECT_EQ(c.mha_provider, MhaPrefillProvider::kAuto);  // the fresh part: engine's default
  EXPECT_EQ(AttentionPathPolicy::Describe(c),
            "mla|mha split (lead: table: bs=1 prefix=4096 extend=512 se=2359296 < "
            "threshold=3000000; fresh: table: bs=2 prefix=0 extend=900 se=450000 >= "
            "threshold=400000)");
  EXPECT_EQ(policy->count(PrefillPath::kSplit), 1u);
  EXPECT_EQ(policy->count(PrefillPath::kMla), 0u);
  EXPECT_EQ(policy->count(ChoiceReason::kSplitLead), 1u);
  EXPECT_EQ(std::string(PrefillPathName(PrefillPath::kSplit)), "split");
  // One-token leading chunks count as the lead too (they attend like decode rows).
  const PathChoice ones = Choose(*policy, {{kLeadPrefix, 1}, {0, 1}, {0, 700}});
  EXPECT_EQ(ones.path, PrefillPath::kSplit);
  EXPECT_EQ(ones.split->lead, 2);
}

TEST(AttentionPathPolicy, BothPartsMhaTakeWholeBatchMha) {
  // Whole batch: bs=3, prefix 4096, extend 2312 (cell (3, 1024, 2048): ours), never MHA. Lead:
  // se 2359296 >= 2000000 in cell (1, 1024, 512) (cuDNN); fresh prompts: se 1640000 >= 400000:
  // both MHA -> MHA for the whole batch, on the whole batch's cell's provider.
  PolicyOptions o;
  o.cudnn_available = true;
  auto policy = MakePolicy(SplitProfile(testing::MixedProviderProfile(), kNeverMha, 2000000), {}, o);
  const PathChoice c = Choose(*policy, {{kLeadPrefix, 512}, {0, 1000}, {0, 800}});
  EXPECT_EQ(c.path, PrefillPath::kMha);
  EXPECT_EQ(c.reason, ChoiceReason::kSplitLead);
  EXPECT_EQ(c.mha_provider, MhaPrefillProvider::kOurs);
  ASSERT_TRUE(c.split.has_value());
  EXPECT_EQ(c.split->lead_path, PrefillPath::kMha);
  EXPECT_EQ(AttentionPathPolicy::Describe(c),
            "mha (split_lead: bs=3 prefix=4096 extend=2312 se=3999296; lead: table: bs=1 "
            "prefix=4096 extend=512 se=2359296 >= threshold=2000000; fresh: table: bs=2 "
            "prefix=0 extend=1800 se=1640000 >= threshold=400000 provider=ours)");
  EXPECT_EQ(policy->count(PrefillPath::kMha), 1u);
  EXPECT_EQ(policy->mha_count(MhaPrefillProvider::kOurs), 1u);
}

TEST(AttentionPathPolicy, SplitWhenTheWholeBatchSaysMhaButItsLeadMla) {
  // Whole batch: se 2809296 >= 0 -> MHA (the fresh prompts' extend^2 in it); lead alone: se
  // 2359296 < 3000000 -> MLA. The split keeps the lead's prefix in latent form.
  auto policy = MakePolicy(SplitProfile(testing::SmallProfile(), 0, 3000000));
  const PathChoice c = Choose(*policy, {{kLeadPrefix, 512}, {0, 600}, {0, 300}});
  EXPECT_EQ(c.path, PrefillPath::kSplit);
  EXPECT_EQ(c.reason, ChoiceReason::kSplitLead);
  EXPECT_EQ(c.mha_provider, MhaPrefillProvider::kAuto);
  ASSERT_TRUE(c.split.has_value());
  EXPECT_EQ(c.split->lead_path, PrefillPath::kMla);
  EXPECT_EQ(policy->count(PrefillPath::kSplit), 1u);
  EXPECT_EQ(policy->count(PrefillPath::kMha), 0u);
}

TEST(AttentionPathPolicy, FreshPromptsThatSayMlaKeepOneForm) {
  const std::vector<SequenceShape> batch = {{kLeadPrefix, 512}, {0, 600}, {0, 300}};
  // The whole batch says MHA (the fresh prompts' extend^2 in its se), but both parts alone
  // say MLA: MLA.
  auto both_mla = MakePolicy(SplitProfile(testing::SmallProfile(), 0, 3000000, kNeverMha));
  PathChoice c = both_mla->Choose(batch);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kSplitLead);
  ASSERT_TRUE(c.split.has_value());
  EXPECT_EQ(c.split->fresh_path, PrefillPath::kMla);
  EXPECT_EQ(AttentionPathPolicy::Describe(c),
            "mla (split_lead: bs=3 prefix=4096 extend=1412 se=2809296; lead: table: bs=1 "
            "prefix=4096 extend=512 se=2359296 < threshold=3000000; fresh: table: bs=2 prefix=0 "
            "extend=900 se=450000 threshold=never)");
  // The lead MHA and the fresh prompts MLA: no form runs that way round; the whole batch's
  // own choice (MLA here).
  auto reversed = MakePolicy(SplitProfile(testing::SmallProfile(), kNeverMha, 0, kNeverMha));
  c = reversed->Choose(batch);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);
  EXPECT_FALSE(c.split.has_value());
}

// A fresh-prompt cell with a split threshold (measured by the tuner: the split against the
// whole batch in latent form) decides the fresh part after a latent lead instead of the cell's
// own threshold (the fresh prompts alone, MHA against MLA).
TEST(AttentionPathPolicy, TheFreshCellsSplitThresholdDecidesAfterALatentLead) {
  const std::vector<SequenceShape> batch = {{kLeadPrefix, 512}, {0, 600}, {0, 300}};  // fresh se 450000
  GpuProfile p = SplitProfile(testing::SmallProfile(), kNeverMha, 3000000);  // own: 400000
  const auto with_split_threshold = [&](int64_t split) {
    GpuProfile q = p;
    for (MhaMlaCell& c : q.mha_mla.cells) {
      if (c.prefix == 0) c.split_se_threshold = split;
    }
    return MakePolicy(q);
  };
  // Above its own threshold but below the split's: no split, the whole batch in latent form.
  auto high = with_split_threshold(1000000);
  PathChoice c = high->Choose(batch);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);  // as the whole batch said
  EXPECT_FALSE(c.split.has_value());
  // Below the split threshold the whole batch keeps its own choice even where it said MHA:
  // both parts say latent, so the batch runs latent (reason split_lead).
  GpuProfile whole_mha = SplitProfile(testing::SmallProfile(), 0, 3000000);
  for (MhaMlaCell& cell : whole_mha.mha_mla.cells) {
    if (cell.prefix == 0) cell.split_se_threshold = 1000000;
  }
  c = MakePolicy(whole_mha)->Choose(batch);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kSplitLead);
  ASSERT_TRUE(c.split.has_value());
  EXPECT_TRUE(c.split->fresh_by_split_threshold);
  EXPECT_EQ(c.split->fresh_threshold, 1000000);
  EXPECT_EQ(AttentionPathPolicy::Describe(c),
            "mla (split_lead: bs=3 prefix=4096 extend=1412 se=2809296; lead: table: bs=1 "
            "prefix=4096 extend=512 se=2359296 < threshold=3000000; fresh: split table: bs=2 "
            "prefix=0 extend=900 se=450000 < threshold=1000000)");
  // At or above it: the split, the threshold named as the split's.
  auto low = with_split_threshold(450000);
  c = low->Choose(batch);
  EXPECT_EQ(c.path, PrefillPath::kSplit);
  ASSERT_TRUE(c.split.has_value());
  EXPECT_EQ(c.split->fresh_threshold, 450000);
  EXPECT_THAT(AttentionPathPolicy::Describe(c),
              HasSubstr("fresh: split table: bs=2 prefix=0 extend=900 se=450000 >= "
                        "threshold=450000"));
  // The split threshold can also split where the cell's own threshold says latent.
  GpuProfile own_never = SplitProfile(testing::SmallProfile(), kNeverMha, 3000000, kNeverMha);
  for (MhaMlaCell& cell : own_never.mha_mla.cells) {
    if (cell.prefix == 0) cell.split_se_threshold = 0;
  }
  EXPECT_EQ(MakePolicy(own_never)->Choose(batch).path, PrefillPath::kSplit);
  // kNeverMha: never split.
  EXPECT_EQ(with_split_threshold(kNeverMha)->Choose(batch).path, PrefillPath::kMla);
  // A lead in MHA form does not ask it: both parts MHA by their own cells -> MHA.
  auto lead_mha = SplitProfile(testing::SmallProfile(), kNeverMha, 0);
  for (MhaMlaCell& cell : lead_mha.mha_mla.cells) {
    if (cell.prefix == 0) cell.split_se_threshold = kNeverMha;
  }
  c = MakePolicy(lead_mha)->Choose(batch);
  EXPECT_EQ(c.path, PrefillPath::kMha);
  ASSERT_TRUE(c.split.has_value());
  EXPECT_FALSE(c.split->fresh_by_split_threshold);
}

TEST(AttentionPathPolicy, SplitRuleLeavesOtherBatchesAlone) {
  const std::vector<SequenceShape> split_shape = {{kLeadPrefix, 512}, {0, 600}, {0, 300}};
  // The whole batch says MHA and so does its lead: unchanged.
  auto mha = MakePolicy(SplitProfile(testing::SmallProfile(), 0, 0));
  PathChoice c = mha->Choose(split_shape);
  EXPECT_EQ(c.path, PrefillPath::kMha);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);
  EXPECT_FALSE(c.split.has_value());
  const GpuProfile p = SplitProfile(testing::SmallProfile(), kNeverMha, 3000000);
  // Not [lead | fresh]: a fresh prompt first.
  auto policy = MakePolicy(p);
  c = Choose(*policy, {{0, 600}, {kLeadPrefix, 512}, {0, 300}});
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);
  // Forced MLA.
  auto forced = MakePolicy(p, {}, {PrefillPath::kMla, 1.0});
  c = forced->Choose(split_shape);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kForced);
  // The option off.
  PolicyOptions off;
  off.split_fresh_prompts = false;
  c = MakePolicy(p, {}, off)->Choose(split_shape);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);
  EXPECT_FALSE(c.split.has_value());
  // DSA: short sequences use the dense table, but DSA choices stay as they were.
  c = MakePolicy(p, kDsa)->Choose(std::vector<SequenceShape>{{1024, 512}, {0, 600}, {0, 300}});
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kTable);
}


TEST(AttentionPathPolicy, DsaCapComesFromDeviceSharedMemory) {
  GpuProfile p = testing::SmallProfile();
  p.device.smem_optin_bytes = 228 * 1024;  // the PR's 228 KiB: cap 11673
  p.sparse.sparse_fwd_min_rows = 20000;    // never by the table
  auto policy = MakePolicy(p, kDsa);
  EXPECT_EQ(policy->sparse_cap_rows(), 11673);
  // Long sequences (seq_len > index_topk) with 11673 rows: the decode-style kernel holds them.
  PathChoice c = Choose(*policy, {{4000, 11673}});
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.reason, ChoiceReason::kSparseTable);
  c = Choose(*policy, {{4000, 11674}});
  EXPECT_EQ(c.path, PrefillPath::kSparseFwd);
  EXPECT_EQ(c.reason, ChoiceReason::kSparseCap);
  // The H100's real opt-in limit (227 KiB) gives 11622.
  p.device.smem_optin_bytes = 232448;
  auto h100 = MakePolicy(p, kDsa);
  EXPECT_EQ(h100->sparse_cap_rows(), 11622);
  EXPECT_EQ(Choose(*h100, {{4000, 11623}}).path, PrefillPath::kSparseFwd);
  EXPECT_EQ(h100->count(ChoiceReason::kSparseCap), 1u);
}

TEST(AttentionPathPolicy, DsaShortSequencesUseDenseTable) {
  GpuProfile p = testing::SmallProfile();
  for (MhaMlaCell& c : p.mha_mla.cells) c.se_threshold = 0;  // dense: always MHA
  auto policy = MakePolicy(p, kDsa);
  // Every seq_len <= 2048: dense MHA, even with more rows than the sparse cap.
  std::vector<SequenceShape> many(8, SequenceShape{48, 2000});
  EXPECT_EQ(policy->Choose(many).path, PrefillPath::kMha);
  EXPECT_EQ(Choose(*policy, {{0, 2048}}).path, PrefillPath::kMha);
  // One sequence one past index_topk: sparse rules.
  const PathChoice c = Choose(*policy, {{0, 2048}, {1, 2048}});
  EXPECT_EQ(c.reason, ChoiceReason::kSparseTable);
  EXPECT_EQ(c.path, PrefillPath::kMla);
}

TEST(AttentionPathPolicy, DsaSparseTableAndForcing) {
  GpuProfile p = testing::SmallProfile();  // sparse_fwd_min_rows 9000, cap 11622
  auto policy = MakePolicy(p, kDsa);
  EXPECT_EQ(Choose(*policy, {{5000, 8999}}).path, PrefillPath::kMla);
  EXPECT_EQ(Choose(*policy, {{5000, 9000}}).path, PrefillPath::kSparseFwd);
  // Forced MHA cannot run a long DSA batch densely: the sparse rules apply.
  auto forced_mha = MakePolicy(p, kDsa, {PrefillPath::kMha, 1.0});
  EXPECT_EQ(Choose(*forced_mha, {{5000, 100}}).path, PrefillPath::kMla);
  EXPECT_EQ(Choose(*forced_mha, {{0, 100}}).path, PrefillPath::kMha);  // short: dense
  // Forced MLA never exceeds the cap; below it, it holds.
  auto forced_mla = MakePolicy(p, kDsa, {PrefillPath::kMla, 1.0});
  EXPECT_EQ(Choose(*forced_mla, {{5000, 10000}}).path, PrefillPath::kMla);
  EXPECT_EQ(Choose(*forced_mla, {{5000, 12000}}).path, PrefillPath::kSparseFwd);
  auto forced_sparse = MakePolicy(p, kDsa, {PrefillPath::kSparseFwd, 1.0});
  EXPECT_EQ(Choose(*forced_sparse, {{5000, 10}}).path, PrefillPath::kSparseFwd);
}

TEST(AttentionPathPolicy, NearestAndMissingCells) {
  GpuProfile p = testing::SmallProfile();
  std::erase_if(p.mha_mla.cells, [](const MhaMlaCell& c) {
    return (c.batch == 1 && c.prefix == 0 && c.extend == 0) || c.batch == 5;
  });
  auto policy = MakePolicy(p);
  const PathChoice near = Choose(*policy, {{0, 100}});  // own cell gone: (0, 512) or (256, 0)
  EXPECT_EQ(near.reason, ChoiceReason::kTableNearest);
  std::vector<SequenceShape> five(5, SequenceShape{0, 10});
  EXPECT_EQ(policy->Choose(five).path, PrefillPath::kMha);  // no cell, no prefix
  EXPECT_EQ(policy->count(ChoiceReason::kNoCell), 1u);
  five[4].prefix = 1;  // last, so the split rule does not apply
  EXPECT_EQ(policy->Choose(five).path, PrefillPath::kMla);  // no cell, with prefix
  EXPECT_EQ(policy->Choose({}).reason, ChoiceReason::kEmpty);
}

}  // namespace
}  // namespace mlaserve::profiles
