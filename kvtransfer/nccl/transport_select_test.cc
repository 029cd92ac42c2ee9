#include "kvtransfer/nccl/transport_select.h"

#include "gtest/gtest.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

TransportEnd Gpu(const std::string& flag = "auto", const std::string& host = "h1") {
  return {flag, true, true, host, false};
}

TEST(ChooseTransportTest, AutoPicksNcclOnlyWhenBothGpusReachEachOther) {
  EXPECT_EQ(*ChooseTransport(Gpu(), Gpu()), "nccl");
  TransportEnd cpu = Gpu();
  cpu.gpu_pool = false;
  EXPECT_EQ(*ChooseTransport(Gpu(), cpu), "tcp");
  TransportEnd no_nccl = Gpu();
  no_nccl.nccl_built = false;
  EXPECT_EQ(*ChooseTransport(no_nccl, Gpu()), "tcp");
  EXPECT_EQ(*ChooseTransport(Gpu("auto", "h1"), Gpu("auto", "h2")), "tcp");
  TransportEnd a = Gpu("auto", "h1"), b = Gpu("auto", "h2");
  a.network = b.network = true;
  EXPECT_EQ(*ChooseTransport(a, b), "nccl");
}

TEST(ChooseTransportTest, ForcedChoicesWinOrFailWithTheReason) {
  EXPECT_EQ(*ChooseTransport(Gpu("tcp"), Gpu()), "tcp");
  EXPECT_EQ(*ChooseTransport(Gpu(), Gpu("nccl")), "nccl");
  TransportEnd cpu = Gpu();
  cpu.gpu_pool = false;
  auto forced = ChooseTransport(Gpu("nccl"), cpu);
  EXPECT_EQ(forced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(forced.status().message().find("decode worker's KV pool is not on a GPU"),
            std::string::npos);
  auto clash = ChooseTransport(Gpu("tcp"), Gpu("nccl"));
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kFailedPrecondition);
  auto bad = ChooseTransport(Gpu("rdma"), Gpu());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"rdma\""), std::string::npos);
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
