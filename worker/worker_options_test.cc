// The layout flags of a multi-GPU worker (docs/parallel.md) as ValidateWorkerOptions checks
// them (model::ParseParallelFlags, shared with mlaserve-run): the layouts by name, the engine's
// ParallelOptions they become, and which workers may move KV over nccl.
#include "worker/worker_options.h"

#include <algorithm>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::worker {
namespace {

using ::testing::HasSubstr;

WorkerOptions Layout(int tp, const std::string& attention, const std::string& transport) {
  WorkerOptions o;
  o.listen = "127.0.0.1:0";
  o.tp_size = tp;
  o.attention_parallel = attention;
  o.kv_transport = transport;
  return o;
}

TEST(WorkerOptionsTest, MultiGpuWorkersOfEveryLayoutMoveKvOverNccl) {
  // A data-parallel prefill worker sends each prompt from its rank's GPU (docs/parallel.md).
  for (const WorkerRoleKind role : {WorkerRoleKind::kPrefill, WorkerRoleKind::kDecode}) {
    for (const std::string attention : {"tensor", "data"}) {
      for (const std::string transport : {"nccl", "auto", "tcp"}) {
        WorkerOptions o = Layout(4, attention, transport);
        EXPECT_TRUE(ValidateWorkerOptions(role, &o).ok()) << attention << " " << transport;
      }
    }
  }
}

TEST(WorkerOptionsTest, LayoutFlagsAreCheckedByName) {
  // model::ParseParallelFlags checks them, as for mlaserve-run: the same messages.
  WorkerOptions o = Layout(2, "dp", "auto");
  absl::Status s = ValidateWorkerOptions(WorkerRoleKind::kDecode, &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("--attention-parallel dp is not one of tensor, data"));
  o = Layout(65, "data", "auto");
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).message()),
              HasSubstr("--tp-size is 65; it must be in [1, 64]"));
  o = Layout(0, "tensor", "auto");
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kPrefill, &o).message()),
              HasSubstr("--tp-size is 0; it must be in [1, 64]"));
  o = Layout(2, "data", "auto");
  o.moe_parallel = "experts";
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kPrefill, &o).message()),
              HasSubstr("--moe-parallel experts is not one of expert, tensor"));
  o = Layout(2, "data", "auto");
  o.moe_dispatch = "alltoall";
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).message()),
              HasSubstr("--moe-dispatch alltoall is not one of gather, all-to-all"));
  o.moe_dispatch = "all-to-all";
  EXPECT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).ok());
  o.moe_parallel = "tensor";
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).message()),
              HasSubstr("--moe-dispatch is all-to-all; it sends tokens to the ranks of their "
                        "experts, which needs --moe-parallel expert"));
}

TEST(WorkerOptionsTest, ValidatedLayoutFlagsAreTheEnginesOptions) {
  WorkerOptions o = Layout(4, "data", "auto");
  o.moe_parallel = "expert";
  o.moe_dispatch = "all-to-all";
  ASSERT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).ok());
  EXPECT_EQ(o.parallel.size, 4);
  EXPECT_EQ(o.parallel.attention, model::AttentionParallel::kData);
  EXPECT_EQ(o.parallel.moe, model::MoeParallel::kExpert);
  EXPECT_EQ(o.parallel.dispatch, model::MoeDispatch::kAllToAll);
  EXPECT_EQ(o.parallel.rank, 0);
  EXPECT_EQ(o.parallel.comm, nullptr);
  EXPECT_EQ(model::DescribeParallel(o.parallel),
            "tp=4 attention=data moe=expert dispatch=all-to-all");
  o = Layout(2, "tensor", "auto");
  o.moe_parallel = "tensor";
  ASSERT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kPrefill, &o).ok());
  EXPECT_EQ(o.parallel.attention, model::AttentionParallel::kTensor);
  EXPECT_EQ(o.parallel.moe, model::MoeParallel::kTensor);
  EXPECT_EQ(o.parallel.dispatch, model::MoeDispatch::kGather);
  EXPECT_EQ(model::DescribeParallel(o.parallel), "tp=2 attention=tensor moe=tensor");
  o = Layout(1, "tensor", "auto");
  ASSERT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kPrefill, &o).ok());
  EXPECT_EQ(model::DescribeParallel(o.parallel), "tp=1");
}


