// The nccl KV transport when the peer process dies mid-transfer, on loopback with the
// FakeCommunicator: every page the survivor holds for the dead peer's sessions must come back
// within the no-progress deadline (--kv-no-progress-ms), whatever stage the transfer was in.
//
// The dead prefill worker is played by raw KvNcclService.Connect calls that are never followed
// by a join or a byte (the process is gone once its Connect was answered, or while it waited);
// the dead decode worker by a KvNcclService that answers Connect and never joins. The decode
// side is data-parallel (a pool and a "GPU" per rank), as in the run that found this (2026-11-29,
// 4x H200, tools/device/nccl_e2e.sh under parallel_suite.sh PARTS=e2edp): prefill killed while
// fresh pairs were being joined, 14 decode pages still held 20 s later (2 sessions of 7 pages).
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/server.h"
#include "common/transport_security.h"
#include "gtest/gtest.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/nccl/schedule.h"
#include "kvtransfer/proto_convert.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/receiving_end.h"
#include "mlaserve/v1/kv.grpc.pb.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

namespace v1 = ::mlaserve::v1;
using testing::DoneProbe;
using testing::Verdict;

constexpr int kPages = 4;
// Slack for a loaded 2-core machine: far below the 30 s join bound the pages used to wait for.
constexpr absl::Duration kSlack = absl::Seconds(3);

