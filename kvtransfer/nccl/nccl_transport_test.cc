// The nccl KvTransport adapter end to end on loopback: NcclKvTransport senders, a real gRPC
// server with KvNcclServiceImpl + KvServiceImpl feeding a KvReceiver, the FakeCommunicator
// moving host pages. Covers the control plane, per-pair ordering, byte identity, and the
// failure paths (peer error, stalled peer, plan mismatch, early abort): both sides free their
// pages and the next session rebuilds the pair's communicator.
#include "kvtransfer/nccl/nccl_transport.h"

#include <optional>
#include <random>

#include "absl/synchronization/notification.h"
#include "common/server.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_service.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

using testing::DoneProbe;
using testing::Verdict;

class NcclTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = testing::SmallPoolOptions(32);
    src_ = testing::MakePool(options_);
    dst_ = testing::MakePool(options_);
    layout_ = testing::SmallLayout(options_);
  }
  void Start(absl::Duration no_progress = absl::Seconds(10)) {
    no_progress_ = no_progress;
    receiver_ = std::make_unique<KvReceiver>(dst_.get(), layout_, KvReceiverOptions{no_progress});
    kv_service_ = std::make_unique<KvServiceImpl>(receiver_.get());
    KvNcclServiceOptions no;
    no.comm_factory = hub_.factory();
    no.id_factory = hub_.id_factory();
    no.no_progress_timeout = no_progress;
    no.connect_timeout = absl::Seconds(5);
    nccl_service_ = std::make_unique<KvNcclServiceImpl>(receiver_.get(), dst_.get(), no);
    common::ServerOptions so;
    so.listen = "127.0.0.1:0";
    server_ = std::make_unique<common::ServerRunner>(so);
    server_->AddService(kv_service_.get());
    server_->AddService(nccl_service_.get());
    ASSERT_TRUE(server_->Start().ok());
    NcclTransportOptions to;
    to.pair_id = "prefill-0";
    to.comm_factory = hub_.factory();
    to.connect_timeout = absl::Seconds(5);
    to.max_message_pages = 2;  // several messages per layer
    transport_ = std::make_unique<NcclKvTransport>(src_.get(), to);
  }
  void TearDown() override {
    transport_.reset();
    if (server_ != nullptr) {
      server_->RequestShutdown();
      server_->WaitForShutdown();
    }
    nccl_service_.reset();
  }
  KvSessionRef Ref(const std::string& id, int pages) {
    return KvSessionRef{id, server_->bound_address(), "nccl", pages, layout_.CompatHash()};
  }
  KvSenderOptions SenderOptions() {
    KvSenderOptions so;
    so.no_progress_timeout = no_progress_;
    so.sender_name = "test";
    return so;
  }
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
  void ExpectArrived(const std::vector<int32_t>& dst_pages, const std::vector<std::string>& data) {
    const size_t n = data.size() / options_.num_layers;
    for (int layer = 0; layer < options_.num_layers; ++layer) {
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(testing::ReadLayerPage(*dst_, layer, dst_pages[i]), data[layer * n + i])
            << "layer " << layer << " page " << i;
      }
    }
  }
  // Ships every layer and completes; returns the sender's verdict.
  absl::Status SendAll(KvSender& sender, const std::vector<int32_t>& pages) {
    for (int layer = 0; layer < options_.num_layers; ++layer) {
      if (absl::Status s = sender.SendLayer(layer, pages); !s.ok()) return s;
    }
    Verdict v;
    sender.Complete(KvCompletion{7, options_.num_layers, static_cast<int>(pages.size()), 0},
                    v.fn());
    if (!v.Wait()) return absl::DeadlineExceededError("no verdict");
    return v.status;
  }
  int64_t PlanBytes(int pages) const {
    return int64_t{pages} * options_.num_layers * static_cast<int64_t>(src_->layer_page_bytes());
  }

  model::KvPoolOptions options_;
  std::unique_ptr<model::KvPool> src_, dst_;
  KvLayout layout_;
  absl::Duration no_progress_;
  FakeCommHub hub_;
  std::unique_ptr<KvReceiver> receiver_;
  std::unique_ptr<KvServiceImpl> kv_service_;
  std::unique_ptr<KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<common::ServerRunner> server_;
  std::unique_ptr<NcclKvTransport> transport_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(NcclTransportTest, SessionsOfAPairArriveByteIdenticalOverOneCommunicator) {
  Start();
  constexpr int kPages = 5;
  DoneProbe p1, p2;
  const std::vector<int32_t> d1 = *dst_->Allocate(kPages), d2 = *dst_->Allocate(kPages);
  ASSERT_TRUE(receiver_->CreateSession("s1", d1, kPages, absl::Now() + absl::Seconds(30),
                                       p1.fn()).ok());
  ASSERT_TRUE(receiver_->CreateSession("s2", d2, kPages, absl::Now() + absl::Seconds(30),
                                       p2.fn()).ok());
  const std::vector<int32_t> s1 = *src_->Allocate(kPages), s2 = *src_->Allocate(kPages);
  const auto data1 = FillSource(s1), data2 = FillSource(s2);
  auto a = transport_->Open(Ref("s1", kPages), layout_, SenderOptions());
  auto b = transport_->Open(Ref("s2", kPages), layout_, SenderOptions());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE((*a)->direct());
  // Interleaved layers, as one batch's on_layer_done produces them: s2 waits for s1's turn.
  Verdict va, vb;
  for (int layer = 0; layer < options_.num_layers; ++layer) {
    ASSERT_TRUE((*a)->SendLayer(layer, s1).ok());
    ASSERT_TRUE((*b)->SendLayer(layer, s2).ok());
  }
  (*b)->Complete(KvCompletion{8, options_.num_layers, kPages, 0}, vb.fn());
  (*a)->Complete(KvCompletion{7, options_.num_layers, kPages, 0}, va.fn());
  ASSERT_TRUE(va.Wait() && vb.Wait());
  EXPECT_TRUE(va.status.ok()) << va.status;
  EXPECT_TRUE(vb.status.ok()) << vb.status;
  ASSERT_TRUE(p1.Wait() && p2.Wait());
  ASSERT_TRUE(p1.result->ok()) << p1.result->status();
  ASSERT_TRUE(p2.result->ok()) << p2.result->status();
  EXPECT_EQ((*p1.result)->first_token, 7);
  EXPECT_EQ((*p2.result)->first_token, 8);
  EXPECT_EQ((*p1.result)->bytes, PlanBytes(kPages));
  EXPECT_EQ((*a)->bytes_sent(), PlanBytes(kPages));
  ExpectArrived(d1, data1);
  ExpectArrived(d2, data2);
  EXPECT_EQ(hub_.comms_created(), 2);  // one communicator (two ranks) for both sessions
  EXPECT_EQ(hub_.bytes_moved(), 2 * PlanBytes(kPages) + 2 * 32);  // + the plan headers
}

