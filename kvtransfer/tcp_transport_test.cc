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
#include "kvtransfer/testing/receiving_end.h"

namespace mlaserve::kvtransfer {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::mlaserve::v1;

using testing::DoneProbe;
using testing::Verdict;

class TcpTransportTest : public ::testing::Test {
 protected:
  // The receiving decode worker: a KvReceiver behind KvServiceImpl on 127.0.0.1:0.
  void StartReceiver(absl::Duration no_progress = absl::Seconds(30)) {
    end_ = std::make_unique<testing::ReceivingEnd>(pools_.dst.get(), pools_.layout, no_progress);
    ASSERT_TRUE(end_->Start().ok());
  }
  KvSessionRef Ref(const std::string& id, int pages) { return end_->Ref(id, pages, "tcp"); }

  // Ships 5 pages of every layer from src to dst and checks them byte for byte.
  void TransferPagesAndCheck() {
    StartReceiver();
    constexpr int kPages = 5;
    DoneProbe probe;
    ASSERT_TRUE(end_->Expect("s1", *pools_.dst->Allocate(kPages + 2), kPages, probe).ok());
    const std::vector<int32_t> src_pages = *pools_.src->Allocate(kPages);
    const std::vector<std::string> data = pools_.FillSource(src_pages);

    TcpKvTransport transport;
    // A small in-flight limit exercises the flow control.
    KvSenderOptions so;
    so.max_inflight_bytes = 3 * pools_.src->layer_page_bytes();
    auto sender = transport.Open(Ref("s1", kPages), pools_.layout, so);
    ASSERT_TRUE(sender.ok()) << sender.status();
    const int layers = pools_.options.num_layers;
    for (int layer = 0; layer < layers; ++layer) {  // layer by layer, as prefill does
      for (int i = 0; i < kPages; ++i) {
        std::string bytes = testing::ReadLayerPage(*pools_.src, layer, src_pages[i]);
        ASSERT_TRUE((*sender)->SendPage(layer, i, std::move(bytes)).ok());
      }
    }
    Verdict verdict;
    (*sender)->Complete(KvCompletion{99, layers, kPages, (*sender)->bytes_sent()}, verdict.fn());
    ASSERT_TRUE(verdict.Wait());
    ASSERT_TRUE(verdict.status.ok()) << verdict.status;
    ASSERT_TRUE(probe.Wait());
    ASSERT_TRUE(probe.result->ok()) << probe.result->status();
    const KvReceivedKv& kv = **probe.result;
    EXPECT_EQ(kv.first_token, 99);
    EXPECT_EQ(kv.bytes, pools_.TransferBytes(kPages));
    ASSERT_EQ(kv.pages.size(), size_t{kPages + 2});
    pools_.ExpectArrived(kv.pages, data);
    pools_.dst->Free(kv.pages);
    EXPECT_EQ(pools_.dst->free_pages(), 32);
  }
  // A random layer page of the pools' size.
  std::string RandomPage() {
    return testing::RandomBytes(pools_.dst->layer_page_bytes(), pools_.rng);
  }

  testing::PoolPair pools_;
  std::unique_ptr<testing::ReceivingEnd> end_;
};

TEST_F(TcpTransportTest, PagesArriveByteIdentical) { TransferPagesAndCheck(); }

// Pools in DeepSeek's fp8 layout (656-byte latent entries + fp8 indexer keys with their
// scales): the pages are opaque bytes to the transport and arrive unchanged.
TEST_F(TcpTransportTest, Fp8CachePagesArriveByteIdentical) {
  model::KvPoolOptions fp8 = pools_.options;
  fp8.cache_format = model::KvCacheFormat::kFp8Ds;
  fp8.latent_dim = 576;
  fp8.index_dim = 32;
  pools_.Reset(fp8);
  ASSERT_NE(pools_.src, nullptr);
  ASSERT_NE(pools_.dst, nullptr);
  ASSERT_EQ(pools_.src->layer_page_bytes(), size_t{64} * 656 + size_t{64} * (32 + 4));
  pools_.layout.dtype = kernels::DType::kFP8E4M3;
  TransferPagesAndCheck();
}

TEST_F(TcpTransportTest, CorruptPayloadIsRefusedWithDataLoss) {
  StartReceiver();
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("s2", *pools_.dst->Allocate(1), 1, probe).ok());
  // A raw stream, so the checksum can be wrong on purpose.
  auto channel = grpc::CreateChannel(end_->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::KvService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::KvPushResult result;
  auto writer = stub->PushPages(&ctx, &result);
  v1::KvPushMessage open;
  open.mutable_open()->set_session_id("s2");
  *open.mutable_open()->mutable_layout() = ToProto(pools_.layout);
  ASSERT_TRUE(writer->Write(open));
  v1::KvPushMessage page;
  std::string bytes = RandomPage();
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
  EXPECT_EQ(pools_.dst->free_pages(), 32);
}

TEST_F(TcpTransportTest, IncompatibleHashIsRefusedAtOpenAndLayoutAtTheReceiver) {
  StartReceiver();
  TcpKvTransport transport;
  KvSessionRef ref = Ref("s3", 1);
  ref.compat_hash = "0000000000000000";
  auto refused = transport.Open(ref, pools_.layout, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("compatibility hash is 0000000000000000"));

  // Without a hash in the ref, the receiver compares field by field.
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("s3", *pools_.dst->Allocate(1), 1, probe).ok());
  KvLayout bf16 = pools_.layout;
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
  EXPECT_EQ(pools_.dst->free_pages(), 32);
}

