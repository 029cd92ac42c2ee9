#include "kvtransfer/tcp_transport.h"

#include <algorithm>
#include <deque>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/grpc_callback_anchor.h"
#include "common/grpc_status.h"
#include "common/self_owned.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/proto_convert.h"
#include "spdlog/spdlog.h"

namespace mlaserve::kvtransfer {

namespace v1 = ::mlaserve::v1;
using common::FromGrpcStatus;
using common::ToGrpcStatus;

namespace {

// Tells the receiver through the control plane (KvService.AbortSession), fire and forget:
// the stream's cancellation may reach it first, or not at all if the open never left.
// Self-owned (common/self_owned.h) until its answer.
class AbortSessionCall final : public common::SelfOwned<AbortSessionCall> {
 public:
  static void Send(const std::shared_ptr<grpc::Channel>& channel, const std::string& session_id,
                   const absl::Status& reason) {
    auto call = common::MakeSelfOwned<AbortSessionCall>(v1::KvService::NewStub(channel));
    call->context_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    call->request_.set_session_id(session_id);
    call->request_.set_reason(std::string(reason.message()));
    call->stub_->async()->AbortSession(&call->context_, &call->request_, &call->response_,
                                       [raw = call.get()](grpc::Status) { raw->ReleaseSelf(); });
  }
  explicit AbortSessionCall(std::unique_ptr<v1::KvService::Stub> stub) : stub_(std::move(stub)) {}

 private:
  const std::unique_ptr<v1::KvService::Stub> stub_;
  grpc::ClientContext context_;
  v1::KvAbortSessionRequest request_;
  v1::KvAbortSessionResponse response_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sender: one PushPages stream.
//
// Write discipline: at most one write is in flight (`writing`); whoever clears the queue head
// starts the next write. gRPC calls are made without `mu_` held, since reactions may run inline.
// A hold keeps the call alive while the application may still start writes; it is released
// exactly once, when no write is in flight and none will be started (half-close or failure).
//
// Lifetime: self-owned (common/self_owned.h) from creation until gRPC's OnDone; the sender and
// the transport's watchdog list hold references too (the list a weak one).
class PushStream final : public grpc::ClientWriteReactor<v1::KvPushMessage>,
                         public common::SelfOwned<PushStream> {
 public:
  PushStream(std::string session_id, KvSenderOptions options,
             std::shared_ptr<grpc::Channel> channel)
      : session_id_(std::move(session_id)),
        options_(std::move(options)),
        channel_(std::move(channel)) {}

  void Start(v1::KvService::Stub* stub, v1::KvPushMessage open) {
    stub->async()->PushPages(&context_, &result_, this);
    AddHold();
    {
      absl::MutexLock lock(&mu_);
      last_progress_ = absl::Now();
      queue_.push_back(std::move(open));
    }
    StartCall();
    MaybeStartWrite();
  }

  // Queues `msg` (a page of `bytes` payload bytes, or the completion). Blocks for room while
  // the stream makes progress. On refusal, `done` (completion only) gets the reason too.
  absl::Status Enqueue(v1::KvPushMessage msg, size_t bytes, bool is_complete,
                       std::function<void(absl::Status)> done) {
    absl::Status refused;
    {
      absl::MutexLock lock(&mu_);
      while (failure_.ok() && !finished_ && !queue_.empty() &&
             queued_bytes_ + bytes > options_.max_inflight_bytes) {
        const absl::Time deadline = last_progress_ + options_.no_progress_timeout;
        if (absl::Now() >= deadline) {
          failure_ = absl::DeadlineExceededError(absl::StrCat(
              "KV session ", session_id_, ": the receiver took nothing for ",
              absl::FormatDuration(options_.no_progress_timeout)));
          break;
        }
        cv_.WaitWithDeadline(&mu_, deadline);
      }
      // A broken stream's status arrives with OnDone, shortly after.
      const absl::Time done_deadline = absl::Now() + options_.no_progress_timeout;
      while ((broken_ || receiver_ended_) && !finished_ && absl::Now() < done_deadline) {
        cv_.WaitWithDeadline(&mu_, done_deadline);
      }
      if (failure_.ok() && (finished_ || broken_ || receiver_ended_)) {
        failure_ = absl::UnavailableError(
            absl::StrCat("KV session ", session_id_, ": stream to the receiver ended early"));
      }
      if (!failure_.ok()) {
        refused = failure_;
        need_cancel_ = true;
      } else if (half_closed_) {
        refused = absl::FailedPreconditionError(
            absl::StrCat("KV session ", session_id_, " already completed"));
      } else {
        if (queue_.empty() && !writing_) last_progress_ = absl::Now();  // idle -> busy
        queue_.push_back(std::move(msg));
        queued_bytes_ += bytes;
        if (!is_complete) sent_bytes_ += static_cast<int64_t>(bytes);
        if (is_complete) {
          half_closed_ = true;
          done_ = std::move(done);
        }
      }
    }
    if (!refused.ok()) {
      CancelIfNeeded();
      if (done) done(refused);
      return refused;
    }
    MaybeStartWrite();
    return absl::OkStatus();
  }

  // Fails the session here and at the receiver: the stream is cancelled and, since the open
  // may not have reached the receiver yet, the control plane is told too.
  void Abort(const absl::Status& reason) {
    bool tell_receiver = false;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (failure_.ok()) failure_ = reason;
      tell_receiver = !abort_sent_;
      abort_sent_ = true;
      need_cancel_ = true;
    }
    if (tell_receiver) AbortSessionCall::Send(channel_, session_id_, reason);
    CancelIfNeeded();
  }

