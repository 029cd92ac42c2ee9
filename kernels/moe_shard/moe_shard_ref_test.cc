#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe_shard/api.h"

namespace mlaserve::kernels {
namespace {

TEST(MoeLocalize, KeepsTheRanksExpertsAndMarksTheRestNotLocal) {
  // 3 tokens x top-2 over 8 experts; the rank holds experts [4, 6).
  const std::vector<int32_t> ids = {4, 1, 5, 6, 0, 7};
  const std::vector<float> w = {0.5f, 0.25f, 2.0f, 1.0f, 3.0f, 4.0f};
  std::vector<int32_t> local(6, -7);
  std::vector<float> lw(6, -7.0f);
  MoeLocalizeParams p;
  p.num_assignments = 6;
  p.num_experts = 8;
  p.expert_begin = 4;
  p.local_experts = 2;
  p.topk_ids = ids.data();
  p.topk_weights = w.data();
  p.local_ids = local.data();
  p.local_weights = lw.data();
  ASSERT_TRUE(MoeLocalize(p, KernelContext{}).ok());
  EXPECT_EQ(local, (std::vector<int32_t>{0, kNotLocal, 1, kNotLocal, kNotLocal, kNotLocal}));
  EXPECT_EQ(lw, (std::vector<float>{0.5f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f}));
}

TEST(MoeLocalize, RejectsARangeOutsideTheModel) {
  MoeLocalizeParams p;
  p.num_experts = 8;
  p.expert_begin = 6;
  p.local_experts = 4;
  absl::Status s = MoeLocalize(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("experts [6, 10) are not within the model's 8"), std::string::npos) << s;
}

TEST(MoeGatherRows, CopiesTheNamedRowsInOrder) {
  const std::vector<float> x = {0, 1, 10, 11, 20, 21};  // 3 rows of 2
  const std::vector<int32_t> rows = {2, 0, 2};
  std::vector<float> out(6, -1.0f);
  MoeGatherRowsParams p;
  p.num_rows = 3;
  p.hidden = 2;
  p.x = x.data();
  p.rows = rows.data();
  p.out = out.data();
  ASSERT_TRUE(MoeGatherRows(p, KernelContext{}).ok());
  EXPECT_EQ(out, (std::vector<float>{20, 21, 0, 1, 20, 21}));
}

TEST(MoeCombineRows, SumsEachTokensSlotsAndZeroesATokenWithNone) {
  const std::vector<float> parts = {1, 2, 10, 20, 100, 200};  // 3 rows of 2
  // token 0: rows 0 and 2; token 1: none; token 2: row 1 only.
  const std::vector<int32_t> slots = {0, 2, -1, -1, -1, 1};
  std::vector<float> out(6, -1.0f);
  MoeCombineRowsParams p;
  p.num_tokens = 3;
  p.num_sources = 2;
  p.hidden = 2;
  p.parts = parts.data();
  p.slots = slots.data();
  p.out = out.data();
  ASSERT_TRUE(MoeCombineRows(p, KernelContext{}).ok());
  EXPECT_EQ(out, (std::vector<float>{101, 202, 0, 0, 10, 20}));
}

TEST(MoeCombineRows, RefusesBf16OnTheCpu) {
  MoeCombineRowsParams p;
  p.dtype = DType::kBF16;
  p.num_sources = 1;
  p.hidden = 2;
  const absl::Status s = MoeCombineRows(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s;
}

// 3 tokens of hidden 2, top-2 over 8 experts on 4 ranks (2 experts each), blocks of 3 rows:
// token 0 -> experts 1 (rank 0), 6 (rank 3); token 1 -> 0, 1 (rank 0 twice: one row);
// token 2 -> 5 (rank 2), 2 (rank 1). Rank 0's block holds tokens 0, 1 then a padding row.
TEST(MoeDispatchFixed, FillsEachRanksBlockInTokenOrderAndPadsTheRest) {
  const std::vector<float> x = {1, 2, 10, 20, 100, 200};
  const std::vector<int32_t> ids = {1, 6, 0, 1, 5, 2};
  const std::vector<float> w = {0.5f, 0.25f, 2.0f, 4.0f, 8.0f, 16.0f};
  constexpr int kRanks = 4, kCapacity = 3, kK = 2;
  std::vector<float> rows(kRanks * kCapacity * 2, -1.0f);
  std::vector<int32_t> meta(kRanks * kCapacity * 2 * kK, -7);
  std::vector<int32_t> slots(3 * kRanks, -7), row_tokens(kRanks * kCapacity, -7);
  MoeDispatchFixedParams p;
  p.num_tokens = 3;
  p.hidden = 2;
  p.top_k = kK;
  p.num_ranks = kRanks;
  p.experts_per_rank = 2;
  p.capacity = kCapacity;
  p.x = x.data();
  p.topk_ids = ids.data();
  p.topk_weights = w.data();
  p.send_rows = rows.data();
  p.send_meta = meta.data();
  p.slots = slots.data();
  p.row_tokens = row_tokens.data();
  ASSERT_TRUE(MoeDispatchFixed(p, KernelContext{}).ok());
  // (t, p) -> p * 3 + place in p's block.
  EXPECT_EQ(slots, (std::vector<int32_t>{0, -1, -1, 9,  // token 0: ranks 0, 3
                                         1, -1, -1, -1,  // token 1: rank 0
                                         -1, 3, 6, -1}));  // token 2: ranks 1, 2
  EXPECT_EQ(row_tokens, (std::vector<int32_t>{0, 1, -1, 2, -1, -1, 2, -1, -1, 0, -1, -1}));
  EXPECT_EQ(std::vector<float>(rows.begin(), rows.begin() + 6),
            (std::vector<float>{1, 2, 10, 20, 0, 0}));
  EXPECT_EQ(std::vector<float>(rows.begin() + 18, rows.begin() + 20), (std::vector<float>{1, 2}));
  // Unpacked: local ids and weights per row; padding rows kNotLocal / 0.
  std::vector<int32_t> got_ids(kRanks * kCapacity * kK);
  std::vector<float> got_w(kRanks * kCapacity * kK);
  MoeUnpackMetaParams u;
  u.num_rows = kRanks * kCapacity;
  u.top_k = kK;
  u.meta = meta.data();
  u.ids = got_ids.data();
  u.weights = got_w.data();
  ASSERT_TRUE(MoeUnpackMeta(u, KernelContext{}).ok());
  const int32_t N = kNotLocal;
  EXPECT_EQ(got_ids, (std::vector<int32_t>{1, N, 0, 1, N, N,     // rank 0: t0, t1, pad
                                           N, 0, N, N, N, N,     // rank 1: t2 (expert 2)
                                           1, N, N, N, N, N,     // rank 2: t2 (expert 5)
                                           N, 0, N, N, N, N}));  // rank 3: t0 (expert 6)
  EXPECT_EQ(got_w, (std::vector<float>{0.5f, 0, 2.0f, 4.0f, 0, 0, 0, 16.0f, 0, 0, 0, 0,
                                       8.0f, 0, 0, 0, 0, 0, 0, 0.25f, 0, 0, 0, 0}));
}

// A rank with no tokens (an idle data-parallel rank, a tensor rank past a short batch) sends
// padding only; tokens that do not fit the blocks are refused, naming both numbers.
TEST(MoeDispatchFixed, NoTokensSendsPaddingAndTooManyAreRefused) {
  constexpr int kRanks = 2, kCapacity = 2, kK = 1;
  std::vector<float> rows(kRanks * kCapacity * 3, -1.0f);
  std::vector<int32_t> meta(kRanks * kCapacity * 2 * kK, -7), row_tokens(kRanks * kCapacity, -7);
  MoeDispatchFixedParams p;
  p.hidden = 3;
  p.top_k = kK;
  p.num_ranks = kRanks;
  p.experts_per_rank = 4;
  p.capacity = kCapacity;
  p.send_rows = rows.data();
  p.send_meta = meta.data();
  p.row_tokens = row_tokens.data();
  ASSERT_TRUE(MoeDispatchFixed(p, KernelContext{}).ok());
  EXPECT_EQ(rows, std::vector<float>(rows.size(), 0.0f));
  EXPECT_EQ(row_tokens, std::vector<int32_t>(row_tokens.size(), -1));
  EXPECT_EQ(meta, (std::vector<int32_t>{kNotLocal, 0, kNotLocal, 0, kNotLocal, 0, kNotLocal, 0}));
  p.num_tokens = 3;
  const absl::Status s = MoeDispatchFixed(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("3 tokens do not fit blocks of 2 rows"), std::string::npos) << s;
}

}  // namespace
}  // namespace mlaserve::kernels
