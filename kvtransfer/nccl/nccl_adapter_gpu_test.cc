// The nccl KvTransport adapter on two GPUs in one process: NcclKvTransport (pool on device 0)
// -> loopback gRPC KvNcclServiceImpl -> KvReceiver (pool on device 1; the shared
// testing::ReceivingEnd), real NCCL communicators and CudaPageIo. Bytes received == bytes sent
// (CRC per layer page); a sender that dies mid-transfer leaves the decode side with every page
// free within its deadline, and the pair rebuilds for the next session. Label gpu; skipped
// with fewer than two GPUs.
#include <cuda_runtime_api.h>

#include <random>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/nccl/cuda_page_io.h"
#include "kvtransfer/nccl/gpu_pair.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/nccl_communicator.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/receiving_end.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

model::KvPoolOptions Options() {
  model::KvPoolOptions o;
  o.backend = kernels::Backend::kCuda;
  o.dtype = kernels::DType::kBF16;
  o.num_layers = 6;
  o.num_pages = 128;
  o.latent_dim = 576;  // DeepSeek's 73,728-byte latent page
  o.index_dim = 0;
  return o;
}

using testing::DoneProbe;

class NcclAdapterGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu_testing::DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs";
    cudaSetDevice(0);
    src_ = std::move(*model::KvPool::Create(Options()));
    cudaSetDevice(1);
    dst_ = std::move(*model::KvPool::Create(Options()));
    layout_.model_type = "deepseek_v2";
    layout_.model_fingerprint = 7;
    layout_.num_layers = Options().num_layers;
    layout_.latent_dim = Options().latent_dim;
    layout_.index_dim = 0;
    layout_.dtype = Options().dtype;
    end_ = std::make_unique<testing::ReceivingEnd>(dst_.get(), layout_, absl::Seconds(3));
    KvNcclServiceOptions no;
    no.comm_factory = NcclCommunicatorFactory(1, absl::Seconds(3));
    no.id_factory = NewNcclCommId;
    no.page_io_factory = CudaPageIoFactory(1);
    no.no_progress_timeout = absl::Seconds(3);
    no.connect_timeout = absl::Seconds(20);
    nccl_service_ = std::make_unique<KvNcclServiceImpl>(&end_->receiver(), dst_.get(), no);
    ASSERT_TRUE(end_->Start({nccl_service_.get()}).ok());
    NcclTransportOptions to;
    to.pair_id = "gpu0";
    to.comm_factory = NcclCommunicatorFactory(0, absl::Seconds(3));
    to.page_io_factory = CudaPageIoFactory(0);
    to.connect_timeout = absl::Seconds(20);
    to.coalesce_bytes = coalesce_bytes();
    transport_ = std::make_unique<NcclKvTransport>(src_.get(), to);
  }
  void TearDown() override {
    transport_.reset();
    if (end_ != nullptr) end_->Stop();  // the server goes before the services it serves
    nccl_service_.reset();
    end_.reset();
  }
  // The packing of small layers into one message (the transport's default).
  virtual int64_t coalesce_bytes() const { return PlanParams::kDefaultCoalesceBytes; }
  KvSenderOptions SenderOptions() {
    KvSenderOptions so;
    so.no_progress_timeout = absl::Seconds(3);
    return so;
  }
  std::vector<uint32_t> Fill(const std::vector<int32_t>& pages) {
    std::vector<uint32_t> crcs;
    for (int l = 0; l < layout_.num_layers; ++l) {
      for (int32_t p : pages) {
        std::string b(src_->layer_page_bytes(), '\0');
        for (auto& c : b) c = static_cast<char>(rng_() & 0xff);
        EXPECT_TRUE(src_->WritePage(l, p, b.data()).ok());
        crcs.push_back(Crc32(b));
      }
    }
    return crcs;
  }
  std::vector<uint32_t> Crcs(const std::vector<int32_t>& pages) {
    std::vector<uint32_t> crcs;
    for (int l = 0; l < layout_.num_layers; ++l) {
      for (int32_t p : pages) {
        std::string b(dst_->layer_page_bytes(), '\0');
        EXPECT_TRUE(dst_->ReadPage(l, p, b.data()).ok());
        crcs.push_back(Crc32(b));
      }
    }
    return crcs;
  }
  // One complete session of n pages; returns the sender's verdict.
  absl::Status Transfer(const std::string& id, int n, bool* identical) {
    std::mt19937 shuffle(rng_());
    const std::vector<int32_t> src = gpu_testing::ShuffledPages(*src_, n, shuffle);
    const std::vector<int32_t> dst = gpu_testing::ShuffledPages(*dst_, n, shuffle);
    const auto want = Fill(src);
    DoneProbe probe;
    EXPECT_TRUE(end_->Expect(id, dst, n, probe).ok());
    auto sender = transport_->Open(end_->Ref(id, n, "nccl"), layout_, SenderOptions());
    if (!sender.ok()) return sender.status();
    for (int l = 0; l < layout_.num_layers; ++l) {
      if (auto s = (*sender)->SendLayer(l, src); !s.ok()) return s;
    }
    absl::Notification done;
    absl::Status verdict;
    (*sender)->Complete(KvCompletion{3, layout_.num_layers, n, 0}, [&](absl::Status s) {
      verdict = s;
      done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    EXPECT_TRUE(probe.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    if (verdict.ok()) {
      EXPECT_TRUE(probe.result->ok()) << probe.result->status();
      EXPECT_EQ((*probe.result)->bytes, (*sender)->bytes_sent());
      EXPECT_EQ((*sender)->bytes_sent(),
                int64_t{n} * layout_.num_layers * static_cast<int64_t>(src_->layer_page_bytes()));
      *identical = Crcs(dst) == want;
      dst_->Free(dst);
    }
    src_->Free(src);
    return verdict;
  }

  std::unique_ptr<model::KvPool> src_, dst_;
  KvLayout layout_;
  std::unique_ptr<testing::ReceivingEnd> end_;  // outlives nccl_service_, which uses its receiver
  std::unique_ptr<KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<NcclKvTransport> transport_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(NcclAdapterGpuTest, PagesLandByteIdenticalAndThePairIsReused) {
  for (int i = 0; i < 3; ++i) {
    bool identical = false;
    const absl::Status s = Transfer("ok" + std::to_string(i), 40 + i, &identical);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(identical) << "session " << i;
  }
  EXPECT_EQ(transport_->communicators_built(), 1);
  EXPECT_EQ(nccl_service_->communicators_built(), 1);
}

// One layer a message: a sender that dies after two layers has bytes on the wire (packed, the
// six small layers of these sessions would be one message, sent only with the last layer).
class NcclAdapterLayerMessagesGpuTest : public NcclAdapterGpuTest {
 protected:
  int64_t coalesce_bytes() const override { return 0; }
};

TEST_F(NcclAdapterLayerMessagesGpuTest, SenderGoneMidTransferFreesDecodePagesThenPairRebuilds) {
  const int dst_free = dst_->free_pages();
  std::mt19937 shuffle(rng_());
  const std::vector<int32_t> src = gpu_testing::ShuffledPages(*src_, 16, shuffle);
  Fill(src);
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("gone", *dst_->Allocate(16), 16, probe).ok());
  {
    auto sender = transport_->Open(end_->Ref("gone", 16, "nccl"), layout_, SenderOptions());
    ASSERT_TRUE(sender.ok());
    ASSERT_TRUE((*sender)->SendLayer(0, src).ok());
    ASSERT_TRUE((*sender)->SendLayer(1, src).ok());
    // Die only once bytes are on the wire (the decode side has joined and is receiving).
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while ((*sender)->bytes_sent() == 0 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_GT((*sender)->bytes_sent(), 0);
    (*sender)->Abort(absl::AbortedError("prefill worker killed"));
  }  // the sender is gone after two of six layers
  ASSERT_TRUE(probe.done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_FALSE(probe.result->ok());
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(1, absl::Seconds(20)));
  EXPECT_EQ(dst_->free_pages(), dst_free);
  src_->Free(src);
  bool identical = false;
  const absl::Status s = Transfer("after", 24, &identical);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(identical);
  EXPECT_EQ(nccl_service_->communicators_built(), 2);  // rebuilt
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
