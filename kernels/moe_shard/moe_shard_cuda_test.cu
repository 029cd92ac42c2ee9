// moe_shard CUDA vs the CPU reference: an index remap, so results must match exactly.
#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe_shard/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

TEST(MoeLocalizeCuda, MatchesCpuExactly) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  constexpr int kExperts = 256;
  const int64_t n = 4099 * 8;
  std::vector<int32_t> ids(n);
  std::vector<float> w(n);
  for (int64_t a = 0; a < n; ++a) {
    ids[a] = std::uniform_int_distribution<int>(0, kExperts - 1)(rng);
    w[a] = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  }
  for (const int begin : {0, 96, 224}) {
    MoeLocalizeParams p;
    p.num_assignments = n;
    p.num_experts = kExperts;
    p.expert_begin = begin;
    p.local_experts = 32;
    std::vector<int32_t> want_ids(n);
    std::vector<float> want_w(n);
    p.topk_ids = ids.data(); p.topk_weights = w.data();
    p.local_ids = want_ids.data(); p.local_weights = want_w.data();
    ASSERT_TRUE(MoeLocalize(p, KernelContext{}).ok());
    auto d_ids = testing::ToDevice(ids);
    auto d_w = testing::ToDevice(w);
    auto d_lids = testing::ToDevice(std::vector<int32_t>(n, -1));
    auto d_lw = testing::PoisonedF32(n);
    MoeLocalizeParams g = p;
    g.topk_ids = d_ids.as<int32_t>(); g.topk_weights = d_w.as<float>();
    g.local_ids = d_lids.as<int32_t>(); g.local_weights = d_lw.as<float>();
    ASSERT_TRUE(MoeLocalize(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(testing::ToHost<int32_t>(d_lids, n), want_ids);
    EXPECT_EQ(testing::ToHost<float>(d_lw, n), want_w);
  }
}

// The all-to-all dispatch's row gather and combine: f32 equals the CPU bit for bit (the same
// sums in the same order); bf16 rows are the CPU's f32 sums of the bf16 inputs, rounded once.
TEST(MoeDispatchRowsCuda, GatherAndCombineMatchCpu) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  constexpr int kHidden = 1000, kTokens = 37, kSources = 4, kParts = 90;
  std::vector<float> x(static_cast<size_t>(kParts) * kHidden);
  for (float& v : x) v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  testing::RoundToBf16(x);
  std::vector<int32_t> rows(kParts), slots(kTokens * kSources);
  for (int32_t& r : rows) r = std::uniform_int_distribution<int>(0, kParts - 1)(rng);
  for (int32_t& s : slots) s = std::uniform_int_distribution<int>(-1, kParts - 1)(rng);
  std::vector<float> want_g(x.size()), want_c(static_cast<size_t>(kTokens) * kHidden);
  MoeGatherRowsParams g;
  g.num_rows = kParts; g.hidden = kHidden; g.x = x.data(); g.rows = rows.data();
  g.out = want_g.data();
  ASSERT_TRUE(MoeGatherRows(g, KernelContext{}).ok());
  MoeCombineRowsParams c;
  c.num_tokens = kTokens; c.num_sources = kSources; c.hidden = kHidden; c.parts = x.data();
  c.slots = slots.data(); c.out = want_c.data();
  ASSERT_TRUE(MoeCombineRows(c, KernelContext{}).ok());
  auto d_rows = testing::ToDevice(rows);
  auto d_slots = testing::ToDevice(slots);
  const KernelContext cuda{Backend::kCuda, nullptr};
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const bool bf16 = dtype == DType::kBF16;
    auto d_x = bf16 ? testing::ToDeviceBf16(x) : testing::ToDevice(x);
    auto d_g = bf16 ? testing::PoisonedBf16(x.size())
                    : testing::PoisonedF32(x.size());
    auto d_c = bf16 ? testing::PoisonedBf16(want_c.size())
                    : testing::PoisonedF32(want_c.size());
    MoeGatherRowsParams dg = g;
    dg.dtype = dtype; dg.x = d_x.get(); dg.rows = d_rows.as<int32_t>(); dg.out = d_g.get();
    ASSERT_TRUE(MoeGatherRows(dg, cuda).ok());
    MoeCombineRowsParams dc = c;
    dc.dtype = dtype; dc.parts = d_x.get(); dc.slots = d_slots.as<int32_t>(); dc.out = d_c.get();
    ASSERT_TRUE(MoeCombineRows(dc, cuda).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    if (bf16) {
      std::vector<float> rounded = want_c;
      testing::RoundToBf16(rounded);
      EXPECT_EQ(testing::FromBf16(testing::ToHost<uint16_t>(d_g, x.size())), want_g);
      EXPECT_EQ(testing::FromBf16(testing::ToHost<uint16_t>(d_c, want_c.size())), rounded);
    } else {
      EXPECT_EQ(testing::ToHost<float>(d_g, x.size()), want_g);
      EXPECT_EQ(testing::ToHost<float>(d_c, want_c.size()), want_c);
    }
  }
}

