// A remotely prefilled prompt on a decode worker that already holds its start (a conversation's
// earlier turn ended there): Reserve takes holds on the cached pages and reports them in the
// session (KvSessionRef::cached_pages), the prefill side ships only the rest, and the request
// decodes from cached + received pages as from a prompt received whole. Every way the
// reservation ends before its KV lands gives the holds back; the pool's free count is exact.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode_worker/decode_runner.h"
#include "decode_worker/testing/recording_sink.h"
#include "decode_worker/testing/small_decode_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::decode {
namespace {

using ::mlaserve::testing::FakeEngine;
using ::mlaserve::testing::RecordingSink;
using ::testing::HasSubstr;
using testing::kPages;
using testing::kVocab;
using testing::Prompt;
using testing::SmallRunnerOptions;

class RemoteReuseTest : public testing::SmallDecodeRunnerHarness {
 protected:
  void SetUp() override { Build(); }  // with the prefix cache (DecodeRunnerOptions' default)
  ReserveSpec Remote(const std::string& id, std::vector<int32_t> prompt, int max_new,
                     bool reuse = true) {
    ReserveSpec s = Spec(id, std::move(prompt), max_new, /*local=*/false);
    s.reuse_cached_pages = reuse;
    return s;
  }
  // Serves `spec` to its end (the prefill side shipping as a current prefill worker does,
  // or every page); returns its sink.
  std::shared_ptr<RecordingSink> Serve(const ReserveSpec& spec, Reservation* reserved = nullptr,
                                       bool ship_every_page = false) {
    auto r = runner_->Reserve(spec);
    EXPECT_TRUE(r.ok()) << r.status();
    auto sink = std::make_shared<RecordingSink>();
    if (!r.ok()) return sink;
    if (reserved != nullptr) *reserved = *r;
    EXPECT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
    PrefillAndShip(*r, spec.prompt, ship_every_page);
    RunUntilIdle();
    return sink;
  }
  // A conversation's first turn (100 prompt tokens, 40 answered: 139 positions computed, two
  // whole pages left cached), and its second turn's prompt: the first, the answer, 30 more.
  std::vector<int32_t> FirstTurn() {
    const std::vector<int32_t> first = Prompt(100, 3);
    std::shared_ptr<RecordingSink> s = Serve(Remote("turn1", first, 40));
    EXPECT_TRUE(s->finish()) << s->error();
    EXPECT_EQ(decode_->kv_pool().cached_pages(), 2);
    EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
    std::vector<int32_t> second = first;
    const std::vector<int32_t> answer = s->tokens();
    second.insert(second.end(), answer.begin(), answer.end());
    for (int32_t t : Prompt(30, 11)) second.push_back(t);
    return second;  // 170 tokens: 3 pages, the first 2 cached
  }
  double Counter(const char* name, common::MetricLabels labels = {}) {
    return metrics_.GetCounter(name, "", std::move(labels))->value();
  }
  int64_t LayerPages(int pages) const {
    return int64_t{pages} * layout_.num_layers *
           static_cast<int64_t>(decode_->kv_pool().layer_page_bytes());
  }
};

TEST_F(RemoteReuseTest, TheNextTurnReceivesOnlyThePagesItsDecodeWorkerLacks) {
  const std::vector<int32_t> second = FirstTurn();
  const double received_before = Counter("mlaserve_kv_transfer_bytes_total",
                                         {{"direction", "received"}});
  EXPECT_EQ(received_before, LayerPages(2));  // the first turn's prompt, whole
  auto r = runner_->Reserve(Remote("turn2", second, 12));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->session.num_pages, 3);
  EXPECT_EQ(r->session.cached_pages, 2);
  EXPECT_EQ(r->reserved_pages, 3);
  // Exact accounting: the two cached pages are held (no longer free), one fresh page taken.
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages - 3);
  EXPECT_EQ(decode_->kv_pool().CachedPrefixPages(second, 2), 2);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  PrefillAndShip(*r, second);
  RunUntilIdle();
  ASSERT_TRUE(sink->finish()) << sink->error();
  // FakeEngine reads back every cached entry it attends: the held pages carried the right KV.
  EXPECT_EQ(sink->tokens(), FakeEngine::ExpectedTokens(second, 12, kVocab));
  EXPECT_EQ(sink->cached(), 0);  // no prompt token was computed from the cache here
  EXPECT_EQ(Counter("mlaserve_decode_kv_pages_reused_total"), 2);
  EXPECT_EQ(Counter("mlaserve_kv_transfer_bytes_total", {{"direction", "received"}}),
            received_before + LayerPages(1));
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// Page boundaries: the page of the prompt's last token is always shipped, so a prompt of
// exactly k pages keeps k - 1, one a token longer keeps k (at most what the cache holds).
TEST_F(RemoteReuseTest, ThePageOfTheLastPromptTokenIsAlwaysShipped) {
  const std::vector<int32_t> second = FirstTurn();  // pages 0 and 1 cached
  for (const auto& [len, cached] : std::vector<std::pair<int, int>>{
           {1, 0}, {64, 0}, {65, 1}, {128, 1}, {129, 2}, {170, 2}}) {
    SCOPED_TRACE(len);
    const std::vector<int32_t> prompt(second.begin(), second.begin() + len);
    Reservation reserved;
    std::shared_ptr<RecordingSink> s =
        Serve(Remote(absl::StrCat("len", len), prompt, 3), &reserved);
    EXPECT_EQ(reserved.session.num_pages, (len + 63) / 64);
    EXPECT_EQ(reserved.session.cached_pages, cached);
    ASSERT_TRUE(s->finish()) << s->error();
    EXPECT_EQ(s->tokens(), FakeEngine::ExpectedTokens(prompt, 3, kVocab));
    EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  }
}

