// The nccl transport with a session whose first pages the decode worker already holds
// (KvSessionRef::cached_pages, its prefix cache): both ends plan only the pages after them, so
// only those cross the wire, the held pages are never written (nor are their tensor-parallel
// replicas), and a sender that predates the field (Connect without cached_pages) still
// delivers every page, into fresh pages. FakeCommunicator and loopback gRPC, as
// nccl_transport_test.cc.
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

constexpr int kCached = 2;    // leading pages the decode pool holds
constexpr int kPrompt = 4;    // the prompt's pages
constexpr int kReserved = 5;  // and the first new token's

class NcclCachedPagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    replica_ = testing::MakePool(pools_.options);
    ASSERT_TRUE(pools_.dst->AddReplica(replica_.get()).ok());  // tensor attention's copy
    pools_.dst->EnablePrefixCache();
    for (int i = 0; i < kPrompt * 64 - 5; ++i) prompt_.push_back(i % 97);
    // An earlier request left the prompt's first pages in the decode pool's cache.
    const std::vector<int32_t> pages = *pools_.dst->Allocate(kCached);
    for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
      for (int32_t p : pages) {
        cached_bytes_.push_back(testing::RandomBytes(pools_.dst->layer_page_bytes(), pools_.rng));
        ASSERT_TRUE(pools_.dst->WritePages(layer, std::span(&p, 1), cached_bytes_.back().data())
                        .ok());  // reaches the replica too
      }
    }
    pools_.dst->PublishPrefix(prompt_, pages, kCached);
    pools_.dst->Free(pages);
    cached_ids_ = pages;

    end_ = std::make_unique<testing::ReceivingEnd>(pools_.dst.get(), pools_.layout);
    KvNcclServiceOptions no;
    no.comm_factory = hub_.factory();
    no.id_factory = hub_.id_factory();
    no.connect_timeout = absl::Seconds(5);
    no.no_progress_timeout = absl::Seconds(2);  // bounds the aborted transfer's receive
    NcclTransportOptions to;
    to.pair_id = "prefill-0";
    to.comm_factory = hub_.factory();
    to.connect_timeout = absl::Seconds(5);
    to.max_message_pages = 1;  // a message per page: the plan's page ranges show
    nccl_service_ = std::make_unique<KvNcclServiceImpl>(&end_->receiver(), pools_.dst.get(), no);
    ASSERT_TRUE(end_->Start({nccl_service_.get()}).ok());
    transport_ = std::make_unique<NcclKvTransport>(pools_.src.get(), to);
  }
  void TearDown() override {
    transport_.reset();
    if (end_ != nullptr) end_->Stop();
    nccl_service_.reset();
  }

  // What the decode worker reserves: the cached pages (held), then fresh ones; the session
  // receives pages [kCached, kPrompt).
  std::vector<int32_t> Reserve(const std::string& id, DoneProbe& probe) {
    std::vector<int32_t> pages = pools_.dst->AcquirePrefix(prompt_, kCached);
    EXPECT_EQ(pages, cached_ids_);
    const std::vector<int32_t> rest = *pools_.dst->Allocate(kReserved - kCached);
    pages.insert(pages.end(), rest.begin(), rest.end());
    EXPECT_TRUE(end_->receiver()
                    .CreateSession(id, pages, kPrompt, absl::Now() + absl::Seconds(30),
                                   probe.fn(), nullptr, kCached)
                    .ok());
    return pages;
  }
  // Every layer of the prompt's pages, as the prefill runner hands them over, then Complete.
  absl::Status SendAll(KvSender& sender, const std::vector<int32_t>& pages) {
    const int layers = pools_.options.num_layers;
    for (int layer = 0; layer < layers; ++layer) {
      if (absl::Status s = sender.SendLayer(layer, pages); !s.ok()) return s;
    }
    Verdict v;
    sender.Complete(KvCompletion{7, layers, kPrompt, 0}, v.fn());
    if (!v.Wait()) return absl::DeadlineExceededError("no verdict");
    return v.status;
  }
  KvSenderOptions SenderOptions() const {
    KvSenderOptions so;
    so.no_progress_timeout = absl::Seconds(10);
    so.sender_name = "test";
    return so;
  }
  // The held pages still hold what was published, in the pool and in its replica.
  void ExpectCacheIntact() {
    int i = 0;
    for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
      for (int32_t p : cached_ids_) {
        EXPECT_EQ(testing::ReadLayerPage(*pools_.dst, layer, p), cached_bytes_[i]);
        EXPECT_EQ(testing::ReadLayerPage(*replica_, layer, p), cached_bytes_[i]);
        ++i;
      }
    }
  }
  // Layer by layer, `dst` holds what `data` (FillSource of the whole prompt) says for prompt
  // pages [first, kPrompt), in the pool and its replica.
  void ExpectArrived(const std::vector<int32_t>& dst, const std::vector<std::string>& data,
                     int first) {
    for (int layer = 0; layer < pools_.options.num_layers; ++layer) {
      for (int i = first; i < kPrompt; ++i) {
        const std::string& want = data[layer * kPrompt + i];
        EXPECT_EQ(testing::ReadLayerPage(*pools_.dst, layer, dst[i]), want) << layer << "/" << i;
        EXPECT_EQ(testing::ReadLayerPage(*replica_, layer, dst[i]), want) << layer << "/" << i;
      }
    }
  }

  testing::PoolPair pools_;
  std::unique_ptr<model::KvPool> replica_;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> cached_ids_;
  std::vector<std::string> cached_bytes_;  // [layer * kCached + i]
  FakeCommHub hub_;
  std::unique_ptr<testing::ReceivingEnd> end_;
  std::unique_ptr<KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<NcclKvTransport> transport_;
};

