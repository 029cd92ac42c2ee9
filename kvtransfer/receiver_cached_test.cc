// KvReceiver sessions that start with pages the decode worker already holds (its prefix
// cache; KvSessionRef::cached_pages): the transfer writes only the pages after them, the
// cached ones are never written, and every way a session ends gives their holds back.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/fake_transport.h"
#include "kvtransfer/receiver.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer {
namespace {

using ::testing::HasSubstr;
using DoneProbe = testing::DoneProbe;

constexpr int kLayers = 3;

class CachedSessionTest : public ::testing::Test {
 protected:
  CachedSessionTest()
      : options_(testing::SmallPoolOptions(16, kLayers)),
        pool_(testing::MakePool(options_)),
        layout_(testing::SmallLayout(options_)) {
    pool_->EnablePrefixCache();
    for (int i = 0; i < 2 * 64 + 10; ++i) prompt_.push_back(i % 50);
    // An earlier request left the prompt's first two pages in the cache (free, holding KV).
    const std::vector<int32_t> pages = *pool_->Allocate(2);
    for (int layer = 0; layer < kLayers; ++layer) {
      for (int i = 0; i < 2; ++i) {
        cached_bytes_.push_back(testing::RandomBytes(pool_->layer_page_bytes(), rng_));
        EXPECT_TRUE(pool_->WritePage(layer, pages[i], cached_bytes_.back().data()).ok());
      }
    }
    pool_->PublishPrefix(prompt_, pages, 2);
    pool_->Free(pages);
    cached_ids_ = pages;
  }

  std::unique_ptr<KvReceiver> MakeReceiver(absl::Duration no_progress = absl::Seconds(30)) {
    return std::make_unique<KvReceiver>(pool_.get(), layout_, KvReceiverOptions{no_progress});
  }
  // What the decode worker reserves for a remote prefill of prompt_ (3 pages) and its first
  // token (a 4th): the two cached pages (held), then fresh ones.
  std::vector<int32_t> ReserveWithCache() {
    std::vector<int32_t> pages = pool_->AcquirePrefix(prompt_, 2);
    EXPECT_EQ(pages, cached_ids_);
    const std::vector<int32_t> rest = *pool_->Allocate(2);
    pages.insert(pages.end(), rest.begin(), rest.end());
    return pages;
  }
  // A session `id` on `r` over ReserveWithCache()'s pages, which it returns: prompt_'s 3 pages
  // to receive, the first 2 cached; its outcome goes to `probe`.
  absl::StatusOr<std::vector<int32_t>> CreateCachedSession(
      KvReceiver& r, DoneProbe& probe, const std::string& id = "s",
      absl::Duration lease = absl::Seconds(30)) {
    std::vector<int32_t> pages = ReserveWithCache();
    absl::Status s = r.CreateSession(id, pages, 3, absl::Now() + lease, probe.fn(), nullptr,
                                     /*cached_pages=*/2);
    if (!s.ok()) return s;
    return pages;
  }
  absl::Status Write(KvReceiver& r, const std::string& id, int layer, int idx,
                     const std::string& bytes) {
    return r.WritePage(id, layer, idx,
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                bytes.size()),
                       Crc32(bytes));
  }
  // A sender that ships every page (one that predates KvOpen.cached_pages): writes prompt_'s
  // 3 pages of every layer into session "s" and completes it; returns what it wrote, per
  // [layer * 3 + page].
  absl::StatusOr<std::vector<std::string>> ShipEveryPage(KvReceiver& r) {
    std::vector<std::string> sent;
    for (int layer = 0; layer < kLayers; ++layer) {
      for (int i = 0; i < 3; ++i) {
        sent.push_back(testing::RandomBytes(pool_->layer_page_bytes(), rng_));
        if (absl::Status s = Write(r, "s", layer, i, sent.back()); !s.ok()) return s;
      }
    }
    const int64_t total = 3 * kLayers * static_cast<int64_t>(pool_->layer_page_bytes());
    if (absl::Status s = r.Complete("s", KvCompletion{3, kLayers, 3, total}).status(); !s.ok()) {
      return s;
    }
    return sent;
  }
  // Every layer of `pages` holds `bytes`, per [layer * pages.size() + page].
  void ExpectPagesHold(const std::vector<int32_t>& pages, const std::vector<std::string>& bytes) {
    for (int layer = 0; layer < kLayers; ++layer) {
      for (size_t i = 0; i < pages.size(); ++i) {
        EXPECT_EQ(testing::ReadLayerPage(*pool_, layer, pages[i]),
                  bytes[layer * pages.size() + i])
            << "layer " << layer << " page " << i;
      }
    }
  }
  // The cached pages still hold what was published, and a later prompt still finds them.
  void ExpectCacheIntact() {
    ExpectPagesHold(cached_ids_, cached_bytes_);
    EXPECT_EQ(pool_->CachedPrefixPages(prompt_, 2), 2);
  }

