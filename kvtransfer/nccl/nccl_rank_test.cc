// The nccl KV transport with multi-GPU decode workers (docs/parallel.md), on loopback with the
// FakeCommunicator moving host pages:
//   data-parallel attention: each session lands in its rank's pool, received on that rank's
//   "GPU" (the pool's own communicator and page io factories), one communicator per
//   (sender, decode rank);
//   tensor attention: a session lands in rank 0's pool and reaches every replica before it
//   completes (KvPool::SyncReplicas);
//   the route (RankRoute) both sides report: prefill rank -> decode rank (+ replicas), for
//   tensor -> data and data -> tensor layouts, and a sender addressing the wrong rank refused.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/nccl/schedule.h"
#include "kvtransfer/rank_route.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/receiving_end.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

using testing::DoneProbe;
using testing::Verdict;

constexpr int kPages = 4;

class NcclRankTest : public ::testing::Test {
 protected:
  // The decode worker: rank 0's pool (pools_.dst) and rank 1's (rank1_). `replicated`: rank 1
  // is a replica of rank 0 (tensor attention); else each is its own (data attention), each
  // with its own communicator factory, counting the communicators of its "GPU".
  void Start(bool replicated) {
    rank1_ = testing::MakePool(pools_.options);
    pools_.dst->set_rank(0);  // as ParallelEngine labels its ranks' pools
    rank1_->set_rank(1);
    end_ = std::make_unique<testing::ReceivingEnd>(pools_.dst.get(), pools_.layout);
    KvNcclServiceOptions no;
    no.comm_factory = hub_.factory();
    no.id_factory = hub_.id_factory();
    no.connect_timeout = absl::Seconds(5);
    if (replicated) {
      ASSERT_TRUE(pools_.dst->AddReplica(rank1_.get()).ok());
    } else {
      for (int r = 0; r < 2; ++r) {
        CommunicatorFactory counting = [this, r](const CommId& id, int rank, absl::Time deadline) {
          ++comms_on_rank_[r];
          return hub_.factory()(id, rank, deadline);
        };
        no.pool_devices.push_back(
            {r == 0 ? pools_.dst.get() : rank1_.get(), counting, HostPageIoFactory()});
      }
    }
    service_ = std::make_unique<KvNcclServiceImpl>(&end_->receiver(), pools_.dst.get(), no);
    ASSERT_TRUE(end_->Start({service_.get()}).ok());
    NcclTransportOptions to;
    to.pair_id = "prefill-0";
    to.comm_factory = hub_.factory();
    to.connect_timeout = absl::Seconds(5);
    transport_ = std::make_unique<NcclKvTransport>(pools_.src.get(), to);
  }
  void TearDown() override {
    transport_.reset();
    if (end_ != nullptr) end_->Stop();
    service_.reset();
  }

  // A session of kPages pages reserved in `pool` (decode rank `rank`), filled on the sender
  // and shipped; returns the sender's verdict and what was sent.
  // `route`: the sender's rank_route() after the verdict.
  absl::Status Ship(const std::string& id, model::KvPool* pool, int rank,
                    std::vector<int32_t>* dst, std::vector<std::string>* sent, DoneProbe* probe,
                    std::string* route = nullptr) {
    *dst = *pool->Allocate(kPages);
    if (absl::Status s = end_->receiver().CreateSession(id, *dst, kPages,
                                                        absl::Now() + absl::Seconds(30),
                                                        probe->fn(), pool);
        !s.ok()) {
      return s;
    }
    const std::vector<int32_t> src = *pools_.src->Allocate(kPages);
    *sent = pools_.FillSource(src);
    KvSessionRef ref = end_->Ref(id, kPages, "nccl");
    ref.rank = rank;
    KvSenderOptions so;
    so.sender_name = "test";
    auto sender = transport_->Open(ref, pools_.layout, so);
    if (!sender.ok()) return sender.status();
    for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
      if (absl::Status s = (*sender)->SendLayer(layer, src); !s.ok()) return s;
    }
    Verdict v;
    (*sender)->Complete(KvCompletion{9, pools_.options.num_layers, kPages, 0}, v.fn());
    if (!v.Wait()) return absl::DeadlineExceededError("no verdict");
    pools_.src->Free(src);
    if (route != nullptr) *route = (*sender)->rank_route();
    return v.status;
  }

  // Every layer of `pages` of `pool` holds `data` (FillSource's order).
  void ExpectIn(const model::KvPool& pool, const std::vector<int32_t>& pages,
                const std::vector<std::string>& data) {
    for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
      for (int i = 0; i < kPages; ++i) {
        EXPECT_EQ(testing::ReadLayerPage(pool, layer, pages[i]), data[layer * kPages + i])
            << "layer " << layer << " page " << i;
      }
    }
  }

  testing::PoolPair pools_;
  std::unique_ptr<model::KvPool> rank1_;
  FakeCommHub hub_;
  int comms_on_rank_[2] = {0, 0};
  std::unique_ptr<testing::ReceivingEnd> end_;
  std::unique_ptr<KvNcclServiceImpl> service_;
  std::unique_ptr<NcclKvTransport> transport_;
};

