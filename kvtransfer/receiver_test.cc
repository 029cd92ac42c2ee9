#include "kvtransfer/receiver.h"

#include <optional>
#include <random>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/fake_transport.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer {
namespace {

using ::testing::HasSubstr;

// Collects one on_done result.
struct DoneProbe {
  absl::Notification done;
  std::optional<absl::StatusOr<KvReceivedKv>> result;
  KvReceiver::DoneFn fn() {
    return [this](absl::StatusOr<KvReceivedKv> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

class KvReceiverTest : public ::testing::Test {
 protected:
  KvReceiverTest()
      : options_(testing::SmallPoolOptions()),
        pool_(testing::MakePool(options_)),
        layout_(testing::SmallLayout(options_)) {}

  std::unique_ptr<KvReceiver> MakeReceiver(absl::Duration no_progress = absl::Seconds(30)) {
    return std::make_unique<KvReceiver>(pool_.get(), layout_, KvReceiverOptions{no_progress});
  }
  std::vector<int32_t> Reserve(int n) { return *pool_->Allocate(n); }
  absl::Status Write(KvReceiver& r, const std::string& id, int layer, int idx,
                     const std::string& bytes, std::optional<uint32_t> crc = std::nullopt) {
    return r.WritePage(id, layer, idx,
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                bytes.size()),
                       crc.value_or(Crc32(bytes)));
  }

  model::KvPoolOptions options_;
  std::unique_ptr<model::KvPool> pool_;
  KvLayout layout_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(KvReceiverTest, CompleteTransferHandsOverByteIdenticalPages) {
  auto r = MakeReceiver();
  DoneProbe probe;
  // 5 pages reserved, 2 of them the prompt's (the rest would hold decoded tokens).
  ASSERT_TRUE(r->CreateSession("s", Reserve(5), 2, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  EXPECT_EQ(pool_->free_pages(), 11);
  ASSERT_TRUE(r->Open("s", layout_).ok());
  std::vector<std::string> sent;
  for (int layer = 0; layer < 3; ++layer) {
    for (int i = 0; i < 2; ++i) {
      sent.push_back(testing::RandomBytes(pool_->layer_page_bytes(), rng_));
      ASSERT_TRUE(Write(*r, "s", layer, i, sent.back()).ok());
    }
  }
  // Re-sending a page replaces it (a chunk boundary inside a page).
  sent[1] = testing::RandomBytes(pool_->layer_page_bytes(), rng_);
  ASSERT_TRUE(Write(*r, "s", 0, 1, sent[1]).ok());
  const int64_t total = 7 * static_cast<int64_t>(pool_->layer_page_bytes());
  auto stats = r->Complete("s", KvCompletion{42, 3, 2, total});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pages_written, 7);
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok()) << probe.result->status();
  const KvReceivedKv& kv = **probe.result;
  EXPECT_EQ(kv.first_token, 42);
  ASSERT_EQ(kv.pages.size(), 5u);
  for (int layer = 0; layer < 3; ++layer) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(testing::ReadLayerPage(*pool_, layer, kv.pages[i]), sent[layer * 2 + i]);
    }
  }
  EXPECT_EQ(pool_->free_pages(), 11);  // ownership moved to the caller, not freed
  EXPECT_EQ(r->active_sessions(), 0);
  pool_->Free(kv.pages);
}

TEST_F(KvReceiverTest, LeaseExpiryFreesPagesAndRefusesLateSender) {
  auto r = MakeReceiver();
  DoneProbe probe;
  const absl::Time lease_end = absl::Now() + absl::Milliseconds(50);
  ASSERT_TRUE(r->CreateSession("s", Reserve(4), 4, lease_end, probe.fn()).ok());
  // The session holds its pages while the lease runs. The reaper ends it once absl::Now()
  // reaches lease_end, so a loaded machine may already be past it here: only a read taken
  // before then can be held to 12.
  const int free_during_lease = pool_->free_pages();
  if (absl::Now() < lease_end) EXPECT_EQ(free_during_lease, 12);
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(probe.result->status().message(), HasSubstr("lease ended"));
  EXPECT_EQ(pool_->free_pages(), 16);
  EXPECT_EQ(r->Open("s", layout_).code(), absl::StatusCode::kNotFound);
}

TEST_F(KvReceiverTest, NoProgressAfterOpenFailsAndFreesPages) {
  auto r = MakeReceiver(absl::Milliseconds(100));
  DoneProbe probe;
  ASSERT_TRUE(r->CreateSession("s", Reserve(2), 2, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  ASSERT_TRUE(r->Open("s", layout_).ok());
  // Some progress, then none. A machine too loaded to write one page within the 100 ms ends
  // the session before this write, for the same reason: the write then finds it gone.
  const absl::Status wrote =
      Write(*r, "s", 0, 0, testing::RandomBytes(pool_->layer_page_bytes(), rng_));
  if (!wrote.ok()) EXPECT_EQ(wrote.code(), absl::StatusCode::kNotFound) << wrote;
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(probe.result->status().message(), HasSubstr("no progress"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(KvReceiverTest, IncompatibleSenderIsRefusedWithFailedPrecondition) {
  auto r = MakeReceiver();
  DoneProbe probe;
  ASSERT_TRUE(r->CreateSession("s", Reserve(2), 2, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  KvLayout other = layout_;
  other.num_layers = 4;
  const absl::Status s = r->Open("s", other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("num_layers is 4 on the peer but 3 here"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(KvReceiverTest, BadChecksumSizeAndRangeAreRefused) {
  auto r = MakeReceiver();
  const std::string page = testing::RandomBytes(pool_->layer_page_bytes(), rng_);
  for (int c = 0; c < 4; ++c) {
    DoneProbe probe;
    ASSERT_TRUE(r->CreateSession("s", Reserve(2), 2, absl::Now() + absl::Seconds(30), probe.fn()).ok());
    ASSERT_TRUE(r->Open("s", layout_).ok());
    absl::Status s;
    absl::StatusCode want;
    if (c == 0) {
      s = Write(*r, "s", 0, 0, page, Crc32(page) ^ 1);
      want = absl::StatusCode::kDataLoss;
    } else if (c == 1) {
      s = Write(*r, "s", 0, 0, page.substr(1));
      want = absl::StatusCode::kInvalidArgument;
    } else if (c == 2) {
      s = Write(*r, "s", 3, 0, page);
      want = absl::StatusCode::kInvalidArgument;
    } else {
      s = Write(*r, "s", 0, 2, page);
      want = absl::StatusCode::kInvalidArgument;
    }
    EXPECT_EQ(s.code(), want) << c << ": " << s;
    ASSERT_TRUE(probe.Wait());
    EXPECT_EQ(probe.result->status().code(), want);
    EXPECT_EQ(pool_->free_pages(), 16);
  }
}

TEST_F(KvReceiverTest, CompletingWithAMissingPageNamesIt) {
  auto r = MakeReceiver();
  DoneProbe probe;
  ASSERT_TRUE(r->CreateSession("s", Reserve(2), 2, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  ASSERT_TRUE(r->Open("s", layout_).ok());
  int64_t total = 0;
  for (int layer = 0; layer < 3; ++layer) {
    for (int i = 0; i < 2; ++i) {
      if (layer == 1 && i == 1) continue;
      ASSERT_TRUE(Write(*r, "s", layer, i, testing::RandomBytes(pool_->layer_page_bytes(), rng_)).ok());
      total += pool_->layer_page_bytes();
    }
  }
  auto stats = r->Complete("s", KvCompletion{1, 3, 2, total});
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stats.status().message(), HasSubstr("without layer 1 page 1"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(KvReceiverTest, CancelFreesWithoutCallingBackAndDuplicateIdsAreRefused) {
  auto r = MakeReceiver();
  bool called = false;
  auto fn = [&](absl::StatusOr<KvReceivedKv>) { called = true; };
  ASSERT_TRUE(r->CreateSession("s", Reserve(3), 3, absl::Now() + absl::Seconds(30), fn).ok());
  EXPECT_EQ(r->CreateSession("s", {}, 0, absl::Now() + absl::Seconds(30), fn).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(r->Cancel("s"));
  EXPECT_FALSE(r->Cancel("s"));
  EXPECT_FALSE(called);
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(KvReceiverTest, DestroyingTheReceiverFailsOpenSessions) {
  DoneProbe probe;
  {
    auto r = MakeReceiver();
    ASSERT_TRUE(r->CreateSession("s", Reserve(3), 3, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  }
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(KvReceiverTest, FakeTransportDeliversAndItsStallIsCaughtByTheDeadline) {
  // The delivery runs on a receiver with the default no-progress deadline: on a loaded machine
  // the test thread can pause 100 ms between two pages of a healthy transfer. Only the stalled
  // session is held to 100 ms, on a second receiver behind its own endpoint.
  auto r = MakeReceiver();
  auto impatient = MakeReceiver(absl::Milliseconds(100));
  FakeKvTransport transport;
  transport.Register("decode-0", r.get());
  transport.Register("decode-1", impatient.get());
  const KvSessionRef ref{"s", "decode-0", "fake", 1, layout_.CompatHash()};

  DoneProbe ok_probe;
  ASSERT_TRUE(r->CreateSession("s", Reserve(1), 1, absl::Now() + absl::Seconds(30), ok_probe.fn()).ok());
  auto sender = transport.Open(ref, layout_, {});
  ASSERT_TRUE(sender.ok());
  for (int layer = 0; layer < 3; ++layer) {
    ASSERT_TRUE((*sender)->SendPage(layer, 0, testing::RandomBytes(pool_->layer_page_bytes(), rng_)).ok());
  }
  absl::Status verdict = absl::UnknownError("not called");
  (*sender)->Complete(KvCompletion{7, 3, 1, (*sender)->bytes_sent()},
                      [&](absl::Status s) { verdict = s; });
  EXPECT_TRUE(verdict.ok()) << verdict;
  ASSERT_TRUE(ok_probe.Wait());
  ASSERT_TRUE(ok_probe.result->ok());
  EXPECT_EQ((*ok_probe.result)->first_token, 7);
  pool_->Free((*ok_probe.result)->pages);

  DoneProbe stall_probe;
  transport.set_faults({.stall_after_pages = transport.pages_delivered() + 1});
  ASSERT_TRUE(impatient->CreateSession("t", Reserve(1), 1, absl::Now() + absl::Seconds(30),
                                       stall_probe.fn())
                  .ok());
  auto stalled = transport.Open(KvSessionRef{"t", "decode-1", "fake", 1, ""}, layout_, {});
  ASSERT_TRUE(stalled.ok());
  for (int layer = 0; layer < 3; ++layer) {
    (void)(*stalled)->SendPage(layer, 0, testing::RandomBytes(pool_->layer_page_bytes(), rng_));
  }
  ASSERT_TRUE(stall_probe.Wait());
  EXPECT_EQ(stall_probe.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(KvReceiverTest, DirectWritesPinPagesUntilReleasedAndCountLandedLayers) {
  auto r = MakeReceiver();
  DoneProbe probe;
  const std::vector<int32_t> pages = Reserve(4);
  ASSERT_TRUE(r->CreateSession("d", pages, 3, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  EXPECT_EQ(r->AcquireDirect("d").status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(r->Open("d", layout_).ok());
  auto direct = r->AcquireDirect("d");
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->pages, std::vector<int32_t>(pages.begin(), pages.begin() + 3));
  const int64_t page = static_cast<int64_t>(pool_->layer_page_bytes());
  ASSERT_TRUE(r->MarkLayersLanded("d", 0, 2, 2 * 3 * page).ok());
  // One layer missing: Complete refuses and names it.
  auto missing = r->Complete("d", KvCompletion{5, 3, 3, 2 * 3 * page});
  EXPECT_THAT(missing.status().message(), HasSubstr("without layer 2"));
  // The session ended while pinned: its pages stay out of the pool until the pin is dropped.
  ASSERT_TRUE(probe.Wait());
  EXPECT_FALSE(probe.result->ok());
  EXPECT_EQ(pool_->free_pages(), 12);
  direct->pin.reset();
  EXPECT_EQ(pool_->free_pages(), 16);
}

TEST_F(KvReceiverTest, DirectWritesCompleteLikePageWrites) {
  auto r = MakeReceiver();
  DoneProbe probe;
  ASSERT_TRUE(r->CreateSession("d", Reserve(2), 2, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  ASSERT_TRUE(r->Open("d", layout_).ok());
  auto direct = r->AcquireDirect("d");
  ASSERT_TRUE(direct.ok());
  const int64_t bytes = 3 * 2 * static_cast<int64_t>(pool_->layer_page_bytes());
  EXPECT_EQ(r->MarkLayersLanded("x", 0, 3, bytes).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(r->MarkLayersLanded("d", 0, 3, bytes).ok());
  direct->pin.reset();  // the device writes ended before Complete
  auto stats = r->Complete("d", KvCompletion{9, 3, 2, bytes});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_received, bytes);
  ASSERT_TRUE(probe.Wait());
  ASSERT_TRUE(probe.result->ok());
  EXPECT_EQ((*probe.result)->pages.size(), 2u);
  EXPECT_EQ(pool_->free_pages(), 14);  // handed over, not freed
}

TEST_F(KvReceiverTest, CancelWhilePinnedDefersTheFree) {
  auto r = MakeReceiver();
  DoneProbe probe;
  ASSERT_TRUE(r->CreateSession("c", Reserve(3), 3, absl::Now() + absl::Seconds(30), probe.fn()).ok());
  ASSERT_TRUE(r->Open("c", layout_).ok());
  auto direct = r->AcquireDirect("c");
  ASSERT_TRUE(direct.ok());
  EXPECT_TRUE(r->Cancel("c"));
  EXPECT_EQ(pool_->free_pages(), 13);
  EXPECT_EQ(r->AcquireDirect("c").status().code(), absl::StatusCode::kNotFound);
  direct->pin.reset();
  EXPECT_EQ(pool_->free_pages(), 16);
}

// A data-parallel decode worker's session lives in its rank's pool: the pages are written
// there, a failure frees them there, and the receiver's own pool is not touched.
TEST_F(KvReceiverTest, ASessionInAnotherPoolWritesAndFreesThere) {
  auto r = MakeReceiver();
  std::unique_ptr<model::KvPool> rank1 = testing::MakePool(options_);
  ASSERT_NE(rank1, nullptr);
  DoneProbe ok, failed;
  ASSERT_TRUE(r->CreateSession("a", *rank1->Allocate(3), 2, absl::Now() + absl::Seconds(30),
                               ok.fn(), rank1.get())
                  .ok());
  ASSERT_TRUE(r->CreateSession("b", *rank1->Allocate(2), 2, absl::Now() + absl::Seconds(30),
                               failed.fn(), rank1.get())
                  .ok());
  EXPECT_EQ(rank1->free_pages(), 11);
  EXPECT_EQ(pool_->free_pages(), 16);
  ASSERT_TRUE(r->Open("a", layout_).ok());
  std::vector<std::string> sent;
  for (int layer = 0; layer < 3; ++layer) {
    for (int i = 0; i < 2; ++i) {
      sent.push_back(testing::RandomBytes(pool_->layer_page_bytes(), rng_));
      ASSERT_TRUE(Write(*r, "a", layer, i, sent.back()).ok());
    }
  }
  auto direct = r->AcquireDirect("a");
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->pool, rank1.get());
  direct->pin.reset();
  const int64_t total = 6 * static_cast<int64_t>(pool_->layer_page_bytes());
  ASSERT_TRUE(r->Complete("a", KvCompletion{7, 3, 2, total}).ok());
  ASSERT_TRUE(ok.Wait());
  ASSERT_TRUE(ok.result->ok()) << ok.result->status();
  for (int layer = 0; layer < 3; ++layer) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(testing::ReadLayerPage(*rank1, layer, (**ok.result).pages[i]), sent[layer * 2 + i]);
    }
  }
  EXPECT_TRUE(r->Fail("b", absl::UnavailableError("sender gone")));
  ASSERT_TRUE(failed.Wait());
  EXPECT_EQ(rank1->free_pages(), 13);  // b's two pages back in rank 1's pool
  EXPECT_EQ(pool_->free_pages(), 16);
  rank1->Free((**ok.result).pages);
}

}  // namespace
}  // namespace mlaserve::kvtransfer