TEST_F(TcpTransportTest, UnknownSessionIsNotFound) {
  StartReceiver();
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("nope", 1), pools_.layout, {});
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
  ASSERT_TRUE(end_->Expect("s4", *pools_.dst->Allocate(4), 4, probe).ok());
  EXPECT_EQ(pools_.dst->free_pages(), 28);
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("s4", 4), pools_.layout, {});
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE((*sender)->SendPage(0, 0, RandomPage()).ok());
  ASSERT_TRUE((*sender)->SendPage(0, 1, RandomPage()).ok());
  (*sender)->Abort(absl::CancelledError("request aborted"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(pools_.dst->free_pages(), 32);
  EXPECT_EQ((*sender)->status().code(), absl::StatusCode::kCancelled);
}

// The sender process going away (its transport torn down mid-transfer, streams cancelled)
// frees the receiver's pages without waiting for the no-progress deadline.
TEST_F(TcpTransportTest, SenderGoneMidTransferFreesReceiverPages) {
  StartReceiver(absl::Seconds(30));
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("s5", *pools_.dst->Allocate(4), 4, probe).ok());
  {
    auto transport = std::make_unique<TcpKvTransport>();
    auto sender = transport->Open(Ref("s5", 4), pools_.layout, {});
    ASSERT_TRUE(sender.ok());
    ASSERT_TRUE((*sender)->SendPage(1, 3, RandomPage()).ok());
    transport.reset();  // the sender's side dies with the sender still holding the session
  }
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(pools_.dst->free_pages(), 32);
}

// A sender that stays connected but goes silent is failed by the receiver's no-progress
// deadline; the sender learns it through its status.
TEST_F(TcpTransportTest, SilentSenderHitsTheNoProgressDeadlineOnBothSides) {
  StartReceiver(absl::Milliseconds(200));
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("s6", *pools_.dst->Allocate(2), 2, probe).ok());
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("s6", 2), pools_.layout, {});
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE((*sender)->SendPage(0, 0, RandomPage()).ok());
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(pools_.dst->free_pages(), 32);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*sender)->status().ok() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ((*sender)->status().code(), absl::StatusCode::kDeadlineExceeded)
      << (*sender)->status();
}

TEST_F(TcpTransportTest, LeaseExpiryFreesPagesAndTheLateSenderGetsNotFound) {
  StartReceiver();
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("s7", *pools_.dst->Allocate(3), 3, probe, absl::Milliseconds(100)).ok());
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(pools_.dst->free_pages(), 32);
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("s7", 3), pools_.layout, {});
  ASSERT_TRUE(sender.ok());
  Verdict verdict;
  (*sender)->Complete(KvCompletion{1, 3, 3, 0}, verdict.fn());
  ASSERT_TRUE(verdict.Wait());
  EXPECT_EQ(verdict.status.code(), absl::StatusCode::kNotFound);
}

// A second stream that opens a session another stream is transferring (a stray retry, a
// hostile or broken peer) is refused and leaves the transfer alone. It used to fail the
// session: the first stream's sender got ALREADY_EXISTS and the pages went back.
TEST_F(TcpTransportTest, AnOpenFromASecondStreamLeavesTheTransferAlone) {
  StartReceiver();
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("s8", *pools_.dst->Allocate(2), 2, probe).ok());
  TcpKvTransport transport;
  auto sender = transport.Open(Ref("s8", 2), pools_.layout, {});
  ASSERT_TRUE(sender.ok());
  const absl::Time opened_by = absl::Now() + absl::Seconds(10);  // the open reached the receiver
  while (!end_->receiver().Route("s8", 0).ok() && absl::Now() < opened_by) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE(end_->receiver().Route("s8", 0).ok());

  auto stub = v1::KvService::NewStub(
      grpc::CreateChannel(end_->address(), grpc::InsecureChannelCredentials()));
  KvLayout bf16 = pools_.layout;  // an incompatible layout must not end the session either
  bf16.dtype = kernels::DType::kBF16;
  for (const KvLayout& layout : {pools_.layout, bf16}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::KvPushResult result;
    auto rogue = stub->PushPages(&ctx, &result);
    v1::KvPushMessage open;
    open.mutable_open()->set_session_id("s8");
    *open.mutable_open()->mutable_layout() = ToProto(layout);
    ASSERT_TRUE(rogue->Write(open));
    rogue->WritesDone();
    EXPECT_EQ(rogue->Finish().error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }

  const int layers = pools_.options.num_layers;
  for (int layer = 0; layer < layers; ++layer) {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*sender)->SendPage(layer, i, RandomPage()).ok());
  }
  Verdict verdict;
  (*sender)->Complete(KvCompletion{7, layers, 2, (*sender)->bytes_sent()}, verdict.fn());
  ASSERT_TRUE(verdict.Wait());
  EXPECT_TRUE(verdict.status.ok()) << verdict.status;
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  EXPECT_EQ((*probe.result)->first_token, 7);
  pools_.dst->Free((*probe.result)->pages);
  EXPECT_EQ(pools_.dst->free_pages(), 32);
}

// A stream that never completes its first message (a peer that sent half of it and stopped, or
// nothing at all) is covered by no session's deadline: it is dropped at the receiver's
// no-progress deadline. It used to stay open, with what gRPC had buffered, until the peer left.
TEST_F(TcpTransportTest, AStreamWithoutAnOpenIsDroppedAtTheNoProgressDeadline) {
  StartReceiver(absl::Milliseconds(200));
  auto stub = v1::KvService::NewStub(
      grpc::CreateChannel(end_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::KvPushResult result;
  const absl::Time start = absl::Now();
  auto silent = stub->PushPages(&ctx, &result);
  const grpc::Status s = silent->Finish();  // sends nothing; waits for the receiver's verdict
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr("no complete first message"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace mlaserve::kvtransfer

