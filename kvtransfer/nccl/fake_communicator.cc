#include "kvtransfer/nccl/fake_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer::nccl {

// Shared state of one pair. Sends and receives queue up; whenever both queues have a head they
// are matched (copy, or failure on a size mismatch). Everything is under one mutex; waiting
// uses absl::Mutex::AwaitWithDeadline, so no thread is needed.
struct FakeCommHub::Link {
  struct Op {
    const void* src = nullptr;
    void* dst = nullptr;
    size_t bytes = 0;
  };
  absl::Mutex mu;
  std::deque<Op> sends ABSL_GUARDED_BY(mu);
  std::deque<Op> recvs ABSL_GUARDED_BY(mu);
  int joined ABSL_GUARDED_BY(mu) = 0;
  int sends_posted ABSL_GUARDED_BY(mu) = 0;
  bool stalled ABSL_GUARDED_BY(mu) = false;
  absl::Status error ABSL_GUARDED_BY(mu);  // sticky link failure, seen by both ranks
  Faults faults;
  std::shared_ptr<int64_t> bytes_moved;
  absl::Mutex* hub_mu = nullptr;

  void Match() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (error.ok() && !sends.empty() && !recvs.empty()) {
      Op s = sends.front(), r = recvs.front();
      if (s.bytes != r.bytes) {
        error = absl::InternalError(absl::StrCat("fake nccl: send of ", s.bytes,
                                                 " bytes matched a recv of ", r.bytes));
        return;
      }
      std::memcpy(r.dst, s.src, s.bytes);
      sends.pop_front();
      recvs.pop_front();
      absl::MutexLock l(hub_mu);
      *bytes_moved += static_cast<int64_t>(s.bytes);
    }
  }
};

namespace {

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeCommHub::Link> link, int rank)
      : link_(std::move(link)), rank_(rank) {}
  ~FakeCommunicator() override { Abort(); }

  int rank() const override { return rank_; }
  void* stream() const override { return nullptr; }

  absl::Status Send(const void* buf, size_t bytes) override {
    absl::MutexLock l(&link_->mu);
    if (absl::Status s = Check(); !s.ok()) return s;
    const int n = ++link_->sends_posted;
    if (link_->faults.fail_after_sends >= 0 && n > link_->faults.fail_after_sends) {
      link_->error = absl::UnavailableError("fake nccl: remote process failed (injected)");
      return link_->error;
    }
    if (link_->faults.stall_after_sends >= 0 && n > link_->faults.stall_after_sends) {
      link_->stalled = true;
    }
    if (link_->stalled) {
      pending_stalled_ = true;  // never delivered
      return absl::OkStatus();
    }
    link_->sends.push_back({buf, nullptr, bytes});
    link_->Match();
    return absl::OkStatus();
  }

  absl::Status Recv(void* buf, size_t bytes) override {
    absl::MutexLock l(&link_->mu);
    if (absl::Status s = Check(); !s.ok()) return s;
    link_->recvs.push_back({nullptr, buf, bytes});
    link_->Match();
    return absl::OkStatus();
  }

  absl::Status WaitAll(absl::Duration no_progress) override {
    absl::MutexLock l(&link_->mu);
    size_t seen = Pending();
    // Done, failed, or one of our operations completed (progress: the deadline restarts).
    auto changed = [this, &seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
      return aborted_ || !link_->error.ok() || Pending() != seen;
    };
    while (Pending() > 0 && !aborted_ && link_->error.ok()) {
      seen = Pending();
      if (!link_->mu.AwaitWithTimeout(absl::Condition(&changed), no_progress)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "fake nccl rank ", rank_, ": no progress for ", absl::FormatDuration(no_progress),
            " with ", Pending(), " operations pending"));
      }
    }
    return Check();
  }

  void Abort() override {
    absl::MutexLock l(&link_->mu);
    if (aborted_) return;
    aborted_ = true;
    // The peer is not told (ncclCommAbort is local); its own deadline must catch it. Our
    // queued operations are dropped so no buffer of ours is touched after Abort.
    if (rank_ == 0) link_->sends.clear();
    else link_->recvs.clear();
  }

  bool usable() const override {
    absl::MutexLock l(&link_->mu);
    return !aborted_ && link_->error.ok();
  }

 private:
  size_t Pending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if (rank_ == 0) return link_->sends.size() + (pending_stalled_ ? 1 : 0);
    return link_->recvs.size();
  }
  absl::Status Check() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if (aborted_) return absl::FailedPreconditionError("fake nccl: communicator was aborted");
    return link_->error;
  }

  std::shared_ptr<FakeCommHub::Link> link_;
  const int rank_;
  bool aborted_ ABSL_GUARDED_BY(link_->mu) = false;
  bool pending_stalled_ ABSL_GUARDED_BY(link_->mu) = false;
};

}  // namespace

void FakeCommHub::set_faults(Faults f) {
  absl::MutexLock l(&mu_);
  faults_ = f;
}

int FakeCommHub::comms_created() const {
  absl::MutexLock l(&mu_);
  return comms_created_;
}

int64_t FakeCommHub::bytes_moved() const {
  absl::MutexLock l(&mu_);
  return *bytes_moved_;
}

CommIdFactory FakeCommHub::id_factory() {
  return [this]() -> absl::StatusOr<CommId> {
    absl::MutexLock l(&mu_);
    return absl::StrCat("fake-", next_id_++);
  };
}

CommunicatorFactory FakeCommHub::factory() {
  return [this](const CommId& id, int rank,
                absl::Time deadline) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    if (rank != 0 && rank != 1) {
      return absl::InvalidArgumentError(absl::StrCat("fake nccl: rank ", rank, " not 0 or 1"));
    }
    std::shared_ptr<Link> link;
    {
      absl::MutexLock l(&mu_);
      auto& slot = links_[id];
      if (slot == nullptr) {
        slot = std::make_shared<Link>();
        slot->faults = faults_;
        slot->bytes_moved = bytes_moved_;
        slot->hub_mu = &mu_;
      }
      link = slot;
      ++comms_created_;
    }
    // Like ncclCommInitRank: both ranks must join before either can use the communicator.
    absl::MutexLock l(&link->mu);
    if (link->joined >= 2) {
      // An NCCL id serves one communicator: its bootstrap root is gone once both ranks joined,
      // so a rank that joins it again (a side that rebuilt while its peer kept the old one)
      // never meets its peer.
      return absl::UnavailableError(absl::StrCat(
          "fake nccl: communicator ", id, " was already formed by both ranks; an id serves one "
          "communicator"));
    }
    ++link->joined;
    auto both = [&link]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link->mu) { return link->joined >= 2; };
    if (!link->mu.AwaitWithDeadline(absl::Condition(&both), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("fake nccl: peer did not join communicator ", id, " by the deadline"));
    }
    return std::unique_ptr<Communicator>(new FakeCommunicator(link, rank));
  };
}

}  // namespace mlaserve::kvtransfer::nccl
