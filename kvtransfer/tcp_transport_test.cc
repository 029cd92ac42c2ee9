// The tcp transport on loopback: a real gRPC server (KvServiceImpl on port 0) feeding a
// KvReceiver, and TcpKvTransport senders.
#include "kvtransfer/tcp_transport.h"

#include <optional>
#include <random>

#include "absl/synchronization/notification.h"
#include "common/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/proto_convert.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::mlaserve::v1;

using testing::DoneProbe;
using testing::Verdict;

class TcpTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = testing::SmallPoolOptions(32);
    src_ = testing::MakePool(options_);
    dst_ = testing::MakePool(options_);
    layout_ = testing::SmallLayout(options_);
  }
  // The receiving decode worker: a KvReceiver behind KvServiceImpl on 127.0.0.1:0.
  void StartReceiver(absl::Duration no_progress = absl::Seconds(30)) {
    receiver_ = std::make_unique<KvReceiver>(dst_.get(), layout_, KvReceiverOptions{no_progress});
    service_ = std::make_unique<KvServiceImpl>(receiver_.get());
    common::ServerOptions so;
    so.listen = "127.0.0.1:0";
    server_ = std::make_unique<common::ServerRunner>(so);
    server_->AddService(service_.get());
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->RequestShutdown();
      server_->WaitForShutdown();
    }
  }

  KvSessionRef Ref(const std::string& id, int pages) {
    return KvSessionRef{id, server_->bound_address(), "tcp", pages, layout_.CompatHash()};
  }
  // Fills `pages` of the source pool with random bytes and returns them per (layer, index).
  std::vector<std::string> FillSource(const std::vector<int32_t>& pages) {
    std::vector<std::string> out;
    for (int layer = 0; layer < options_.num_layers; ++layer) {
      for (int32_t p : pages) {
        out.push_back(testing::RandomBytes(src_->layer_page_bytes(), rng_));
        EXPECT_TRUE(src_->WritePage(layer, p, out.back().data()).ok());
      }
    }
    return out;
  }

  // Ships 5 pages of every layer from src_ to dst_ and checks them byte for byte.
  void TransferPagesAndCheck() {
    StartReceiver();
    constexpr int kPages = 5;
    DoneProbe probe;
    ASSERT_TRUE(receiver_->CreateSession("s1", *dst_->Allocate(kPages + 2), kPages,
                                         absl::Now() + absl::Seconds(30), probe.fn())
                    .ok());
    const std::vector<int32_t> src_pages = *src_->Allocate(kPages);
    const std::vector<std::string> data = FillSource(src_pages);

    TcpKvTransport transport;
    // A small in-flight limit exercises the flow control.
    KvSenderOptions so;
    so.max_inflight_bytes = 3 * src_->layer_page_bytes();
    auto sender = transport.Open(Ref("s1", kPages), layout_, so);
    ASSERT_TRUE(sender.ok()) << sender.status();
    for (int layer = 0; layer < options_.num_layers; ++layer) {  // layer by layer, as prefill does
      for (int i = 0; i < kPages; ++i) {
        std::string bytes = testing::ReadLayerPage(*src_, layer, src_pages[i]);
        ASSERT_TRUE((*sender)->SendPage(layer, i, std::move(bytes)).ok());
      }
    }
    Verdict verdict;
    (*sender)->Complete(KvCompletion{99, options_.num_layers, kPages, (*sender)->bytes_sent()},
                        verdict.fn());
    ASSERT_TRUE(verdict.Wait());
    ASSERT_TRUE(verdict.status.ok()) << verdict.status;
    ASSERT_TRUE(probe.Wait());
    ASSERT_TRUE(probe.result->ok()) << probe.result->status();
    const KvReceivedKv& kv = **probe.result;
    EXPECT_EQ(kv.first_token, 99);
    EXPECT_EQ(kv.bytes, int64_t{kPages} * options_.num_layers * int64_t(src_->layer_page_bytes()));
    ASSERT_EQ(kv.pages.size(), size_t{kPages + 2});
    for (int layer = 0; layer < options_.num_layers; ++layer) {
      for (int i = 0; i < kPages; ++i) {
        ASSERT_EQ(testing::ReadLayerPage(*dst_, layer, kv.pages[i]), data[layer * kPages + i])
            << "layer " << layer << " page " << i;
      }
    }
    dst_->Free(kv.pages);
    EXPECT_EQ(dst_->free_pages(), 32);
  }

  model::KvPoolOptions options_;
  std::unique_ptr<model::KvPool> src_, dst_;
  KvLayout layout_;
  std::unique_ptr<KvReceiver> receiver_;
  std::unique_ptr<KvServiceImpl> service_;
  std::unique_ptr<common::ServerRunner> server_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(TcpTransportTest, PagesArriveByteIdentical) { TransferPagesAndCheck(); }

// Pools in DeepSeek's fp8 layout (656-byte latent entries + fp8 indexer keys with their
// scales): the pages are opaque bytes to the transport and arrive unchanged.
TEST_F(TcpTransportTest, Fp8CachePagesArriveByteIdentical) {
  options_.cache_format = model::KvCacheFormat::kFp8Ds;
  options_.latent_dim = 576;
  options_.index_dim = 32;
  src_ = testing::MakePool(options_);
  dst_ = testing::MakePool(options_);
  ASSERT_NE(src_, nullptr);
  ASSERT_NE(dst_, nullptr);
  ASSERT_EQ(src_->layer_page_bytes(), size_t{64} * 656 + size_t{64} * (32 + 4));
  layout_ = testing::SmallLayout(options_);
  layout_.dtype = kernels::DType::kFP8E4M3;
  TransferPagesAndCheck();
}