TEST_F(NcclCachedPagesTest, OnlyThePagesTheDecodeWorkerLacksCrossTheWire) {
  DoneProbe probe;
  const std::vector<int32_t> dst = Reserve("s", probe);
  const std::vector<int32_t> src = *pools_.src->Allocate(kPrompt);
  const auto data = pools_.FillSource(src);
  KvSessionRef ref = end_->Ref("s", kPrompt, "nccl");
  ref.cached_pages = kCached;
  auto sender = transport_->Open(ref, pools_.layout, SenderOptions());
  ASSERT_TRUE(sender.ok()) << sender.status();
  const absl::Status verdict = SendAll(**sender, src);
  ASSERT_TRUE(verdict.ok()) << verdict;
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  const KvReceivedKv& kv = **probe.result;
  EXPECT_EQ(kv.pages, dst);
  EXPECT_EQ(kv.cached_pages, kCached);
  const int64_t shipped = pools_.TransferBytes(kPrompt - kCached);
  EXPECT_EQ(kv.bytes, shipped);
  EXPECT_EQ((*sender)->bytes_sent(), shipped);
  EXPECT_EQ(hub_.bytes_moved(), shipped + 32);  // + the plan header, nothing for pages 0, 1
  ExpectArrived(dst, data, kCached);
  ExpectCacheIntact();
  pools_.dst->Free(kv.pages);
  EXPECT_EQ(pools_.dst->free_pages(), pools_.options.num_pages);
  EXPECT_EQ(pools_.dst->cached_pages(), kCached);
}

TEST_F(NcclCachedPagesTest, ASenderThatPredatesCachedPagesShipsEveryPageIntoFreshPages) {
  DoneProbe probe;
  const std::vector<int32_t> dst = Reserve("s", probe);
  const std::vector<int32_t> src = *pools_.src->Allocate(kPrompt);
  const auto data = pools_.FillSource(src);
  // The reference as an old prefill worker reads it: no cached_pages, so its Connect has none
  // and its plan covers every page.
  auto sender = transport_->Open(end_->Ref("s", kPrompt, "nccl"), pools_.layout, SenderOptions());
  ASSERT_TRUE(sender.ok()) << sender.status();
  const absl::Status verdict = SendAll(**sender, src);
  ASSERT_TRUE(verdict.ok()) << verdict;
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  const KvReceivedKv& kv = **probe.result;
  EXPECT_EQ(kv.cached_pages, 0);
  EXPECT_EQ(kv.bytes, pools_.TransferBytes(kPrompt));
  for (int i = 0; i < kCached; ++i) {
    EXPECT_NE(kv.pages[i], cached_ids_[0]);
    EXPECT_NE(kv.pages[i], cached_ids_[1]);
  }
  EXPECT_EQ(std::vector<int32_t>(kv.pages.begin() + kCached, kv.pages.end()),
            std::vector<int32_t>(dst.begin() + kCached, dst.end()));
  ExpectArrived(kv.pages, data, 0);
  ExpectCacheIntact();
  pools_.dst->Free(kv.pages);
  EXPECT_EQ(pools_.dst->free_pages(), pools_.options.num_pages);
}

TEST_F(NcclCachedPagesTest, AFailedTransferGivesTheHeldPagesBack) {
  DoneProbe probe;
  Reserve("s", probe);
  const std::vector<int32_t> src = *pools_.src->Allocate(kPrompt);
  KvSessionRef ref = end_->Ref("s", kPrompt, "nccl");
  ref.cached_pages = kCached;
  auto sender = transport_->Open(ref, pools_.layout, SenderOptions());
  ASSERT_TRUE(sender.ok()) << sender.status();
  ASSERT_TRUE((*sender)->SendLayer(0, src).ok());
  (*sender)->Abort(absl::CancelledError("prefill aborted"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  // The receive may still drain: the pages come back when its pin drops.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (pools_.dst->free_pages() != pools_.options.num_pages && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(pools_.dst->free_pages(), pools_.options.num_pages);
  ExpectCacheIntact();
  EXPECT_EQ(pools_.dst->CachedPrefixPages(prompt_, kCached), kCached);
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