  // Watchdog: fails the stream when it has work but made no progress in time.
  void CheckProgress(absl::Time now) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || !failure_.ok() || broken_) return;
      const bool busy = writing_ || !queue_.empty() || half_closed_;
      if (!busy || now < last_progress_ + options_.no_progress_timeout) return;
      failure_ = absl::DeadlineExceededError(
          absl::StrCat("KV session ", session_id_, ": no progress for ",
                       absl::FormatDuration(options_.no_progress_timeout)));
      need_cancel_ = true;
    }
    CancelIfNeeded();
  }

  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    if (failure_.ok() && broken_) {
      return absl::UnavailableError(absl::StrCat("KV session ", session_id_, ": stream broke"));
    }
    return failure_;
  }
  int64_t sent_bytes() const {
    absl::MutexLock lock(&mu_);
    return sent_bytes_;
  }
  bool finished() const {
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  std::string rank_route() const {
    absl::MutexLock lock(&mu_);
    return rank_route_;
  }
  absl::Duration no_progress_timeout() const { return options_.no_progress_timeout; }
  size_t max_message_bytes() const { return options_.max_message_bytes; }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        // The stream is over; OnDone brings the receiver's status (e.g. its refusal).
        broken_ = true;
        DropQueuedLocked();
      } else if (!queue_.empty()) {  // (emptied already if the receiver ended the stream)
        queued_bytes_ -= MessageBytes(queue_.front());
        queue_.pop_front();
        last_progress_ = absl::Now();
      }
      cv_.SignalAll();
    }
    MaybeStartWrite();
  }

  // The receiver sends no initial metadata before it finishes the stream, so its arrival means
  // the verdict is on its way (a refusal, a failure on its side, or the final answer): stop
  // writing and release the hold so that OnDone can deliver the status even while idle.
  void OnReadInitialMetadataDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      receiver_ended_ = true;
      DropQueuedLocked();
      cv_.SignalAll();
    }
    MaybeStartWrite();
  }

  void OnDone(const grpc::Status& status) override {
    std::function<void(absl::Status)> done;
    absl::Status verdict;
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
      if (!status.ok() && failure_.ok()) failure_ = FromGrpcStatus(status);
      if (status.ok() && !half_closed_ && failure_.ok()) {
        failure_ = absl::InternalError("KV receiver answered before completion");
      }
      verdict = failure_;
      if (verdict.ok()) rank_route_ = result_.rank_route();  // the receiver's record
      done = std::move(done_);
      cv_.SignalAll();
    }
    if (done) done(verdict);
    ReleaseSelf();  // the terminal event; `this` may be gone after it
  }

 private:
  static size_t MessageBytes(const v1::KvPushMessage& m) {
    if (m.has_pages()) return m.pages().payload().size();
    return m.has_page() ? m.page().payload().size() : 0;
  }

  // Starts the next write, the half-close, or releases the hold, as the state asks.
  void MaybeStartWrite() {
    enum { kNothing, kWrite, kWritesDone, kRelease } action = kNothing;
    const v1::KvPushMessage* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || hold_released_) return;
      if (broken_ || (receiver_ended_ && !half_closed_)) {
        hold_released_ = true;
        action = kRelease;
      } else if (failure_.ok() && !queue_.empty()) {
        writing_ = true;
        next = &queue_.front();  // deque keeps element addresses stable on push_back
        action = kWrite;
      } else if (failure_.ok() && half_closed_) {
        hold_released_ = true;
        action = kWritesDone;
      } else if (!failure_.ok()) {
        hold_released_ = true;
        action = kRelease;
      }
    }
    switch (action) {
      case kWrite: StartWrite(next); break;
      case kWritesDone: StartWritesDone(); RemoveHold(); break;
      case kRelease: RemoveHold(); break;
      case kNothing: break;
    }
  }

  // Drops the messages not yet handed to gRPC. The head stays while a write of it is in
  // flight: StartWrite serializes it outside mu_ (and OnWriteDone pops it), so clearing it
  // here from another thread would free the message under the serializer.
  void DropQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t keep = writing_ && !queue_.empty() ? 1 : 0;
    while (queue_.size() > keep) {
      queued_bytes_ -= MessageBytes(queue_.back());
      queue_.pop_back();
    }
  }

  void CancelIfNeeded() {
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      cancel = need_cancel_ && !cancelled_ && !finished_;
      if (cancel) cancelled_ = true;
    }
    if (cancel) context_.TryCancel();
    MaybeStartWrite();  // releases the hold when idle
  }

  const std::string session_id_;
  const KvSenderOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  v1::KvPushResult result_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<v1::KvPushMessage> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sent_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed: no more writes
  bool receiver_ended_ ABSL_GUARDED_BY(mu_) = false;  // its verdict is coming: no more writes
  bool half_closed_ ABSL_GUARDED_BY(mu_) = false;  // completion queued
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  bool need_cancel_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool abort_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // OnDone ran
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_);
  std::function<void(absl::Status)> done_ ABSL_GUARDED_BY(mu_);
  std::string rank_route_ ABSL_GUARDED_BY(mu_);  // KvPushResult.rank_route of a success
};