TEST_F(NcclRankTest, DataParallelSessionsLandInTheirRanksPoolOnTheirRanksCommunicator) {
  Start(/*replicated=*/false);
  const int free0 = pools_.dst->free_pages();
  DoneProbe p1, p0, p1b;
  std::vector<int32_t> d1, d0, d1b;
  std::vector<std::string> s1, s0, s1b;
  std::string route1;
  ASSERT_TRUE(Ship("on-rank-1", rank1_.get(), 1, &d1, &s1, &p1, &route1).ok());
  EXPECT_EQ(pools_.dst->free_pages(), free0) << "rank 0's pool untouched";
  ASSERT_TRUE(Ship("on-rank-0", pools_.dst.get(), 0, &d0, &s0, &p0).ok());
  ASSERT_TRUE(Ship("on-rank-1-again", rank1_.get(), 1, &d1b, &s1b, &p1b).ok());
  for (DoneProbe* p : {&p1, &p0, &p1b}) {
    ASSERT_TRUE(p->Wait());
    ASSERT_TRUE(p->result->ok()) << p->result->status();
  }
  ExpectIn(*rank1_, d1, s1);
  ExpectIn(*pools_.dst, d0, s0);
  ExpectIn(*rank1_, d1b, s1b);
  // Tensor (or one-GPU) prefill -> data decode: rank 0's pages to the session's rank, both
  // sides saying so.
  EXPECT_EQ((*p1.result)->route, (RankRoute{0, 1, {}}));
  EXPECT_EQ(route1, "prefill rank 0 -> decode rank 1");
  EXPECT_EQ((*p0.result)->route, (RankRoute{0, 0, {}}));
  // One communicator per (sender, decode rank), reused by the second session of rank 1: the
  // decode side made each on its rank's "GPU".
  EXPECT_EQ(comms_on_rank_[0], 1);
  EXPECT_EQ(comms_on_rank_[1], 1);
  EXPECT_EQ(hub_.comms_created(), 4);  // two pairs, two ends each
  EXPECT_EQ(transport_->communicators_built(), 2);
  rank1_->Free((*p1.result)->pages);
  rank1_->Free((*p1b.result)->pages);
  pools_.dst->Free((*p0.result)->pages);
  EXPECT_EQ(rank1_->free_pages(), rank1_->total_pages());
}

TEST_F(NcclRankTest, TensorParallelSessionsReachEveryReplicaBeforeTheyComplete) {
  Start(/*replicated=*/true);
  DoneProbe probe;
  std::vector<int32_t> dst;
  std::vector<std::string> sent;
  std::string route;
  ASSERT_TRUE(Ship("replicated", pools_.dst.get(), 0, &dst, &sent, &probe, &route).ok());
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  ExpectIn(*pools_.dst, dst, sent);
  ExpectIn(*rank1_, dst, sent);  // the replica holds the same pages
  EXPECT_EQ((*probe.result)->route, (RankRoute{0, 0, {1}}));
  EXPECT_EQ((*probe.result)->route.DestinationRanks(), (std::vector<int>{0, 1}));
  EXPECT_EQ(route, "prefill rank 0 -> decode rank 0 (replicated to ranks 1)");
  pools_.dst->Free((*probe.result)->pages);
}