// Nothing to reuse, or not asked: the reservation is today's (0 cached, every page shipped).
TEST_F(RemoteReuseTest, ZeroCachedPagesWhenNotAskedOrNothingMatches) {
  const std::vector<int32_t> second = FirstTurn();
  struct Case {
    const char* name;
    bool reuse;
    std::string salt;
    std::vector<int32_t> prompt;
  };
  std::vector<int32_t> other = second;
  other[10] = (other[10] + 1) % kVocab;  // differs in the first page
  std::vector<int32_t> one_page(second.begin(), second.begin() + 64);  // last token computed
  for (const Case& c : {Case{"not asked", false, "", second}, Case{"salt", true, "other", second},
                        Case{"other tokens", true, "", other},
                        Case{"one page", true, "", one_page}}) {
    SCOPED_TRACE(c.name);
    ReserveSpec spec = Remote(absl::StrCat("r-", c.name), c.prompt, 4, c.reuse);
    spec.cache_salt = c.salt;
    Reservation reserved;
    std::shared_ptr<RecordingSink> s = Serve(spec, &reserved);
    EXPECT_EQ(reserved.session.cached_pages, 0);
    ASSERT_TRUE(s->finish()) << s->error();
    EXPECT_EQ(s->tokens(), FakeEngine::ExpectedTokens(c.prompt, 4, kVocab));
    EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  }
  EXPECT_EQ(Counter("mlaserve_decode_kv_pages_reused_total"), 0);
}