TEST_F(NcclTransportTest, ASessionWithoutItsFirstLayerDoesNotHoldBackALaterOne) {
  // s1 was opened first but its prefill has produced nothing yet (a long prompt still in its
  // first chunks); s2's layers are all there: s2 is driven, completed and verified while s1
  // still waits, then s1 follows on the same communicator.
  Start();
  constexpr int kPages = 3;
  DoneProbe p1, p2;
  const std::vector<int32_t> d1 = *dst_->Allocate(kPages), d2 = *dst_->Allocate(kPages);
  ASSERT_TRUE(receiver_->CreateSession("slow", d1, kPages, absl::Now() + absl::Seconds(30),
                                       p1.fn()).ok());
  ASSERT_TRUE(receiver_->CreateSession("fast", d2, kPages, absl::Now() + absl::Seconds(30),
                                       p2.fn()).ok());
  const std::vector<int32_t> s1 = *src_->Allocate(kPages), s2 = *src_->Allocate(kPages);
  const auto data1 = FillSource(s1), data2 = FillSource(s2);
  auto a = transport_->Open(Ref("slow", kPages), layout_, SenderOptions());
  auto b = transport_->Open(Ref("fast", kPages), layout_, SenderOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(SendAll(**b, s2).ok());  // returns only once the receiver confirmed s2
  ASSERT_TRUE(p2.Wait());
  ASSERT_TRUE(p2.result->ok()) << p2.result->status();
  ExpectArrived(d2, data2);
  EXPECT_FALSE(p1.done.HasBeenNotified());
  EXPECT_TRUE(SendAll(**a, s1).ok());
  ASSERT_TRUE(p1.Wait());
  ASSERT_TRUE(p1.result->ok()) << p1.result->status();
  ExpectArrived(d1, data1);
  EXPECT_EQ(hub_.comms_created(), 2);
}

TEST_F(NcclTransportTest, PeerFailureFreesPagesOnBothSidesThenThePairRebuilds) {
  Start();
  constexpr int kPages = 4;
  const int dst_free = dst_->free_pages();
  hub_.set_faults({/*fail_after_sends=*/3, -1});
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("bad", *dst_->Allocate(kPages), kPages,
                                       absl::Now() + absl::Seconds(30), probe.fn()).ok());
  const std::vector<int32_t> src = *src_->Allocate(kPages);
  FillSource(src);
  auto sender = transport_->Open(Ref("bad", kPages), layout_, SenderOptions());
  ASSERT_TRUE(sender.ok());
  const absl::Status verdict = SendAll(**sender, src);
  EXPECT_EQ(verdict.code(), absl::StatusCode::kUnavailable) << verdict;
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(1, absl::Seconds(10)));
  EXPECT_EQ(dst_->free_pages(), dst_free);
  EXPECT_EQ(receiver_->active_sessions(), 0);

  hub_.set_faults({});
  DoneProbe ok;
  const std::vector<int32_t> dst = *dst_->Allocate(kPages);
  ASSERT_TRUE(receiver_->CreateSession("good", dst, kPages, absl::Now() + absl::Seconds(30),
                                       ok.fn()).ok());
  const auto data = FillSource(src);
  auto again = transport_->Open(Ref("good", kPages), layout_, SenderOptions());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(SendAll(**again, src).ok());
  ASSERT_TRUE(ok.Wait());
  ASSERT_TRUE(ok.result->ok()) << ok.result->status();
  ExpectArrived(dst, data);
  EXPECT_EQ(hub_.comms_created(), 4);  // rebuilt on both sides
}

