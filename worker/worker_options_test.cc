// The layout flags of a multi-GPU worker (docs/parallel.md) as ValidateWorkerOptions checks
// them: the layouts by name, and which workers may move KV over nccl.
#include "worker/worker_options.h"

#include <string>

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
  WorkerOptions o = Layout(2, "dp", "auto");
  absl::Status s = ValidateWorkerOptions(WorkerRoleKind::kDecode, &o);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("--attention-parallel is dp; it must be tensor or data"));
  o = Layout(65, "data", "auto");
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).message()),
              HasSubstr("--tp-size is 65; it must be in [1, 64]"));
  o = Layout(2, "data", "auto");
  o.moe_dispatch = "alltoall";
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).message()),
              HasSubstr("--moe-dispatch is alltoall; it must be gather or all-to-all"));
  o.moe_dispatch = "all-to-all";
  EXPECT_TRUE(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).ok());
  o.moe_parallel = "tensor";
  EXPECT_THAT(std::string(ValidateWorkerOptions(WorkerRoleKind::kDecode, &o).message()),
              HasSubstr("--moe-dispatch is all-to-all; it sends tokens to the ranks of their "
                        "experts, which needs --moe-parallel expert"));
}

}  // namespace
}  // namespace mlaserve::worker
