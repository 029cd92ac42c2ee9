#include "parallel/fake_collective.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/common/numeric.h"

namespace mlaserve::parallel {
namespace {

using kernels::DType;

// Runs body(rank, comm) on one thread per rank; returns every rank's status.
std::vector<absl::Status> OnRanks(int n, const std::function<absl::Status(int, Collective&)>& body,
                                  absl::Duration timeout = absl::Seconds(30)) {
  auto group = FakeCollectiveGroup::Create(n, timeout);
  EXPECT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { status[r] = body(r, *(*group)[r]); });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

class FakeCollectiveTest : public ::testing::TestWithParam<int> {};

TEST_P(FakeCollectiveTest, AllReduceSumsInPlaceAndOutOfPlace) {
  const int n = GetParam();
  std::vector<std::vector<float>> out(n);
  auto st = OnRanks(n, [&](int r, Collective& c) -> absl::Status {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), n);
    std::vector<float> v = {1.0f * r, 10.0f + r, -2.0f};
    std::vector<float> sum(3);
    if (absl::Status s = c.AllReduceSum(v.data(), sum.data(), 3, DType::kF32, nullptr); !s.ok()) return s;
    if (absl::Status s = c.AllReduceSum(v.data(), v.data(), 3, DType::kF32, nullptr); !s.ok()) return s;
    EXPECT_EQ(v, sum);
    out[r] = sum;
    return absl::OkStatus();
  });
  const float ranks = n * (n - 1) / 2.0f;
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(out[r], (std::vector<float>{ranks, 10.0f * n + ranks, -2.0f * n}));
  }
}

TEST_P(FakeCollectiveTest, AllGatherAndReduceScatterInverse) {
  const int n = GetParam();
  constexpr int kCount = 5;
  std::vector<std::vector<int32_t>> gathered(n), scattered(n);
  auto st = OnRanks(n, [&](int r, Collective& c) -> absl::Status {
    // In place: the rank's part already sits at its slot of recv.
    gathered[r].assign(static_cast<size_t>(n) * kCount, -1);
    for (int i = 0; i < kCount; ++i) gathered[r][r * kCount + i] = 100 * r + i;
    if (auto s = c.AllGather(gathered[r].data() + r * kCount, gathered[r].data(), kCount,
                             DType::kI32, nullptr); !s.ok()) return s;
    scattered[r].resize(kCount);
    return c.ReduceScatterSum(gathered[r].data(), scattered[r].data(), kCount, DType::kI32, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < kCount; ++i) EXPECT_EQ(gathered[r][p * kCount + i], 100 * p + i);
    }
    // Every rank contributed the same gathered buffer: slot r summed n times.
    for (int i = 0; i < kCount; ++i) EXPECT_EQ(scattered[r][i], n * (100 * r + i));
  }
}

TEST_P(FakeCollectiveTest, Bf16SumsInF32InRankOrder) {
  const int n = GetParam();
  std::vector<float> got(n);
  auto st = OnRanks(n, [&](int r, Collective& c) -> absl::Status {
    uint16_t v = kernels::FloatToBf16(r == 0 ? 256.0f : 0.5f);
    if (auto s = c.AllReduceSum(&v, &v, 1, DType::kBF16, nullptr); !s.ok()) return s;
    got[r] = kernels::Bf16ToFloat(v);
    return absl::OkStatus();
  });
  // 256 + 0.5 (n-1) in f32, rounded once to bf16 (8 bits of mantissa: steps of 2 at 256).
  const float want = kernels::Bf16ToFloat(kernels::FloatToBf16(256.0f + 0.5f * (n - 1)));
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(got[r], want);
  }
}

