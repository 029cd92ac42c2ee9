#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_decode/balanced_schedule.h"
#include "kernels/testing/latent_params.h"
#include "kernels/testing/mla_case.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

MlaParams ParamsFor(const testing::LatentBatch& c, std::vector<float>& out, std::vector<float>& lse) {
  return testing::HostLatentParams(c, out, lse);
}

// (batch, num_heads, rank/rope, q_per_request)
class MlaDecodeTest
    : public ::testing::TestWithParam<std::tuple<int, int, std::pair<int, int>, int>> {};

TEST_P(MlaDecodeTest, EqualsMlaPrefill) {
  const auto [batch, heads, dims, qpr] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> lq(batch, qpr), prefix(batch);
  for (auto& x : prefix) x = static_cast<int>(rng() % 300);
  auto c = testing::MakeLatentBatch(lq, prefix, heads, dims.first, dims.second, seed);
  auto plan = PlanMlaDecode({batch, heads, qpr, c.rank, c.rope, 300 + qpr, /*num_sms=*/0});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_splits, 1);
  EXPECT_EQ(plan->workspace_bytes, 0u);

  std::vector<float> dec_out, dec_lse, pre_out, pre_lse;
  MlaParams dp = ParamsFor(c, dec_out, dec_lse);
  ASSERT_TRUE(MlaDecode(dp, *plan, nullptr, KernelContext{}).ok());
  MlaParams pp = ParamsFor(c, pre_out, pre_lse);
  ASSERT_TRUE(MlaPrefill(pp, KernelContext{}).ok());
  EXPECT_EQ(testing::RelativeError(dec_out, pre_out), 0.0);
  EXPECT_EQ(testing::LseError(dec_lse, pre_lse), 0.0);
  // And against the naive reference (causal: query i sees positions <= its own).
  std::vector<float> want_out, want_lse;
  testing::NaiveLatentAttention(
      c,
      [&](int t) {
        std::vector<int> pos(c.query_pos(t) + 1);
        for (size_t j = 0; j < pos.size(); ++j) pos[j] = static_cast<int>(j);
        return pos;
      },
      want_out, want_lse);
  EXPECT_LT(testing::RelativeError(dec_out, want_out), 1e-5);
  EXPECT_LT(testing::LseError(dec_lse, want_lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaDecodeTest,
                         ::testing::Combine(::testing::Values(1, 5), ::testing::Values(1, 4, 16),
                                            ::testing::Values(std::pair{512, 64}, std::pair{32, 16}),
                                            ::testing::Values(1, 2)));

TEST(MlaDecodePlan, SplitsFillTheDevice) {
  constexpr auto kChunks = MlaDecodeSchedule::kChunks;
  // One request, 16 heads, 8192 keys on 132 SMs: split into page-aligned chunks.
  auto plan = PlanMlaDecode({1, 16, 1, 512, 64, 8192, 132, kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->num_splits, 1);
  EXPECT_EQ(plan->num_parts, 0);
  EXPECT_EQ(plan->chunk_tokens % kPageSize, 0);
  EXPECT_GE(plan->num_splits * plan->chunk_tokens, 8192);
  EXPECT_LT((plan->num_splits - 1) * plan->chunk_tokens, 8192);
  EXPECT_EQ(plan->workspace_bytes, 16u * plan->num_splits * 513 * sizeof(float));
  EXPECT_FALSE(plan->longest_first);  // one wave
  // A full batch needs no split; its 256 CTAs run longest first (the workspace holds the order).
  plan = PlanMlaDecode({256, 16, 1, 512, 64, 8192, 132, kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_splits, 1);
  EXPECT_TRUE(plan->longest_first);
  EXPECT_EQ(plan->workspace_bytes, MlaDecodeChunkOrderBytes(256, 1));
  EXPECT_EQ(plan->workspace_bytes, 256u * sizeof(int32_t) + 144) << "the order, then the pick's words";
  EXPECT_EQ(PlanMlaDecode({1, 16, 3, 512, 64, 10, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MlaDecodePlan, ChunksRunLongestFirstBeyondOneWave) {
  constexpr auto kChunks = MlaDecodeSchedule::kChunks;
  // 64 requests x 2 row blocks = 128 CTAs: one wave on 132 SMs, grid order.
  auto plan = PlanMlaDecode({64, 128, 1, 512, 64, 8192, 132, kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_splits, 1);
  EXPECT_FALSE(plan->longest_first);
  EXPECT_EQ(plan->workspace_bytes, 0u);
  // 128 requests: 256 CTAs, two waves: longest first, the order after any partials.
  plan = PlanMlaDecode({128, 128, 1, 512, 64, 8192, 132, kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->longest_first);
  EXPECT_EQ(plan->workspace_bytes,
            MlaDecodeChunkWorkspaceBytes(128, 128, 512, plan->num_splits, /*longest_first=*/true));
  EXPECT_EQ(MlaDecodeChunkWorkspaceBytes(128, 128, 512, 3, true),
            MlaDecodeChunkOrderOffset(128, 128, 512, 3) + 128u * 3 * sizeof(int32_t) + 144);
  EXPECT_EQ(MlaDecodeChunkOrderOffset(128, 128, 512, 3) % 256, 0u);
  EXPECT_GE(MlaDecodeChunkOrderOffset(128, 128, 512, 3), 128u * 128 * 3 * 513 * sizeof(float));
  EXPECT_EQ(MlaDecodeChunkWorkspaceBytes(128, 128, 512, 3, false), 128u * 128 * 3 * 513 * sizeof(float));
  // More chunks than the order kernel sorts: grid order.
  plan = PlanMlaDecode({kMlaDecodeMaxOrderedChunks + 1, 16, 1, 512, 64, 256, 132, kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->longest_first);
  // The balanced schedule and the CPU have no chunk order.
  plan = PlanMlaDecode({128, 128, 1, 512, 64, 8192, 132, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->longest_first);
  plan = PlanMlaDecode({128, 128, 1, 512, 64, 8192, 0, kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->longest_first);
}

TEST(MlaDecodePlan, SmallBatchesSplitIntoShortChunks) {
  // Batch 1, 16 heads, 1024 keys (16 pages) on 132 SMs: a decode step at batch 1 is latency
  // bound, so the plan spreads the pages over many CTAs: one page each for 16 rows (the few-rows
  // kernel walks pages one at a time), a pair of pages each for 128 rows (both warpgroups of the
  // 64-row kernel busy), rather than a few CTAs of 4 pages.
  auto plan = PlanMlaDecode({1, 16, 1, 512, 64, 1024, 132, MlaDecodeSchedule::kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chunk_tokens, kPageSize);
  EXPECT_EQ(plan->num_splits, 16);
  plan = PlanMlaDecode({1, 128, 1, 512, 64, 1024, 132, MlaDecodeSchedule::kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chunk_tokens, 2 * kPageSize);
  EXPECT_EQ(plan->num_splits, 8);
  // 4 requests of 128 heads (2 row blocks each), 4096 keys: still within one wave.
  plan = PlanMlaDecode({4, 128, 1, 512, 64, 4096, 132, MlaDecodeSchedule::kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->num_splits, 4);
  EXPECT_LE(4 * 2 * plan->num_splits, 132);
  EXPECT_LE(plan->num_splits, 64);
}

TEST(MlaDecodePlan, PagesPerSplitCanBeForcedForTiming) {
  // MLASERVE_MLA_PAGES_PER_SPLIT=N sets the chunks' length (capped at the context's pages); out of
  // range it is ignored, and the balanced schedule keeps its own parts.
  const MlaDecodeShape shape{1, 16, 1, 512, 64, 1024, 132, MlaDecodeSchedule::kChunks};
  {
    testing::ScopedEnv forced("MLASERVE_MLA_PAGES_PER_SPLIT", "4");
    auto plan = PlanMlaDecode(shape);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->chunk_tokens, 4 * kPageSize);
    EXPECT_EQ(plan->num_splits, 4);
  }
  {
    testing::ScopedEnv whole("MLASERVE_MLA_PAGES_PER_SPLIT", "64");
    auto plan = PlanMlaDecode(shape);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->num_splits, 1) << "16 pages in one chunk: no split";
  }
  {
    // Longer than the even cuts (a 5000-key request in 64 + 15 pages), longest first beyond a wave.
    testing::ScopedEnv uneven("MLASERVE_MLA_PAGES_PER_SPLIT", "64");
    auto plan = PlanMlaDecode({64, 128, 1, 512, 64, 5000, 132, MlaDecodeSchedule::kChunks});
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->chunk_tokens, 64 * kPageSize);
    EXPECT_EQ(plan->num_splits, 2);
    EXPECT_TRUE(plan->longest_first);
  }
  {
    testing::ScopedEnv bad("MLASERVE_MLA_PAGES_PER_SPLIT", "1025");
    auto plan = PlanMlaDecode(shape);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->chunk_tokens, kPageSize) << "an out-of-range value leaves the plan's choice";
  }
  const MlaDecodeShape balanced{37, 16, 1, 512, 64, 3000, 132, MlaDecodeSchedule::kBalanced};
  auto unforced = PlanMlaDecode(balanced);
  ASSERT_TRUE(unforced.ok());
  testing::ScopedEnv forced("MLASERVE_MLA_PAGES_PER_SPLIT", "2");
  auto plan = PlanMlaDecode(balanced);
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->num_parts, 0);
  EXPECT_EQ(plan->chunk_tokens, unforced->chunk_tokens) << "the balanced schedule's plan is left as it was";
  EXPECT_EQ(plan->num_splits, unforced->num_splits);
}

TEST(MlaDecodePlan, BalancedScheduleIsOneWavePerRowBlock) {
  // 16 heads x 1 query = one 64-row block: 132 parts; 128 heads x 2 queries = 4 blocks: 33.
  auto plan = PlanMlaDecode({64, 16, 1, 512, 64, 8192, 132, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 132);
  EXPECT_EQ(plan->workspace_bytes, mla_decode_internal::MakeBalancedLayout(64, 1, 16, 512, 132).bytes);
  plan = PlanMlaDecode({64, 128, 2, 512, 64, 8192, 132, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 33);
  // The workspace holds 2 slots per part of every row of a request, and the schedule.
  const auto layout = mla_decode_internal::MakeBalancedLayout(64, 2, 128, 512, 33);
  EXPECT_GE(layout.part_lse, 2u * 33 * 256 * 512 * sizeof(float));
  EXPECT_GE(layout.bytes - layout.segments, (64u + 33) * 4 * sizeof(int32_t));
  EXPECT_EQ(plan->workspace_bytes, layout.bytes);
  // The CPU plan has neither.
  plan = PlanMlaDecode({64, 16, 1, 512, 64, 8192, 0, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 0);
  EXPECT_EQ(plan->workspace_bytes, 0u);
}

TEST(MlaDecodePlan, MetadataIsTheBatchPartOfTheWorkspace) {
  // The balanced schedule's records: the layout's segments .. slot_base, inside the workspace.
  auto plan = PlanMlaDecode({64, 128, 2, 512, 64, 8192, 132, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->num_parts, 0);
  const auto layout = mla_decode_internal::MakeBalancedLayout(64, 2, 128, 512, plan->num_parts);
  EXPECT_EQ(plan->metadata_bytes, layout.bytes - layout.segments);
  EXPECT_GT(plan->metadata_bytes, 0u);
  EXPECT_LE(plan->metadata_bytes, plan->workspace_bytes);
  EXPECT_EQ(plan->metadata_bytes % 16, 0u);
  // A longest-first chunk plan: its order, batch x splits int32 rounded up to 16 bytes.
  plan = PlanMlaDecode({256, 128, 1, 512, 64, 8192, 132, MlaDecodeSchedule::kChunks});
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(plan->longest_first);
  EXPECT_EQ(plan->metadata_bytes, MlaDecodeChunkOrderBytes(256, plan->num_splits));
  EXPECT_GE(plan->metadata_bytes, 256u * plan->num_splits * sizeof(int32_t));
  EXPECT_LE(plan->metadata_bytes, plan->workspace_bytes);
  // The order rounded up to 16 bytes, then the pick's 144 (chunk_pick.h: the picked length, the
  // longest request, each candidate's time).
  EXPECT_EQ(MlaDecodeChunkOrderBytes(3, 1), 160u);
  EXPECT_EQ(MlaDecodeChunkOrderBytes(5, 3), 208u);
  EXPECT_EQ(MlaDecodeChunkPickOffset(3, 1), 16u);
  EXPECT_EQ(MlaDecodeChunkPickOffset(5, 3), 64u);
  // No order and no schedule: one request in one wave of chunks, and the CPU plan.
  plan = PlanMlaDecode({1, 16, 1, 512, 64, 8192, 132, MlaDecodeSchedule::kChunks});
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->longest_first);
  EXPECT_EQ(plan->metadata_bytes, 0u);
  plan = PlanMlaDecode({256, 128, 1, 512, 64, 8192, 0});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->metadata_bytes, 0u);
}

TEST(MlaDecodePlan, AutoPicksBalancedForSkewedBatches) {
  // Short contexts over a full batch: chunk waves are even already.
  auto plan = PlanMlaDecode({128, 128, 1, 512, 64, 4096, 132});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 0);
  // One long request among short ones (the total says so): the balanced schedule.
  plan = PlanMlaDecode({64, 128, 1, 512, 64, 65536, 132, MlaDecodeSchedule::kAuto, 65536 + 63 * 1024});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 66);
  // Without the total the plan takes every request at the longest context: uniform lengths, where
  // chunks measured faster at 128 heads.
  plan = PlanMlaDecode({64, 128, 1, 512, 64, 65536, 132});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 0);
}

TEST(MlaDecodePlan, AutoWeighsTheBalancedScheduleByTheTotalKeys) {
  // 128 requests of 16 heads, the longest 5120 keys: taken all at the longest, chunks (one wave)
  // cost as much as the balanced schedule; with the total the caller knows (mean 4096), the
  // balanced schedule's parts are a fifth shorter than the longest request.
  MlaDecodeShape shape{128, 16, 1, 512, 64, 5120, 132};
  auto plan = PlanMlaDecode(shape);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 0);
  shape.total_seqlen_k = int64_t{128} * 4096;
  plan = PlanMlaDecode(shape);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_parts, 132);
  shape.total_seqlen_k = -1;
  EXPECT_EQ(PlanMlaDecode(shape).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MlaDecodePlan, BalancedPlansEstimateTheMostPiecesOfARequest) {
  // Lengths +-25% about the mean: the longest request spans at most three parts, so the combine
  // may take a warp per row (at most kCombineFewPieces = 4 pieces).
  struct Case {
    int batch, heads, mean_k, max_k;
    int64_t total;
    int max_pieces;
  };
  for (const Case c : {Case{64, 128, 4096, 5120, 64 * 4096, 3}, Case{64, 128, 8192, 10240, 64 * 8192, 3},
                       Case{128, 16, 4096, 5120, 128 * 4096, 3}, Case{64, 16, 4096, 5120, 64 * 4096, 4},
                       // one request of 64k keys among 63 of 1k: it spans tens of parts
                       Case{64, 16, 1024, 65536, 65536 + 63 * 1024, 62},
                       Case{64, 128, 1024, 65536, 65536 + 63 * 1024, 29}}) {
    const MlaDecodeShape shape{c.batch, c.heads, 1, 512, 64, c.max_k, 132, MlaDecodeSchedule::kBalanced, c.total};
    const auto plan = PlanMlaDecode(shape);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->max_pieces, c.max_pieces) << "batch " << c.batch << ", heads " << c.heads << ", max " << c.max_k;
  }
  // Chunk plans have no estimate (the combine knows their splits).
  const auto chunks = PlanMlaDecode({128, 128, 1, 512, 64, 5120, 132, MlaDecodeSchedule::kChunks, 128 * 4096});
  ASSERT_TRUE(chunks.ok());
  EXPECT_EQ(chunks->num_parts, 0);
  EXPECT_EQ(chunks->max_pieces, 0);
}

// The balanced schedule's cuts of its cost line (BalancedCuts, what MlaScheduleKernel runs):
// exact in sum, increasing, PartOf the inverse of Bound, tiny lines on fewer parts; charged cuts
// give every part the same cost (its share, plus the cut cost of the request piece it starts
// with after part 0) within a unit, uncharged ones every part but the last the same share.
TEST(MlaDecodeSchedule, CutsGiveEveryPartTheSameCost) {
  std::mt19937 rng(testing::FreshSeed());
  for (int trial = 0; trial < 4000; ++trial) {
    const int piece_cost = 1 + static_cast<int>(rng() % 8);
    const bool charge_cuts = rng() % 2 == 0;
    const int num_parts = 1 + static_cast<int>(rng() % 200);
    const int64_t total = static_cast<int64_t>(rng() % 100000);
    const mla_decode_internal::BalancedCuts cuts =
        mla_decode_internal::MakeBalancedCuts(total, piece_cost, charge_cuts, num_parts);
    SCOPED_TRACE(::testing::Message() << "total " << total << ", piece cost " << piece_cost << ", charged "
                                      << charge_cuts << ", parts " << num_parts << " (used " << cuts.parts << ")");
    const int64_t min_cost = mla_decode_internal::MinPartCost(piece_cost);
    ASSERT_EQ(cuts.cut_cost, charge_cuts ? piece_cost : 0);
    ASSERT_GE(cuts.parts, 1);
    ASSERT_LE(cuts.parts, num_parts);
    EXPECT_EQ(cuts.Bound(0), 0);
    EXPECT_EQ(cuts.Bound(cuts.parts), total);
    std::vector<int64_t> costs;
    for (int q = 0; q < cuts.parts; ++q) {
      if (total > 0) ASSERT_LT(cuts.Bound(q), cuts.Bound(q + 1)) << "part " << q;
      costs.push_back(cuts.Bound(q + 1) - cuts.Bound(q) + (q > 0 ? cuts.cut_cost : 0));
      if (total > 0) {
        EXPECT_EQ(cuts.PartOf(cuts.Bound(q)), q);
        EXPECT_EQ(cuts.PartOf(cuts.Bound(q + 1) - 1), q);
      }
    }
    if (cuts.parts == 1) continue;
    const auto [lo, hi] = std::minmax_element(costs.begin(), costs.end());
    if (charge_cuts) {
      EXPECT_LE(*hi - *lo, 1);
      EXPECT_GE(total / cuts.parts, min_cost);
      if (cuts.parts < num_parts) EXPECT_LT(total / (cuts.parts + 1), min_cost);
    } else {
      for (int q = 0; q + 1 < cuts.parts; ++q) EXPECT_EQ(costs[q], cuts.share) << "part " << q;
      EXPECT_LE(costs.back(), cuts.share);
      EXPECT_EQ(cuts.share, std::max((total + num_parts - 1) / num_parts, min_cost));
    }
  }
  // The kernel bench's 64 requests of 4k keys +-25% (4097 pages, piece cost 5: a line of 4417)
  // over 132 SMs' 66 parts of 128 heads: 71 or 72 a part, the last 67 pages and a cut. Equal
  // shares of ceil(4417 / 66) = 67 units, without the cuts' cost, left the last part 62.
  const mla_decode_internal::BalancedCuts cuts = mla_decode_internal::MakeBalancedCuts(4097 + 64 * 5, 5, true, 66);
  EXPECT_EQ(cuts.parts, 66);
  EXPECT_EQ(cuts.Bound(1), 71);
  EXPECT_EQ(cuts.Bound(66) - cuts.Bound(65), 67);
  // Uncharged (the few-rows kernel's): shares of ceil(4225 / 66) = 65; the 66th part gets none.
  const mla_decode_internal::BalancedCuts few = mla_decode_internal::MakeBalancedCuts(4225, 2, false, 66);
  EXPECT_EQ(few.parts, 65);
  EXPECT_EQ(few.Bound(1), 65);
  EXPECT_EQ(few.Bound(65), 4225);
}

// kAuto's schedule at 128 heads on the kernel bench's six mla_decode shapes (b 64 / 128 x 4k / 8k /
// 16k keys, lengths +-25% about the mean), planned from round lengths (the longest mean + 25%, the
// total batch x mean) and from the bench's own (their longest and their sum, on which the choices
// were measured): balanced[i] says whether shape i takes the balanced schedule.
// dram: the GPU's nominal DRAM bytes per SM clock (MlaDecodeShape::dram_bytes_per_sm_clock).
void ExpectAutoBalancedOnBenchShapes(int q_per_request, const std::array<bool, 6>& balanced, double dram = 0) {
  struct Shape {
    int batch, mean_k, bench_max_k;
    int64_t bench_total;
  };
  constexpr Shape kShapes[] = {{64, 4096, 5118, 260171},   {64, 8192, 10200, 533926},   {64, 16384, 20476, 1065302},
                               {128, 4096, 5095, 518841}, {128, 8192, 10169, 1067215}, {128, 16384, 20322, 2086258}};
  for (size_t i = 0; i < balanced.size(); ++i) {
    const Shape& s = kShapes[i];
    const auto round = PlanMlaDecode({s.batch, 128, q_per_request, 512, 64, s.mean_k + s.mean_k / 4, 132,
                                      MlaDecodeSchedule::kAuto, int64_t{s.batch} * s.mean_k, dram});
    const auto bench = PlanMlaDecode(
        {s.batch, 128, q_per_request, 512, 64, s.bench_max_k, 132, MlaDecodeSchedule::kAuto, s.bench_total, dram});
    ASSERT_TRUE(round.ok() && bench.ok());
    EXPECT_EQ(round->num_parts > 0, balanced[i])
        << "batch " << s.batch << ", mean " << s.mean_k << ", round lengths, dram " << dram;
    EXPECT_EQ(bench->num_parts > 0, balanced[i])
        << "batch " << s.batch << ", mean " << s.mean_k << ", bench lengths, dram " << dram;
  }
}

TEST(MlaDecodePlan, AutoTakesTheBalancedScheduleForOneWaveOfLongRequestsAt128Heads) {
  // 64 requests of 128 heads make one wave of chunk CTAs that lasts as long as the longest request;
  // the balanced schedule measured faster from 8k keys (H200, 2026-11-30: 8k 0.291 vs 0.306 ms, 16k
  // 0.524 vs 0.589) and, since the combine's evict-first loads, at 4k (2026-12-01: 493 / 488, 491 /
  // 480, 489 / 475 TFLOP/s in three calls); at 128 requests (two waves, longest first) the chunks.
  ExpectAutoBalancedOnBenchShapes(1, {true, true, true, false, false, false});
}

TEST(MlaDecodePlan, AutoPicksTheChunksFromTheLengthsOnALeanDramGpu) {
  // The H100 (12.83 DRAM bytes per SM clock, below kernels::kLeanDramBytesPerSmClock). b 64 x 128
  // heads: chunks whose length the metadata kernel picks from the lengths (chunk_pick.h), measured
  // ahead of the balanced schedule (2026-12-07: forced lengths 68 / 136 / 256 pages at 4k / 8k / 16k
  // 482.4 / 544.6 / 593.7 TFLOP/s against the balanced 459.7 / 534.5 / 587.5); b 128 keeps the
  // chunks of the plan's model (two waves without a split: no pick).
  constexpr double kH100 = 12.83;
  ExpectAutoBalancedOnBenchShapes(1, {false, false, false, false, false, false}, kH100);
  for (const int mean_k : {4096, 8192, 16384}) {
    for (const int batch : {64, 128}) {
      const auto plan = PlanMlaDecode({batch, 128, 1, 512, 64, mean_k + mean_k / 4, 132, MlaDecodeSchedule::kAuto,
                                       int64_t{batch} * mean_k, kH100});
      ASSERT_TRUE(plan.ok());
      EXPECT_EQ(plan->chunk_pick_sms, batch == 64 ? 132 : 0) << "batch " << batch << ", mean " << mean_k;
    }
  }
  // A GPU with more DRAM per SM clock (the H200's HBM3e), and one not known (0), as measured there.
  ExpectAutoBalancedOnBenchShapes(1, {true, true, true, false, false, false}, 18.8);
  ExpectAutoBalancedOnBenchShapes(1, {true, true, true, false, false, false}, 0);
  // Four row blocks a request (two query tokens) keep their own factor on either GPU.
  ExpectAutoBalancedOnBenchShapes(2, {false, false, true, false, true, true}, kH100);
  // 16 heads (one row block a request) do not read it.
  for (const double dram : {0.0, kH100}) {
    const auto plan = PlanMlaDecode({64, 16, 1, 512, 64, 5118, 132, MlaDecodeSchedule::kAuto, 260171, dram});
    const auto none = PlanMlaDecode({64, 16, 1, 512, 64, 5118, 132, MlaDecodeSchedule::kAuto, 260171});
    ASSERT_TRUE(plan.ok() && none.ok());
    EXPECT_EQ(plan->num_parts, none->num_parts);
    EXPECT_EQ(plan->num_splits, none->num_splits);
  }
}

TEST(MlaDecodePlan, PicksTheChunkLengthOnTheDeviceWhereEveryFirstChunkHasAnSm) {
  // Where the 64-row kernel's CTAs of one chunk a request fit one wave and fill more than 7/8 of
  // it: two chunks a request at most (the first half the width), longest first, the order's metadata
  // with the pick beside it; kAuto on a lean-DRAM GPU, or wherever MLASERVE_MLA_CHUNK_PICK=1.
  constexpr double kH100 = 12.83, kH200 = 18.8;
  const MlaDecodeShape b64{64, 128, 1, 512, 64, 5000, 132, MlaDecodeSchedule::kAuto, 64 * 4096, kH100};
  auto plan = PlanMlaDecode(b64);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chunk_pick_sms, 132);
  EXPECT_EQ(plan->num_splits, 2);
  EXPECT_EQ(plan->chunk_tokens, 40 * kPageSize) << "half of 79 pages, rounded up";
  EXPECT_EQ(plan->num_parts, 0);
  EXPECT_TRUE(plan->longest_first);
  EXPECT_EQ(plan->metadata_bytes, MlaDecodeChunkOrderBytes(64, 2));
  EXPECT_GE(plan->workspace_bytes, MlaDecodeChunkWorkspaceBytes(64, 128, 512, 2, true));
  // Not picked: more CTAs than SMs without a split (b 128, or two query tokens: four row blocks),
  // 7/8 of the SMs or fewer (b 57: 114 row blocks on 132), the few-rows kernel (16 heads), the
  // balanced schedule or the chunks forced, a forced chunk length, a GPU that is not lean, the CPU.
  const auto expect_no_pick = [](MlaDecodeShape shape, const char* why) {
    const auto p = PlanMlaDecode(shape);
    ASSERT_TRUE(p.ok()) << why;
    EXPECT_EQ(p->chunk_pick_sms, 0) << why;
  };
  MlaDecodeShape s = b64;
  s.batch = 128;
  expect_no_pick(s, "b 128");
  s = b64;
  s.q_per_request = 2;
  expect_no_pick(s, "two query tokens");
  s = b64;
  s.batch = 57;
  expect_no_pick(s, "b 57");
  s.batch = 58;
  plan = PlanMlaDecode(s);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chunk_pick_sms, 132) << "b 58: 116 row blocks on 132 SMs";
  s = b64;
  s.num_heads = 16;
  expect_no_pick(s, "16 heads");
  s = b64;
  s.schedule = MlaDecodeSchedule::kBalanced;
  expect_no_pick(s, "balanced forced");
  s = b64;
  s.schedule = MlaDecodeSchedule::kChunks;
  expect_no_pick(s, "chunks forced");
  s = b64;
  s.dram_bytes_per_sm_clock = kH200;
  expect_no_pick(s, "the H200");
  s = b64;
  s.num_sms = 0;
  expect_no_pick(s, "the CPU");
  {
    testing::ScopedEnv forced("MLASERVE_MLA_PAGES_PER_SPLIT", "68");
    expect_no_pick(b64, "a forced chunk length");
  }
  {
    testing::ScopedEnv off("MLASERVE_MLA_CHUNK_PICK", "0");
    expect_no_pick(b64, "MLASERVE_MLA_CHUNK_PICK=0");
  }
  // MLASERVE_MLA_CHUNK_PICK=1: also on other GPUs and for forced chunks (b 56 x 64 heads: one row
  // block a request), never where the model's condition fails.
  testing::ScopedEnv on("MLASERVE_MLA_CHUNK_PICK", "1");
  s = b64;
  s.dram_bytes_per_sm_clock = kH200;
  plan = PlanMlaDecode(s);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chunk_pick_sms, 132);
  plan = PlanMlaDecode({56, 64, 1, 512, 64, 3000, 60, MlaDecodeSchedule::kChunks, 0, kH200});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chunk_pick_sms, 60);
  EXPECT_EQ(plan->num_splits, 2);
  s = b64;
  s.batch = 128;
  expect_no_pick(s, "b 128 with the switch on");
}

TEST(MlaDecodeValidation, RefusesABadDramRate) {
  for (const double dram : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const auto plan = PlanMlaDecode({64, 128, 1, 512, 64, 4096, 132, MlaDecodeSchedule::kAuto, 0, dram});
    ASSERT_FALSE(plan.ok()) << dram;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(plan.status().message()).find("dram_bytes_per_sm_clock="), std::string::npos)
        << plan.status();
  }
}

TEST(MlaDecodePlan, AutoTakesTheBalancedScheduleForLongRequestsAtTwoQueryTokens) {
  // Two query tokens at 128 heads: four 64-row blocks a request, whose balanced CTAs read each page
  // together. Measured (H200, 2026-12-01): the balanced schedule ahead from 8k keys at b 128 and at
  // 16k at b 64; the chunks at 4k, and even with it at b 64, 8k.
  ExpectAutoBalancedOnBenchShapes(2, {false, false, true, false, true, true});
}

TEST(MlaDecodeValidation, RefusesLongQueries) {
  std::vector<int> lq = {3}, prefix = {5};
  auto c = testing::MakeLatentBatch(lq, prefix, 1, 8, 4, 1);
  std::vector<float> out, lse;
  MlaParams p = ParamsFor(c, out, lse);
  auto st = MlaDecode(p, MlaDecodePlan{}, nullptr, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("3 queries"), std::string::npos) << st.message();
}

// The value projection's contract (api.h), checked before any launch: each bad value is named.
// Every call here is refused (host pointers: nothing may launch).
TEST(MlaDecodeValidation, RefusesBadValueProjections) {
  std::vector<int> lq = {1}, prefix = {700};
  auto c = testing::MakeLatentBatch(lq, prefix, 16, 512, 64, 1);
  std::vector<float> out, lse;
  MlaParams p = ParamsFor(c, out, lse);
  p.dtype = DType::kBF16;
  MlaDecodePlan plan;
  plan.num_splits = 4;
  plan.chunk_tokens = 4 * kPageSize;
  plan.workspace_bytes = MlaDecodeChunkWorkspaceBytes(1, 16, 512, 4, false);
  std::vector<uint8_t> workspace(plan.workspace_bytes);
  alignas(16) static uint16_t weight[16 * 256 * 512];
  std::vector<uint16_t> values(16 * 128);
  const MlaValueProjection good{weight + 128 * 512, 512, 256 * 512, 128, values.data(), 16 * 128, 128};
  const KernelContext cuda{Backend::kCuda, nullptr};
  auto refused = [&](const MlaParams& params, const MlaDecodePlan& pl, const MlaValueProjection& v,
                     const KernelContext& ctx, const std::string& names) {
    const auto st = MlaDecode(params, pl, workspace.data(), ctx, &v);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << names << ": " << st;
    EXPECT_NE(st.message().find(names), std::string::npos) << st.message();
  };
  refused(p, plan, good, KernelContext{}, "backend=cpu");
  MlaParams f32 = p;
  f32.dtype = DType::kF32;
  refused(f32, plan, good, cuda, "dtype=f32");
  refused(p, MlaDecodePlan{}, good, cuda, "plan.num_splits=1");
  MlaValueProjection v = good;
  v.w = nullptr;
  refused(p, plan, v, cuda, "value_proj.w is null");
  v = good;
  v.w = weight + 4;
  refused(p, plan, v, cuda, "16-byte aligned");
  v = good;
  v.row_stride = 256;
  refused(p, plan, v, cuda, "value_proj.row_stride=256");
  v.row_stride = 516;
  refused(p, plan, v, cuda, "value_proj.row_stride=516");
  v = good;
  v.head_stride = 12;
  refused(p, plan, v, cuda, "value_proj.head_stride=12");
  v = good;
  v.v_dim = 0;
  refused(p, plan, v, cuda, "value_proj.v_dim=0");
  v = good;
  v.out = nullptr;
  refused(p, plan, v, cuda, "value_proj.out is null");
  v = good;
  v.out_head_stride = 100;
  refused(p, plan, v, cuda, "value_proj.out_head_stride=100");
  v = good;
  v.out_token_stride = 15 * 128;
  refused(p, plan, v, cuda, "value_proj.out_token_stride=1920");
  // And the predicate never takes it on the CPU backend, in f32, without a combine, or past
  // kMlaFusedValueMaxTokens tokens.
  EXPECT_FALSE(MlaDecodeTakesValueProjection(p, plan, KernelContext{}));
  EXPECT_FALSE(MlaDecodeTakesValueProjection(f32, plan, cuda));
  EXPECT_FALSE(MlaDecodeTakesValueProjection(p, MlaDecodePlan{}, cuda));
  MlaParams wide = p;
  wide.batch = static_cast<int>(kMlaFusedValueMaxTokens / wide.max_seqlen_q + 1);
  EXPECT_FALSE(MlaDecodeTakesValueProjection(wide, plan, cuda));
}

// 16 bytes, so that a vector of them is a 16-byte aligned metadata buffer on the host.
struct alignas(16) MetadataWord {
  uint8_t bytes[16];
};

// The CPU backend computes every row in one pass: it has no metadata to build, writes none into
// the caller's buffer, and MlaDecode gives the same result with the buffer as without.
TEST(MlaDecodeValidation, CpuBuildsNoMetadata) {
  std::vector<int> lq = {1, 2, 1}, prefix = {700, 90, 3000};
  auto c = testing::MakeLatentBatch(lq, prefix, 16, 512, 64, 3);
  std::vector<float> out, lse, plain_out, plain_lse;
  MlaParams p = ParamsFor(c, out, lse);
  auto plan = PlanMlaDecode({3, 16, 2, 512, 64, 3001, 132, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->metadata_bytes, 0u);
  std::vector<MetadataWord> metadata(plan->metadata_bytes / sizeof(MetadataWord));
  std::memset(metadata.data(), 0xab, plan->metadata_bytes);
  const std::vector<uint8_t> poison(plan->metadata_bytes, 0xab);
  EXPECT_TRUE(MlaDecodeBuildMetadata(p, *plan, metadata.data(), KernelContext{}).ok());
  EXPECT_TRUE(MlaDecodeBuildMetadata(p, *plan, nullptr, KernelContext{}).ok());
  EXPECT_EQ(std::memcmp(metadata.data(), poison.data(), poison.size()), 0) << "the CPU wrote metadata";
  std::vector<uint8_t> workspace(plan->workspace_bytes);
  ASSERT_TRUE(MlaDecode(p, *plan, workspace.data(), KernelContext{}, nullptr, metadata.data()).ok());
  MlaParams plain = ParamsFor(c, plain_out, plain_lse);
  ASSERT_TRUE(MlaDecode(plain, *plan, workspace.data(), KernelContext{}).ok());
  EXPECT_EQ(out, plain_out);
  EXPECT_EQ(lse, plain_lse);
}

// The metadata's contract (api.h), checked before any launch: each bad value is named. Every
// call here is refused or has nothing to build (host pointers: nothing may launch).
TEST(MlaDecodeValidation, RefusesBadMetadata) {
  std::vector<int> lq = {1, 1, 1}, prefix = {700, 90, 3000};
  auto c = testing::MakeLatentBatch(lq, prefix, 16, 512, 64, 4);
  std::vector<float> out, lse;
  MlaParams p = ParamsFor(c, out, lse);
  auto plan = PlanMlaDecode({3, 16, 1, 512, 64, 3001, 132, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->metadata_bytes, 0u);
  std::vector<MetadataWord> metadata(plan->metadata_bytes / sizeof(MetadataWord) + 1);
  auto* misaligned = reinterpret_cast<uint8_t*>(metadata.data()) + 4;
  std::vector<uint8_t> workspace(plan->workspace_bytes);
  const KernelContext cuda{Backend::kCuda, nullptr};
  auto refused = [](const absl::Status& st, const std::string& names) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << names << ": " << st;
    EXPECT_NE(st.message().find(names), std::string::npos) << st.message();
  };
  // MlaDecode checks the pointer's alignment before it dispatches, on either backend.
  for (const KernelContext& ctx : {KernelContext{}, cuda}) {
    refused(MlaDecode(p, *plan, workspace.data(), ctx, nullptr, misaligned), "metadata=");
  }
  refused(MlaDecodeBuildMetadata(p, *plan, nullptr, cuda), "metadata is null");
  refused(MlaDecodeBuildMetadata(p, *plan, misaligned, cuda), "16-byte aligned");
  MlaParams bad = p;
  bad.seqlens_k = nullptr;
  refused(MlaDecodeBuildMetadata(bad, *plan, metadata.data(), cuda), "seqlens_k is null");
  bad = p;
  bad.cu_seqlens_q = nullptr;
  refused(MlaDecodeBuildMetadata(bad, *plan, metadata.data(), cuda), "cu_seqlens_q is null");
  bad = p;
  bad.block_table = nullptr;
  refused(MlaDecodeBuildMetadata(bad, *plan, metadata.data(), cuda), "block_table is null");
  bad = p;
  bad.max_pages_per_seq = 0;
  refused(MlaDecodeBuildMetadata(bad, *plan, metadata.data(), cuda), "max_pages_per_seq=0");
  MlaDecodePlan no_splits = *plan;
  no_splits.num_splits = 0;
  for (const KernelContext& ctx : {KernelContext{}, cuda}) {
    refused(MlaDecodeBuildMetadata(p, no_splits, metadata.data(), ctx), "plan.num_splits=0");
  }
  // A plan without metadata, or an empty batch, has nothing to build: OK with no buffer.
  EXPECT_TRUE(MlaDecodeBuildMetadata(p, MlaDecodePlan{}, nullptr, cuda).ok());
  MlaParams empty = p;
  empty.batch = 0;
  EXPECT_TRUE(MlaDecodeBuildMetadata(empty, *plan, nullptr, cuda).ok());
}

}  // namespace
}  // namespace mlaserve::kernels
