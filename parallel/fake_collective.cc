#include "parallel/fake_collective.h"

#include <cstring>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/common/numeric.h"

namespace mlaserve::parallel {
namespace {

enum class Op : uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAllV, kBarrier };

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce: return "AllReduceSum";
    case Op::kAllGather: return "AllGather";
    case Op::kReduceScatter: return "ReduceScatterSum";
    case Op::kAllToAllV: return "AllToAllV";
    case Op::kBarrier: return "Barrier";
  }
  return "?";
}

// One rank's side of the current operation.
struct Call {
  Op op = Op::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  kernels::DType dtype = kernels::DType::kF32;
  std::vector<int64_t> send_counts, send_offsets, recv_counts, recv_offsets;
};

float Load(const void* base, int64_t i, kernels::DType t) {
  switch (t) {
    case kernels::DType::kF32: return static_cast<const float*>(base)[i];
    case kernels::DType::kBF16: return kernels::Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<float>(static_cast<const int32_t*>(base)[i]);
  }
}

// Sum of `n` elements at element offset `at` of every rank's send buffer, in rank order, as
// the dtype's bytes.
std::vector<uint8_t> SumInRankOrder(const std::vector<Call>& calls, int64_t at, int64_t n,
                                    kernels::DType t) {
  const size_t es = kernels::DTypeSize(t);
  std::vector<uint8_t> out(static_cast<size_t>(n) * es);
  if (t == kernels::DType::kI32) {
    auto* o = reinterpret_cast<int32_t*>(out.data());
    for (const Call& c : calls) {
      const auto* s = static_cast<const int32_t*>(c.send) + at;
      for (int64_t i = 0; i < n; ++i) o[i] += s[i];
    }
    return out;
  }
  std::vector<float> acc(static_cast<size_t>(n), 0.0f);
  for (const Call& c : calls) {
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

}  // namespace

struct FakeCollectiveGroup::State {
  State(int n, absl::Duration t) : size(n), timeout(t), calls(n) {}
  const int size;
  const absl::Duration timeout;
  absl::Mutex mu;
  std::vector<Call> calls ABSL_GUARDED_BY(mu);
  int arrived ABSL_GUARDED_BY(mu) = 0;
  int64_t generation ABSL_GUARDED_BY(mu) = 0;  // operations completed
  absl::Status error ABSL_GUARDED_BY(mu);      // sticky

  // Checks that the calls agree; empty when they do.
  std::string Mismatch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const Call& a = calls[0];
    for (int r = 1; r < size; ++r) {
      const Call& b = calls[r];
      if (b.op != a.op || b.dtype != a.dtype || (a.op != Op::kAllToAllV && b.count != a.count)) {
        return absl::StrCat("rank 0 called ", OpName(a.op), " of ", a.count, " ",
                            kernels::DTypeName(a.dtype), " while rank ", r, " called ",
                            OpName(b.op), " of ", b.count, " ", kernels::DTypeName(b.dtype));
      }
    }
    if (a.op != Op::kAllToAllV) return "";
    for (int r = 0; r < size; ++r) {
      for (int p = 0; p < size; ++p) {
        if (calls[r].send_counts[p] != calls[p].recv_counts[r]) {
          return absl::StrCat("AllToAllV: rank ", r, " sends ", calls[r].send_counts[p],
                              " elements to rank ", p, ", which expects ",
                              calls[p].recv_counts[r]);
        }
      }
    }
    return "";
  }

  // Computes every rank's result (into temporaries first: a send may alias a recv).
  void Execute() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const Call& a = calls[0];
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
      case Op::kBarrier:
        break;
      case Op::kAllReduce: {
        std::vector<uint8_t> sum = SumInRankOrder(calls, 0, a.count, a.dtype);
        for (const Call& c : calls) writes.push_back({c.recv, sum});
        break;
      }
      case Op::kAllGather:
        for (const Call& dst : calls) {
          for (int r = 0; r < size; ++r) {
            writes.push_back({static_cast<uint8_t*>(dst.recv) + r * a.count * es,
                              copy_of(calls[r].send, a.count)});
          }
        }
        break;
      case Op::kReduceScatter:
        for (int r = 0; r < size; ++r) {
          writes.push_back({calls[r].recv, SumInRankOrder(calls, r * a.count, a.count, a.dtype)});
        }
        break;
      case Op::kAllToAllV:
        for (int r = 0; r < size; ++r) {
          for (int p = 0; p < size; ++p) {
            const Call& from = calls[p];
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

  absl::Status Run(int rank, Call call) {
    absl::MutexLock l(&mu);
    if (!error.ok()) return error;
    const int64_t my_generation = generation;
    calls[rank] = std::move(call);
    if (++arrived == size) {
      if (std::string bad = Mismatch(); !bad.empty()) {
        error = absl::InternalError(absl::StrCat("fake collective: ", bad));
      } else {
        Execute();
      }
      arrived = 0;
      ++generation;
      return error;
    }
    auto done = [this, my_generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return generation != my_generation || !error.ok();
    };
    if (!mu.AwaitWithTimeout(absl::Condition(&done), timeout)) {
      error = absl::DeadlineExceededError(absl::StrCat(
          "fake collective: rank ", rank, " waited ", absl::FormatDuration(timeout), " in ",
          OpName(calls[rank].op), " (operation ", my_generation, ") for the other ",
          size - arrived, " of ", size, " ranks"));
    }
    return error;
  }

  void Abort(int rank) {
    absl::MutexLock l(&mu);
    if (error.ok()) {
      error = absl::AbortedError(absl::StrCat("fake collective: aborted by rank ", rank));
    }
  }
};

namespace {

class FakeCollective final : public Collective {
 public:
  FakeCollective(std::shared_ptr<FakeCollectiveGroup::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }

  absl::Status AllReduceSum(const void* send, void* recv, int64_t count, kernels::DType dtype,
                            void*) override {
    return Simple(Op::kAllReduce, send, recv, count, dtype);
  }
  absl::Status AllGather(const void* send, void* recv, int64_t count, kernels::DType dtype,
                         void*) override {
    return Simple(Op::kAllGather, send, recv, count, dtype);
  }
  absl::Status ReduceScatterSum(const void* send, void* recv, int64_t count,
                                kernels::DType dtype, void*) override {
    return Simple(Op::kReduceScatter, send, recv, count, dtype);
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
    Call c;
    c.op = Op::kAllToAllV;
    c.send = send;
    c.recv = recv;
    c.dtype = dtype;
    c.send_counts.assign(send_counts.begin(), send_counts.end());
    c.send_offsets.assign(send_offsets.begin(), send_offsets.end());
    c.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    c.recv_offsets.assign(recv_offsets.begin(), recv_offsets.end());
    return state_->Run(rank_, std::move(c));
  }
  absl::Status Barrier(void*) override {
    Call c;
    c.op = Op::kBarrier;
    return state_->Run(rank_, std::move(c));
  }
  void Abort() override { state_->Abort(rank_); }

 private:
  absl::Status Simple(Op op, const void* send, void* recv, int64_t count, kernels::DType dtype) {
    if (absl::Status s = CheckCollectiveDType(dtype); !s.ok()) return s;
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(OpName(op), ": count is ", count));
    }
    Call c;
    c.op = op;
    c.send = send;
    c.recv = recv;
    c.count = count;
    c.dtype = dtype;
    return state_->Run(rank_, std::move(c));
  }

  std::shared_ptr<FakeCollectiveGroup::State> state_;
  const int rank_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Collective>>> FakeCollectiveGroup::Create(
    int size, absl::Duration timeout) {
  if (size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("fake collective: group size is ", size));
  }
  auto state = std::make_shared<State>(size, timeout);
  std::vector<std::unique_ptr<Collective>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<FakeCollective>(state, r));
  return ranks;
}

}  // namespace mlaserve::parallel
