#include "kvtransfer/kv_service.h"

#include <memory>

#include <grpcpp/alarm.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/self_owned.h"
#include "kvtransfer/proto_convert.h"
#include "spdlog/spdlog.h"

namespace mlaserve::kvtransfer {

namespace v1 = ::mlaserve::v1;
using common::ToGrpcStatus;

// One reactor per PushPages stream. Self-owned (common/self_owned.h) until gRPC's OnDone; the
// receiver's failure callback holds the FinishOnce below, not the reactor.
namespace {

class PushPagesReactor final : public grpc::ServerReadReactor<v1::KvPushMessage>,
                               public common::SelfOwned<PushPagesReactor> {
 public:
  PushPagesReactor(KvReceiver* receiver, v1::KvPushResult* result, std::string peer)
      : receiver_(receiver),
        result_(result),
        peer_(std::move(peer)),
        finish_(std::make_shared<FinishOnce>(this)) {}

  // Until its first message arrives no session's deadline covers the stream, so it gets one of
  // its own (the receiver's no-progress deadline): a peer that sends half a message and stops
  // is dropped, with what gRPC buffered of the message, instead of holding both forever.
  void Start() {
    const absl::Duration timeout = receiver_->no_progress_timeout();
    // gRPC keeps the callback after it ran: it moves its reference out, or the reactor would
    // hold itself through its own alarm forever.
    first_message_alarm_.Set(absl::ToChronoTime(absl::Now() + timeout),
                             [self = SelfRef(), timeout](bool fired) mutable {
                               std::shared_ptr<PushPagesReactor> reactor = std::move(self);
                               if (fired) reactor->OnFirstMessageDeadline(timeout);
                             });
    StartRead(&msg_);
  }

  void OnReadDone(bool ok) override {
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      first = !first_message_seen_;
      first_message_seen_ = true;
    }
    if (first) first_message_alarm_.Cancel();  // its callback lets go of the reactor
    if (!ok) {
      // The sender half-closed without `complete`, or the stream was cancelled (or gRPC could
      // not parse a message).
      const absl::Status why = absl::CancelledError(
          "KV stream ended before its completion (sender aborted or went away)");
      if (msg_session().empty()) LogRefused(why);  // a session's failure is logged with it
      finish_->Finish(Fail(why));
      return;
    }
    absl::Status st;
    switch (msg_.kind_case()) {
      case v1::KvPushMessage::kOpen: {
        if (opened_) {
          st = absl::InvalidArgumentError("KV stream: second open message");
          break;
        }
        opened_ = true;
        auto layout = FromProto(msg_.open().layout());
        // The receiver may fail the session from another thread at any time, even while
        // this reactor finishes and is destroyed: the callback holds the shared FinishOnce,
        // not the reactor.
        st = layout.ok() ? receiver_->Open(msg_.open().session_id(), *layout,
                                           [finish = finish_](const absl::Status& why) {
                                             finish->Finish(ToGrpcStatus(why));
                                           },
                                           msg_.open().dest_rank(), msg_.open().cached_pages())
                         : layout.status();
        // The stream owns the session (and fails it when it breaks) only once its open was
        // taken. A refused open leaves it alone: Open ended it where that is right (an
        // unopened session and an incompatible layout); another stream may be transferring it
        // (ALREADY_EXISTS); a layout that does not parse leaves it, as nccl's Connect does, to
        // the router's abort (the sender's prefill fails) or its lease.
        if (st.ok()) {
          absl::MutexLock lock(&mu_);
          session_id_ = msg_.open().session_id();
        }
        break;
      }
      case v1::KvPushMessage::kPage: {
        if (!opened_) {
          st = absl::FailedPreconditionError("KV stream: page before open");
          break;
        }
        const auto& p = msg_.page();
        st = receiver_->WritePage(
            msg_session(), p.layer(), p.page_index(),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p.payload().data()),
                                     p.payload().size()),
            p.crc32());
        break;
      }
      case v1::KvPushMessage::kPages: {
        if (!opened_) {
          st = absl::FailedPreconditionError("KV stream: pages before open");
          break;
        }
        const auto& run = msg_.pages();
        st = receiver_->WritePages(
            msg_session(), run.layer(), run.first_page_index(), run.num_pages(),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(run.payload().data()),
                                     run.payload().size()),
            run.crc32());
        break;
      }
      case v1::KvPushMessage::kComplete: {
        if (!opened_) {
          st = absl::FailedPreconditionError("KV stream: complete before open");
          break;
        }
        const auto& c = msg_.complete();
        KvCompletion completion{c.first_token(), c.num_layers(), c.num_pages(), c.total_bytes(),
                                c.source_rank()};
        auto stats = receiver_->Complete(msg_session(), completion);
        if (stats.ok()) {
          result_->set_bytes_received(stats->bytes_received);
          result_->set_pages_written(stats->pages_written);
          result_->set_rank_route(stats->route.Describe());
          finish_->Finish(grpc::Status::OK);
          return;
        }
        st = stats.status();
        break;
      }
      default:
        st = absl::InvalidArgumentError("KV stream: empty message");
    }
    if (!st.ok()) {
      if (msg_session().empty()) LogRefused(st);
      finish_->Finish(Fail(st));
      return;
    }
    StartRead(&msg_);
  }

  void OnCancel() override {
    Fail(absl::CancelledError("KV sender cancelled the stream or went away"));
  }

  void OnDone() override {
    first_message_alarm_.Cancel();  // its callback holds a reference: let go of it now
    ReleaseSelf();
  }

 private:
  // A stream refused without a session of its own (the receiver logs its sessions' failures).
  void LogRefused(const absl::Status& why) const {
    spdlog::warn("KV stream from {} refused: {}", peer_, why.ToString());
  }

  void OnFirstMessageDeadline(absl::Duration timeout) {
    {
      absl::MutexLock lock(&mu_);
      if (first_message_seen_) return;
    }
    spdlog::warn("KV stream from {}: no complete first message within {}; dropped", peer_,
                 absl::FormatDuration(timeout));
    finish_->Finish(grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("KV stream: no complete first message (open) within ",
                     absl::FormatDuration(timeout))));
  }

  // Finish exactly once, whichever comes first: this stream's own verdict or the receiver
  // failing the session (lease / no progress / cancel, from another thread). Shared with the
  // receiver's callback, so it outlives the reactor: only the first caller touches the
  // reactor, and OnDone (which releases it) comes only after that Finish.
  class FinishOnce {
   public:
    explicit FinishOnce(PushPagesReactor* reactor) : reactor_(reactor) {}
    void Finish(const grpc::Status& status) {
      {
        absl::MutexLock lock(&mu_);
        if (finished_) return;
        finished_ = true;
      }
      reactor_->Finish(status);
    }

   private:
    PushPagesReactor* const reactor_;
    absl::Mutex mu_;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  std::string msg_session() {
    absl::MutexLock lock(&mu_);
    return session_id_;
  }
  // Fails the session (no-op once it ended) and returns the status to finish with.
  grpc::Status Fail(const absl::Status& why) {
    const std::string id = msg_session();
    if (!id.empty()) receiver_->Fail(id, why);
    return ToGrpcStatus(why);
  }

  KvReceiver* const receiver_;
  v1::KvPushResult* const result_;
  const std::string peer_;  // for logs
  v1::KvPushMessage msg_;
  bool opened_ = false;  // touched by OnReadDone only (reactions on one stream are serial)
  absl::Mutex mu_;  // OnCancel and the alarm run on other threads than OnReadDone
  std::string session_id_ ABSL_GUARDED_BY(mu_);  // set once Open took the session
  bool first_message_seen_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Alarm first_message_alarm_;
  const std::shared_ptr<FinishOnce> finish_;
};

}  // namespace

