// SelfOwned: the object lives until its terminal event and its last holder, whichever is
// later, and a cancellation racing with holders never frees it early. The race test is meant
// to run under AddressSanitizer too (docs/serving.md, "Lifetime of asynchronous objects").
#include "common/self_owned.h"

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

std::atomic<int> live{0};

// A stand-in for a stream reactor: a producer pushes into it while its driver may cancel and
// then end it (OnCancel, then OnDone), as gRPC does.
class FakeStream final : public SelfOwned<FakeStream> {
 public:
  FakeStream() { ++live; }
  ~FakeStream() { --live; }

  // From a producer holding a reference: ignored once cancelled or done.
  bool Push() {
    absl::MutexLock lock(&mu_);
    if (cancelled_ || done_) return false;
    ++pushed_;
    return true;
  }
  void OnCancel() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  void OnDone() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    ReleaseSelf();
  }
  std::shared_ptr<FakeStream> Ref() { return SelfRef(); }
  int pushed() {
    absl::MutexLock lock(&mu_);
    return pushed_;
  }

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  int pushed_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(SelfOwned, LivesUntilItsTerminalEventWhenNobodyElseHoldsIt) {
  FakeStream* stream = nullptr;
  {
    auto created = MakeSelfOwned<FakeStream>();
    stream = created.get();
  }
  EXPECT_EQ(live.load(), 1);  // the creator's reference is gone; the self-reference holds it
  EXPECT_TRUE(stream->Push());
  stream->OnDone();
  EXPECT_EQ(live.load(), 0);
}

TEST(SelfOwned, TheLastHolderAfterTheTerminalEventDestroysIt) {
  std::shared_ptr<FakeStream> producer;
  {
    auto created = MakeSelfOwned<FakeStream>();
    producer = created->Ref();
    created->OnCancel();
    created->OnDone();
  }
  EXPECT_EQ(live.load(), 1);       // the producer still holds it
  EXPECT_FALSE(producer->Push());  // ended: the late push is ignored, not a use-after-free
  producer.reset();
  EXPECT_EQ(live.load(), 0);
}

TEST(SelfOwned, ReleasingTwiceIsHarmless) {
  auto created = MakeSelfOwned<FakeStream>();
  FakeStream* stream = created.get();
  stream->OnDone();
  stream->OnDone();  // `created` still holds it
  EXPECT_EQ(live.load(), 1);
  created.reset();
  EXPECT_EQ(live.load(), 0);
}

// Many streams, each with producers pushing from their own threads while the driver cancels
// and ends it at a random moment: every stream is destroyed exactly once, after the last push
// returned, on whichever thread let go last.
TEST(SelfOwned, CancellationRacingWithProducersNeverFreesEarly) {
  constexpr int kStreams = 300;
  constexpr int kProducers = 3;
  std::mt19937 rng(12345);
  for (int i = 0; i < kStreams; ++i) {
    std::shared_ptr<FakeStream> created = MakeSelfOwned<FakeStream>();
    FakeStream* stream = created.get();
    std::vector<std::thread> producers;
    std::atomic<bool> go{false};
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([ref = stream->Ref(), &go]() mutable {
        while (!go.load()) std::this_thread::yield();
        while (ref->Push()) std::this_thread::yield();
        ref.reset();  // may be the last reference
      });
    }
    created.reset();
    const int spins = std::uniform_int_distribution<int>(0, 200)(rng);
    go.store(true);
    for (int s = 0; s < spins; ++s) std::this_thread::yield();
    stream->OnCancel();
    stream->OnDone();  // `stream` may be gone from here on
    for (auto& t : producers) t.join();
    ASSERT_EQ(live.load(), 0) << "stream " << i;
  }
}

}  // namespace
}  // namespace mlaserve::common
