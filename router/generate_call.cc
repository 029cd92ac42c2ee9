// GenerateCall, first half: starting (Prepare), admission, Reserve with its retries, and the
// worker calls' events. How a call ends is in generate_call_end.cc.
#include "router/generate_call.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/request_limits.h"
#include "common/status.h"
#include "kernels/common/page.h"
#include "router/api_conversion.h"
#include "router/validation.h"
#include "spdlog/spdlog.h"

namespace mlaserve::router {

// The decode worker's token stream. Owned by the call (for TryCancel), and holding the call
// from Start until its OnDone, gRPC's last reaction: the call outlives every reaction.
class GenerateCall::DecodeStreamReader final
    : public grpc::ClientReadReactor<v1::DecodeStreamResponse> {
 public:
  explicit DecodeStreamReader(std::shared_ptr<GenerateCall> call) : call_(std::move(call)) {}

  void Start(v1::DecodeWorker::Stub* stub, const std::string& session_id, absl::Time deadline) {
    request_.set_session_id(session_id);
    context_.set_deadline(absl::ToChronoTime(deadline));
    stub->async()->Stream(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status
    call_->OnDecodeMessage(response_);
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<GenerateCall> call = std::move(call_);
    call->OnDecodeStreamDone(status);
  }  // `call` may be the last reference: the call, and this reader with it, go here
  grpc::ClientContext& context() { return context_; }

 private:
  std::shared_ptr<GenerateCall> call_;
  grpc::ClientContext context_;
  v1::DecodeStreamRequest request_;
  v1::DecodeStreamResponse response_;
};

GenerateCall* GenerateCall::Start(RouterContext* router, GenerateClient* client,
                                  absl::Time client_deadline,
                                  const absl::StatusOr<v1::GenerateRequest>& request) {
  std::shared_ptr<GenerateCall> call =
      common::MakeSelfOwned<GenerateCall>(Key{}, router, client, client_deadline);
  call->Begin(request);
  return call.get();  // alive until the client's OnDone, whatever happened in Begin
}

GenerateCall::GenerateCall(Key, RouterContext* router, GenerateClient* client,
                           absl::Time client_deadline)
    : router_(router), start_time_(absl::Now()), outbox_(client) {
  router_->CallStarted();
  request_deadline_ = std::min(start_time_ + router_->options().request_timeout, client_deadline);
  queue_deadline_ = std::min(request_deadline_, start_time_ + router_->options().queue_timeout);
}

void GenerateCall::Begin(const absl::StatusOr<v1::GenerateRequest>& request) {
  absl::Status st = Prepare(request);
  if (!st.ok()) {
    FailNow(st);
    return;
  }
  bool no_room_now = false;
  st = Place(&no_room_now);
  if (!st.ok()) {
    WaitForRoomOrFail(st, no_room_now);
    return;
  }
  StartReserve();
}

GenerateCall::~GenerateCall() { router_->CallEnded(); }

absl::Status GenerateCall::Prepare(const absl::StatusOr<v1::GenerateRequest>& request) {
  if (!request.ok()) return request.status();
  const v1::GenerateRequest& req = *request;

  // The router's one check of a request (the public edge); workers check again at theirs.
  RETURN_IF_ERROR(common::ValidateRequestId(req.request_id()));
  RETURN_IF_ERROR(common::ValidateCacheSalt(req.cache_salt()));
  cache_salt_ = req.cache_salt();
  const ModelLimits& limits = router_->model().limits;
  switch (req.input_case()) {
    case v1::GenerateRequest::kText: {
      if (req.text().empty()) return absl::InvalidArgumentError("prompt is empty: text is \"\"");
      RETURN_IF_ERROR(
          ValidatePromptBytes(req.text().size(), router_->codec().MaxBytesPerToken(), limits));
      ASSIGN_OR_RETURN(RouterContext::TokenizingClaim claim,
                       router_->ClaimTokenizing(req.text().size()));
      ASSIGN_OR_RETURN(prompt_ids_, router_->codec().Encode(req.text()));
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      prompt_ids_.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      break;
    default:
      return absl::InvalidArgumentError("prompt is empty: set text or token_ids");
  }
  RETURN_IF_ERROR(ValidatePrompt(prompt_ids_, limits));
  RETURN_IF_ERROR(ValidateSamplingProto(req.sampling()));
  sampling_ = SamplingFromProto(req.sampling());
  RETURN_IF_ERROR(ValidateAndResolveSampling(sampling_, static_cast<int32_t>(prompt_ids_.size()),
                                             limits));
  if (!sampling_.seed.has_value()) {
    absl::BitGen gen;
    sampling_.seed = absl::Uniform<uint64_t>(gen);
  }
  request_id_ = req.request_id().empty() ? router_->NewRequestId() : req.request_id();
  const int32_t prompt_tokens = static_cast<int32_t>(prompt_ids_.size());
  const v1::OutputOptions& output = req.output();
  outbox_.Open(
      {.request_id = request_id_,
       .prompt_tokens = prompt_tokens,
       .include_token_ids = !output.has_include_token_ids() || output.include_token_ids(),
       .include_text = !output.has_include_text() || output.include_text()},
      OutputAssembler(router_->codec().NewDetokenizer(prompt_ids_, sampling_.skip_special_tokens),
                      StopStringMatcher(sampling_.stop, sampling_.include_stop_str_in_output),
                      StopTokensWithoutText(sampling_, limits.eos_token_ids)));
  {
    absl::MutexLock lock(&mu_);
    placement_.emplace(&router_->registry(),
                       DecodePlacement::Options{
                           .max_attempts = router_->options().max_reserve_attempts,
                           .reserve_timeout = router_->options().reserve_timeout,
                           // The prefill worker returns no logprobs for the first token,
                           // and none for the prompt (the decode worker scores its rows).
                           .prefill_locally = sampling_.wants_logprobs() ||
                                              sampling_.wants_prompt_logprobs(),
                           .prefix_affinity = router_->prefix_affinity(),
                           .prompt_ids = prompt_ids_,
                           .cache_salt = cache_salt_,
                           .decode_affinity = router_->options().decode_affinity,
                           .decode_cache_usable = !sampling_.wants_prompt_logprobs(),
                           .remote_prefill_reuse = router_->options().remote_prefill_reuse},
                       prompt_tokens, *sampling_.max_new_tokens);
  }
  RETURN_IF_ERROR(router_->requests().Insert(request_id_, weak_from_this()));
  registered_ = true;
  router_->total_requests().fetch_add(1);
  router_->metrics().requests_total->Increment();
  router_->metrics().requests_running->Add(1);
  router_->metrics().prompt_tokens_total->Increment(static_cast<double>(prompt_ids_.size()));
  return absl::OkStatus();
}

absl::Status GenerateCall::Place(bool* no_room_now) {
  absl::MutexLock lock(&mu_);
  absl::Status st = placement_->Rank();
  *no_room_now = placement_->no_room_now();
  return st;
}

void GenerateCall::WaitForRoomOrFail(const absl::Status& why, bool no_room_now) {
  if (!no_room_now) {
    FailNow(why);
    return;
  }
  if (absl::Now() >= queue_deadline_) {
    FailNow(WithWaitTime(why));
    return;
  }
  // A bounded queue: past the limit a request fails at once rather than holding memory.
  if (const int limit = router_->options().max_queued_requests;
      router_->admission().size() >= limit) {
    FailNow(absl::ResourceExhaustedError(absl::StrCat(
        "the router's queue is full (", limit, " requests waiting for KV room, "
        "--max-queued-requests): ", why.message())));
    return;
  }
  last_no_room_ = why;
  if (!waiting_.exchange(true)) router_->metrics().requests_waiting->Add(1);
  router_->admission().Add(SelfRef());
}

AdmissionQueue::Waiter::Outcome GenerateCall::RetryAdmission(absl::Time now) {
  // Ended meanwhile (the client left): leave the queue.
  if (ExpireIfDue(absl::InfinitePast())) return Outcome::kEnded;
  bool no_room_now = false;
  absl::Status st = Place(&no_room_now);
  if (st.ok()) {
    if (waiting_.exchange(false)) router_->metrics().requests_waiting->Add(-1);
    StartReserve();
    return Outcome::kAdmitted;
  }
  last_no_room_ = st;
  if (no_room_now && now < queue_deadline_) return Outcome::kStillWaiting;
  ExpireIfDue(absl::InfiniteFuture());
  return Outcome::kEnded;
}

bool GenerateCall::ExpireIfDue(absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kReserving) {
      if (waiting_.exchange(false)) router_->metrics().requests_waiting->Add(-1);
      return true;
    }
  }
  if (now < queue_deadline_) return false;
  if (waiting_.exchange(false)) router_->metrics().requests_waiting->Add(-1);
  FailNow(WithWaitTime(last_no_room_));
  return true;
}

absl::Status GenerateCall::WithWaitTime(const absl::Status& why) const {
  if (absl::Now() - start_time_ < absl::Milliseconds(1)) return why;  // no queue: as it was
  const absl::Duration waited = absl::Trunc(absl::Now() - start_time_, absl::Milliseconds(1));
  return absl::Status(why.code(), absl::StrCat(why.message(), " (waited ",
                                               absl::FormatDuration(waited), " for room)"));
}

grpc::ClientContext* GenerateCall::StreamContextLocked() {
  return stream_ ? &stream_->context() : nullptr;
}

absl::Time GenerateCall::CallDeadline(absl::Duration step_timeout) const {
  return std::min(absl::Now() + step_timeout, request_deadline_);
}

void GenerateCall::StartReserve() {
  std::shared_ptr<v1::DecodeWorker::Stub> stub;
  ReserveAttempt* attempt = nullptr;
  size_t index = 0;
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kReserving) return;
    absl::StatusOr<DecodePlacement::Target> target = placement_->Next();
    if (!target.ok()) {
      ended = FailLocked(target.status());
    } else {
      reserve_attempts_.push_back(std::make_unique<ReserveAttempt>());
      index = reserve_attempts_.size() - 1;
      attempt = reserve_attempts_.back().get();
      attempt->request.set_request_id(request_id_);
      attempt->request.mutable_prompt_token_ids()->Assign(prompt_ids_.begin(), prompt_ids_.end());
      *attempt->request.mutable_sampling() = SamplingToProto(sampling_);
      attempt->request.set_local_prefill(target->local_prefill);
      attempt->request.set_cache_salt(cache_salt_);  // a local prefill uses D's prefix cache
      if (!target->local_prefill) {
        attempt->request.set_prefill_kv_compat_hash(target->prefill_kv_compat_hash);
        // D keeps what its prefix cache holds of the prompt; P ships the rest.
        attempt->request.set_reuse_cached_pages(target->reuse_cached_pages);
      }
      attempt->context.set_deadline(
          absl::ToChronoTime(CallDeadline(router_->options().reserve_timeout)));
      stub = router_->channels().Decode(target->decode_address);
    }
  }
  if (ended) {
    AfterEnd(/*abort_workers=*/false);
    outbox_.Pump();
    return;
  }
  stub->async()->Reserve(&attempt->context, &attempt->request, &attempt->response,
                         [self = SelfRef(), index](grpc::Status s) {
                           self->OnReserveDone(index, s);
                         });
}

