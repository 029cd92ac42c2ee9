// GenerateCall, second half: how a call ends (Complete / Fail, aborts, bookkeeping) and the
// outbox that writes chunks, the terminal message and the status to the client.
#include "absl/strings/str_cat.h"
#include "router/generate_call.h"

namespace mlaserve::router {
namespace {

template <typename Stub>
void SendAbortTo(std::shared_ptr<Stub> stub, const std::string& request_id,
                 absl::Duration timeout) {
  struct State {
    std::shared_ptr<Stub> stub;
    grpc::ClientContext context;
    v1::WorkerAbortRequest request;
    v1::WorkerAbortResponse response;
  };
  auto* s = new State;
  s->stub = std::move(stub);
  s->request.set_request_id(request_id);
  s->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  s->stub->async()->Abort(&s->context, &s->request, &s->response,
                          [s](const grpc::Status&) { delete s; });
}

}  // namespace

bool GenerateCall::CompleteLocked(v1::FinishReason reason, std::optional<int32_t> matched_token) {
  if (phase_ == Phase::kDone) return false;
  phase_ = Phase::kDone;
  if (!output_->stopped()) {
    // End of generation: release text held for a possible stop string or a partial
    // character. A stop string completed by that text still counts.
    if (output_->Finish()) reason = v1::FINISH_REASON_STOP;
  }
  const absl::Time now = absl::Now();
  v1::GenerateResponse response;
  response.set_request_id(request_id_);
  v1::GenerateComplete* c = response.mutable_complete();
  c->set_finish_reason(reason);
  if (output_->stopped()) {
    c->set_matched_stop(*output_->matched_stop());
  } else if (matched_token.has_value()) {
    c->set_matched_token_id(*matched_token);
  }
  c->set_prompt_tokens(static_cast<int32_t>(prompt_ids_.size()));
  c->set_completion_tokens(output_->completion_tokens());
  c->set_local_prefill(local_prefill_);
  if (!local_prefill_) c->set_prefill_worker_id(prefill_id_);
  c->set_decode_worker_id(decode_id_);
  if (first_token_time_.has_value()) {
    c->set_time_to_first_token_s(absl::ToDoubleSeconds(*first_token_time_ - start_time_));
  }
  c->set_e2e_latency_s(absl::ToDoubleSeconds(now - start_time_));
  router_->metrics().e2e_request_latency_seconds->Observe(absl::ToDoubleSeconds(now - start_time_));
  terminal_message_ = std::move(response);
  final_status_ = absl::OkStatus();
  return true;
}

bool GenerateCall::FailLocked(const absl::Status& status) {
  if (phase_ == Phase::kDone) return false;
  phase_ = Phase::kDone;
  // Once the client has seen output, an `error` message tells readers of messages too.
  if (sent_any_ || (output_.has_value() && output_->has_pending())) {
    v1::GenerateResponse response;
    response.set_request_id(request_id_);
    response.mutable_error()->set_code(static_cast<int32_t>(status.code()));
    response.mutable_error()->set_message(std::string(status.message()));
    terminal_message_ = std::move(response);
  }
  final_status_ = status;
  if (status.code() != absl::StatusCode::kCancelled) {
    router_->metrics().requests_failed_total->Increment();
  }
  return true;
}

void GenerateCall::ReleasePrefillLoadLocked() {
  if (!prefill_charged_) return;
  prefill_charged_ = false;
  router_->registry().AddRouterLoad(
      prefill_id_, {.inflight = -1, .prefill_tokens = -static_cast<int64_t>(prompt_ids_.size())});
}

void GenerateCall::AfterEnd(bool abort_workers) {
  if (abort_workers) SendWorkerAborts();
  bool released = false;
  {
    absl::MutexLock lock(&mu_);
    if (decode_charged_) {
      decode_charged_ = false;
      released = true;
      router_->registry().AddRouterLoad(
          decode_id_, {.inflight = -1, .reserved_pages = -decode_charged_pages_});
    }
    // A prefill still running after a normal end is about to answer; its load is gone.
    ReleasePrefillLoadLocked();
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
    if (prefill_context_) to_cancel.push_back(prefill_context_.get());
    if (decode_contacted_) decode_stub = router_->channels().Decode(decode_address_);
    if (prefill_contacted_) prefill_stub = router_->channels().Prefill(prefill_address_);
  }
  // Contexts live as long as the call, and TryCancel before a call starts cancels it at start.
  for (grpc::ClientContext* context : to_cancel) context->TryCancel();
  const absl::Duration timeout = router_->options().abort_timeout;
  if (decode_stub) SendAbortTo(std::move(decode_stub), request_id_, timeout);
  if (prefill_stub) SendAbortTo(std::move(prefill_stub), request_id_, timeout);
}

void GenerateCall::SendDecodeAbort(std::shared_ptr<v1::DecodeWorker::Stub> stub) {
  SendAbortTo(std::move(stub), request_id_, router_->options().abort_timeout);
}

void GenerateCall::Pump() {
  enum class Action { kNone, kSend, kEnd } action = Action::kNone;
  absl::Status status;
  v1::GenerateResponse message;
  {
    absl::MutexLock lock(&mu_);
    if (finish_called_ || write_in_flight_) return;
    if (client_gone_) {
      // Nothing more reaches the client; finish once the call has ended.
      if (phase_ != Phase::kDone) return;
      finish_called_ = true;
      action = Action::kEnd;
      status = final_status_.value_or(absl::CancelledError("cancelled"));
    } else if (output_.has_value() && output_->has_pending()) {
      PendingChunk chunk = output_->TakeChunk();
      message.set_request_id(request_id_);
      v1::GenerateChunk* c = message.mutable_chunk();
      if (include_token_ids_) c->mutable_token_ids()->Assign(chunk.token_ids.begin(), chunk.token_ids.end());
      if (include_text_) c->set_text(std::move(chunk.text));
      c->set_prompt_tokens(static_cast<int32_t>(prompt_ids_.size()));
      c->set_completion_tokens(output_->completion_tokens());
      write_in_flight_ = true;
      sent_any_ = true;
      action = Action::kSend;
    } else if (terminal_message_.has_value()) {
      message = *std::move(terminal_message_);
      terminal_message_.reset();
      write_in_flight_ = true;
      sent_any_ = true;
      action = Action::kSend;
    } else if (phase_ == Phase::kDone && final_status_.has_value()) {
      finish_called_ = true;
      status = *final_status_;
      action = Action::kEnd;
    }
  }
  if (action == Action::kSend) {
    client_->Send(message);
  } else if (action == Action::kEnd) {
    client_->End(status);
  }
}

}  // namespace mlaserve::router