  model::KvPoolOptions options_;
  std::unique_ptr<model::KvPool> pool_;
  KvLayout layout_;
  std::mt19937 rng_{std::random_device{}()};
  std::vector<int32_t> prompt_;
  std::vector<int32_t> cached_ids_;
  std::vector<std::string> cached_bytes_;  // [layer * 2 + page]
};

TEST_F(CachedSessionTest, OnlyThePagesAfterTheCachedOnesAreReceived) {
  auto r = MakeReceiver();
  DoneProbe probe;
  const auto pages = CreateCachedSession(*r, probe);
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(pool_->free_pages(), 12);  // the cached pages are held, not free
  ASSERT_TRUE(r->Open("s", layout_, nullptr, 0, /*sender_cached_pages=*/2).ok());
  std::vector<std::string> sent;
  for (int layer = 0; layer < kLayers; ++layer) {
    sent.push_back(testing::RandomBytes(pool_->layer_page_bytes(), rng_));
    ASSERT_TRUE(Write(*r, "s", layer, 2, sent.back()).ok());
  }
  const int64_t total = kLayers * static_cast<int64_t>(pool_->layer_page_bytes());
  auto stats = r->Complete("s", KvCompletion{42, kLayers, 3, total});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pages_written, kLayers);
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  const KvReceivedKv& kv = **probe.result;
  EXPECT_EQ(kv.pages, *pages);  // cached + received: the request's page table
  EXPECT_EQ(kv.cached_pages, 2);
  EXPECT_EQ(kv.bytes, total);
  ExpectPagesHold({(*pages)[2]}, sent);
  ExpectCacheIntact();
  EXPECT_EQ(pool_->free_pages(), 12);  // handed over with their holds
  pool_->Free(kv.pages);
  EXPECT_EQ(pool_->free_pages(), 16);
  EXPECT_EQ(pool_->cached_pages(), 2);  // and still cached for the next turn
}

TEST_F(CachedSessionTest, CompletionMustCoverTheReceivedPagesOnly) {
  auto r = MakeReceiver();
  DoneProbe probe;
  ASSERT_TRUE(CreateCachedSession(*r, probe).ok());
  ASSERT_TRUE(r->Open("s", layout_, nullptr, 0, 2).ok());
  const int64_t page = static_cast<int64_t>(pool_->layer_page_bytes());
  ASSERT_TRUE(Write(*r, "s", 0, 2, testing::RandomBytes(page, rng_)).ok());
  ASSERT_TRUE(Write(*r, "s", 2, 2, testing::RandomBytes(page, rng_)).ok());
  auto stats = r->Complete("s", KvCompletion{1, kLayers, 3, 2 * page});
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stats.status().message(), HasSubstr("without layer 1 page 2"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(pool_->free_pages(), 16);
  ExpectCacheIntact();
}

// Every way a session with cached pages ends before it hands them on gives every hold back:
// the pool's free count is exact, and the cache keeps the pages (never written).
TEST_F(CachedSessionTest, EveryFailureGivesTheHoldsBack) {
  const std::string page = testing::RandomBytes(pool_->layer_page_bytes(), rng_);
  enum Case { kWriteIntoCached, kSenderDisagrees, kCancel, kFail, kLease, kNoProgress, kShutdown };
  for (Case c : {kWriteIntoCached, kSenderDisagrees, kCancel, kFail, kLease, kNoProgress,
                 kShutdown}) {
    SCOPED_TRACE(c);
    auto r = MakeReceiver(c == kNoProgress ? absl::Milliseconds(50) : absl::Seconds(30));
    DoneProbe probe;
    const absl::Duration lease = c == kLease ? absl::Milliseconds(50) : absl::Seconds(30);
    ASSERT_TRUE(CreateCachedSession(*r, probe, "s", lease).ok());
    if (c == kWriteIntoCached) {
      ASSERT_TRUE(r->Open("s", layout_, nullptr, 0, 2).ok());
      const absl::Status s = Write(*r, "s", 0, 1, page);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr("held from the prefix cache"));
    } else if (c == kSenderDisagrees) {
      const absl::Status s = r->Open("s", layout_, nullptr, 0, 1);
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_THAT(s.message(), HasSubstr("skips the first 1 pages but this decode worker holds 2"));
    } else if (c == kCancel) {
      ASSERT_TRUE(r->Open("s", layout_, nullptr, 0, 2).ok());
      ASSERT_TRUE(Write(*r, "s", 0, 2, page).ok());
      EXPECT_TRUE(r->Cancel("s"));
    } else if (c == kFail) {
      ASSERT_TRUE(r->Open("s", layout_, nullptr, 0, 2).ok());
      EXPECT_TRUE(r->Fail("s", absl::UnavailableError("sender gone")));
    } else if (c == kNoProgress) {
      ASSERT_TRUE(r->Open("s", layout_, nullptr, 0, 2).ok());
    } else if (c == kShutdown) {
      r.reset();
    }
    if (c != kCancel) ASSERT_TRUE(probe.Wait());  // kLease, kNoProgress: the reaper ends it
    if (c != kCancel) EXPECT_FALSE(probe.result->ok());
    EXPECT_EQ(pool_->free_pages(), 16);
    ExpectCacheIntact();
  }
}

