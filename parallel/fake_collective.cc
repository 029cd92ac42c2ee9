#include "parallel/fake_collective.h"

#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/numeric.h"
#include "parallel/rank_rendezvous.h"

namespace mlaserve::parallel {
namespace {

float Load(const void* base, int64_t i, kernels::DType t) {
  switch (t) {
    case kernels::DType::kF32: return static_cast<const float*>(base)[i];
    case kernels::DType::kBF16: return kernels::Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<float>(static_cast<const int32_t*>(base)[i]);
  }
}

// Sum of `n` elements at element offset `at` of every rank's send buffer, in rank order, as
// the dtype's bytes.
std::vector<uint8_t> SumInRankOrder(std::span<const CollectiveCall> calls, int64_t at, int64_t n,
                                    kernels::DType t) {
  const size_t es = kernels::DTypeSize(t);
  std::vector<uint8_t> out(static_cast<size_t>(n) * es);
  if (t == kernels::DType::kI32) {
    auto* o = reinterpret_cast<int32_t*>(out.data());
    for (const CollectiveCall& c : calls) {
      const auto* s = static_cast<const int32_t*>(c.send) + at;
      for (int64_t i = 0; i < n; ++i) o[i] += s[i];
    }
    return out;
  }
  std::vector<float> acc(static_cast<size_t>(n), 0.0f);
  for (const CollectiveCall& c : calls) {
    for (int64_t i = 0; i < n; ++i) acc[i] += Load(c.send, at + i, t);
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case kernels::DType::kF32: reinterpret_cast<float*>(out.data())[i] = acc[i]; break;
      default:  // kBF16
        reinterpret_cast<uint16_t*>(out.data())[i] = kernels::FloatToBf16(acc[i]);
        break;
    }
  }
  return out;
}

// Every rank's result of one agreed operation (into temporaries first: a send may alias a
// recv). Runs on the last rank to arrive, while the others wait (RankRendezvous::Meet).
void MoveData(std::span<const CollectiveCall> calls) {
  const int size = static_cast<int>(calls.size());
  const CollectiveCall& a = calls[0];
  const size_t es = kernels::DTypeSize(a.dtype);
  struct Write {
    void* dst;
    std::vector<uint8_t> bytes;
  };
  std::vector<Write> writes;
  auto copy_of = [es](const void* src, int64_t elements) {
    const auto* p = static_cast<const uint8_t*>(src);
    return std::vector<uint8_t>(p, p + elements * static_cast<int64_t>(es));
  };
  switch (a.op) {
    case CollectiveOp::kBarrier:
      break;
    case CollectiveOp::kAllReduce: {
      std::vector<uint8_t> sum = SumInRankOrder(calls, 0, a.count, a.dtype);
      for (const CollectiveCall& c : calls) writes.push_back({c.recv, sum});
      break;
    }
    case CollectiveOp::kAllGather:
      for (const CollectiveCall& dst : calls) {
        for (int r = 0; r < size; ++r) {
          writes.push_back({static_cast<uint8_t*>(dst.recv) + r * a.count * es,
                            copy_of(calls[r].send, a.count)});
        }
      }
      break;
    case CollectiveOp::kReduceScatter:
      for (int r = 0; r < size; ++r) {
        writes.push_back({calls[r].recv, SumInRankOrder(calls, r * a.count, a.count, a.dtype)});
      }
      break;
    case CollectiveOp::kAllToAllV:
      for (int r = 0; r < size; ++r) {
        for (int p = 0; p < size; ++p) {
          const CollectiveCall& from = calls[p];
          writes.push_back(
              {static_cast<uint8_t*>(calls[r].recv) + calls[r].recv_offsets[p] * es,
               copy_of(static_cast<const uint8_t*>(from.send) + from.send_offsets[r] * es,
                       from.send_counts[r])});
        }
      }
      break;
  }
  for (Write& w : writes) {
    if (!w.bytes.empty()) std::memcpy(w.dst, w.bytes.data(), w.bytes.size());
  }
}

class FakeCollective final : public Collective {
 public:
  FakeCollective(std::shared_ptr<RankRendezvous> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  absl::Status AllReduceSum(const void* send, void* recv, int64_t count, kernels::DType dtype,
                            void*) override {
    return Simple(CollectiveOp::kAllReduce, send, recv, count, dtype);
  }
  absl::Status AllGather(const void* send, void* recv, int64_t count, kernels::DType dtype,
                         void*) override {
    return Simple(CollectiveOp::kAllGather, send, recv, count, dtype);
  }
  absl::Status ReduceScatterSum(const void* send, void* recv, int64_t count,
                                kernels::DType dtype, void*) override {
    return Simple(CollectiveOp::kReduceScatter, send, recv, count, dtype);
  }
  absl::Status AllToAllV(const void* send, std::span<const int64_t> send_counts,
                         std::span<const int64_t> send_offsets, void* recv,
                         std::span<const int64_t> recv_counts,
                         std::span<const int64_t> recv_offsets, kernels::DType dtype,
                         void*) override {
    if (absl::Status s = CheckCollectiveDType(dtype); !s.ok()) return s;
    const size_t n = static_cast<size_t>(size());
    if (send_counts.size() != n || send_offsets.size() != n || recv_counts.size() != n ||
        recv_offsets.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllToAllV: counts and offsets need one entry per rank (", n, "); got ",
          send_counts.size(), ", ", send_offsets.size(), ", ", recv_counts.size(), ", ",
          recv_offsets.size()));
    }
    CollectiveCall c;
    c.op = CollectiveOp::kAllToAllV;
    c.send = send;
    c.recv = recv;
    c.dtype = dtype;
    c.send_counts.assign(send_counts.begin(), send_counts.end());
    c.send_offsets.assign(send_offsets.begin(), send_offsets.end());
    c.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    c.recv_offsets.assign(recv_offsets.begin(), recv_offsets.end());
    return group_->Meet(rank_, std::move(c), MoveData);
  }
  absl::Status Barrier(void*) override {
    CollectiveCall c;
    c.op = CollectiveOp::kBarrier;
    return group_->Meet(rank_, std::move(c));
  }
  void Abort() override { group_->Abort(rank_); }

 private:
  absl::Status Simple(CollectiveOp op, const void* send, void* recv, int64_t count,
                      kernels::DType dtype) {
    if (absl::Status s = CheckCollectiveDType(dtype); !s.ok()) return s;
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(CollectiveOpName(op), ": count is ", count));
    }
    CollectiveCall c;
    c.op = op;
    c.send = send;
    c.recv = recv;
    c.count = count;
    c.dtype = dtype;
    return group_->Meet(rank_, std::move(c), MoveData);
  }

  std::shared_ptr<RankRendezvous> group_;
  const int rank_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Collective>>> FakeCollectiveGroup::Create(
    int size, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<RankRendezvous>> group =
      RankRendezvous::Create(size, timeout, "fake collective");
  if (!group.ok()) return group.status();
  std::vector<std::unique_ptr<Collective>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<FakeCollective>(*group, r));
  return ranks;
}

}  // namespace mlaserve::parallel
