// The tcp transport between workers of different layouts (docs/parallel.md): the route each
// session reports (RankRoute: prefill rank -> decode rank and its replicas), on both sides,
// for tensor prefill -> data decode and data prefill -> tensor decode; a sender that addresses
// another rank than the one whose pool holds the session is refused naming both.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvtransfer/rank_route.h"
#include "kvtransfer/tcp_transport.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/receiving_end.h"

namespace mlaserve::kvtransfer {
namespace {

using testing::DoneProbe;
using testing::Verdict;

constexpr int kPages = 3;

class TcpRankTest : public ::testing::Test {
 protected:
  // The decode worker's two ranks, labelled as ParallelEngine labels them; `replicated`: rank
  // 1 is rank 0's replica (tensor attention), else each pool is its own (data attention).
  void Start(bool replicated) {
    rank1_ = testing::MakePool(pools_.options);
    pools_.dst->set_rank(0);
    rank1_->set_rank(1);
    if (replicated) ASSERT_TRUE(pools_.dst->AddReplica(rank1_.get()).ok());
    end_ = std::make_unique<testing::ReceivingEnd>(pools_.dst.get(), pools_.layout);
    ASSERT_TRUE(end_->Start().ok());
  }
  void TearDown() override {
    if (end_ != nullptr) end_->Stop();
  }

  // Ships kPages pages of every layer from prefill rank `source_rank` into a session in
  // `pool`, addressed to decode rank `addressed_rank`. Returns the sender's verdict; the
  // receiver's outcome goes to `probe`, the sender's rank_route() to `route`.
  absl::Status Ship(const std::string& id, model::KvPool* pool, int addressed_rank,
                    int source_rank, DoneProbe* probe, std::vector<std::string>* sent,
                    std::string* route) {
    if (absl::Status s = end_->receiver().CreateSession(id, *pool->Allocate(kPages), kPages,
                                                        absl::Now() + absl::Seconds(30),
                                                        probe->fn(), pool);
        !s.ok()) {
      return s;
    }
    const std::vector<int32_t> src = *pools_.src->Allocate(kPages);
    *sent = pools_.FillSource(src);
    KvSessionRef ref = end_->Ref(id, kPages, "tcp");
    ref.rank = addressed_rank;
    TcpKvTransport transport;
    auto sender = transport.Open(ref, pools_.layout, KvSenderOptions{});
    if (!sender.ok()) return sender.status();
    if (absl::Status s = (*sender)->SetSourceRank(source_rank); !s.ok()) return s;
    const int layers = pools_.options.num_layers;
    for (int layer = 0; layer < layers; ++layer) {
      for (int i = 0; i < kPages; ++i) {
        std::string bytes = testing::ReadLayerPage(*pools_.src, layer, src[i]);
        if (absl::Status s = (*sender)->SendPage(layer, i, std::move(bytes)); !s.ok()) break;
      }
    }
    Verdict v;
    (*sender)->Complete(KvCompletion{7, layers, kPages, (*sender)->bytes_sent()}, v.fn());
    if (!v.Wait()) return absl::DeadlineExceededError("no verdict");
    pools_.src->Free(src);
    *route = (*sender)->rank_route();
    return v.status;
  }

  // Every layer of the first kPages `pages` of `pool` holds `sent`.
  void ExpectIn(const model::KvPool& pool, const std::vector<int32_t>& pages,
                const std::vector<std::string>& sent) {
    for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
      for (int i = 0; i < kPages; ++i) {
        EXPECT_EQ(testing::ReadLayerPage(pool, layer, pages[i]), sent[layer * kPages + i])
            << "layer " << layer << " page " << i;
      }
    }
  }

  testing::PoolPair pools_;
  std::unique_ptr<model::KvPool> rank1_;
  std::unique_ptr<testing::ReceivingEnd> end_;
};

// Tensor prefill (rank 0's replicated cache) -> data decode rank 1.
TEST_F(TcpRankTest, TensorPrefillToDataDecodeRank) {
  Start(/*replicated=*/false);
  DoneProbe probe;
  std::vector<std::string> sent;
  std::string route;
  ASSERT_TRUE(Ship("t2d", rank1_.get(), 1, 0, &probe, &sent, &route).ok());
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  EXPECT_EQ((*probe.result)->route, (RankRoute{0, 1, {}}));
  EXPECT_EQ(route, "prefill rank 0 -> decode rank 1");
  ExpectIn(*rank1_, (*probe.result)->pages, sent);
  EXPECT_EQ(pools_.dst->free_pages(), pools_.dst->total_pages()) << "rank 0's pool untouched";
  rank1_->Free((*probe.result)->pages);
}

// Data prefill rank 1 -> tensor decode: rank 0's pool, written through to its replica.
TEST_F(TcpRankTest, DataPrefillRankToTensorDecode) {
  Start(/*replicated=*/true);
  DoneProbe probe;
  std::vector<std::string> sent;
  std::string route;
  ASSERT_TRUE(Ship("d2t", pools_.dst.get(), 0, 1, &probe, &sent, &route).ok());
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  EXPECT_EQ((*probe.result)->route, (RankRoute{1, 0, {1}}));
  EXPECT_EQ(route, "prefill rank 1 -> decode rank 0 (replicated to ranks 1)");
  ExpectIn(*pools_.dst, (*probe.result)->pages, sent);
  ExpectIn(*rank1_, (*probe.result)->pages, sent);
  pools_.dst->Free((*probe.result)->pages);
}

TEST_F(TcpRankTest, ASenderAddressingAnotherRankIsRefused) {
  Start(/*replicated=*/false);
  DoneProbe probe;
  std::vector<std::string> sent;
  std::string route;
  const absl::Status s = Ship("wrong", rank1_.get(), 0, 0, &probe, &sent, &route);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("the sender addressed decode rank 0; the session's pages are in "
                             "rank 1's pool"),
            std::string::npos)
      << s;
  EXPECT_EQ(route, "");
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  EXPECT_EQ(rank1_->free_pages(), rank1_->total_pages());
}

}  // namespace
}  // namespace mlaserve::kvtransfer
