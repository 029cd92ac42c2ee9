// Two GPUs (devices 0 and 1, one thread each): random layer pages from the prefill side's pool
// land in the decode side's pool at other page ids, checksums equal; a stalled receiver is
// caught by the sender's no-progress deadline and the pair rebuilds. Label gpu; skipped with
// fewer than two GPUs.
#include <cuda_runtime_api.h>

#include <future>
#include <random>

#include "gtest/gtest.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/nccl/gpu_pair.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

using gpu_testing::Side;

model::KvPoolOptions Options() {
  model::KvPoolOptions o;
  o.dtype = kernels::DType::kBF16;
  o.num_layers = 5;
  o.num_pages = 96;
  o.latent_dim = 576;  // DeepSeek's 73,728-byte latent page
  o.index_dim = 128;   // and a V3.2 indexer plane: two planes per page
  return o;
}

std::string Page(const model::KvPool& pool, int layer, int32_t page) {
  std::string s(pool.layer_page_bytes(), '\0');
  EXPECT_TRUE(pool.ReadPage(layer, page, s.data()).ok());
  return s;
}

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu_testing::DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs";
  }
};

TEST_F(NcclGpuTest, RandomPagesArriveWithEqualChecksums) {
  const model::KvPoolOptions o = Options();
  std::mt19937 rng(std::random_device{}());
  const int n = 45;  // two messages per layer of at most 32 pages: slot reuse
  auto plan = TransferPlan::Make({"gpu-1", o.num_layers, n, 73728 + 16384, 32});
  ASSERT_TRUE(plan.ok());
  Side tx, rx;
  ASSERT_TRUE(gpu_testing::MakePair(o, 2, plan->max_step_bytes(), &tx, &rx).ok());
  auto src = gpu_testing::ShuffledPages(*tx.pool, n, rng);
  auto dst = gpu_testing::ShuffledPages(*rx.pool, n, rng);
  const size_t pb = tx.pool->layer_page_bytes();
  ASSERT_EQ(pb, 73728u + 16384u);
  std::vector<uint32_t> want;
  for (int l = 0; l < o.num_layers; ++l) {
    for (int i = 0; i < n; ++i) {
      std::string bytes(pb, '\0');
      for (auto& c : bytes) c = static_cast<char>(rng());
      ASSERT_TRUE(tx.pool->WritePage(l, src[i], bytes.data()).ok());
      want.push_back(Crc32(bytes));
      std::string poison(pb, '\x7f');
      ASSERT_TRUE(rx.pool->WritePage(l, dst[i], poison.data()).ok());
    }
  }
  auto received = std::async(std::launch::async, [&] {
    cudaSetDevice(1);
    return ReceivePlan(rx.comm.get(), rx.io.get(), *plan, dst, absl::Seconds(20));
  });
  cudaSetDevice(0);
  PlanSender sender(tx.comm.get(), tx.io.get(), &*plan, src, absl::Seconds(20));
  ASSERT_TRUE(sender.Begin().ok());
  for (int l = 0; l < o.num_layers; ++l) ASSERT_TRUE(sender.SendLayer(l).ok()) << l;
  auto sent = sender.Finish();
  auto got = received.get();
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*sent, plan->total_bytes());
  EXPECT_EQ(*got, plan->total_bytes());
  size_t k = 0;
  for (int l = 0; l < o.num_layers; ++l) {
    for (int i = 0; i < n; ++i, ++k) {
      EXPECT_EQ(Crc32(Page(*rx.pool, l, dst[i])), want[k]) << "layer " << l << " page " << i;
    }
  }
}

TEST_F(NcclGpuTest, StalledReceiverHitsTheSenderDeadlineThenPairRebuilds) {
  const model::KvPoolOptions o = Options();
  std::mt19937 rng(1);
  // 5 x 48 layer pages = 21 MB: more than NCCL's connection buffers hold, so the sends cannot
  // complete without the receiver.
  const int n = 48;
  // 4.3 MB layers: three share a 16 MiB message (packing, gathers at offsets in a slot).
  auto plan = TransferPlan::Make({"gpu-2", o.num_layers, n, 90112, 512});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps()[0].num_layers, 3);
  const size_t slot = plan->max_step_bytes();
  Side tx, rx;
  ASSERT_TRUE(gpu_testing::MakePair(o, 2, slot, &tx, &rx, absl::Milliseconds(500)).ok());
  auto src = gpu_testing::ShuffledPages(*tx.pool, n, rng);
  // The receiver never posts its receives (a hung decode process). Depending on NCCL's lazy
  // connection setup the failure surfaces while enqueueing or while waiting: either way within
  // about one no-progress period, as DEADLINE_EXCEEDED.
  cudaSetDevice(0);
  PlanSender sender(tx.comm.get(), tx.io.get(), &*plan, src, absl::Milliseconds(500));
  const absl::Time start = absl::Now();
  absl::Status s = sender.Begin();
  for (int l = 0; s.ok() && l < o.num_layers; ++l) s = sender.SendLayer(l);
  if (s.ok()) s = sender.Finish().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(tx.comm->usable());
  rx.comm->Abort();
  tx.pool->Free(src);
  EXPECT_EQ(tx.pool->free_pages(), o.num_pages);
  // A fresh communicator for the pair works (the rebuild after failure).
  tx.io.reset();
  rx.io.reset();
  Side tx2, rx2;
  ASSERT_TRUE(gpu_testing::MakePair(o, 2, slot, &tx2, &rx2).ok());
  auto src2 = gpu_testing::ShuffledPages(*tx2.pool, n, rng);
  auto dst2 = gpu_testing::ShuffledPages(*rx2.pool, n, rng);
  auto received = std::async(std::launch::async, [&] {
    cudaSetDevice(1);
    return ReceivePlan(rx2.comm.get(), rx2.io.get(), *plan, dst2, absl::Seconds(20));
  });
  cudaSetDevice(0);
  PlanSender again(tx2.comm.get(), tx2.io.get(), &*plan, src2, absl::Seconds(20));
  ASSERT_TRUE(again.Begin().ok());
  for (int l = 0; l < o.num_layers; ++l) ASSERT_TRUE(again.SendLayer(l).ok());
  ASSERT_TRUE(again.Finish().ok());
  auto got = received.get();
  ASSERT_TRUE(got.ok()) << got.status();
  for (int l = 0; l < o.num_layers; ++l) {
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(Crc32(Page(*rx2.pool, l, dst2[i])), Crc32(Page(*tx2.pool, l, src2[i])));
    }
  }
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
