// KvShipper with recording senders: each request's runs reach its sender in order with the
// right bytes, its completion after them with the bytes it was sent; a full staging ring
// refuses within the deadline; a read that cannot start fails only its layer; Stop answers
// queued completions.
#include "kvtransfer/kv_shipper.h"

#include <map>
#include <numeric>
#include <optional>
#include <thread>
#include <random>
#include <string>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer {
namespace {

using ::testing::HasSubstr;

// Records what it is handed; optionally blocks in SendPages until released.
class RecordingSender final : public KvSender {
 public:
  struct Call {
    int layer, first, n;
    std::string bytes;
  };
  absl::Status SendPage(int layer, int page_index, std::string payload) override {
    return SendPages(layer, page_index, 1,
                     {reinterpret_cast<const uint8_t*>(payload.data()), payload.size()});
  }
  absl::Status SendPages(int layer, int first, int n, std::span<const uint8_t> bytes) override {
    if (block_ != nullptr) block_->WaitForNotificationWithTimeout(absl::Seconds(10));
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    calls_.push_back({layer, first, n, std::string(bytes.begin(), bytes.end())});
    sent_ += static_cast<int64_t>(bytes.size());
    if (fail_after_ >= 0 && static_cast<int>(calls_.size()) >= fail_after_) {
      failure_ = absl::UnavailableError("stream broke");
    }
    return absl::OkStatus();
  }
  void Complete(const KvCompletion& c, std::function<void(absl::Status)> done) override {
    absl::Status s;
    {
      absl::MutexLock lock(&mu_);
      completion_ = c;
      completed_after_ = static_cast<int>(calls_.size());
      s = failure_;
    }
    done(s);
  }
  void Abort(const absl::Status& reason) override {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = reason;
  }
  absl::Status status() const override {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  int64_t bytes_sent() const override {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::optional<KvCompletion> completion() const {
    absl::MutexLock lock(&mu_);
    return completion_;
  }
  int completed_after() const {
    absl::MutexLock lock(&mu_);
    return completed_after_;
  }
  absl::Notification* block_ = nullptr;
  int fail_after_ = -1;

 private:
  mutable absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::optional<KvCompletion> completion_ ABSL_GUARDED_BY(mu_);
  int completed_after_ ABSL_GUARDED_BY(mu_) = -1;
};

class KvShipperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = testing::SmallPoolOptions(64, 4);
    pool_ = testing::MakePool(options_);
    ASSERT_NE(pool_, nullptr);
    // Every page of every layer random.
    for (int l = 0; l < options_.num_layers; ++l) {
      for (int32_t p = 0; p < options_.num_pages; ++p) {
        ASSERT_TRUE(pool_->WritePage(l, p, testing::RandomBytes(pool_->layer_page_bytes(), rng_).data()).ok());
      }
    }
  }
  std::string PagesOf(int layer, const std::vector<int32_t>& ids) {
    std::string s(ids.size() * pool_->layer_page_bytes(), '\0');
    EXPECT_TRUE(pool_->ReadPages(layer, ids, s.data()).ok());
    return s;
  }