TEST_F(CachedSessionTest, ASenderThatShipsEveryPageGetsFreshPagesInPlaceOfTheCachedOnes) {
  auto r = MakeReceiver();
  DoneProbe probe;
  const auto pages = CreateCachedSession(*r, probe);
  ASSERT_TRUE(pages.ok()) << pages.status();
  // A sender before KvOpen.cached_pages opens with 0 and will write pages 0 and 1 too.
  ASSERT_TRUE(r->Open("s", layout_).ok());
  EXPECT_EQ(pool_->free_pages(), 12);  // two fresh pages taken, the two holds given back
  const auto sent = ShipEveryPage(*r);
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  const KvReceivedKv& kv = **probe.result;
  EXPECT_EQ(kv.cached_pages, 0);
  ASSERT_EQ(kv.pages.size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(kv.pages.begin() + 2, kv.pages.end()),
            std::vector<int32_t>(pages->begin() + 2, pages->end()));
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(kv.pages[i], cached_ids_[0]);
    EXPECT_NE(kv.pages[i], cached_ids_[1]);
  }
  ExpectPagesHold(std::vector<int32_t>(kv.pages.begin(), kv.pages.begin() + 3), *sent);
  ExpectCacheIntact();
  pool_->Free(kv.pages);
  EXPECT_EQ(pool_->free_pages(), 16);
}

// A pool full to its last page: the session's holds go back first, so the pages only it held
// are free again and serve as the fresh ones (their cache forgotten), as a reservation without
// the cache would have taken them. Allocating before letting them go refused the session.
TEST_F(CachedSessionTest, ASenderThatShipsEveryPageIsServedInANearlyFullPool) {
  auto r = MakeReceiver();
  DoneProbe probe;
  ASSERT_TRUE(CreateCachedSession(*r, probe).ok());
  const std::vector<int32_t> others = *pool_->Allocate(11);  // 1 page left free
  ASSERT_EQ(pool_->free_pages(), 1);
  ASSERT_TRUE(r->Open("s", layout_).ok());
  EXPECT_EQ(pool_->free_pages(), 1);  // two holds given back, two pages taken
  const auto sent = ShipEveryPage(*r);
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  const KvReceivedKv& kv = **probe.result;
  EXPECT_EQ(kv.cached_pages, 0);
  ASSERT_EQ(kv.pages.size(), 4u);
  ExpectPagesHold(std::vector<int32_t>(kv.pages.begin(), kv.pages.begin() + 3), *sent);
  // A page the session wrote caches nothing any more (it was handed out fresh).
  EXPECT_LT(pool_->CachedPrefixPages(prompt_, 2), 2);
  pool_->Free(kv.pages);
  pool_->Free(others);
  EXPECT_EQ(pool_->free_pages(), 16);
}