void GenerateCall::OnReserveDone(size_t index, const grpc::Status& status) {
  bool ended = false, late_success = false;
  std::optional<DecodePlacement::Failure> failure;
  std::string hung_address;
  v1::ReserveResponse reserved;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kReserving) {
      // The call ended while Reserve was in flight: the Abort sent then may have reached
      // the worker before the reservation did, so send another.
      late_success = status.ok();
    } else if (status.ok()) {
      reserved = reserve_attempts_[index]->response;
      placement_->Reserved(reserved.reserved_pages());
      phase_ = Phase::kRunning;
    } else {
      failure = placement_->ReserveFailed(status, absl::Now() < request_deadline_);
      if (failure->hung) {
        // Should it wake up, the reservation it may still make must be let go.
        hung_address = placement_->decode_address();
        spdlog::warn("decode worker {} ({}) did not answer Reserve of request {} within {}; "
                     "marking it unhealthy{}",
                     placement_->decode_id(), hung_address, common::IdForMessages(request_id_),
                     absl::FormatDuration(router_->options().reserve_timeout),
                     placement_->more_candidates() ? " and trying another" : "");
      }
      if (failure->verdict == DecodePlacement::Failure::Verdict::kFail) {
        ended = FailLocked(failure->error);
      }
    }
  }
  if (late_success) SendWorkerAborts();
  if (!hung_address.empty()) SendDecodeAbort(hung_address);
  if (ended) {
    AfterEnd(/*abort_workers=*/false);
    outbox_.Pump();
  }
  if (status.ok() && !late_success) StartStreamAndPrefill(reserved);
  if (!failure.has_value()) return;
  if (failure->verdict == DecodePlacement::Failure::Verdict::kRetry) StartReserve();
  if (failure->verdict == DecodePlacement::Failure::Verdict::kWaitForRoom) {
    WaitForRoomOrFail(failure->error, /*no_room_now=*/true);
  }
}