  model::KvPoolOptions options_;
  std::unique_ptr<model::KvPool> pool_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(KvShipperTest, RunsReachTheirSendersInOrderAndCompletionsFollow) {
  KvShipper shipper(pool_.get(), nullptr, {.num_slots = 2, .num_threads = 3});
  // Five requests, two steps: the first step ships pages [0, 2) of each, the second [1, 4)
  // (page 1 again: the chunk boundary inside it). Page ids scattered over the pool.
  constexpr int kRequests = 5;
  std::vector<std::shared_ptr<RecordingSender>> senders;
  std::vector<std::vector<int32_t>> ids(kRequests);
  std::vector<int32_t> all(options_.num_pages);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng_);
  for (int r = 0; r < kRequests; ++r) {
    senders.push_back(std::make_shared<RecordingSender>());
    ids[r].assign(all.begin() + r * 4, all.begin() + r * 4 + 4);
  }
  for (auto [first, last] : {std::pair{0, 2}, std::pair{1, 4}}) {
    for (int l = 0; l < options_.num_layers; ++l) {
      std::vector<KvShipRun> runs;
      for (int r = 0; r < kRequests; ++r) {
        runs.push_back({senders[r], first,
                        std::vector<int32_t>(ids[r].begin() + first, ids[r].begin() + last)});
      }
      ASSERT_TRUE(shipper.ShipLayer(l, std::move(runs)).ok());
    }
    ASSERT_TRUE(shipper.WaitCopies(absl::Now() + absl::Seconds(10)).ok());
  }
  std::vector<testing::Verdict> verdicts(kRequests);
  for (int r = 0; r < kRequests; ++r) {
    shipper.Complete(senders[r], KvCompletion{r, options_.num_layers, 4, -1}, verdicts[r].fn());
  }
  for (auto& v : verdicts) {
    ASSERT_TRUE(v.Wait());
    EXPECT_TRUE(v.status.ok()) << v.status;
  }
  ASSERT_TRUE(shipper.Flush(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(shipper.pages_shipped(), int64_t{kRequests} * options_.num_layers * 5);
  for (int r = 0; r < kRequests; ++r) {
    const auto calls = senders[r]->calls();
    ASSERT_EQ(calls.size(), size_t(2 * options_.num_layers)) << "request " << r;
    for (int l = 0; l < options_.num_layers; ++l) {
      const auto& a = calls[l];
      const auto& b = calls[options_.num_layers + l];
      EXPECT_EQ(std::tuple(a.layer, a.first, a.n), std::tuple(l, 0, 2));
      EXPECT_EQ(std::tuple(b.layer, b.first, b.n), std::tuple(l, 1, 3));
      EXPECT_EQ(a.bytes, PagesOf(l, {ids[r][0], ids[r][1]})) << "request " << r << " layer " << l;
      EXPECT_EQ(b.bytes, PagesOf(l, {ids[r][1], ids[r][2], ids[r][3]}));
    }
    // The completion came last, with the bytes sent filled in.
    EXPECT_EQ(senders[r]->completed_after(), 2 * options_.num_layers);
    ASSERT_TRUE(senders[r]->completion().has_value());
    EXPECT_EQ(senders[r]->completion()->total_bytes,
              int64_t{options_.num_layers} * 5 * int64_t(pool_->layer_page_bytes()));
    EXPECT_EQ(senders[r]->completion()->first_token, r);
  }
}

// A layer larger than a slot (a prompt's cached prefix shipped with its first chunk) goes
// through several slots: each sender gets its pages in order, cut at slot boundaries.
TEST_F(KvShipperTest, ALayerLargerThanASlotIsCutIntoSlotsInOrder) {
  KvShipper shipper(pool_.get(), nullptr, {.num_slots = 2, .num_threads = 2, .max_slot_pages = 3});
  auto a = std::make_shared<RecordingSender>(), b = std::make_shared<RecordingSender>();
  std::vector<int32_t> all(options_.num_pages);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng_);
  const std::vector<int32_t> ia(all.begin(), all.begin() + 10), ib(all.begin() + 10, all.begin() + 14);
  ASSERT_TRUE(shipper.ShipLayer(1, {{a, 5, ia}, {b, 0, ib}}).ok());
  ASSERT_TRUE(shipper.WaitCopies(absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(shipper.Flush(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(shipper.pages_shipped(), 14);
  // a: slots [a0 a1 a2] [a3 a4 a5] [a6 a7 a8] [a9 b0 b1] [b2 b3].
  auto expect = [&](const RecordingSender& s, const std::vector<int32_t>& ids, int first,
                    const std::vector<int>& cuts) {
    const auto calls = s.calls();
    ASSERT_EQ(calls.size(), cuts.size());
    int at = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(std::tuple(calls[i].layer, calls[i].first, calls[i].n),
                std::tuple(1, first + at, cuts[i]));
      EXPECT_EQ(calls[i].bytes,
                PagesOf(1, std::vector<int32_t>(ids.begin() + at, ids.begin() + at + cuts[i])));
      at += cuts[i];
    }
  };
  expect(*a, ia, 5, {3, 3, 3, 1});
  expect(*b, ib, 0, {2, 2});
}

// A sender that takes nothing holds its slot; with every slot held, ShipLayer gives up at the
// no-progress deadline instead of stalling the forward for good.
TEST_F(KvShipperTest, FullStagingRingIsRefusedAtTheDeadline) {
  KvShipper shipper(pool_.get(), nullptr,
                    {.num_slots = 1, .num_threads = 1,
                     .no_progress_timeout = absl::Milliseconds(200)});
  absl::Notification release;
  auto stuck = std::make_shared<RecordingSender>();
  stuck->block_ = &release;
  ASSERT_TRUE(shipper.ShipLayer(0, {{stuck, 0, {1, 2}}}).ok());
  const absl::Time start = absl::Now();
  const absl::Status s = shipper.ShipLayer(1, {{stuck, 0, {1, 2}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("no staging slot came free"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  release.Notify();
  ASSERT_TRUE(shipper.Flush(absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(shipper.ShipLayer(1, {{stuck, 0, {1, 2}}}).ok());  // the slot is free again
  ASSERT_TRUE(shipper.Flush(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(stuck->calls().size(), 2u);
}

TEST_F(KvShipperTest, BadPageIdsFailOnlyThatLayerAndFailedSendersAreSkipped) {
  KvShipper shipper(pool_.get(), nullptr, {.num_slots = 2, .num_threads = 2});
  auto good = std::make_shared<RecordingSender>();
  auto broken = std::make_shared<RecordingSender>();
  broken->fail_after_ = 1;  // its stream breaks after the first run
  const absl::Status s = shipper.ShipLayer(0, {{good, 0, {3}}, {broken, 0, {64}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("page 64"));
  for (int l = 0; l < options_.num_layers; ++l) {
    ASSERT_TRUE(shipper.ShipLayer(l, {{good, 0, {3}}, {broken, 0, {4}}}).ok());
  }
  testing::Verdict good_done, broken_done;
  shipper.Complete(good, KvCompletion{1, options_.num_layers, 1, 0}, good_done.fn());
  shipper.Complete(broken, KvCompletion{1, options_.num_layers, 1, 0}, broken_done.fn());
  ASSERT_TRUE(good_done.Wait());
  ASSERT_TRUE(broken_done.Wait());
  EXPECT_TRUE(good_done.status.ok());
  EXPECT_EQ(broken_done.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(good->calls().size(), size_t(options_.num_layers));
  EXPECT_EQ(broken->calls().size(), 1u);  // nothing more was handed to a failed sender
}

TEST_F(KvShipperTest, StopAnswersQueuedCompletions) {
  auto shipper = std::make_unique<KvShipper>(pool_.get(), nullptr,
                                             KvShipperOptions{.num_slots = 2, .num_threads = 1});
  absl::Notification release;
  auto stuck = std::make_shared<RecordingSender>();
  stuck->block_ = &release;
  ASSERT_TRUE(shipper->ShipLayer(0, {{stuck, 0, {1}}}).ok());
  testing::Verdict verdict;
  shipper->Complete(stuck, KvCompletion{1, 1, 1, 0}, verdict.fn());
  std::thread stopper([&] { shipper->Stop(); });
  release.Notify();  // the running job finishes; the queued completion is answered once,
  stopper.join();    // by the shipping thread (OK) if it got there before the stop, else by Stop
  ASSERT_TRUE(verdict.Wait());
  EXPECT_TRUE(verdict.status.ok() || verdict.status.code() == absl::StatusCode::kUnavailable)
      << verdict.status;
  testing::Verdict late;
  shipper->Complete(stuck, KvCompletion{1, 1, 1, 0}, late.fn());
  ASSERT_TRUE(late.Wait());
  EXPECT_EQ(late.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shipper->ShipLayer(0, {{stuck, 0, {1}}}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mlaserve::kvtransfer
