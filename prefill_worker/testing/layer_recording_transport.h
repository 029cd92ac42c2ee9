// LayerRecordingTransport: a KvTransport wrapper for the prefill runner's layer-wise tests. It
// opens its sessions through another transport and records, per session, the prefill rank the
// runner bound it to (SetSourceRank) and which layers left:
//   host-payload senders: the layers handed to SendPages (the shipping thread's send), and
//   each run's page indexes (Runs);
//   direct senders (nccl): the bytes the transport put on the wire (bytes_sent()).
// A test holds a rank inside its step (FakeEngine::set_after_rank_layer, or an engine wrapper)
// and waits here until that rank's layer left: which proves the pages left while the rank's
// later layers were still to be computed. Waits are bounded.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvtransfer/transport.h"

namespace mlaserve::prefill::testing {

class LayerRecordingTransport final : public kvtransfer::KvTransport {
 public:
  explicit LayerRecordingTransport(kvtransfer::KvTransport* inner) : inner_(inner) {}

  std::string_view name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<kvtransfer::KvSender>> Open(
      const kvtransfer::KvSessionRef& ref, const kvtransfer::KvLayout& local_layout,
      const kvtransfer::KvSenderOptions& options) override {
    absl::StatusOr<std::unique_ptr<kvtransfer::KvSender>> s =
        inner_->Open(ref, local_layout, options);
    if (!s.ok()) return s.status();
    {
      absl::MutexLock l(&mu_);
      sessions_[ref.session_id].inner = s->get();
    }
    return std::unique_ptr<kvtransfer::KvSender>(
        new Sender(this, ref.session_id, *std::move(s)));
  }

  // The sessions the runner bound to prefill rank `rank` so far.
  std::vector<std::string> SessionsOfRank(int rank) const {
    absl::MutexLock l(&mu_);
    std::vector<std::string> ids;
    for (const auto& [id, s] : sessions_) {
      if (s.rank == rank) ids.push_back(id);
    }
    return ids;
  }
  // Host-payload senders: what SendPages / SendPage carried, in order.
  struct Run {
    int layer = 0;
    int first_page = 0;
    int num_pages = 0;
    bool operator==(const Run&) const = default;
  };
  std::vector<Run> Runs(const std::string& session) const {
    absl::MutexLock l(&mu_);
    auto it = sessions_.find(session);
    return it == sessions_.end() ? std::vector<Run>{} : it->second.runs;
  }
  // Host-payload senders: true once SendPages carried a run of `layer` (false at the
  // deadline).
  bool AwaitLayerSent(const std::string& session, int layer, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto sent = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = sessions_.find(session);
      return it != sessions_.end() && it->second.layers.contains(layer);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&sent), timeout);
  }
  // Direct senders: true once the session's bytes on the wire reached `bytes` (polled: the
  // transport's threads count them; false at the deadline or once the session ended).
  bool AwaitBytesSent(const std::string& session, int64_t bytes, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      {
        absl::MutexLock l(&mu_);
        auto it = sessions_.find(session);
        if (it == sessions_.end() || it->second.inner == nullptr) return false;
        if (it->second.inner->bytes_sent() >= bytes) return true;
      }
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

 private:
  struct Record {
    kvtransfer::KvSender* inner = nullptr;  // null once the runner dropped the sender
    int rank = -1;
    std::set<int> layers;
    std::vector<Run> runs;
  };

  class Sender final : public kvtransfer::KvSender {
   public:
    Sender(LayerRecordingTransport* t, std::string id, std::unique_ptr<kvtransfer::KvSender> s)
        : t_(t), id_(std::move(id)), s_(std::move(s)) {}
    ~Sender() override {
      absl::MutexLock l(&t_->mu_);
      t_->sessions_[id_].inner = nullptr;
    }
    absl::Status SendPage(int layer, int page_index, std::string payload) override {
      Record(layer, page_index, 1);
      return s_->SendPage(layer, page_index, std::move(payload));
    }
    absl::Status SendPages(int layer, int first_page_index, int num_pages,
                           std::span<const uint8_t> bytes) override {
      Record(layer, first_page_index, num_pages);
      return s_->SendPages(layer, first_page_index, num_pages, bytes);
    }
    void Complete(const kvtransfer::KvCompletion& completion,
                  std::function<void(absl::Status)> done) override {
      s_->Complete(completion, std::move(done));
    }
    void Abort(const absl::Status& reason) override { s_->Abort(reason); }
    absl::Status status() const override { return s_->status(); }
    int64_t bytes_sent() const override { return s_->bytes_sent(); }
    bool direct() const override { return s_->direct(); }
    absl::Status SendLayer(int layer, std::span<const int32_t> local_pages) override {
      return s_->SendLayer(layer, local_pages);
    }
    absl::Status SetSourceRank(int rank) override {
      {
        absl::MutexLock l(&t_->mu_);
        t_->sessions_[id_].rank = rank;
      }
      return s_->SetSourceRank(rank);
    }

   private:
    void Record(int layer, int first_page, int num_pages) {
      absl::MutexLock l(&t_->mu_);
      t_->sessions_[id_].layers.insert(layer);
      t_->sessions_[id_].runs.push_back({layer, first_page, num_pages});
    }
    LayerRecordingTransport* const t_;
    const std::string id_;
    std::unique_ptr<kvtransfer::KvSender> s_;
  };

  kvtransfer::KvTransport* const inner_;
  mutable absl::Mutex mu_;
  std::map<std::string, Record> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::prefill::testing
