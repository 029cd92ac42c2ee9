// The layout flags as every binary takes them (ParseParallelFlags: mlaserve-run and the prefill
// and decode workers) and the description a worker reports (DescribeParallel).
#include "model/parallel_layout.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::model {
namespace {

using ::testing::HasSubstr;

std::string Refusal(int tp, const std::string& attention, const std::string& moe,
                    const std::string& dispatch) {
  absl::StatusOr<ParallelOptions> o = ParseParallelFlags(tp, attention, moe, dispatch);
  EXPECT_FALSE(o.ok());
  if (o.ok()) return "";
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  return std::string(o.status().message());
}

TEST(ParseParallelFlags, NamesTheFlagAndItsValue) {
  EXPECT_EQ(Refusal(0, "tensor", "expert", "gather"), "--tp-size is 0; it must be in [1, 64]");
  EXPECT_EQ(Refusal(65, "tensor", "expert", "gather"), "--tp-size is 65; it must be in [1, 64]");
  EXPECT_EQ(Refusal(2, "dp", "expert", "gather"),
            "--attention-parallel dp is not one of tensor, data");
  EXPECT_EQ(Refusal(2, "data", "experts", "gather"),
            "--moe-parallel experts is not one of expert, tensor");
  EXPECT_EQ(Refusal(2, "data", "expert", "alltoall"),
            "--moe-dispatch alltoall is not one of gather, all-to-all");
  EXPECT_THAT(Refusal(2, "data", "tensor", "all-to-all"),
              HasSubstr("--moe-dispatch is all-to-all; it sends tokens to the ranks of their "
                        "experts, which needs --moe-parallel expert"));
}

TEST(ParseParallelFlags, EveryLayoutByName) {
  for (const int tp : {1, 2, 64}) {
    for (const auto& [attention, a] :
         {std::pair{"tensor", AttentionParallel::kTensor}, {"data", AttentionParallel::kData}}) {
      for (const auto& [moe, m] :
           {std::pair{"expert", MoeParallel::kExpert}, {"tensor", MoeParallel::kTensor}}) {
        absl::StatusOr<ParallelOptions> o = ParseParallelFlags(tp, attention, moe, "gather");
        ASSERT_TRUE(o.ok()) << o.status();
        EXPECT_EQ(o->size, tp);
        EXPECT_EQ(o->attention, a);
        EXPECT_EQ(o->moe, m);
        EXPECT_EQ(o->dispatch, MoeDispatch::kGather);
        EXPECT_EQ(o->rank, 0);
        EXPECT_EQ(o->comm, nullptr);
      }
    }
  }
  absl::StatusOr<ParallelOptions> a2a = ParseParallelFlags(4, "data", "expert", "all-to-all");
  ASSERT_TRUE(a2a.ok()) << a2a.status();
  EXPECT_EQ(a2a->dispatch, MoeDispatch::kAllToAll);
}

TEST(DescribeParallel, WhatAWorkerReports) {
  EXPECT_EQ(DescribeParallel(*ParseParallelFlags(1, "data", "tensor", "gather")), "tp=1");
  EXPECT_EQ(DescribeParallel(*ParseParallelFlags(2, "tensor", "expert", "gather")),
            "tp=2 attention=tensor moe=expert");
  EXPECT_EQ(DescribeParallel(*ParseParallelFlags(4, "data", "tensor", "gather")),
            "tp=4 attention=data moe=tensor");
  EXPECT_EQ(DescribeParallel(*ParseParallelFlags(4, "data", "expert", "all-to-all")),
            "tp=4 attention=data moe=expert dispatch=all-to-all");
}

}  // namespace
}  // namespace mlaserve::model