namespace {

class TcpKvSender final : public KvSender {
 public:
  explicit TcpKvSender(std::shared_ptr<PushStream> stream) : stream_(std::move(stream)) {}
  ~TcpKvSender() override {
    if (!completed_) stream_->Abort(absl::CancelledError("KV sender destroyed before completion"));
  }

  absl::Status SendPage(int layer, int page_index, std::string payload) override {
    v1::KvPushMessage msg;
    auto* run = msg.mutable_pages();
    run->set_layer(layer);
    run->set_first_page_index(page_index);
    run->set_num_pages(1);
    run->set_crc32(Crc32(payload));
    const size_t bytes = payload.size();
    run->set_payload(std::move(payload));
    return stream_->Enqueue(std::move(msg), bytes, /*is_complete=*/false, nullptr);
  }

  // One message per run of pages up to the size cap: the payload is copied once, into the
  // message, and checksummed there.
  absl::Status SendPages(int layer, int first_page_index, int num_pages,
                         std::span<const uint8_t> bytes) override {
    if (num_pages <= 0 || bytes.size() % num_pages != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SendPages: ", bytes.size(), " bytes are not ", num_pages, " equal pages"));
    }
    const size_t page_bytes = bytes.size() / num_pages;
    const int per_message = static_cast<int>(
        std::max<size_t>(1, stream_->max_message_bytes() / std::max<size_t>(1, page_bytes)));
    for (int i = 0; i < num_pages; i += per_message) {
      const int n = std::min(per_message, num_pages - i);
      v1::KvPushMessage msg;
      auto* run = msg.mutable_pages();
      run->set_layer(layer);
      run->set_first_page_index(first_page_index + i);
      run->set_num_pages(n);
      std::string* payload = run->mutable_payload();
      payload->assign(reinterpret_cast<const char*>(bytes.data()) + i * page_bytes,
                      n * page_bytes);
      run->set_crc32(Crc32(*payload));
      absl::Status s = stream_->Enqueue(std::move(msg), n * page_bytes, false, nullptr);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  void Complete(const KvCompletion& c, std::function<void(absl::Status)> done) override {
    completed_ = true;
    v1::KvPushMessage msg;
    auto* complete = msg.mutable_complete();
    complete->set_first_token(c.first_token);
    complete->set_num_layers(c.num_layers);
    complete->set_num_pages(c.num_pages);
    complete->set_total_bytes(c.total_bytes);
    complete->set_source_rank(source_rank_);
    (void)stream_->Enqueue(std::move(msg), 0, /*is_complete=*/true, std::move(done));
  }

  void Abort(const absl::Status& reason) override { stream_->Abort(reason); }
  absl::Status status() const override { return stream_->status(); }
  int64_t bytes_sent() const override { return stream_->sent_bytes(); }
  // The host-payload sender takes bytes, not page ids: the rank only names the route's source.
  absl::Status SetSourceRank(int rank) override {
    if (rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat("KV source rank ", rank, " is negative"));
    }
    source_rank_ = rank;
    return absl::OkStatus();
  }
  std::string rank_route() const override { return stream_->rank_route(); }

 private:
  std::shared_ptr<PushStream> stream_;
  bool completed_ = false;
  int source_rank_ = 0;
};

}  // namespace

TcpKvTransport::TcpKvTransport(std::shared_ptr<const common::ClusterDialer> dialer,
                               int connections_per_endpoint)
    : dialer_(std::move(dialer)), connections_per_endpoint_(std::max(1, connections_per_endpoint)) {
  common::KeepGrpcCallbackQueueAlive();
  watchdog_ = std::thread([this] { WatchdogLoop(); });
}

TcpKvTransport::~TcpKvTransport() {
  std::vector<std::shared_ptr<PushStream>> live;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
    for (auto& w : streams_) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  watchdog_.join();
  for (auto& s : live) s->Abort(absl::UnavailableError("KV transport shutting down"));
  // Streams finish asynchronously; wait (bounded) so none outlives the channels.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  for (auto& s : live) {
    while (!s->finished() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  }
}

std::shared_ptr<grpc::Channel> TcpKvTransport::ChannelFor(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  EndpointChannels& e = channels_[endpoint];
  if (e.channels.empty()) {
    for (int i = 0; i < connections_per_endpoint_; ++i) {
      grpc::ChannelArguments args;
      args.SetMaxSendMessageSize(-1);
      args.SetMaxReceiveMessageSize(-1);
      // Channels with equal arguments share one connection (gRPC's global subchannel pool):
      // a private pool and a distinct argument give each its own.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("mlaserve.kv_connection", i);
      e.channels.push_back(dialer_->Dial(endpoint, args));
    }
  }
  return e.channels[e.next++ % e.channels.size()];
}

absl::StatusOr<std::unique_ptr<KvSender>> TcpKvTransport::Open(const KvSessionRef& ref,
                                                               const KvLayout& local_layout,
                                                               const KvSenderOptions& options) {
  if (absl::Status s = ValidateSessionRef(ref, local_layout); !s.ok()) return s;
  auto channel = ChannelFor(ref.endpoint);
  auto stub = v1::KvService::NewStub(channel);
  auto stream = common::MakeSelfOwned<PushStream>(ref.session_id, options, channel);
  v1::KvPushMessage open;
  open.mutable_open()->set_session_id(ref.session_id);
  *open.mutable_open()->mutable_layout() = ToProto(local_layout);
  open.mutable_open()->set_sender(options.sender_name);
  open.mutable_open()->set_dest_rank(ref.rank);
  open.mutable_open()->set_cached_pages(ref.cached_pages);  // the runner ships the pages after
  stream->Start(stub.get(), std::move(open));
  {
    absl::MutexLock lock(&mu_);
    streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                  [](const std::weak_ptr<PushStream>& w) { return w.expired(); }),
                   streams_.end());
    streams_.push_back(stream);
    wake_.Signal();
  }
  return std::make_unique<TcpKvSender>(std::move(stream));
}

void TcpKvTransport::WatchdogLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Duration tick = absl::Seconds(1);
    std::vector<std::shared_ptr<PushStream>> live;
    for (auto& w : streams_) {
      if (auto s = w.lock()) {
        tick = std::min(tick, s->no_progress_timeout() / 4);
        live.push_back(std::move(s));
      }
    }
    mu_.Unlock();
    const absl::Time now = absl::Now();
    for (auto& s : live) s->CheckProgress(now);
    live.clear();
    mu_.Lock();
    wake_.WaitWithTimeout(&mu_, std::max(tick, absl::Milliseconds(5)));
  }
}

}  // namespace mlaserve::kvtransfer