void GenerateCall::StartStreamAndPrefill(const v1::ReserveResponse& reserved) {
  std::shared_ptr<v1::DecodeWorker::Stub> decode_stub;
  std::shared_ptr<v1::PrefillWorker::Stub> prefill_stub;
  DecodeStreamReader* reader;
  PrefillCall* prefill = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kRunning) return;  // ended meanwhile; aborts were sent
    stream_ = std::make_unique<DecodeStreamReader>(SelfRef());
    reader = stream_.get();
    decode_stub = router_->channels().Decode(placement_->decode_address());
    if (placement_->decode_affinity_rebalanced()) {
      router_->metrics().decode_affinity_rebalanced_total->Increment();
    }
    if (placement_->local_prefill()) {
      router_->metrics().local_prefill_total->Increment();
      router_->metrics().decode_affinity_tokens_total->Increment(
          static_cast<double>(placement_->decode_expected_cached_tokens()));
    } else {
      prefill_ = std::make_unique<PrefillCall>();
      prefill = prefill_.get();
      prefill->context.set_deadline(
          absl::ToChronoTime(CallDeadline(router_->options().prefill_timeout)));
      prefill->request.set_request_id(request_id_);
      prefill->request.mutable_token_ids()->Assign(prompt_ids_.begin(), prompt_ids_.end());
      prefill->request.set_cache_salt(cache_salt_);
      *prefill->request.mutable_sampling() = SamplingToProto(sampling_);
      *prefill->request.mutable_kv_session() = reserved.session();  // cached_pages included
      router_->metrics().decode_reused_tokens_total->Increment(
          static_cast<double>(reserved.session().cached_pages()) * kernels::kPageSize);
      placement_->ChargePrefill();
      router_->metrics().prefix_affinity_tokens_total->Increment(
          static_cast<double>(placement_->prefill_expected_cached_tokens()));
      prefill_stub = router_->channels().Prefill(placement_->prefill_address());
    }
  }
  // The decode worker starts decoding once its Stream is open and the KV has landed; opening
  // the stream first lets it see the first token as soon as it exists.
  reader->Start(decode_stub.get(), reserved.session_id(), request_deadline_);
  if (prefill_stub) {
    prefill_stub->async()->Prefill(&prefill->context, &prefill->request, &prefill->response,
                                   [self = SelfRef()](grpc::Status s) { self->OnPrefillDone(s); });
  }
}

