#include "kvtransfer/kv_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/self_owned.h"
#include "kvtransfer/proto_convert.h"

namespace mlaserve::kvtransfer {

namespace v1 = ::mlaserve::v1;
using common::ToGrpcStatus;

// One reactor per PushPages stream. Self-owned (common/self_owned.h) until gRPC's OnDone; the
// receiver's failure callback holds the FinishOnce below, not the reactor.
namespace {

class PushPagesReactor final : public grpc::ServerReadReactor<v1::KvPushMessage>,
                               public common::SelfOwned<PushPagesReactor> {
 public:
  PushPagesReactor(KvReceiver* receiver, v1::KvPushResult* result)
      : receiver_(receiver), result_(result), finish_(std::make_shared<FinishOnce>(this)) {}

  void Start() { StartRead(&msg_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The sender half-closed without `complete`, or the stream was cancelled.
      finish_->Finish(Fail(absl::CancelledError(
          "KV stream ended before its completion (sender aborted or went away)")));
      return;
    }
    absl::Status st;
    switch (msg_.kind_case()) {
      case v1::KvPushMessage::kOpen: {
        if (opened_) {
          st = absl::InvalidArgumentError("KV stream: second open message");
          break;
        }
        {
          absl::MutexLock lock(&mu_);
          session_id_ = msg_.open().session_id();
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
      finish_->Finish(Fail(st));
      return;
    }
    StartRead(&msg_);
  }

  void OnCancel() override {
    Fail(absl::CancelledError("KV sender cancelled the stream or went away"));
  }

  void OnDone() override { ReleaseSelf(); }

 private:
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
  v1::KvPushMessage msg_;
  bool opened_ = false;  // touched by OnReadDone only (reactions on one stream are serial)
  absl::Mutex mu_;  // OnCancel runs on another thread than OnReadDone
  std::string session_id_ ABSL_GUARDED_BY(mu_);
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
  auto reactor = common::MakeSelfOwned<PushPagesReactor>(receiver_, result);
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