grpc::ServerReadReactor<v1::KvPushMessage>* KvServiceImpl::PushPages(
    grpc::CallbackServerContext* context, v1::KvPushResult* result) {
  if (authorizer_ != nullptr) {
    if (grpc::Status s = authorizer_->Check(*context, common::Privilege::kCluster); !s.ok()) {
      return common::RefuseRead<v1::KvPushMessage>(s);
    }
  }
  auto reactor = common::MakeSelfOwned<PushPagesReactor>(receiver_, result, context->peer());
  reactor->Start();
  return reactor.get();
}

grpc::ServerUnaryReactor* KvServiceImpl::AbortSession(grpc::CallbackServerContext* context,
                                                      const v1::KvAbortSessionRequest* request,
                                                      v1::KvAbortSessionResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kCluster)) {
    return refused;
  }
  auto* reactor = context->DefaultReactor();
  const bool found = receiver_->Fail(
      request->session_id(),
      absl::CancelledError(absl::StrCat("KV session aborted by the sender: ", request->reason())));
  reactor->Finish(found ? grpc::Status::OK
                        : grpc::Status(grpc::StatusCode::NOT_FOUND,
                                       absl::StrCat("KV session ", request->session_id(),
                                                    " is unknown (ended or never reserved)")));
  return reactor;
}

}  // namespace mlaserve::kvtransfer