TEST_P(FakeCollectiveTest, AllToAllVMovesRaggedBlocks) {
  const int n = GetParam();
  // Rank r sends (r + p + 1) values to rank p, each 1000 r + 10 p + i.
  std::vector<std::vector<float>> recv(n);
  auto st = OnRanks(n, [&](int r, Collective& c) -> absl::Status {
    std::vector<int64_t> sc(n), so(n), rc(n), ro(n);
    std::vector<float> send;
    int64_t in = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = r + p + 1;
      so[p] = static_cast<int64_t>(send.size());
      for (int i = 0; i < sc[p]; ++i) send.push_back(1000.0f * r + 10.0f * p + i);
      rc[p] = p + r + 1;
      ro[p] = in;
      in += rc[p];
    }
    recv[r].assign(in, -1.0f);
    return c.AllToAllV(send.data(), sc, so, recv[r].data(), rc, ro, DType::kF32, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    size_t at = 0;
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < p + r + 1; ++i) EXPECT_EQ(recv[r][at++], 1000.0f * p + 10.0f * r + i);
    }
    EXPECT_EQ(at, recv[r].size());
  }
}

TEST_P(FakeCollectiveTest, AllToAllSwapsEqualBlocks) {
  const int n = GetParam();
  constexpr int kCount = 3;
  std::vector<std::vector<int32_t>> got(n);
  auto st = OnRanks(n, [&](int r, Collective& c) -> absl::Status {
    std::vector<int32_t> send(static_cast<size_t>(n) * kCount);
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < kCount; ++i) send[p * kCount + i] = 100 * r + 10 * p + i;  // r -> p
    }
    got[r].assign(send.size(), -1);
    return c.AllToAll(send.data(), got[r].data(), kCount, DType::kI32, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < kCount; ++i) {
        EXPECT_EQ(got[r][p * kCount + i], 100 * p + 10 * r + i) << "rank " << r << " from " << p;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, FakeCollectiveTest, ::testing::Values(1, 2, 4));

TEST(FakeCollective, MismatchedCallsFailEveryRankNamingBoth) {
  auto st = OnRanks(2, [](int r, Collective& c) -> absl::Status {
    float v[4] = {};
    return c.AllReduceSum(v, v, r == 0 ? 4 : 3, DType::kF32, nullptr);
  });
  for (const absl::Status& s : st) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find("of 4 f32 while rank 1 called AllReduceSum of 3"),
              std::string::npos) << s;
  }
}

TEST(FakeCollective, AllToAllVCountsMustAgreePairwise) {
  auto st = OnRanks(2, [](int r, Collective& c) -> absl::Status {
    float buf[8] = {};
    // Consistent would be rc = sc on both; rank 0 expects 3 from rank 1, which sends 2.
    std::vector<int64_t> sc = r == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 1};
    std::vector<int64_t> rc = r == 0 ? std::vector<int64_t>{1, 3} : sc, off = {0, 4};
    return c.AllToAllV(buf, sc, off, buf, rc, off, DType::kF32, nullptr);
  });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInternal);
  EXPECT_NE(st[0].message().find("rank 1 sends 2 elements to rank 0, which expects 3"),
            std::string::npos) << st[0];
}

TEST(FakeCollective, AMissingRankFailsTheGroupByTheDeadline) {
  auto st = OnRanks(
      3,
      [](int r, Collective& c) -> absl::Status {
        if (r == 2) return absl::OkStatus();  // never arrives
        return c.Barrier(nullptr);
      },
      absl::Milliseconds(50));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kDeadlineExceeded) << st[r];
    EXPECT_NE(st[r].message().find("in Barrier"), std::string::npos) << st[r];
  }
}

TEST(FakeCollective, AbortReleasesWaitersAndSticks) {
  auto st = OnRanks(2, [](int r, Collective& c) -> absl::Status {
    if (r == 1) {
      c.Abort();  // e.g. its step failed before the collective
      float v = 0;
      absl::Status again = c.AllReduceSum(&v, &v, 1, DType::kF32, nullptr);
      EXPECT_EQ(again.code(), absl::StatusCode::kAborted);
      return again;
    }
    return c.Barrier(nullptr);
  });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kAborted) << st[0];
  EXPECT_NE(st[0].message().find("aborted by rank 1"), std::string::npos) << st[0];
}

TEST(FakeCollective, RejectsDtypesItCannotSum) {
  auto group = FakeCollectiveGroup::Create(1);
  ASSERT_TRUE(group.ok());
  uint8_t v = 0;
  absl::Status s = (*group)[0]->AllReduceSum(&v, &v, 1, DType::kFP8E4M3, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fp8_e4m3"), std::string::npos) << s;
  EXPECT_EQ(FakeCollectiveGroup::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::parallel
