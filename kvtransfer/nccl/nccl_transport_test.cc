// The nccl KvTransport adapter end to end on loopback: NcclKvTransport senders, a real gRPC
// server with KvNcclServiceImpl + KvServiceImpl feeding a KvReceiver, the FakeCommunicator
// moving host pages. Covers the control plane, per-pair ordering, byte identity, and the
// failure paths (peer error, stalled peer, plan mismatch, early abort): both sides free their
// pages and the next session rebuilds the pair's communicator.
#include "kvtransfer/nccl/nccl_transport.h"

#include <functional>
#include <optional>
#include <random>

#include "absl/synchronization/notification.h"
#include "common/server.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_service.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/recording_page_io.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/receiving_end.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

using testing::DoneProbe;
using testing::PageIoCall;
using testing::PageIoLog;
using testing::Verdict;

class NcclTransportTest : public ::testing::Test {
 protected:
  // Changes the receiver's and the sender's options before they are built.
  using Customize = std::function<void(KvNcclServiceOptions&, NcclTransportOptions&)>;

  void Start(absl::Duration no_progress = absl::Seconds(10), const Customize& customize = {}) {
    no_progress_ = no_progress;
    end_ = std::make_unique<testing::ReceivingEnd>(pools_.dst.get(), pools_.layout, no_progress);
    KvNcclServiceOptions no;
    no.comm_factory = hub_.factory();
    no.id_factory = hub_.id_factory();
    no.no_progress_timeout = no_progress;
    no.connect_timeout = absl::Seconds(5);
    NcclTransportOptions to;
    to.pair_id = "prefill-0";
    to.comm_factory = hub_.factory();
    to.connect_timeout = absl::Seconds(5);
    to.max_message_pages = 2;  // several messages per layer
    if (customize) customize(no, to);
    nccl_service_ =
        std::make_unique<KvNcclServiceImpl>(&end_->receiver(), pools_.dst.get(), no);
    ASSERT_TRUE(end_->Start({nccl_service_.get()}).ok());
    transport_ = std::make_unique<NcclKvTransport>(pools_.src.get(), to);
  }
  void TearDown() override {
    transport_.reset();
    if (end_ != nullptr) end_->Stop();
    nccl_service_.reset();
  }
  KvSessionRef Ref(const std::string& id, int pages) { return end_->Ref(id, pages, "nccl"); }
  KvSenderOptions SenderOptions() {
    KvSenderOptions so;
    so.no_progress_timeout = no_progress_;
    so.sender_name = "test";
    return so;
  }
  // Ships every layer and completes; returns the sender's verdict.
  absl::Status SendAll(KvSender& sender, const std::vector<int32_t>& pages) {
    const int layers = pools_.options.num_layers;
    for (int layer = 0; layer < layers; ++layer) {
      if (absl::Status s = sender.SendLayer(layer, pages); !s.ok()) return s;
    }
    Verdict v;
    sender.Complete(KvCompletion{7, layers, static_cast<int>(pages.size()), 0}, v.fn());
    if (!v.Wait()) return absl::DeadlineExceededError("no verdict");
    return v.status;
  }

  testing::PoolPair pools_;
  absl::Duration no_progress_;
  FakeCommHub hub_;
  std::unique_ptr<testing::ReceivingEnd> end_;
  std::unique_ptr<KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<NcclKvTransport> transport_;
  // LayersWrittenTogether...'s probes; members, so they outlive the pair threads using them.
  PageIoLog sent_log_, received_log_;
  absl::Notification all_recorded_;
  absl::Mutex fences_mu_;
  std::vector<std::shared_ptr<void>> fences_ ABSL_GUARDED_BY(fences_mu_);  // layer order
};

