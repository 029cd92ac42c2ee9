// RankRendezvous::PostTogether, the rule NCCL ranks on threads of one process enqueue their
// collectives by (rank_rendezvous.h), against a host model of what NCCL does on the GPUs: an
// operation a rank enqueued completes once every rank has enqueued it, and a rank waiting for
// its device waits for all it enqueued to complete. Meet (the fake's rule) is tested through the
// fake collective (fake_collective_test.cc).
#include "parallel/rank_rendezvous.h"

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace mlaserve::parallel {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(20);  // a deadlock fails, it does not hang

// Runs body(rank) on one thread per rank; returns every rank's status.
std::vector<absl::Status> OnRanks(int n, const std::function<absl::Status(int)>& body) {
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { status[r] = body(r); });
  for (std::thread& t : threads) t.join();
  return status;
}

CollectiveCall Gather(int64_t count) {
  CollectiveCall c;
  c.op = CollectiveOp::kAllGather;
  c.count = count;
  c.dtype = kernels::DType::kBF16;
  return c;
}

// The GPUs of the ranks, as NCCL leaves them: Enqueue is an NCCL call's return (the kernel is
// on the stream, nothing moved), WaitIdle a rank's wait for its device (a stream sync, a copy
// to pageable memory, or the driver loading a kernel's module once the device is idle).
class Devices {
 public:
  explicit Devices(int ranks) : enqueued_(ranks, 0) {}

  void Enqueue(int rank) {
    absl::MutexLock l(&mu_);
    ++enqueued_[rank];
  }
  // Whether every operation `rank` enqueued completed (every rank enqueued it) by `timeout`.
  bool WaitIdle(int rank, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto idle = [this, rank]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (int64_t e : enqueued_) {
        if (e < enqueued_[rank]) return false;
      }
      return true;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }
  int64_t enqueued(int rank) {
    absl::MutexLock l(&mu_);
    return enqueued_[rank];
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> enqueued_ ABSL_GUARDED_BY(mu_);
};

class PostTogetherTest : public ::testing::TestWithParam<int> {};

// What hung the 2-GPU engine: each rank's step takes a lock every rank's thread shares (a GEMM
// library's plan cache) and, holding it, waits for its device (the kernel's first launch loads
// its module once the device is idle); then it enqueues the layer's collective. Had a rank
// returned from its enqueue alone (NCCL's own rule), it could take the lock and wait for its
// device while a slower rank, not yet at that collective, waited for the lock: no device would
// ever be idle. Enqueued together, a rank's device can always become idle.
TEST_P(PostTogetherTest, ALockHeldAcrossADeviceWaitCannotDeadlockTheRanks) {
  const int n = GetParam();
  constexpr int kOps = 200;
  auto group = RankRendezvous::Create(n, kTimeout, "test");
  ASSERT_TRUE(group.ok()) << group.status();
  Devices devices(n);
  absl::Mutex library;  // shared by every rank's thread
  auto st = OnRanks(n, [&](int r) -> absl::Status {
    for (int k = 0; k < kOps; ++k) {
      {
        absl::MutexLock l(&library);
        if (!devices.WaitIdle(r, kTimeout)) {
          return absl::DeadlineExceededError(absl::StrCat("rank ", r, "'s device never became "
                                                          "idle before operation ", k));
        }
      }
      absl::Status s = (*group)->PostTogether(r, Gather(64), [&] {
        devices.Enqueue(r);
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(devices.enqueued(r), kOps);
  }
}

// The two meetings: no rank enqueues an operation before every rank arrived at it, and no rank
// returns from it before every rank enqueued it.
TEST_P(PostTogetherTest, EveryRankArrivesBeforeAnyEnqueuesAndEnqueuesBeforeAnyReturns) {
  const int n = GetParam();
  constexpr int kOps = 100;
  auto group = RankRendezvous::Create(n, kTimeout, "test");
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<std::atomic<int>> arrived(kOps), enqueued(kOps);
  std::atomic<int> early_enqueues = 0, early_returns = 0;
  auto st = OnRanks(n, [&](int r) -> absl::Status {
    for (int k = 0; k < kOps; ++k) {
      ++arrived[k];
      absl::Status s = (*group)->PostTogether(r, Gather(k), [&] {
        if (arrived[k].load() != n) ++early_enqueues;
        ++enqueued[k];
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
      if (enqueued[k].load() != n) ++early_returns;
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  EXPECT_EQ(early_enqueues.load(), 0);
  EXPECT_EQ(early_returns.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PostTogetherTest, ::testing::Values(1, 2, 4));

// A rank calling another count (or operation, or dtype) fails every rank before anything is
// enqueued: on NCCL the mismatch would otherwise hang the devices or move wrong bytes.
TEST(PostTogether, MismatchedCallsEnqueueNothingAndFailEveryRankNamingBoth) {
  auto group = RankRendezvous::Create(2, kTimeout, "nccl collective");
  ASSERT_TRUE(group.ok());
  std::atomic<int> enqueues = 0;
  auto st = OnRanks(2, [&](int r) {
    return (*group)->PostTogether(r, Gather(r == 0 ? 4 : 8), [&] {
      ++enqueues;
      return absl::OkStatus();
    });
  });
  EXPECT_EQ(enqueues.load(), 0);
  for (const absl::Status& s : st) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find("nccl collective: rank 0 called AllGather of 4 bf16 while rank 1 "
                               "called AllGather of 8 bf16"),
              std::string::npos)
        << s;
  }
}

// A rank whose enqueue fails releases the others from the second meeting (they abort their
// communicators, NcclCollective::Fail) and the group stays failed.
TEST(PostTogether, AFailedEnqueueReleasesTheOthersAndSticks) {
  auto group = RankRendezvous::Create(3, kTimeout, "nccl collective");
  ASSERT_TRUE(group.ok());
  auto st = OnRanks(3, [&](int r) {
    return (*group)->PostTogether(r, Gather(16), [r] {
      return r == 1 ? absl::UnavailableError("peer gone") : absl::OkStatus();
    });
  });
  EXPECT_EQ(st[1].code(), absl::StatusCode::kUnavailable) << st[1];
  for (int r : {0, 2}) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kAborted) << st[r];
    EXPECT_NE(st[r].message().find("aborted by rank 1"), std::string::npos) << st[r];
  }
  absl::Status again = (*group)->PostTogether(0, Gather(16), [] { return absl::OkStatus(); });
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted) << again;
}

// A rank that never enqueues its side fails the others by the deadline, naming the meeting.
TEST(PostTogether, AMissingRankFailsTheOthersByTheDeadline) {
  auto group = RankRendezvous::Create(3, absl::Milliseconds(50), "nccl collective");
  ASSERT_TRUE(group.ok());
  auto st = OnRanks(3, [&](int r) {
    if (r == 2) return absl::OkStatus();  // never arrives
    return (*group)->PostTogether(r, Gather(16), [] { return absl::OkStatus(); });
  });
  for (int r : {0, 1}) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kDeadlineExceeded) << st[r];
    EXPECT_NE(st[r].message().find("in AllGather"), std::string::npos) << st[r];
  }
}

TEST(RankRendezvous, RefusesAnEmptyGroup) {
  EXPECT_EQ(RankRendezvous::Create(0, kTimeout, "test").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::parallel
