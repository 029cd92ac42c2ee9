#include "router/admission_queue.h"

#include <atomic>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

using ::testing::ElementsAre;

// A waiting call: fits once `room` is true; ends itself at `deadline`.
struct FakeWaiter : AdmissionQueue::Waiter {
  FakeWaiter(std::string n, std::vector<std::string>* log, absl::Time d)
      : name(std::move(n)), events(log), deadline(d) {}
  Outcome RetryAdmission(absl::Time now) override {
    events->push_back("try " + name);
    if (ended) return Outcome::kEnded;
    if (room) {
      events->push_back("admit " + name);
      if (on_admit) on_admit();
      return Outcome::kAdmitted;
    }
    if (now >= deadline) {
      ended = true;
      events->push_back("expire " + name);
      return Outcome::kEnded;
    }
    return Outcome::kStillWaiting;
  }
  bool ExpireIfDue(absl::Time now) override {
    if (!ended && now >= deadline) {
      ended = true;
      events->push_back("expire " + name);
    }
    return ended;
  }
  absl::Time queue_deadline() const override { return deadline; }

  std::string name;
  std::vector<std::string>* events;
  absl::Time deadline;
  bool room = false;
  bool ended = false;
  std::function<void()> on_admit;
};

// The queue holds a reference to each waiter while it waits: the test's own, plus the queue's.
std::shared_ptr<FakeWaiter> Waiter(std::string name, std::vector<std::string>* log,
                                   absl::Time deadline) {
  return std::make_shared<FakeWaiter>(std::move(name), log, deadline);
}

TEST(AdmissionQueue, OldestFirstAndNewerOnesWaitBehindOneThatDoesNotFit) {
  std::vector<std::string> log;
  const absl::Time later = absl::Now() + absl::Hours(1);
  auto a = Waiter("a", &log, later), b = Waiter("b", &log, later), c = Waiter("c", &log, later);
  AdmissionQueue q;
  q.Add(a);
  q.Add(b);
  q.Add(c);
  EXPECT_EQ(a.use_count(), 2);
  c->room = true;  // c would fit, but a (older) does not: nobody passes a
  q.Kick();
  EXPECT_THAT(log, ElementsAre("try a"));
  EXPECT_EQ(q.size(), 3);
  log.clear();
  a->room = true;
  b->room = true;
  q.Kick();
  EXPECT_THAT(log, ElementsAre("try a", "admit a", "try b", "admit b", "try c", "admit c"));
  EXPECT_EQ(q.size(), 0);
  EXPECT_EQ(a.use_count() + b.use_count() + c.use_count(), 3);  // the queue let go
}

TEST(AdmissionQueue, WaitersPastTheirDeadlineEndEvenBehindABlockedOne) {
  std::vector<std::string> log;
  auto a = Waiter("a", &log, absl::Now() + absl::Hours(1));
  auto b = Waiter("b", &log, absl::InfinitePast());
  {
    AdmissionQueue q;
    q.Add(a);
    q.Add(b);
    // b's deadline has passed, so the queue's own deadline thread may kick at the same time
    // as this one (the rounds are serialized; either may be first).
    q.Kick();
    EXPECT_TRUE(q.AwaitSize(1, absl::Seconds(10)));
    EXPECT_EQ(b.use_count(), 1);
  }  // joins the deadline thread: nothing touches `log` after this
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[0], "try a");
  EXPECT_EQ(log[1], "expire b");
  for (size_t i = 2; i < log.size(); ++i) EXPECT_EQ(log[i], "try a") << "entry " << i;
}

TEST(AdmissionQueue, AKickDuringAKickRunsAnotherRoundAndArrivalsQueueBehind) {
  std::vector<std::string> log;
  const absl::Time later = absl::Now() + absl::Hours(1);
  auto a = Waiter("a", &log, later), b = Waiter("b", &log, later);
  auto late = Waiter("late", &log, later);
  AdmissionQueue q;
  q.Add(a);
  q.Add(b);
  a->room = true;
  // Admitting a frees room for b (and a newcomer arrives): the nested Kick must not recurse
  // but make the running one go round again.
  a->on_admit = [&] {
    b->room = true;
    late->room = true;
    q.Add(late);
    q.Kick();
  };
  q.Kick();
  EXPECT_THAT(log, ElementsAre("try a", "admit a", "try b", "admit b", "try late", "admit late"));
  EXPECT_EQ(q.size(), 0);
}

}  // namespace
}  // namespace mlaserve::router