TEST_F(NcclTransportTest, SessionsOfAPairArriveByteIdenticalOverOneCommunicator) {
  Start();
  constexpr int kPages = 5;
  DoneProbe p1, p2;
  const std::vector<int32_t> d1 = *pools_.dst->Allocate(kPages), d2 = *pools_.dst->Allocate(kPages);
  ASSERT_TRUE(end_->Expect("s1", d1, kPages, p1).ok());
  ASSERT_TRUE(end_->Expect("s2", d2, kPages, p2).ok());
  const std::vector<int32_t> s1 = *pools_.src->Allocate(kPages), s2 = *pools_.src->Allocate(kPages);
  const auto data1 = pools_.FillSource(s1), data2 = pools_.FillSource(s2);
  auto a = transport_->Open(Ref("s1", kPages), pools_.layout, SenderOptions());
  auto b = transport_->Open(Ref("s2", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE((*a)->direct());
  // Interleaved layers, as one batch's on_layer_done produces them: s2 waits for s1's turn.
  Verdict va, vb;
  for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
    ASSERT_TRUE((*a)->SendLayer(layer, s1).ok());
    ASSERT_TRUE((*b)->SendLayer(layer, s2).ok());
  }
  (*b)->Complete(KvCompletion{8, pools_.options.num_layers, kPages, 0}, vb.fn());
  (*a)->Complete(KvCompletion{7, pools_.options.num_layers, kPages, 0}, va.fn());
  ASSERT_TRUE(va.Wait() && vb.Wait());
  EXPECT_TRUE(va.status.ok()) << va.status;
  EXPECT_TRUE(vb.status.ok()) << vb.status;
  ASSERT_TRUE(p1.Wait() && p2.Wait());
  ASSERT_TRUE(p1.result->ok()) << p1.result->status();
  ASSERT_TRUE(p2.result->ok()) << p2.result->status();
  EXPECT_EQ((*p1.result)->first_token, 7);
  EXPECT_EQ((*p2.result)->first_token, 8);
  EXPECT_EQ((*p1.result)->bytes, pools_.TransferBytes(kPages));
  EXPECT_EQ((*a)->bytes_sent(), pools_.TransferBytes(kPages));
  pools_.ExpectArrived(d1, data1);
  pools_.ExpectArrived(d2, data2);
  EXPECT_EQ(hub_.comms_created(), 2);  // one communicator (two ranks) for both sessions
  EXPECT_EQ(hub_.bytes_moved(), 2 * pools_.TransferBytes(kPages) + 2 * 32);  // + the plan headers
}

TEST_F(NcclTransportTest, LayersWrittenTogetherCostOneFenceWaitAndOneCopyPerMessage) {
  // The pair thread builds its page io only once the prefill thread recorded every layer, so
  // it finds them all ready: one run, one wait (for the last layer's fence, which covers the
  // others), one gather of the one packed message; the receiver scatters it once.
  Start(absl::Seconds(10), [this](KvNcclServiceOptions& no, NcclTransportOptions& to) {
    no.page_io_factory = testing::RecordingPageIoFactory(&received_log_);
    to.max_message_pages = 512;  // the transport's defaults: the 3 layers share a message
    to.coalesce_bytes = PlanParams::kDefaultCoalesceBytes;
    to.page_io_factory = [this](model::KvPool* pool, Communicator* comm, size_t slot_bytes) {
      EXPECT_TRUE(all_recorded_.WaitForNotificationWithTimeout(absl::Seconds(10)));
      return testing::RecordingPageIoFactory(&sent_log_)(pool, comm, slot_bytes);
    };
    to.layer_fence = [this]() -> absl::StatusOr<std::shared_ptr<void>> {
      absl::MutexLock l(&fences_mu_);
      fences_.push_back(std::make_shared<int>(static_cast<int>(fences_.size())));
      return fences_.back();
    };
  });
  constexpr int kPages = 4;
  const int layers = pools_.options.num_layers;
  DoneProbe probe;
  const std::vector<int32_t> dst = *pools_.dst->Allocate(kPages);
  ASSERT_TRUE(end_->Expect("run", dst, kPages, probe).ok());
  const std::vector<int32_t> src = *pools_.src->Allocate(kPages);
  const auto data = pools_.FillSource(src);
  auto sender = transport_->Open(Ref("run", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(sender.ok());
  for (int layer = 0; layer < layers; ++layer) {
    ASSERT_TRUE((*sender)->SendLayer(layer, src).ok());
  }
  all_recorded_.Notify();
  Verdict v;
  (*sender)->Complete(KvCompletion{7, layers, kPages, 0}, v.fn());
  ASSERT_TRUE(v.Wait());
  ASSERT_TRUE(v.status.ok()) << v.status;
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  pools_.ExpectArrived(dst, data);
  const SlotBlock message{0, layers, 0, kPages, 0, sizeof(PlanHeader)};
  const std::vector<PageIoCall> calls = sent_log_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].kind, PageIoCall::Kind::kWaitFence);
  {
    absl::MutexLock l(&fences_mu_);
    ASSERT_EQ(fences_.size(), static_cast<size_t>(layers));
    EXPECT_EQ(calls[0].fence, fences_.back().get());  // the last layer's
  }
  EXPECT_EQ(calls[1].kind, PageIoCall::Kind::kGather);
  EXPECT_TRUE(calls[1].block == message);
  EXPECT_EQ(received_log_.blocks(PageIoCall::Kind::kScatter), std::vector<SlotBlock>{message});
}

TEST_F(NcclTransportTest, ASessionWithoutItsFirstLayerDoesNotHoldBackALaterOne) {
  // s1 was opened first but its prefill has produced nothing yet (a long prompt still in its
  // first chunks); s2's layers are all there: s2 is driven, completed and verified while s1
  // still waits, then s1 follows on the same communicator.
  Start();
  constexpr int kPages = 3;
  DoneProbe p1, p2;
  const std::vector<int32_t> d1 = *pools_.dst->Allocate(kPages), d2 = *pools_.dst->Allocate(kPages);
  ASSERT_TRUE(end_->Expect("slow", d1, kPages, p1).ok());
  ASSERT_TRUE(end_->Expect("fast", d2, kPages, p2).ok());
  const std::vector<int32_t> s1 = *pools_.src->Allocate(kPages), s2 = *pools_.src->Allocate(kPages);
  const auto data1 = pools_.FillSource(s1), data2 = pools_.FillSource(s2);
  auto a = transport_->Open(Ref("slow", kPages), pools_.layout, SenderOptions());
  auto b = transport_->Open(Ref("fast", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(SendAll(**b, s2).ok());  // returns only once the receiver confirmed s2
  ASSERT_TRUE(p2.Wait());
  ASSERT_TRUE(p2.result->ok()) << p2.result->status();
  pools_.ExpectArrived(d2, data2);
  EXPECT_FALSE(p1.done.HasBeenNotified());
  EXPECT_TRUE(SendAll(**a, s1).ok());
  ASSERT_TRUE(p1.Wait());
  ASSERT_TRUE(p1.result->ok()) << p1.result->status();
  pools_.ExpectArrived(d1, data1);
  EXPECT_EQ(hub_.comms_created(), 2);
}

TEST_F(NcclTransportTest, PeerFailureFreesPagesOnBothSidesThenThePairRebuilds) {
  Start();
  constexpr int kPages = 4;
  const int dst_free = pools_.dst->free_pages();
  hub_.set_faults({/*fail_after_sends=*/3, -1});
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("bad", *pools_.dst->Allocate(kPages), kPages, probe).ok());
  const std::vector<int32_t> src = *pools_.src->Allocate(kPages);
  pools_.FillSource(src);
  auto sender = transport_->Open(Ref("bad", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(sender.ok());
  const absl::Status verdict = SendAll(**sender, src);
  EXPECT_EQ(verdict.code(), absl::StatusCode::kUnavailable) << verdict;
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(1, absl::Seconds(10)));
  EXPECT_EQ(pools_.dst->free_pages(), dst_free);
  EXPECT_EQ(end_->receiver().active_sessions(), 0);

  hub_.set_faults({});
  DoneProbe ok;
  const std::vector<int32_t> dst = *pools_.dst->Allocate(kPages);
  ASSERT_TRUE(end_->Expect("good", dst, kPages, ok).ok());
  const auto data = pools_.FillSource(src);
  auto again = transport_->Open(Ref("good", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(SendAll(**again, src).ok());
  ASSERT_TRUE(ok.Wait());
  ASSERT_TRUE(ok.result->ok()) << ok.result->status();
  pools_.ExpectArrived(dst, data);
  EXPECT_EQ(hub_.comms_created(), 4);  // rebuilt on both sides
}

TEST_F(NcclTransportTest, StalledPeerHitsBothDeadlinesThenThePairRebuilds) {
  Start(absl::Milliseconds(300));
  constexpr int kPages = 3;
  const int dst_free = pools_.dst->free_pages();
  hub_.set_faults({-1, /*stall_after_sends=*/2});
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("stall", *pools_.dst->Allocate(kPages), kPages, probe).ok());
  const std::vector<int32_t> src = *pools_.src->Allocate(kPages);
  pools_.FillSource(src);
  auto sender = transport_->Open(Ref("stall", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(sender.ok());
  const absl::Status verdict = SendAll(**sender, src);
  EXPECT_EQ(verdict.code(), absl::StatusCode::kDeadlineExceeded) << verdict;
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(1, absl::Seconds(10)));
  EXPECT_EQ(pools_.dst->free_pages(), dst_free);

  hub_.set_faults({});
  DoneProbe ok;
  const std::vector<int32_t> dst = *pools_.dst->Allocate(kPages);
  ASSERT_TRUE(end_->Expect("after", dst, kPages, ok).ok());
  const auto data = pools_.FillSource(src);
  auto again = transport_->Open(Ref("after", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(SendAll(**again, src).ok());
  ASSERT_TRUE(ok.Wait());
  ASSERT_TRUE(ok.result->ok()) << ok.result->status();
  pools_.ExpectArrived(dst, data);
  EXPECT_EQ(hub_.comms_created(), 4);
}

TEST_F(NcclTransportTest, PlanMismatchIsRefusedAtConnectAndFreesThePages) {
  Start();
  const int dst_free = pools_.dst->free_pages();
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("m", *pools_.dst->Allocate(5), 5, probe).ok());
  const std::vector<int32_t> src = *pools_.src->Allocate(4);
  auto sender = transport_->Open(Ref("m", 4), pools_.layout, SenderOptions());  // 4 != 5 pages
  ASSERT_TRUE(sender.ok());
  const absl::Status verdict = SendAll(**sender, src);
  EXPECT_EQ(verdict.code(), absl::StatusCode::kFailedPrecondition) << verdict;
  EXPECT_NE(verdict.message().find("plan"), std::string::npos) << verdict;
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pools_.dst->free_pages(), dst_free);
  EXPECT_EQ(hub_.comms_created(), 0);  // refused before any communicator
}

TEST_F(NcclTransportTest, ARefusedConnectLeavesThePairsCommunicatorInStepOnBothSides) {
  // A Connect the receiver refuses (here a plan mismatch; also a session that ended while its
  // Connect waited for its turn) posts nothing on either side, so both keep the communicator.
  // The sender used to drop its own anyway, and then joined the receiver's old id again for the
  // next session: NCCL cannot (an id serves one communicator), so that session failed too.
  Start();
  constexpr int kPages = 3;
  const std::vector<int32_t> src = *pools_.src->Allocate(kPages);
  auto ship = [&](const std::string& id, int receiver_pages) -> absl::Status {
    DoneProbe probe;
    const std::vector<int32_t> dst = *pools_.dst->Allocate(receiver_pages);
    if (absl::Status s = end_->Expect(id, dst, receiver_pages, probe); !s.ok()) return s;
    const auto data = pools_.FillSource(src);
    auto sender = transport_->Open(Ref(id, kPages), pools_.layout, SenderOptions());
    if (!sender.ok()) return sender.status();
    absl::Status verdict = SendAll(**sender, src);
    EXPECT_TRUE(probe.Wait()) << id;
    if (verdict.ok() && probe.result->ok()) {
      pools_.ExpectArrived(dst, data);
      pools_.dst->Free((*probe.result)->pages);
    }
    return verdict;
  };
  const int dst_free = pools_.dst->free_pages();
  ASSERT_TRUE(ship("first", kPages).ok());
  EXPECT_EQ(ship("refused", kPages + 1).code(), absl::StatusCode::kFailedPrecondition);
  const absl::Status third = ship("third", kPages);
  EXPECT_TRUE(third.ok()) << third;
  EXPECT_EQ(hub_.comms_created(), 2);  // the first communicator served the third session too
  EXPECT_EQ(pools_.dst->free_pages(), dst_free);
}

TEST_F(NcclTransportTest, ASenderThatDroppedItsCommunicatorGetsAFreshOneForTheNextSession) {
  // Every byte of s1 arrives, but the decode side's session has ended meanwhile (its owner
  // failed it), so the sender's Finish finds nothing (NOT_FOUND): the sender drops its end of
  // the communicator, while the receiver, whose receive went fine, keeps its own. The next
  // Connect says the sender holds none, and the receiver answers a fresh id: before, it handed
  // out its old id, which the sender cannot join again (an id serves one communicator), and s2
  // failed while the receiver waited out its no-progress deadline with s2's pages pinned.
  Start();
  constexpr int kPages = 3;
  const int layers = pools_.options.num_layers;
  const int dst_free = pools_.dst->free_pages();
  const std::vector<int32_t> src = *pools_.src->Allocate(kPages);
  pools_.FillSource(src);
  DoneProbe p1;
  ASSERT_TRUE(end_->Expect("s1", *pools_.dst->Allocate(kPages), kPages, p1).ok());
  auto s1 = transport_->Open(Ref("s1", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(s1.ok());
  for (int layer = 0; layer < layers; ++layer) ASSERT_TRUE((*s1)->SendLayer(layer, src).ok());
  // Every byte is on the receiver's side (payload + the plan header) before its session ends.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (hub_.bytes_moved() < pools_.TransferBytes(kPages) + 32 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(hub_.bytes_moved(), pools_.TransferBytes(kPages) + 32);
  ASSERT_TRUE(end_->receiver().Fail("s1", absl::UnavailableError("owner went away")));
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(1, absl::Seconds(10)));  // every byte landed
  Verdict v1;
  (*s1)->Complete(KvCompletion{7, layers, kPages, 0}, v1.fn());
  ASSERT_TRUE(v1.Wait());
  EXPECT_EQ(v1.status.code(), absl::StatusCode::kNotFound) << v1.status;
  EXPECT_EQ(pools_.dst->free_pages(), dst_free);

  DoneProbe p2;
  const std::vector<int32_t> dst = *pools_.dst->Allocate(kPages);
  ASSERT_TRUE(end_->Expect("s2", dst, kPages, p2).ok());
  const auto data = pools_.FillSource(src);
  auto s2 = transport_->Open(Ref("s2", kPages), pools_.layout, SenderOptions());
  ASSERT_TRUE(s2.ok());
  const absl::Status verdict = SendAll(**s2, src);
  EXPECT_TRUE(verdict.ok()) << verdict;
  ASSERT_TRUE(p2.Wait());
  ASSERT_TRUE(p2.result->ok()) << p2.result->status();
  pools_.ExpectArrived(dst, data);
  EXPECT_EQ(hub_.comms_created(), 4);  // rebuilt on both sides
}

TEST_F(NcclTransportTest, AbortBeforeTheFirstLayerReachesTheReceiver) {
  Start();
  const int dst_free = pools_.dst->free_pages();
  DoneProbe probe;
  ASSERT_TRUE(end_->Expect("a", *pools_.dst->Allocate(2), 2, probe).ok());
  auto sender = transport_->Open(Ref("a", 2), pools_.layout, SenderOptions());
  ASSERT_TRUE(sender.ok());
  (*sender)->Abort(absl::CancelledError("client went away"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(pools_.dst->free_pages(), dst_free);
  Verdict v;
  (*sender)->Complete(KvCompletion{1, pools_.options.num_layers, 2, 0}, v.fn());
  ASSERT_TRUE(v.Wait());
  EXPECT_EQ(v.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ((*sender)->SendLayer(0, {}).code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