void GenerateCall::OnDecodeMessage(const v1::DecodeStreamResponse& message) {
  bool ended = false, abort_workers = false;
  {
    absl::MutexLock lock(&mu_);
    // After a failed KV transfer the call only waits for the stream's end (OnPrefillDone).
    if (phase_ != Phase::kRunning || kv_transfer_failure_.has_value()) return;
    if (message.has_tokens()) {
      const auto& ids = message.tokens().token_ids();
      if (message.tokens().cached_prompt_tokens() > 0) {  // a local prefill's first tokens
        local_cached_tokens_ = message.tokens().cached_prompt_tokens();
      }
      const absl::Time now = absl::Now();
      RouterMetrics& m = router_->metrics();
      if (!ids.empty()) {
        if (!first_token_time_.has_value()) {
          first_token_time_ = now;
          m.time_to_first_token_seconds->Observe(absl::ToDoubleSeconds(now - start_time_));
        } else {
          const double gap = absl::ToDoubleSeconds(now - last_token_time_) / ids.size();
          for (int i = 0; i < ids.size(); ++i) m.inter_token_latency_seconds->Observe(gap);
        }
        last_token_time_ = now;
      }
      // A local prefill's prompt rows come first, before its first tokens, led by the prompt's
      // first token, which has no distribution before it (and no entry from the worker).
      if (sampling_.wants_prompt_logprobs() && !prompt_head_sent_) {
        google::protobuf::RepeatedPtrField<v1::PromptTokenLogprobs> head;
        head.Add()->set_token_id(prompt_ids_.front());
        outbox_.AddPromptLogprobs(head);
        prompt_head_sent_ = true;
      }
      outbox_.AddPromptLogprobs(message.tokens().prompt_logprobs());
      std::vector<const v1::TokenLogprobs*> logprobs;
      for (const v1::TokenLogprobs& lp : message.tokens().logprobs()) logprobs.push_back(&lp);
      const ClientOutbox::Added added =
          outbox_.AddTokens(std::span<const int32_t>(ids.data(), ids.size()), logprobs);
      if (router_->prefix_affinity() != nullptr) {  // for RecordDecoded at the end
        generated_ids_.insert(generated_ids_.end(), ids.begin(), ids.begin() + added.tokens);
      }
      m.generation_tokens_total->Increment(added.tokens);
      if (added.stopped) {
        ended = CompleteLocked(v1::FINISH_REASON_STOP, std::nullopt);
        abort_workers = true;  // the decode worker does not know about stop strings
      }
    } else if (message.has_finished()) {
      const v1::DecodeFinished& f = message.finished();
      std::optional<int32_t> matched;
      if (f.has_matched_token_id()) matched = f.matched_token_id();
      ended = CompleteLocked(f.finish_reason(), matched);
    }
  }
  if (ended) AfterEnd(abort_workers);
  outbox_.Pump();
}