// Polls `done` every 5 ms until it holds or `deadline` passes.
bool PollUntil(const std::function<bool()>& done, absl::Time deadline) {
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

class DeadSenderTest : public ::testing::Test {
 protected:
  // A decode worker of two data-parallel ranks: rank 0's pool (pools_.dst) and rank 1's, each
  // with its own communicator and page io factories. The join bound (connect_timeout) is left
  // at its default, 30 s, as mlaserve-decode runs it.
  void Start(absl::Duration no_progress) {
    rank1_ = testing::MakePool(pools_.options);
    pools_.dst->set_rank(0);
    rank1_->set_rank(1);
    end_ = std::make_unique<testing::ReceivingEnd>(pools_.dst.get(), pools_.layout, no_progress);
    KvNcclServiceOptions no;
    no.comm_factory = hub_.factory();
    no.id_factory = hub_.id_factory();
    no.no_progress_timeout = no_progress;
    for (int r = 0; r < 2; ++r) {
      no.pool_devices.push_back({pool(r), hub_.factory(), HostPageIoFactory()});
    }
    service_ = std::make_unique<KvNcclServiceImpl>(&end_->receiver(), pools_.dst.get(), no);
    ASSERT_TRUE(end_->Start({service_.get()}).ok());
    stub_ = v1::KvNcclService::NewStub(
        common::ClusterDialer::Insecure()->Dial(end_->address(), grpc::ChannelArguments()));
  }
  void TearDown() override {
    if (end_ != nullptr) end_->Stop();
    service_.reset();
  }
  model::KvPool* pool(int rank) { return rank == 0 ? pools_.dst.get() : rank1_.get(); }

  // What the decode runner's Reserve does: kPages pages of decode rank `rank`'s pool, owned by
  // the KV session `id` until the transfer lands or fails.
  void Reserve(const std::string& id, int rank, DoneProbe& probe) {
    auto pages = pool(rank)->Allocate(kPages);
    ASSERT_TRUE(pages.ok());
    ASSERT_TRUE(end_->receiver()
                    .CreateSession(id, *pages, kPages, absl::Now() + absl::Seconds(30),
                                   probe.fn(), pool(rank))
                    .ok());
  }

  // The Connect that prefill rank `source`'s pair thread (pair id `pair_id`) sends for session
  // `id` on decode rank `dest`, as NcclKvTransport builds it. Blocks until answered (the
  // receive thread answers when the session's turn on the pair comes).
  grpc::Status Connect(const std::string& id, const std::string& pair_id, int source, int dest,
                       v1::KvNcclConnectResponse* response) {
    PlanParams params{id, pools_.options.num_layers, kPages,
                      static_cast<int64_t>(pools_.dst->layer_page_bytes())};
    params.source_rank = source;
    params.dest_rank = dest;
    v1::KvNcclConnectRequest req;
    req.set_session_id(id);
    *req.mutable_layout() = ToProto(pools_.layout);
    req.set_sender("dead prefill");
    req.set_pair_id(pair_id);
    req.set_max_message_pages(params.max_message_pages);
    req.set_coalesce_bytes(params.coalesce_bytes);
    req.set_plan_digest(TransferPlan::Make(params)->digest());
    req.set_source_rank(source);
    req.set_dest_rank(dest);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return stub_->Connect(&ctx, req, response);
  }

  // Both ranks' pools have `free0` / `free1` free pages by `deadline`.
  bool PagesBack(int free0, int free1, absl::Time deadline) {
    return PollUntil(
        [&] { return pool(0)->free_pages() == free0 && pool(1)->free_pages() == free1; },
        deadline);
  }

  testing::PoolPair pools_;
  std::unique_ptr<model::KvPool> rank1_;
  FakeCommHub hub_;
  std::unique_ptr<testing::ReceivingEnd> end_;
  std::unique_ptr<KvNcclServiceImpl> service_;
  std::unique_ptr<v1::KvNcclService::Stub> stub_;
};

TEST_F(DeadSenderTest, PrefillRanksDeadBeforeJoiningFreeEveryDecodeRanksPagesWithinNoProgress) {
  // Each prefill rank's pair thread had its Connect answered, then the process died before it
  // joined the communicator. The decode side's receive threads wait to join; the pages are
  // pinned meanwhile (a device write could land), so no session end frees them: neither the
  // router's Abort (s0; the decode runner cancels the KV session) nor the receiver's no-progress
  // deadline (s1). They used to come back only at the join bound, 30 s.
  constexpr absl::Duration kNoProgress = absl::Milliseconds(400);
  Start(kNoProgress);
  const int idle0 = pool(0)->free_pages(), idle1 = pool(1)->free_pages();
  DoneProbe p0, p1;
  Reserve("s0", 0, p0);
  Reserve("s1", 1, p1);
  v1::KvNcclConnectResponse r0, r1;
  ASSERT_TRUE(Connect("s0", "dead/rank0", 0, 0, &r0).ok());
  ASSERT_TRUE(Connect("s1", "dead/rank1", 1, 1, &r1).ok());
  EXPECT_FALSE(r0.comm_id().empty());
  EXPECT_NE(r0.comm_id(), r1.comm_id());  // a communicator per (prefill rank, decode rank)
  const absl::Time killed = absl::Now();
  EXPECT_TRUE(end_->receiver().Cancel("s0"));
  ASSERT_TRUE(p1.Wait());
  EXPECT_EQ(p1.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(PagesBack(idle0, idle1, killed + kNoProgress + kSlack))
      << "rank 0: " << pool(0)->free_pages() << " of " << idle0 << " free, rank 1: "
      << pool(1)->free_pages() << " of " << idle1;
  EXPECT_TRUE(service_->AwaitReceivesEnded(2, absl::Seconds(1)));
  EXPECT_FALSE(p0.done.HasBeenNotified());  // cancelled: the owner is not called back
}

TEST_F(DeadSenderTest, ASessionQueuedBehindADeadSendersJoinLeavesAsSoonAsItEnds) {
  // Session b's Connect waits behind a's receive on the same pair (a's receive thread waits
  // for the dead sender to join). When b ends (the router's Abort), b leaves the queue at once:
  // its Connect is answered with the reason, its pin is dropped, its pages are back, while a
  // still waits. It used to wait for its turn (a's join bound) and then join a fresh
  // communicator the dead sender never heard of (another join bound), pinned all along.
  constexpr absl::Duration kNoProgress = absl::Seconds(3);
  Start(kNoProgress);
  const int idle0 = pool(0)->free_pages(), idle1 = pool(1)->free_pages();
  DoneProbe pa, pb;
  Reserve("a", 0, pa);
  Reserve("b", 0, pb);
  v1::KvNcclConnectResponse ra;
  ASSERT_TRUE(Connect("a", "dead/rank0", 0, 0, &ra).ok());
  const absl::Time a_turn = absl::Now();
  auto b = std::async(std::launch::async, [this] {
    v1::KvNcclConnectResponse rb;
    return Connect("b", "dead/rank0", 0, 0, &rb);
  });
  ASSERT_TRUE(PollUntil([this] { return service_->sessions_waiting() == 1; },
                        absl::Now() + absl::Seconds(5)));
  const absl::Time cancelled = absl::Now();
  EXPECT_TRUE(end_->receiver().Cancel("b"));
  EXPECT_TRUE(PagesBack(idle0 - kPages, idle1, cancelled + absl::Seconds(1)))
      << pool(0)->free_pages() << " of " << idle0 << " free on rank 0";
  ASSERT_EQ(b.wait_for(std::chrono::seconds(1)), std::future_status::ready);
  EXPECT_EQ(b.get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(service_->sessions_waiting(), 0);
  // a: back at its join bound, the no-progress deadline.
  EXPECT_TRUE(end_->receiver().Cancel("a"));
  EXPECT_TRUE(PagesBack(idle0, idle1, a_turn + kNoProgress + kSlack));
  EXPECT_TRUE(service_->AwaitReceivesEnded(2, absl::Seconds(1)));
}

// A decode worker that answers Connect (the plan's digest, a fresh communicator id) and dies
// before joining.
class DeadReceiver final : public v1::KvNcclService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Connect(grpc::CallbackServerContext* context,
                                    const v1::KvNcclConnectRequest* request,
                                    v1::KvNcclConnectResponse* response) override {
    response->set_comm_id("never-joined");
    response->set_plan_digest(request->plan_digest());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

TEST(DeadReceiverTest, TheSenderGivesUpWithinItsNoProgressDeadline) {
  // The prefill side of the same rule: its prompt's pages are held until the session's verdict,
  // and joining a communicator the decode worker never joins used to take the join bound (30 s).
  constexpr absl::Duration kNoProgress = absl::Milliseconds(400);
  testing::PoolPair pools;
  FakeCommHub hub;
  DeadReceiver dead;
  common::ServerOptions so;
  so.listen = "127.0.0.1:0";
  common::ServerRunner server(so);
  server.AddService(&dead);
  ASSERT_TRUE(server.Start().ok());
  NcclTransportOptions to;  // connect_timeout: the default, 30 s
  to.pair_id = "prefill-0";
  to.comm_factory = hub.factory();
  auto transport = std::make_unique<NcclKvTransport>(pools.src.get(), to);
  KvSessionRef ref{"s", server.bound_address(), "nccl", kPages, pools.layout.CompatHash()};
  KvSenderOptions sender_options;
  sender_options.no_progress_timeout = kNoProgress;
  sender_options.sender_name = "test";
  auto sender = transport->Open(ref, pools.layout, sender_options);
  ASSERT_TRUE(sender.ok()) << sender.status();
  const std::vector<int32_t> src = *pools.src->Allocate(kPages);
  const absl::Time start = absl::Now();
  for (int layer = 0; layer < pools.options.num_layers; ++layer) {
    ASSERT_TRUE((*sender)->SendLayer(layer, src).ok());
  }
  Verdict v;
  (*sender)->Complete(KvCompletion{1, pools.options.num_layers, kPages, 0}, v.fn());
  ASSERT_TRUE(v.done.WaitForNotificationWithTimeout(kNoProgress + kSlack));
  EXPECT_EQ(v.status.code(), absl::StatusCode::kDeadlineExceeded) << v.status;
  EXPECT_LT(absl::Now() - start, kNoProgress + kSlack);
  transport.reset();
  server.RequestShutdown();
  server.WaitForShutdown();
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