TEST_F(TcpTransportTest, CorruptPayloadIsRefusedWithDataLoss) {
  StartReceiver();
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("s2", *dst_->Allocate(1), 1,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  // A raw stream, so the checksum can be wrong on purpose.
  auto channel = grpc::CreateChannel(server_->bound_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::KvService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::KvPushResult result;
  auto writer = stub->PushPages(&ctx, &result);
  v1::KvPushMessage open;
  open.mutable_open()->set_session_id("s2");
  *open.mutable_open()->mutable_layout() = ToProto(layout_);
  ASSERT_TRUE(writer->Write(open));
  v1::KvPushMessage page;
  std::string bytes = testing::RandomBytes(dst_->layer_page_bytes(), rng_);
  page.mutable_page()->set_crc32(Crc32(bytes));
  bytes[17] ^= 0x40;  // flipped in flight
  page.mutable_page()->set_payload(bytes);
  (void)writer->Write(page);
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(s.error_message(), HasSubstr("checksum"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(dst_->free_pages(), 32);
}

TEST_F(TcpTransportTest, IncompatibleHashIsRefusedAtOpenAndLayoutAtTheReceiver) {
  StartReceiver();
  TcpKvTransport transport;
  KvSessionRef ref = Ref("s3", 1);
  ref.compat_hash = "0000000000000000";
  auto refused = transport.Open(ref, layout_, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("compatibility hash is 0000000000000000"));

  // Without a hash in the ref, the receiver compares field by field.
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("s3", *dst_->Allocate(1), 1,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  KvLayout bf16 = layout_;
  bf16.dtype = kernels::DType::kBF16;
  ref.compat_hash.clear();
  auto sender = transport.Open(ref, bf16, {});
  ASSERT_TRUE(sender.ok());
  Verdict verdict;
  (*sender)->Complete(KvCompletion{1, 3, 1, 0}, verdict.fn());
  ASSERT_TRUE(verdict.Wait());
  EXPECT_EQ(verdict.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(verdict.status.message(), HasSubstr("dtype is bf16 on the peer but f32 here"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(dst_->free_pages(), 32);
}

TEST_F(TcpTransportTest, UnknownSessionIsNotFound) {
  StartReceiver();
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("nope", 1), layout_, {});
  ASSERT_TRUE(sender.ok());
  Verdict verdict;
  (*sender)->Complete(KvCompletion{1, 3, 1, 0}, verdict.fn());
  ASSERT_TRUE(verdict.Wait());
  EXPECT_EQ(verdict.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(verdict.status.message(), HasSubstr("nope"));
}

// With a 30 s no-progress deadline on the receiver, only the abort (a cancelled stream) can end
// the session within the test's wait.
TEST_F(TcpTransportTest, SenderAbortMidTransferFreesReceiverPages) {
  StartReceiver(absl::Seconds(30));
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("s4", *dst_->Allocate(4), 4,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  EXPECT_EQ(dst_->free_pages(), 28);
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("s4", 4), layout_, {});
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE((*sender)->SendPage(0, 0, testing::RandomBytes(dst_->layer_page_bytes(), rng_)).ok());
  ASSERT_TRUE((*sender)->SendPage(0, 1, testing::RandomBytes(dst_->layer_page_bytes(), rng_)).ok());
  (*sender)->Abort(absl::CancelledError("request aborted"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(dst_->free_pages(), 32);
  EXPECT_EQ((*sender)->status().code(), absl::StatusCode::kCancelled);
}

// The sender process going away (its transport torn down mid-transfer, streams cancelled)
// frees the receiver's pages without waiting for the no-progress deadline.
TEST_F(TcpTransportTest, SenderGoneMidTransferFreesReceiverPages) {
  StartReceiver(absl::Seconds(30));
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("s5", *dst_->Allocate(4), 4,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  {
    auto transport = std::make_unique<TcpKvTransport>();
    auto sender = transport->Open(Ref("s5", 4), layout_, {});
    ASSERT_TRUE(sender.ok());
    ASSERT_TRUE((*sender)->SendPage(1, 3, testing::RandomBytes(dst_->layer_page_bytes(), rng_)).ok());
    transport.reset();  // the sender's side dies with the sender still holding the session
  }
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(dst_->free_pages(), 32);
}

// A sender that stays connected but goes silent is failed by the receiver's no-progress
// deadline; the sender learns it through its status.
TEST_F(TcpTransportTest, SilentSenderHitsTheNoProgressDeadlineOnBothSides) {
  StartReceiver(absl::Milliseconds(200));
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("s6", *dst_->Allocate(2), 2,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("s6", 2), layout_, {});
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE((*sender)->SendPage(0, 0, testing::RandomBytes(dst_->layer_page_bytes(), rng_)).ok());
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(dst_->free_pages(), 32);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*sender)->status().ok() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ((*sender)->status().code(), absl::StatusCode::kDeadlineExceeded)
      << (*sender)->status();
}

TEST_F(TcpTransportTest, LeaseExpiryFreesPagesAndTheLateSenderGetsNotFound) {
  StartReceiver();
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("s7", *dst_->Allocate(3), 3,
                                       absl::Now() + absl::Milliseconds(100), probe.fn())
                  .ok());
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(dst_->free_pages(), 32);
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("s7", 3), layout_, {});
  ASSERT_TRUE(sender.ok());
  Verdict verdict;
  (*sender)->Complete(KvCompletion{1, 3, 3, 0}, verdict.fn());
  ASSERT_TRUE(verdict.Wait());
  EXPECT_EQ(verdict.status.code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlaserve::kvtransfer