void GenerateCall::OnDecodeStreamDone(const grpc::Status& status) {
  bool ended = false;
  grpc::Alarm* grace = nullptr;
  {
    absl::MutexLock lock(&mu_);
    stream_done_ = true;
    grace = stream_grace_.get();
    const std::string& id = placement_->decode_id();
    const std::string& address = placement_->decode_address();
    const absl::Status error = WorkerError("token stream from decode worker", id, address, status);
    // A decode worker that went away is marked unhealthy whatever else happened to the call
    // (it may have ended already: the client left, or the wait after a failed KV transfer ran
    // out), and before the client hears of it.
    if (WorkerLooksGone(status)) {
      router_->registry().ReportFailure(id, std::string(error.message()), absl::Now());
    }
    if (phase_ == Phase::kDone) {
      ended = false;
    } else if (kv_transfer_failure_.has_value()) {
      // The prefill worker reported the failed KV transfer first: the client hears of that.
      ended = FailLocked(*kv_transfer_failure_);
    } else if (status.ok()) {
      ended = FailLocked(absl::UnavailableError(absl::StrCat("decode worker ", id, " (", address,
                                                             ") ended the token stream without a "
                                                             "final message")));
    } else {
      ended = FailLocked(error);
    }
  }
  if (grace != nullptr) grace->Cancel();  // its callback lets go of the call
  if (ended) AfterEnd(/*abort_workers=*/true);
  outbox_.Pump();
}

