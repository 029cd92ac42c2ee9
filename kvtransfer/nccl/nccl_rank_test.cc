// The nccl KV transport with multi-GPU decode workers (docs/parallel.md), on loopback with the
// FakeCommunicator moving host pages:
//   data-parallel attention: each session lands in its rank's pool, received on that rank's
//   "GPU" (the pool's own communicator and page io factories), one communicator per
//   (sender, decode rank);
//   tensor attention: a session lands in rank 0's pool and reaches every replica before it
//   completes (KvPool::SyncReplicas).
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/nccl_transport.h"
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
  absl::Status Ship(const std::string& id, model::KvPool* pool, int rank,
                    std::vector<int32_t>* dst, std::vector<std::string>* sent, DoneProbe* probe) {
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
  ASSERT_TRUE(Ship("on-rank-1", rank1_.get(), 1, &d1, &s1, &p1).ok());
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
  ASSERT_TRUE(Ship("replicated", pools_.dst.get(), 0, &dst, &sent, &probe).ok());
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  ExpectIn(*pools_.dst, dst, sent);
  ExpectIn(*rank1_, dst, sent);  // the replica holds the same pages
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

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