TEST_F(NcclTransportTest, StalledPeerHitsBothDeadlinesThenThePairRebuilds) {
  Start(absl::Milliseconds(300));
  constexpr int kPages = 3;
  const int dst_free = dst_->free_pages();
  hub_.set_faults({-1, /*stall_after_sends=*/2});
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("stall", *dst_->Allocate(kPages), kPages,
                                       absl::Now() + absl::Seconds(30), probe.fn()).ok());
  const std::vector<int32_t> src = *src_->Allocate(kPages);
  FillSource(src);
  auto sender = transport_->Open(Ref("stall", kPages), layout_, SenderOptions());
  ASSERT_TRUE(sender.ok());
  const absl::Status verdict = SendAll(**sender, src);
  EXPECT_EQ(verdict.code(), absl::StatusCode::kDeadlineExceeded) << verdict;
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(1, absl::Seconds(10)));
  EXPECT_EQ(dst_->free_pages(), dst_free);

  hub_.set_faults({});
  DoneProbe ok;
  const std::vector<int32_t> dst = *dst_->Allocate(kPages);
  ASSERT_TRUE(receiver_->CreateSession("after", dst, kPages, absl::Now() + absl::Seconds(30),
                                       ok.fn()).ok());
  const auto data = FillSource(src);
  auto again = transport_->Open(Ref("after", kPages), layout_, SenderOptions());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(SendAll(**again, src).ok());
  ASSERT_TRUE(ok.Wait());
  ASSERT_TRUE(ok.result->ok()) << ok.result->status();
  ExpectArrived(dst, data);
  EXPECT_EQ(hub_.comms_created(), 4);
}

TEST_F(NcclTransportTest, PlanMismatchIsRefusedAtConnectAndFreesThePages) {
  Start();
  const int dst_free = dst_->free_pages();
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("m", *dst_->Allocate(5), 5,
                                       absl::Now() + absl::Seconds(30), probe.fn()).ok());
  const std::vector<int32_t> src = *src_->Allocate(4);
  auto sender = transport_->Open(Ref("m", 4), layout_, SenderOptions());  // 4 != 5 pages
  ASSERT_TRUE(sender.ok());
  const absl::Status verdict = SendAll(**sender, src);
  EXPECT_EQ(verdict.code(), absl::StatusCode::kFailedPrecondition) << verdict;
  EXPECT_NE(verdict.message().find("plan"), std::string::npos) << verdict;
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(dst_->free_pages(), dst_free);
  EXPECT_EQ(hub_.comms_created(), 0);  // refused before any communicator
}

TEST_F(NcclTransportTest, AbortBeforeTheFirstLayerReachesTheReceiver) {
  Start();
  const int dst_free = dst_->free_pages();
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("a", *dst_->Allocate(2), 2,
                                       absl::Now() + absl::Seconds(30), probe.fn()).ok());
  auto sender = transport_->Open(Ref("a", 2), layout_, SenderOptions());
  ASSERT_TRUE(sender.ok());
  (*sender)->Abort(absl::CancelledError("client went away"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(dst_->free_pages(), dst_free);
  Verdict v;
  (*sender)->Complete(KvCompletion{1, options_.num_layers, 2, 0}, v.fn());
  ASSERT_TRUE(v.Wait());
  EXPECT_EQ(v.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ((*sender)->SendLayer(0, {}).code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
