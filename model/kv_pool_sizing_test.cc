#include "model/kv_pool_sizing.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "parallel/rank_rendezvous.h"

namespace mlaserve::model {
namespace {

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMiB = size_t{1} << 20;
constexpr int64_t kNoCap = int64_t{1} << 40;

TEST(KvPagesForMemoryTest, TakesTheFractionOfTheTotalLessWhatIsInUse) {
  // 80 GiB device, 32 GiB in use (the weights): 0.85 * 80 - 32 = 36 GiB for 2 MiB pages.
  const DeviceMemoryInfo m{80 * kGiB, 48 * kGiB};
  absl::StatusOr<int> pages = KvPagesForMemory(m, 0.85, 2 * kMiB, 129, kNoCap);
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(*pages, 18432);
  // A page that does not divide the budget: whole pages only.
  pages = KvPagesForMemory(m, 0.85, 3 * kMiB, 129, kNoCap);
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(*pages, 12288);
  EXPECT_EQ(*KvPagesForMemory(m, 1.0, 2 * kMiB, 1, kNoCap), 24576);  // all that is free
}

TEST(KvPagesForMemoryTest, OtherProcessesMemoryCountsAsTaken) {
  // A second worker on the same device sees the first one's weights and pool as used.
  const DeviceMemoryInfo alone{80 * kGiB, 48 * kGiB};
  const DeviceMemoryInfo shared{80 * kGiB, 20 * kGiB};
  EXPECT_GT(*KvPagesForMemory(alone, 0.9, 2 * kMiB, 1, kNoCap), *KvPagesForMemory(shared, 0.9, 2 * kMiB, 1, kNoCap));
  EXPECT_EQ(*KvPagesForMemory(shared, 0.9, 2 * kMiB, 1, kNoCap), 6144);  // 72 - 60 GiB
}

TEST(KvPagesForMemoryTest, TooLittleLeftIsResourceExhaustedNamingTheNumbers) {
  const DeviceMemoryInfo m{80 * kGiB, 10 * kGiB};  // 70 GiB used, 0.85 allows 68
  absl::StatusOr<int> pages = KvPagesForMemory(m, 0.85, 2 * kMiB, 129, kNoCap);
  ASSERT_EQ(pages.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(pages.status().message());
  EXPECT_NE(msg.find("--mem-fraction-static 0.85"), std::string::npos) << msg;
  EXPECT_NE(msg.find("80.00 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("70.00 GiB in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-2.00 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0 pages"), std::string::npos) << msg;
  EXPECT_NE(msg.find("129"), std::string::npos) << msg;
  // Some pages fit, but fewer than one batch needs.
  const DeviceMemoryInfo tight{80 * kGiB, 12 * kGiB + 100 * kMiB};
  pages = KvPagesForMemory(tight, 0.85, 2 * kMiB, 129, kNoCap);
  ASSERT_EQ(pages.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(pages.status().message()).find("50 pages"), std::string::npos)
      << pages.status();
}

TEST(KvPagesForMemoryTest, RefusesAFractionOutsideZeroToOne) {
  const DeviceMemoryInfo m{80 * kGiB, 48 * kGiB};
  for (double f : {0.0, -0.5, 1.01, std::numeric_limits<double>::quiet_NaN()}) {
    absl::StatusOr<int> pages = KvPagesForMemory(m, f, 2 * kMiB, 1, kNoCap);
    EXPECT_EQ(pages.status().code(), absl::StatusCode::kInvalidArgument) << f;
    EXPECT_NE(std::string(pages.status().message()).find("--mem-fraction-static"), std::string::npos);
  }
  EXPECT_EQ(KvPagesForMemory(m, 0.5, 0, 1, kNoCap).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvPagesForMemoryTest, NoMorePagesThanTheEngineCanHold) {
  // A small model on a large GPU: every sequence of a batch at the longest context, no more.
  const DeviceMemoryInfo m{80 * kGiB, 79 * kGiB};
  EXPECT_EQ(*KvPagesForMemory(m, 0.85, 20 * 1024, 129, 256 * 32 + 1), 256 * 32 + 1);
  // A cap below the minimum still gives the minimum when it fits.
  EXPECT_EQ(*KvPagesForMemory(m, 0.85, 20 * 1024, 129, 64), 129);
}

TEST(KvPagesForMemoryTest, PageIdsStayInt32) {
  const DeviceMemoryInfo huge{size_t{1} << 62, size_t{1} << 62};
  EXPECT_EQ(*KvPagesForMemory(huge, 1.0, 64, 1, kNoCap), std::numeric_limits<int32_t>::max() - 1);
}

std::shared_ptr<parallel::RankRendezvous> Ranks(int n, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<parallel::RankRendezvous>> r =
      parallel::RankRendezvous::Create(n, timeout, "KV pool size");
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(AgreeOnFewestPagesTest, EveryRankGetsTheSmallestOffer) {
  std::shared_ptr<parallel::RankRendezvous> ranks = Ranks(4, absl::Seconds(30));
  std::vector<absl::StatusOr<int>> got(4, absl::UnknownError("unset"));
  std::vector<std::thread> threads;
  const int offers[4] = {900, 700, 1200, 800};
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] { got[r] = AgreeOnFewestPages(*ranks, r, offers[r]); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    EXPECT_EQ(*got[r], 700);
  }
}

TEST(AgreeOnFewestPagesTest, ARankThatFailsReleasesTheOthers) {
  std::shared_ptr<parallel::RankRendezvous> ranks = Ranks(3, absl::Seconds(60));
  std::vector<absl::StatusOr<int>> got(2, absl::UnknownError("unset"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { got[r] = AgreeOnFewestPages(*ranks, r, 100); });
  ranks->Abort(2);  // what ParallelEngine::Create does for a rank whose engine failed
  for (std::thread& t : threads) t.join();
  for (const absl::StatusOr<int>& g : got) {
    ASSERT_EQ(g.status().code(), absl::StatusCode::kAborted) << g.status();
    EXPECT_NE(std::string(g.status().message()).find("aborted by rank 2"), std::string::npos);
  }
}

TEST(AgreeOnFewestPagesTest, AbortAfterEveryRankOfferedChangesNothing) {
  std::shared_ptr<parallel::RankRendezvous> ranks = Ranks(2, absl::Seconds(30));
  absl::StatusOr<int> other = absl::UnknownError("unset");
  std::thread t([&] { other = AgreeOnFewestPages(*ranks, 1, 5); });
  absl::StatusOr<int> mine = AgreeOnFewestPages(*ranks, 0, 9);
  t.join();
  ranks->Abort(0);
  ASSERT_TRUE(mine.ok() && other.ok());
  EXPECT_EQ(*mine, 5);
  EXPECT_EQ(*other, 5);
}

TEST(AgreeOnFewestPagesTest, AMissingRankEndsAtTheDeadline) {
  std::shared_ptr<parallel::RankRendezvous> ranks = Ranks(2, absl::Milliseconds(50));
  absl::StatusOr<int> got = AgreeOnFewestPages(*ranks, 0, 10);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(std::string(got.status().message()).find("for the other 1 of 2 ranks"), std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace mlaserve::model
