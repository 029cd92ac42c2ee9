#include "kvtransfer/fake_transport.h"

#include "absl/strings/str_cat.h"
#include "kvtransfer/checksum.h"

namespace mlaserve::kvtransfer {

class FakeKvSender final : public KvSender {
 public:
  FakeKvSender(FakeKvTransport* transport, KvReceiver* receiver, std::string session_id,
               int dest_rank, int cached_pages)
      : transport_(transport),
        receiver_(receiver),
        session_id_(std::move(session_id)),
        dest_rank_(dest_rank),
        cached_pages_(cached_pages) {}
  ~FakeKvSender() override {
    if (!completed_) Abort(absl::CancelledError("KV sender destroyed before completion"));
  }

  // The addressed rank and the source rank reach the receiver as over tcp (rank_route.h).
  absl::Status Open(const KvLayout& layout) {
    return Fail(receiver_->Open(session_id_, layout, nullptr, dest_rank_, cached_pages_));
  }

  absl::Status SendPage(int layer, int page_index, std::string payload) override {
    if (!status_.ok() || stalled_) return status_;
    FakeKvTransport::Faults faults;
    int delivered;
    {
      absl::MutexLock lock(&transport_->mu_);
      faults = transport_->faults_;
      delivered = transport_->pages_delivered_;
    }
    if (faults.break_after_pages >= 0 && delivered >= faults.break_after_pages) {
      status_ = absl::UnavailableError(absl::StrCat("fake KV stream ", session_id_, " broke"));
      receiver_->Fail(session_id_, absl::CancelledError("fake KV stream broke"));
      return status_;
    }
    if (faults.stall_after_pages >= 0 && delivered >= faults.stall_after_pages) {
      stalled_ = true;
      return status_;
    }
    const uint32_t crc = Crc32(payload);
    absl::Status s = receiver_->WritePage(
        session_id_, layer, page_index,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()),
                                 payload.size()),
        crc);
    if (s.ok()) {
      bytes_ += static_cast<int64_t>(payload.size());
      absl::MutexLock lock(&transport_->mu_);
      ++transport_->pages_delivered_;
    }
    return Fail(s);
  }

  void Complete(const KvCompletion& completion, std::function<void(absl::Status)> done) override {
    completed_ = true;
    if (!status_.ok() || stalled_) {
      // A stalled stream never answers; the caller's deadline or the receiver's must act.
      if (!status_.ok()) done(status_);
      return;
    }
    KvCompletion c = completion;
    c.source_rank = source_rank_;
    auto stats = receiver_->Complete(session_id_, c);
    if (stats.ok()) rank_route_ = stats->route.Describe();
    done(Fail(stats.status()));
  }
  absl::Status SetSourceRank(int rank) override {
    if (rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat("KV source rank ", rank, " is negative"));
    }
    source_rank_ = rank;
    return absl::OkStatus();
  }
  std::string rank_route() const override { return rank_route_; }

  void Abort(const absl::Status& reason) override {
    if (status_.ok()) status_ = reason;
    receiver_->Fail(session_id_, reason);
  }
  absl::Status status() const override { return status_; }
  int64_t bytes_sent() const override { return bytes_; }

 private:
  absl::Status Fail(absl::Status s) {
    if (!s.ok() && status_.ok()) status_ = s;
    return s;
  }
  FakeKvTransport* const transport_;
  KvReceiver* const receiver_;
  const std::string session_id_;
  const int dest_rank_;
  const int cached_pages_;  // the pages the receiver holds: the caller ships the others
  int source_rank_ = 0;
  std::string rank_route_;
  absl::Status status_;
  bool stalled_ = false;
  bool completed_ = false;
  int64_t bytes_ = 0;
};

void FakeKvTransport::Register(const std::string& endpoint, KvReceiver* receiver) {
  absl::MutexLock lock(&mu_);
  receivers_[endpoint] = receiver;
}

void FakeKvTransport::set_faults(Faults faults) {
  absl::MutexLock lock(&mu_);
  faults_ = faults;
}

int FakeKvTransport::pages_delivered() const {
  absl::MutexLock lock(&mu_);
  return pages_delivered_;
}

absl::StatusOr<std::unique_ptr<KvSender>> FakeKvTransport::Open(const KvSessionRef& ref,
                                                                const KvLayout& local_layout,
                                                                const KvSenderOptions& options) {
  if (absl::Status s = ValidateSessionRef(ref, local_layout); !s.ok()) return s;
  KvReceiver* receiver;
  {
    absl::MutexLock lock(&mu_);
    auto it = receivers_.find(ref.endpoint);
    if (it == receivers_.end()) {
      return absl::UnavailableError(absl::StrCat("no fake KV receiver at ", ref.endpoint));
    }
    receiver = it->second;
  }
  auto sender =
      std::make_unique<FakeKvSender>(this, receiver, ref.session_id, ref.rank, ref.cached_pages);
  (void)sender->Open(local_layout);  // a refusal shows in sender->status()
  return sender;
}

}  // namespace mlaserve::kvtransfer