void GenerateCall::OnPrefillDone(const grpc::Status& status) {
  bool ended = false;
  grpc::Alarm* grace = nullptr;  // set when the call waits for D's stream
  std::string decode_address;
  {
    absl::MutexLock lock(&mu_);
    placement_->ReleasePrefill();
    prefill_answered_ = true;
    if (held_completion_.has_value()) {  // D's stream ended first (CompleteLocked)
      HeldCompletion& h = *held_completion_;
      if (status.ok()) {
        h.complete.set_cached_prompt_tokens(prefill_->response.cached_tokens());
        router_->metrics().cached_prompt_tokens_total->Increment(h.complete.cached_prompt_tokens());
      }
      outbox_.Complete(h.reason, h.matched_token, std::move(h.complete));
      held_completion_.reset();
      ended = true;  // (pumped below; the call itself ended already)
    }
  }
  if (ended) {
    outbox_.Pump();
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone || status.ok()) return;  // the first token comes from D's stream
    const DecodePlacement& p = *placement_;
    if (status.error_code() == grpc::StatusCode::ABORTED) {
      // The prefill worker is fine; its KV transfer to the decode worker failed (the decode
      // worker died or stalled). Tell the client so, naming the decode worker. If D's stream is
      // still open, its end says whether D died (then the registry hears of it before the
      // client does, so the next request is not routed to a dead worker): the call waits for it,
      // at most abort_timeout, after asking D to abort (a live D ends the stream at once).
      absl::Status error = absl::UnavailableError(absl::StrCat(
          "KV transfer from prefill worker ", p.prefill_id(), " to decode worker ", p.decode_id(),
          " (", p.decode_address(), ") failed: ", status.error_message()));
      if (stream_ != nullptr && !stream_done_) {
        kv_transfer_failure_ = std::move(error);
        stream_grace_ = std::make_unique<grpc::Alarm>();
        grace = stream_grace_.get();
        decode_address = p.decode_address();
      } else {
        ended = FailLocked(error);
      }
    } else {
      const absl::Status error =
          WorkerError("prefill on prefill worker", p.prefill_id(), p.prefill_address(), status);
      if (WorkerLooksGone(status)) {
        router_->registry().ReportFailure(p.prefill_id(), std::string(error.message()),
                                          absl::Now());
      }
      ended = FailLocked(error);
    }
  }
  if (grace != nullptr) {
    // Set once, outside mu_ (the alarm may fire at once). The callback holds the call until it
    // runs (fired, or cancelled by OnDecodeStreamDone) and lets go of it there: the alarm's
    // stored callback must not keep the call that owns the alarm.
    grace->Set(absl::ToChronoTime(absl::Now() + router_->options().abort_timeout),
               [self = SelfRef()](bool fired) mutable {
                 std::shared_ptr<GenerateCall> call = std::move(self);
                 if (fired) call->OnStreamGraceEnded();
               });
    SendDecodeAbort(decode_address);
    return;
  }
  if (ended) AfterEnd(/*abort_workers=*/true);
  outbox_.Pump();
}

void GenerateCall::OnStreamGraceEnded() {
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    if (kv_transfer_failure_.has_value()) ended = FailLocked(*kv_transfer_failure_);
  }
  if (ended) AfterEnd(/*abort_workers=*/true);  // cancels the stream
  outbox_.Pump();
}

}  // namespace mlaserve::router