TEST(WorkerOptionsTest, SplitFreshPromptsIsAPrefillFlagOnByDefault) {
  const auto parse = [](WorkerRoleKind role, std::vector<std::string> args, WorkerOptions* o) {
    CLI::App app;
    AddWorkerFlags(app, role, o);
    args.insert(args.begin(), {"--model", "m"});
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
  };
  WorkerOptions o;
  parse(WorkerRoleKind::kPrefill, {}, &o);
  EXPECT_TRUE(o.split_fresh_prompts);
  parse(WorkerRoleKind::kPrefill, {"--split-fresh-prompts", "false"}, &o);
  EXPECT_FALSE(o.split_fresh_prompts);
  parse(WorkerRoleKind::kPrefill, {"--split-fresh-prompts", "true"}, &o);
  EXPECT_TRUE(o.split_fresh_prompts);
  EXPECT_THROW(parse(WorkerRoleKind::kPrefill, {"--split-fresh-prompts", "sometimes"}, &o),
               CLI::ParseError);
  // The decode worker asks kAuto, which splits by itself: no such flag there.
  WorkerOptions d;
  EXPECT_THROW(parse(WorkerRoleKind::kDecode, {"--split-fresh-prompts", "false"}, &d),
               CLI::ParseError);
}

// --advertise is what RegisterWorker gives the router: the router's grammar (common/host_port.h
// ParseDialAddress), checked when the worker starts, not at every registration.
TEST(WorkerOptionsTest, TheAdvertisedAddressMustBeOneTheRouterTakes) {
  for (const char* good : {"10.0.0.5:8200", "[fd00::5]:8200", "decode-0.svc.cluster.local:8200"}) {
    WorkerOptions o = Layout(1, "tensor", "auto");
    o.advertise = good;
    EXPECT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).ok()) << good;
  }
  for (const char* bad : {"a b:1", "dns:///a:1", "h:0", "fd00::5:8200"}) {
    WorkerOptions o = Layout(1, "tensor", "auto");
    o.advertise = bad;
    const absl::Status s = ValidateWorkerOptions(WorkerRoleKind::kDecode, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("--advertise address '", bad, "'")));
  }
}

TEST(WorkerOptionsTest, TheKvPoolIsSizedFromMemoryUnlessAPageCountIsGiven) {
  WorkerOptions o = Layout(1, "tensor", "auto");
  EXPECT_EQ(o.num_kv_pages, 0);  // sized: model/kv_pool_sizing.h
  EXPECT_DOUBLE_EQ(o.mem_fraction_static, model::kDefaultMemFractionStatic);
  EXPECT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).ok());
  o.num_kv_pages = 4096;
  EXPECT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).ok());
  o.num_kv_pages = -1;
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kPrefill, &o).message()),
              HasSubstr("--num-kv-pages is -1; it must be >= 1, or 0 to size the pool"));
  for (const double f : {0.0, -0.1, 1.5}) {
    o = Layout(1, "tensor", "auto");
    o.mem_fraction_static = f;
    const absl::Status s = ValidateWorkerOptions(WorkerRoleKind::kDecode, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << f;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--mem-fraction-static is")) << f;
    EXPECT_THAT(std::string(s.message()), HasSubstr("it must be in (0, 1]")) << f;
  }
  o = Layout(1, "tensor", "auto");
  o.mem_fraction_static = 1.0;
  EXPECT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).ok());
}

}  // namespace
}  // namespace mlaserve::worker