// A data-parallel prefill worker: the sender has a pool per rank (rank_pools); a session is
// read from the pool of the rank it is bound to, on that rank's pair.
TEST_F(NcclRankTest, RankPoolSenderReadsTheBoundRanksPoolOnItsOwnPair) {
  Start(/*replicated=*/false);
  std::unique_ptr<model::KvPool> src1 = testing::MakePool(pools_.options);
  int comms_of_source[2] = {0, 0};
  NcclTransportOptions to;
  to.pair_id = "prefill-dp";
  to.connect_timeout = absl::Seconds(5);
  for (int r = 0; r < 2; ++r) {
    CommunicatorFactory counting = [this, r, &comms_of_source](const CommId& id, int rank,
                                                               absl::Time deadline) {
      ++comms_of_source[r];
      return hub_.factory()(id, rank, deadline);
    };
    to.rank_pools.push_back(
        {r == 0 ? pools_.src.get() : src1.get(), counting, HostPageIoFactory(), nullptr});
  }
  transport_ = std::make_unique<NcclKvTransport>(pools_.src.get(), to);

  // Prefill rank 1's pages (rank 0's pool holds other bytes at the same ids) to decode rank 1.
  const std::vector<int32_t> dst = *rank1_->Allocate(kPages);
  DoneProbe probe;
  ASSERT_TRUE(end_->receiver()
                  .CreateSession("from-rank-1", dst, kPages, absl::Now() + absl::Seconds(30),
                                 probe.fn(), rank1_.get())
                  .ok());
  const std::vector<int32_t> src = *src1->Allocate(kPages);
  ASSERT_EQ(src, *pools_.src->Allocate(kPages));
  pools_.FillSource(src);  // rank 0's pool: not what must arrive
  std::vector<std::string> sent;
  for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
    for (int32_t p : src) {
      sent.push_back(testing::RandomBytes(src1->layer_page_bytes(), pools_.rng));
      ASSERT_TRUE(src1->WritePage(layer, p, sent.back().data()).ok());
    }
  }
  KvSessionRef ref = end_->Ref("from-rank-1", kPages, "nccl");
  ref.rank = 1;
  auto sender = transport_->Open(ref, pools_.layout, KvSenderOptions{});
  ASSERT_TRUE(sender.ok()) << sender.status();
  EXPECT_EQ((*sender)->SetSourceRank(2).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*sender)->SetSourceRank(1).ok());
  ASSERT_TRUE((*sender)->SetSourceRank(1).ok());  // the same rank again
  EXPECT_EQ((*sender)->SetSourceRank(0).code(), absl::StatusCode::kFailedPrecondition);
  for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
    ASSERT_TRUE((*sender)->SendLayer(layer, src).ok());
  }
  Verdict v;
  (*sender)->Complete(KvCompletion{9, pools_.options.num_layers, kPages, 0}, v.fn());
  ASSERT_TRUE(v.Wait());
  ASSERT_TRUE(v.status.ok()) << v.status;
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  ExpectIn(*rank1_, dst, sent);
  EXPECT_EQ(comms_of_source[0], 0);
  EXPECT_EQ(comms_of_source[1], 1);
  // Each prefill rank is a sender of its own on the decode side: rank 1's communicator.
  EXPECT_EQ(comms_on_rank_[1], 1);

  // Aborted before it was placed: the decode worker is told (its pages free at once), and no
  // communicator is made for it.
  const int free1 = rank1_->free_pages();
  DoneProbe aborted;
  ASSERT_TRUE(end_->receiver()
                  .CreateSession("never-placed", *rank1_->Allocate(kPages), kPages,
                                 absl::Now() + absl::Seconds(30), aborted.fn(), rank1_.get())
                  .ok());
  ref = end_->Ref("never-placed", kPages, "nccl");
  ref.rank = 1;
  auto unplaced = transport_->Open(ref, pools_.layout, KvSenderOptions{});
  ASSERT_TRUE(unplaced.ok());
  (*unplaced)->Abort(absl::CancelledError("request cancelled"));
  ASSERT_TRUE(aborted.Wait());
  EXPECT_FALSE(aborted.result->ok());
  EXPECT_EQ(rank1_->free_pages(), free1);
  EXPECT_EQ(comms_of_source[0] + comms_of_source[1], 1);
  unplaced->reset();
  sender->reset();
  transport_.reset();  // before src1
  rank1_->Free((*probe.result)->pages);
}