TEST_F(RemoteReuseTest, AWorkerWithoutAPrefixCacheReportsNone) {
  runner_.reset();  // before the engine and receiver it uses are replaced
  DecodeRunnerOptions o = SmallRunnerOptions();
  o.prefix_cache = false;
  Build(o);
  const std::vector<int32_t> prompt = Prompt(200, 5);
  std::shared_ptr<RecordingSink> s = Serve(Remote("a", prompt, 4));
  ASSERT_TRUE(s->finish()) << s->error();
  Reservation again;
  s = Serve(Remote("b", prompt, 4), &again);
  ASSERT_TRUE(s->finish()) << s->error();
  EXPECT_EQ(again.session.cached_pages, 0);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// A prefill worker that predates KvSessionRef.cached_pages ships every page: its session gets
// fresh pages for them at open, and the request is served as before.
TEST_F(RemoteReuseTest, APrefillWorkerThatShipsEveryPageIsServedFromFreshPages) {
  const std::vector<int32_t> second = FirstTurn();
  Reservation reserved;
  std::shared_ptr<RecordingSink> s =
      Serve(Remote("turn2", second, 12), &reserved, /*ship_every_page=*/true);
  EXPECT_EQ(reserved.session.cached_pages, 2);
  ASSERT_TRUE(s->finish()) << s->error();
  EXPECT_EQ(s->tokens(), FakeEngine::ExpectedTokens(second, 12, kVocab));
  EXPECT_EQ(Counter("mlaserve_decode_kv_pages_reused_total"), 0);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// The same in a pool full to its last page: the reservation's holds go back before the fresh
// pages are taken, so the cached pages only it held serve as those (a reservation without the
// cache would have taken them too) and the request is served, not refused.
TEST_F(RemoteReuseTest, APrefillWorkerThatShipsEveryPageIsServedInANearlyFullPool) {
  const std::vector<int32_t> second = FirstTurn();
  auto r = runner_->Reserve(Remote("turn2", second, 12));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->session.cached_pages, 2);
  const std::vector<int32_t> others =
      *decode_->kv_pool().Allocate(decode_->kv_pool().free_pages() - 1);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
  PrefillAndShip(*r, second, /*ship_every_page=*/true);
  RunUntilIdle();
  ASSERT_TRUE(sink->finish()) << sink->error();
  EXPECT_EQ(sink->tokens(), FakeEngine::ExpectedTokens(second, 12, kVocab));
  EXPECT_EQ(Counter("mlaserve_decode_kv_pages_reused_total"), 0);
  decode_->kv_pool().Free(others);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// Each way a reservation with cached pages ends before its KV landed releases the holds: the
// pool is whole again and the cache still holds the earlier turn (never written).
TEST_F(RemoteReuseTest, EveryFailureBeforeTheKvLandsGivesTheCachedPagesBack) {
  const std::vector<int32_t> second = FirstTurn();
  enum Case { kAbort, kCancelStream, kSenderAborts, kSenderDisagrees, kOldSenderNoRoom };
  for (Case c : {kAbort, kCancelStream, kSenderAborts, kSenderDisagrees, kOldSenderNoRoom}) {
    SCOPED_TRACE(c);
    const std::string id = absl::StrCat("turn2-", c);
    auto r = runner_->Reserve(Remote(id, second, 12));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->session.cached_pages, 2);
    EXPECT_EQ(decode_->kv_pool().free_pages(), kPages - 3);
    auto sink = std::make_shared<RecordingSink>();
    ASSERT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
    std::vector<int32_t> others;
    if (c == kAbort) {
      ASSERT_TRUE(runner_->Abort(id).ok());
    } else if (c == kCancelStream) {
      runner_->CancelStream(r->session_id);
    } else if (c == kSenderAborts) {  // the prefill worker died mid-transfer
      auto sender = *transport_.Open(r->session, layout_, {});
      sender->Abort(absl::UnavailableError("prefill worker gone"));
    } else if (c == kSenderDisagrees) {
      kvtransfer::KvSessionRef ref = r->session;
      ref.cached_pages = 1;
      auto sender = *transport_.Open(ref, layout_, {});
      EXPECT_EQ(sender->status().code(), absl::StatusCode::kFailedPrecondition);
    } else {  // an old sender while no page is free for the cached ones (held elsewhere too)
      others = decode_->kv_pool().AcquirePrefix(second, 2);
      const std::vector<int32_t> rest =
          *decode_->kv_pool().Allocate(decode_->kv_pool().free_pages());
      others.insert(others.end(), rest.begin(), rest.end());
      kvtransfer::KvSessionRef ref = r->session;
      ref.cached_pages = 0;
      auto sender = *transport_.Open(ref, layout_, {});
      EXPECT_EQ(sender->status().code(), absl::StatusCode::kResourceExhausted);
    }
    RunUntilIdle();
    if (c != kCancelStream) {
      ASSERT_TRUE(sink->ended());
      if (c == kAbort) {
        ASSERT_TRUE(sink->finish());
        EXPECT_EQ(sink->finish()->reason, FinishReason::kAbort);
      } else {
        EXPECT_FALSE(sink->error().ok());
      }
    }
    decode_->kv_pool().Free(others);
    EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
    EXPECT_EQ(decode_->kv_pool().CachedPrefixPages(second, 2), 2);
    EXPECT_EQ(runner_->load().running + runner_->load().pending, 0);
  }
  // The cache is intact: the next turn still reuses it and decodes right.
  Reservation reserved;
  std::shared_ptr<RecordingSink> s = Serve(Remote("turn2-ok", second, 12), &reserved);
  EXPECT_EQ(reserved.session.cached_pages, 2);
  ASSERT_TRUE(s->finish()) << s->error();
  EXPECT_EQ(s->tokens(), FakeEngine::ExpectedTokens(second, 12, kVocab));
}

TEST_F(RemoteReuseTest, ALeaseThatEndsUnusedGivesTheCachedPagesBack) {
  const std::vector<int32_t> second = FirstTurn();
  runner_->Start();
  ReserveSpec spec = Remote("late", second, 12);
  spec.lease = absl::Milliseconds(50);
  auto r = runner_->Reserve(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->session.cached_pages, 2);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((decode_->kv_pool().free_pages() < kPages || runner_->load().pending > 0) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  EXPECT_EQ(runner_->load().pending, 0);
  EXPECT_EQ(decode_->kv_pool().CachedPrefixPages(second, 2), 2);
  runner_->Stop();
}

TEST_F(RemoteReuseTest, StoppingWithAReservationPendingGivesTheCachedPagesBack) {
  const std::vector<int32_t> second = FirstTurn();
  auto r = runner_->Reserve(Remote("pending", second, 12));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages - 3);
  runner_->Stop();
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
  EXPECT_EQ(decode_->kv_pool().CachedPrefixPages(second, 2), 2);
}

// Room: the cached pages an earlier request left free cost the reservation free pages (it
// takes them), so a pool too full for the whole prompt refuses it with or without reuse, and
// the refusal leaves every hold where it was.
TEST_F(RemoteReuseTest, ARefusedReservationTakesNothing) {
  const std::vector<int32_t> second = FirstTurn();
  const std::vector<int32_t> others = *decode_->kv_pool().Allocate(kPages - 2);  // 2 free
  auto r = runner_->Reserve(Remote("big", second, 12));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(decode_->kv_pool().free_pages(), 2);
  EXPECT_EQ(decode_->kv_pool().CachedPrefixPages(second, 2), 2);
  decode_->kv_pool().Free(others);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// Data-parallel attention: each rank's pool has its own cache, and the next turn goes to the
// rank that holds the earlier one (not the load order's), where it keeps its pages.
TEST_F(RemoteReuseTest, OnDataParallelRanksTheNextTurnGoesToTheRankHoldingTheEarlierOne) {
  runner_.reset();
  Build(SmallRunnerOptions(), /*data_ranks=*/2);
  // A pending request on rank 0 sends the first turn to rank 1.
  auto busy = runner_->Reserve(Remote("busy", Prompt(10, 9), 4));
  ASSERT_TRUE(busy.ok()) << busy.status();
  ASSERT_EQ(busy->rank, 0);
  const std::vector<int32_t> first = Prompt(100, 3);
  Reservation r1;
  std::shared_ptr<RecordingSink> s1 = Serve(Remote("turn1", first, 40), &r1);
  ASSERT_TRUE(s1->finish()) << s1->error();
  ASSERT_EQ(r1.rank, 1);
  ASSERT_TRUE(runner_->Abort("busy").ok());
  RunUntilIdle();
  EXPECT_EQ(decode_->rank_pool(0).free_pages(), kPages);
  EXPECT_EQ(decode_->rank_pool(1).cached_pages(), 2);
  // Both ranks idle with every page free: by load the tie goes to rank 0.
  std::vector<int32_t> second = first;
  const std::vector<int32_t> answer = s1->tokens();
  second.insert(second.end(), answer.begin(), answer.end());
  for (int32_t t : Prompt(30, 11)) second.push_back(t);
  Reservation r2;
  std::shared_ptr<RecordingSink> s2 = Serve(Remote("turn2", second, 12), &r2);
  EXPECT_EQ(r2.rank, 1);
  EXPECT_EQ(r2.session.rank, 1);
  EXPECT_EQ(r2.session.cached_pages, 2);
  ASSERT_TRUE(s2->finish()) << s2->error();
  EXPECT_EQ(s2->tokens(), FakeEngine::ExpectedTokens(second, 12, kVocab));
  // Without reuse nothing favours rank 1: the load order's rank 0.
  Reservation r3;
  std::shared_ptr<RecordingSink> s3 = Serve(Remote("turn2-again", second, 12, false), &r3);
  EXPECT_EQ(r3.rank, 0);
  EXPECT_EQ(r3.session.cached_pages, 0);
  ASSERT_TRUE(s3->finish()) << s3->error();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(decode_->rank_pool(r).free_pages(), kPages) << r;
}

}  // namespace
}  // namespace mlaserve::decode
