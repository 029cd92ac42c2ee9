// GenerateCall, second half: how a call ends. Complete and Fail take effect once (phase_ to
// kDone), hand the client's last message and status to the outbox, and AfterEnd then cancels
// the worker calls still open, sends Abort to the workers that hold state, and releases the
// router's bookkeeping. Also the client's own events (cancel, write done, done) and Abort.
#include "absl/strings/str_cat.h"
#include "router/generate_call.h"

namespace mlaserve::router {
namespace {

// One Abort to a worker, fire and forget: self-owned (common/self_owned.h) until its answer.
template <typename Stub>
class WorkerAbortCall final : public common::SelfOwned<WorkerAbortCall<Stub>> {
 public:
  static void Send(std::shared_ptr<Stub> stub, const std::string& request_id,
                   absl::Duration timeout) {
    auto call = common::MakeSelfOwned<WorkerAbortCall>(std::move(stub));
    call->request_.set_request_id(request_id);
    call->context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    call->stub_->async()->Abort(&call->context_, &call->request_, &call->response_,
                                [raw = call.get()](const grpc::Status&) { raw->ReleaseSelf(); });
  }
  explicit WorkerAbortCall(std::shared_ptr<Stub> stub) : stub_(std::move(stub)) {}

 private:
  const std::shared_ptr<Stub> stub_;
  grpc::ClientContext context_;
  v1::WorkerAbortRequest request_;
  v1::WorkerAbortResponse response_;
};

template <typename Stub>
void SendAbortTo(std::shared_ptr<Stub> stub, const std::string& request_id,
                 absl::Duration timeout) {
  WorkerAbortCall<Stub>::Send(std::move(stub), request_id, timeout);
}

}  // namespace

bool GenerateCall::CompleteLocked(v1::FinishReason reason, std::optional<int32_t> matched_token) {
  if (phase_ == Phase::kDone) return false;
  phase_ = Phase::kDone;
  const absl::Time now = absl::Now();
  // What the call knows; the outbox adds what the output knows (reason, tokens, stop).
  v1::GenerateComplete c;
  const bool local = placement_->local_prefill();
  c.set_local_prefill(local);
  if (!local) c.set_prefill_worker_id(placement_->prefill_id());
  c.set_decode_worker_id(placement_->decode_id());
  if (first_token_time_.has_value()) {
    c.set_time_to_first_token_s(absl::ToDoubleSeconds(*first_token_time_ - start_time_));
  }
  c.set_e2e_latency_s(absl::ToDoubleSeconds(now - start_time_));
  router_->metrics().e2e_request_latency_seconds->Observe(absl::ToDoubleSeconds(now - start_time_));
  if (!local && prefill_ != nullptr && !prefill_answered_) {
    held_completion_ = HeldCompletion{reason, matched_token, std::move(c)};  // OnPrefillDone
    return true;
  }
  if (!local && prefill_ != nullptr) {
    c.set_cached_prompt_tokens(prefill_->response.cached_tokens());
  } else if (local) {
    c.set_cached_prompt_tokens(local_cached_tokens_);
  }
  router_->metrics().cached_prompt_tokens_total->Increment(c.cached_prompt_tokens());
  // The decode worker keeps the prompt and all but the last generated token (whose KV it never
  // wrote) in its prefix cache: where the conversation's next turn would find them.
  placement_->RecordDecoded(prompt_ids_, generated_ids_, cache_salt_);
  outbox_.Complete(reason, matched_token, std::move(c));
  return true;
}

bool GenerateCall::FailLocked(const absl::Status& status) {
  if (phase_ == Phase::kDone) return false;
  phase_ = Phase::kDone;
  outbox_.Fail(status);
  if (status.code() != absl::StatusCode::kCancelled) {
    router_->metrics().requests_failed_total->Increment();
  }
  return true;
}

void GenerateCall::AfterEnd(bool abort_workers) {
  if (abort_workers) SendWorkerAborts();
  bool released = false;
  {
    absl::MutexLock lock(&mu_);
    if (placement_.has_value()) {
      released = placement_->ReleaseDecode();
      // A prefill still running after a normal end is about to answer; its load is gone.
      placement_->ReleasePrefill();
    }
  }
  if (registered_) {
    router_->requests().Erase(request_id_, this);
    router_->metrics().requests_running->Add(-1);
  }
  // The pages this request held may be what a waiting one needs; a call that ended while
  // waiting (its client left) is dropped from the queue by the same Kick.
  if (released || waiting_.load()) router_->admission().Kick();
}

void GenerateCall::SendWorkerAborts() {
  std::vector<grpc::ClientContext*> to_cancel;
  std::shared_ptr<v1::DecodeWorker::Stub> decode_stub;
  std::shared_ptr<v1::PrefillWorker::Stub> prefill_stub;
  {
    absl::MutexLock lock(&mu_);
    for (auto& attempt : reserve_attempts_) to_cancel.push_back(&attempt->context);
    if (grpc::ClientContext* c = StreamContextLocked()) to_cancel.push_back(c);
    if (prefill_) to_cancel.push_back(&prefill_->context);
    if (placement_.has_value() && placement_->decode_contacted()) {
      decode_stub = router_->channels().Decode(placement_->decode_address());
    }
    if (placement_.has_value() && placement_->prefill_contacted()) {
      prefill_stub = router_->channels().Prefill(placement_->prefill_address());
    }
  }
  // Contexts live as long as the call, and TryCancel before a call starts cancels it at start.
  for (grpc::ClientContext* context : to_cancel) context->TryCancel();
  const absl::Duration timeout = router_->options().abort_timeout;
  if (decode_stub) SendAbortTo(std::move(decode_stub), request_id_, timeout);
  if (prefill_stub) SendAbortTo(std::move(prefill_stub), request_id_, timeout);
}

void GenerateCall::SendDecodeAbort(const std::string& address) {
  SendAbortTo(router_->channels().Decode(address), request_id_, router_->options().abort_timeout);
}

void GenerateCall::FailNow(const absl::Status& status) {
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    ended = FailLocked(status);
  }
  if (ended) AfterEnd(/*abort_workers=*/false);
  outbox_.Pump();
}

void GenerateCall::Abort() {
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    ended = CompleteLocked(v1::FINISH_REASON_ABORT, std::nullopt);
  }
  if (ended) {
    router_->metrics().requests_aborted_total->Increment();
    AfterEnd(/*abort_workers=*/true);
  }
  outbox_.Pump();
}

void GenerateCall::OnCancel() {
  bool ended;
  outbox_.ClientGone();
  {
    absl::MutexLock lock(&mu_);
    ended = FailLocked(absl::CancelledError("the client cancelled the request"));
  }
  if (ended) {
    router_->metrics().requests_aborted_total->Increment();
    AfterEnd(/*abort_workers=*/true);
  }
  outbox_.Pump();
}

void GenerateCall::OnWriteDone(bool ok) {
  bool ended = false;
  outbox_.WriteDone(ok);
  if (!ok) {
    absl::MutexLock lock(&mu_);
    ended = FailLocked(absl::CancelledError("the client went away"));
  }
  if (ended) AfterEnd(/*abort_workers=*/true);
  outbox_.Pump();
}

void GenerateCall::OnDone() { ReleaseSelf(); }

}  // namespace mlaserve::router