// Data prefill -> tensor decode: prefill rank 1's pool (its prompt's rank) into decode rank 0,
// which copies the pages into its replica; the plan and both sides name the route.
TEST_F(NcclRankTest, DataPrefillRankToTensorDecodeNamesItsRoute) {
  Start(/*replicated=*/true);
  std::unique_ptr<model::KvPool> src1 = testing::MakePool(pools_.options);
  NcclTransportOptions to;
  to.pair_id = "prefill-dp";
  to.connect_timeout = absl::Seconds(5);
  for (model::KvPool* pool : {pools_.src.get(), src1.get()}) {
    to.rank_pools.push_back({pool, hub_.factory(), HostPageIoFactory(), nullptr});
  }
  transport_ = std::make_unique<NcclKvTransport>(pools_.src.get(), to);
  const std::vector<int32_t> dst = *pools_.dst->Allocate(kPages);
  DoneProbe probe;
  ASSERT_TRUE(end_->receiver()
                  .CreateSession("data-to-tensor", dst, kPages, absl::Now() + absl::Seconds(30),
                                 probe.fn(), pools_.dst.get())
                  .ok());
  const std::vector<int32_t> src = *src1->Allocate(kPages);
  std::vector<std::string> sent;
  for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
    for (int32_t p : src) {
      sent.push_back(testing::RandomBytes(src1->layer_page_bytes(), pools_.rng));
      ASSERT_TRUE(src1->WritePage(layer, p, sent.back().data()).ok());
    }
  }
  auto sender = transport_->Open(end_->Ref("data-to-tensor", kPages, "nccl"), pools_.layout,
                                 KvSenderOptions{});
  ASSERT_TRUE(sender.ok()) << sender.status();
  EXPECT_EQ((*sender)->rank_route(), "");  // nothing reported before Connect
  ASSERT_TRUE((*sender)->SetSourceRank(1).ok());
  for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
    ASSERT_TRUE((*sender)->SendLayer(layer, src).ok());
  }
  Verdict v;
  (*sender)->Complete(KvCompletion{9, pools_.options.num_layers, kPages, 0}, v.fn());
  ASSERT_TRUE(v.Wait());
  ASSERT_TRUE(v.status.ok()) << v.status;
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  ExpectIn(*pools_.dst, dst, sent);
  ExpectIn(*rank1_, dst, sent);
  EXPECT_EQ((*probe.result)->route, (RankRoute{1, 0, {1}}));
  EXPECT_EQ((*sender)->rank_route(), "prefill rank 1 -> decode rank 0 (replicated to ranks 1)");
  sender->reset();
  transport_.reset();  // before src1
  pools_.dst->Free((*probe.result)->pages);
}

// A sender addressing another decode rank than the one whose pool holds the session is
// refused before any byte moves, naming both ranks; the session's pages go back.
TEST_F(NcclRankTest, ASenderAddressingAnotherRankIsRefused) {
  Start(/*replicated=*/false);
  const int free1 = rank1_->free_pages();
  DoneProbe probe;
  std::vector<int32_t> dst;
  std::vector<std::string> sent;
  absl::Status s = Ship("wrong-rank", rank1_.get(), /*rank=*/0, &dst, &sent, &probe);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("the sender addressed decode rank 0; the session's pages are in "
                             "rank 1's pool"),
            std::string::npos)
      << s;
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  EXPECT_EQ(rank1_->free_pages(), free1);
}

// The plan's digest covers the ranks, and its description names them.
TEST(TransferPlanRanksTest, DigestAndDescriptionNameTheRanks) {
  PlanParams a{"r#1", 3, 2, 1152};
  a.source_rank = 1;
  a.dest_rank = 3;
  auto plan = TransferPlan::Make(a);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(plan->Describe().find("session r#1: prefill rank 1 -> decode rank 3, 3 layers x 2 "
                                  "pages of 1152 B in 1 message(s), 6912 B, digest "),
            std::string::npos)
      << plan->Describe();
  PlanParams b = a;
  b.source_rank = 0;
  PlanParams c = a;
  c.dest_rank = 0;
  EXPECT_NE(TransferPlan::Make(b)->digest(), plan->digest());
  EXPECT_NE(TransferPlan::Make(c)->digest(), plan->digest());
  EXPECT_NE(TransferPlan::Make(b)->digest(), TransferPlan::Make(c)->digest());
  PlanParams bad = a;
  bad.dest_rank = -1;
  EXPECT_EQ(TransferPlan::Make(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