// The fixed-capacity dispatch: the plan (slots, row tokens, meta) equals the CPU's exactly and
// the rows bit for bit (a copy), for token counts across the plan kernel's 256-token tiles,
// no tokens (padding only), 2..8 ranks and top-k up to 8; MoeUnpackMeta likewise.
TEST(MoeDispatchFixedCuda, MatchesCpuExactly) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  constexpr int kHidden = 300;
  const KernelContext cuda{Backend::kCuda, nullptr};
  for (const int ranks : {2, 4, 8}) {
    for (const int k : {1, 6, 8}) {
      for (const int tokens : {0, 1, 37, 256, 600}) {
        SCOPED_TRACE(::testing::Message() << ranks << " ranks, top-" << k << ", " << tokens
                                          << " tokens");
        const int experts_per_rank = 4;
        const int capacity = std::max(tokens, 1) + (tokens % 3);
        std::vector<float> x(static_cast<size_t>(tokens) * kHidden);
        for (float& v : x) v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
        testing::RoundToBf16(x);
        std::vector<int32_t> ids(static_cast<size_t>(tokens) * k);
        std::vector<float> w(ids.size());
        for (int32_t& id : ids) {
          id = std::uniform_int_distribution<int>(0, ranks * experts_per_rank - 1)(rng);
        }
        for (float& v : w) v = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        const size_t send_rows = static_cast<size_t>(ranks) * capacity;
        std::vector<float> want_rows(send_rows * kHidden);
        std::vector<int32_t> want_meta(send_rows * 2 * k), want_slots(tokens * ranks + 1),
            want_tokens(send_rows);
        MoeDispatchFixedParams p;
        p.num_tokens = tokens;
        p.hidden = kHidden;
        p.top_k = k;
        p.num_ranks = ranks;
        p.experts_per_rank = experts_per_rank;
        p.capacity = capacity;
        p.x = x.data();
        p.topk_ids = ids.data();
        p.topk_weights = w.data();
        p.send_rows = want_rows.data();
        p.send_meta = want_meta.data();
        p.slots = want_slots.data();
        p.row_tokens = want_tokens.data();
        ASSERT_TRUE(MoeDispatchFixed(p, KernelContext{}).ok());
        std::vector<int32_t> want_ids(send_rows * k);
        std::vector<float> want_w(send_rows * k);
        MoeUnpackMetaParams u;
        u.num_rows = static_cast<int64_t>(send_rows);
        u.top_k = k;
        u.meta = want_meta.data();
        u.ids = want_ids.data();
        u.weights = want_w.data();
        ASSERT_TRUE(MoeUnpackMeta(u, KernelContext{}).ok());

        auto d_ids = testing::ToDevice(ids.empty() ? std::vector<int32_t>{0} : ids);
        auto d_w = testing::ToDevice(w.empty() ? std::vector<float>{0} : w);
        auto d_meta = testing::ToDevice(std::vector<int32_t>(want_meta.size(), 77));
        auto d_slots = testing::ToDevice(std::vector<int32_t>(want_slots.size(), 77));
        auto d_tokens = testing::ToDevice(std::vector<int32_t>(send_rows, 77));
        auto d_uids = testing::ToDevice(std::vector<int32_t>(want_ids.size(), 77));
        auto d_uw = testing::PoisonedF32(want_w.size());
        for (const DType dtype : {DType::kF32, DType::kBF16}) {
          SCOPED_TRACE(DTypeName(dtype));
          const bool bf16 = dtype == DType::kBF16;
          auto d_x = bf16 ? testing::ToDeviceBf16(x.empty() ? std::vector<float>{0} : x)
                          : testing::ToDevice(x.empty() ? std::vector<float>{0} : x);
          auto d_rows = bf16 ? testing::PoisonedBf16(want_rows.size())
                             : testing::PoisonedF32(want_rows.size());
          MoeDispatchFixedParams g = p;
          g.dtype = dtype;
          g.x = d_x.get();
          g.topk_ids = d_ids.as<int32_t>();
          g.topk_weights = d_w.as<float>();
          g.send_rows = d_rows.get();
          g.send_meta = d_meta.as<int32_t>();
          g.slots = d_slots.as<int32_t>();
          g.row_tokens = d_tokens.as<int32_t>();
          ASSERT_TRUE(MoeDispatchFixed(g, cuda).ok());
          MoeUnpackMetaParams du = u;
          du.meta = d_meta.as<int32_t>();
          du.ids = d_uids.as<int32_t>();
          du.weights = d_uw.as<float>();
          ASSERT_TRUE(MoeUnpackMeta(du, cuda).ok());
          MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
          EXPECT_EQ(testing::ToHost<int32_t>(d_meta, want_meta.size()), want_meta);
          std::vector<int32_t> slots = testing::ToHost<int32_t>(d_slots, want_slots.size());
          slots.back() = want_slots.back();  // the spare entry (tokens == 0) is not written
          EXPECT_EQ(slots, want_slots);
          EXPECT_EQ(testing::ToHost<int32_t>(d_tokens, send_rows), want_tokens);
          EXPECT_EQ(testing::ToHost<int32_t>(d_uids, want_ids.size()), want_ids);
          EXPECT_EQ(testing::ToHost<float>(d_uw, want_w.size()), want_w);
          if (bf16) {
            EXPECT_EQ(testing::FromBf16(testing::ToHost<uint16_t>(d_rows, want_rows.size())),
                      want_rows);
          } else {
            EXPECT_EQ(testing::ToHost<float>(d_rows, want_rows.size()), want_rows);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve::kernels
