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

}  // namespace
}  // namespace mlaserve::kernels