// The cached pages are held by another request too (the same prefix, concurrently): giving
// this session's holds back frees none of them, and with no free page left the session is
// refused; every page is accounted for exactly once.
TEST_F(CachedSessionTest, ASenderThatShipsEveryPageIsRefusedWhenNoPageIsFreeForThem) {
  auto r = MakeReceiver();
  DoneProbe probe;
  ASSERT_TRUE(CreateCachedSession(*r, probe).ok());
  const std::vector<int32_t> other_holds = pool_->AcquirePrefix(prompt_, 2);
  ASSERT_EQ(other_holds, cached_ids_);
  const std::vector<int32_t> others = *pool_->Allocate(12);  // no page left free
  ASSERT_EQ(pool_->free_pages(), 0);
  const absl::Status s = r->Open("s", layout_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("no 2 free pages"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool_->free_pages(), 2);  // the session's two fresh pages; the holds were its own
  pool_->Free(others);
  EXPECT_EQ(pool_->free_pages(), 14);  // the other request still holds the cached pages
  ExpectCacheIntact();
  pool_->Free(other_holds);
  EXPECT_EQ(pool_->free_pages(), 16);
  ExpectCacheIntact();
}

TEST_F(CachedSessionTest, DirectWritesCoverTheReceivedPagesOnly) {
  auto r = MakeReceiver();
  DoneProbe probe;
  const auto pages = CreateCachedSession(*r, probe, "d");
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_TRUE(r->Open("d", layout_, nullptr, 0, 2).ok());
  auto direct = r->AcquireDirect("d");
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->pages, std::vector<int32_t>{(*pages)[2]});  // what the plan moves
  const int64_t bytes = kLayers * static_cast<int64_t>(pool_->layer_page_bytes());
  ASSERT_TRUE(r->MarkLayersLanded("d", 0, kLayers, bytes).ok());
  direct->pin.reset();
  auto stats = r->Complete("d", KvCompletion{9, kLayers, 3, bytes});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pages_written, kLayers);
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok());
  EXPECT_EQ((*probe.result)->cached_pages, 2);
  pool_->Free((*probe.result)->pages);
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(CachedSessionTest, CachedPagesMustLeaveAPageToShip) {
  auto r = MakeReceiver();
  auto fn = [](absl::StatusOr<KvReceivedKv>) {};
  const std::vector<int32_t> pages = ReserveWithCache();
  const absl::Status s =
      r->CreateSession("s", pages, 2, absl::Now() + absl::Seconds(30), fn, nullptr, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(r->CreateSession("t", {}, 0, absl::Now() + absl::Seconds(30), fn, nullptr, -1).code(),
            absl::StatusCode::kInvalidArgument);
  pool_->Free(pages);  // refused: still the caller's
  EXPECT_EQ(pool_->free_pages(), 16);
  // The sender's side checks the reference the same way.
  const KvSessionRef ref{"s", "decode-0", "fake", 2, layout_.CompatHash(), 0, 2};
  EXPECT_EQ(ValidateSessionRef(ref, layout_).code(), absl::StatusCode::kInvalidArgument);
}

// The fake transport opens with the reference's cached_pages, as tcp does.
TEST_F(CachedSessionTest, FakeTransportOpensWithTheCachedPages) {
  auto r = MakeReceiver();
  FakeKvTransport transport;
  transport.Register("decode-0", r.get());
  DoneProbe probe;
  ASSERT_TRUE(CreateCachedSession(*r, probe).ok());
  const KvSessionRef ref{"s", "decode-0", "fake", 3, layout_.CompatHash(), 0, 2};
  auto sender = transport.Open(ref, layout_, {});
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE((*sender)->status().ok()) << (*sender)->status();
  for (int layer = 0; layer < kLayers; ++layer) {
    ASSERT_TRUE(
        (*sender)->SendPage(layer, 2, testing::RandomBytes(pool_->layer_page_bytes(), rng_)).ok());
  }
  absl::Status verdict = absl::UnknownError("not called");
  (*sender)->Complete(KvCompletion{7, kLayers, 3, (*sender)->bytes_sent()},
                      [&](absl::Status s) { verdict = s; });
  EXPECT_TRUE(verdict.ok()) << verdict;
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok());
  EXPECT_EQ((*probe.result)->cached_pages, 2);
  pool_->Free((*probe.result)->pages);
  ExpectCacheIntact();
}

}  // namespace
}  // namespace mlaserve::kvtransfer
