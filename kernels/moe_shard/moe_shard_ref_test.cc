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

}  // namespace
}  // namespace mlaserve::kernels
