// RankRendezvous (rank_rendezvous.h): the meeting of a process's ranks at each collective.
#include "parallel/rank_rendezvous.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace mlaserve::parallel {

const char* CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "AllReduceSum";
    case CollectiveOp::kAllGather: return "AllGather";
    case CollectiveOp::kReduceScatter: return "ReduceScatterSum";
    case CollectiveOp::kAllToAllV: return "AllToAllV";
    case CollectiveOp::kBarrier: return "Barrier";
  }
  return "?";
}

absl::StatusOr<std::shared_ptr<RankRendezvous>> RankRendezvous::Create(int size,
                                                                       absl::Duration timeout,
                                                                       std::string who) {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat(who, ": group size is ", size));
  return std::shared_ptr<RankRendezvous>(new RankRendezvous(size, timeout, std::move(who)));
}

RankRendezvous::RankRendezvous(int size, absl::Duration timeout, std::string who)
    : size_(size), timeout_(timeout), who_(std::move(who)), calls_(size) {}

absl::Status RankRendezvous::Meet(int rank, CollectiveCall call, const Complete& complete) {
  return Arrive(rank, std::move(call), complete, Phase::kCall);
}

absl::Status RankRendezvous::PostTogether(int rank, CollectiveCall call,
                                          const std::function<absl::Status()>& enqueue) {
  CollectiveCall enqueued;  // the second meeting names the operation in a timeout, nothing more
  enqueued.op = call.op;
  if (absl::Status s = Arrive(rank, std::move(call), nullptr, Phase::kCall); !s.ok()) return s;
  if (absl::Status s = enqueue(); !s.ok()) {
    Abort(rank);  // the others must not wait for an operation this rank did not post
    return s;
  }
  return Arrive(rank, std::move(enqueued), nullptr, Phase::kEnqueued);
}

void RankRendezvous::Abort(int rank) {
  absl::MutexLock l(&mu_);
  if (error_.ok()) error_ = absl::AbortedError(absl::StrCat(who_, ": aborted by rank ", rank));
}

absl::Status RankRendezvous::Arrive(int rank, CollectiveCall call, const Complete& complete,
                                    Phase phase) {
  absl::MutexLock l(&mu_);
  if (!error_.ok()) return error_;
  const int64_t meeting = meetings_;
  calls_[rank] = std::move(call);
  if (++arrived_ == size_) {
    if (std::string bad = phase == Phase::kCall ? Mismatch() : ""; !bad.empty()) {
      error_ = absl::InternalError(absl::StrCat(who_, ": ", bad));
    } else if (complete) {
      complete(calls_);
    }
    arrived_ = 0;
    ++meetings_;
    return error_;
  }
  auto done = [this, meeting]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return meetings_ != meeting || !error_.ok();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout_)) {
    error_ = absl::DeadlineExceededError(absl::StrCat(
        who_, ": rank ", rank, " waited ", absl::FormatDuration(timeout_),
        phase == Phase::kCall ? " in " : " after enqueuing ", CollectiveOpName(calls_[rank].op),
        " (meeting ", meeting, ") for the other ", size_ - arrived_, " of ", size_, " ranks"));
  }
  return error_;
}

std::string RankRendezvous::Mismatch() const {
  const CollectiveCall& a = calls_[0];
  for (int r = 1; r < size_; ++r) {
    const CollectiveCall& b = calls_[r];
    if (b.op != a.op || b.dtype != a.dtype ||
        (a.op != CollectiveOp::kAllToAllV && b.count != a.count)) {
      return absl::StrCat("rank 0 called ", CollectiveOpName(a.op), " of ", a.count, " ",
                          kernels::DTypeName(a.dtype), " while rank ", r, " called ",
                          CollectiveOpName(b.op), " of ", b.count, " ",
                          kernels::DTypeName(b.dtype));
    }
  }
  if (a.op != CollectiveOp::kAllToAllV) return "";
  for (int r = 0; r < size_; ++r) {
    for (int p = 0; p < size_; ++p) {
      if (calls_[r].send_counts[p] != calls_[p].recv_counts[r]) {
        return absl::StrCat("AllToAllV: rank ", r, " sends ", calls_[r].send_counts[p],
                            " elements to rank ", p, ", which expects ", calls_[p].recv_counts[r]);
      }
    }
  }
  return "";
}

}  // namespace mlaserve::parallel
