#include "router/generate_call.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "common/request_limits.h"
#include "common/status.h"
#include "kernels/common/page.h"
#include "router/api_conversion.h"
#include "router/routing_policy.h"
#include "router/validation.h"
#include "spdlog/spdlog.h"

namespace mlaserve::router {
namespace {

std::string DescribeWorkers(const std::vector<WorkerSnapshot>& all) {
  if (all.empty()) return "none is registered";
  std::vector<std::string> parts;
  for (const WorkerSnapshot& w : all) {
    std::string part = absl::StrCat(w.id, " at ", w.address, " is ", StateName(w.state));
    if (!w.last_error.empty()) absl::StrAppend(&part, " (", w.last_error, ")");
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

class GenerateCall::DecodeStreamReader final
    : public grpc::ClientReadReactor<v1::DecodeStreamResponse> {
 public:
  explicit DecodeStreamReader(GenerateCall* call) : call_(call) {}

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
    GenerateCall* call = call_;
    call->OnDecodeStreamDone(status);
    call->Unref();  // may delete the call and this reader with it
  }
  grpc::ClientContext& context() { return context_; }

 private:
  GenerateCall* const call_;
  grpc::ClientContext context_;
  v1::DecodeStreamRequest request_;
  v1::DecodeStreamResponse response_;
};

GenerateCall::GenerateCall(RouterContext* router, GenerateClient* client,
                           absl::Time client_deadline,
                           const absl::StatusOr<v1::GenerateRequest>& request)
    : router_(router), client_(client), start_time_(absl::Now()) {
  router_->CallStarted();
  request_deadline_ = std::min(start_time_ + router_->options().request_timeout, client_deadline);
  queue_deadline_ = std::min(request_deadline_, start_time_ + router_->options().queue_timeout);
  absl::Status st = Prepare(request);
  if (!st.ok()) {
    FailNow(st);
    return;
  }
  st = PickDecodeCandidates();
  if (!st.ok()) {
    WaitForRoomOrFail(st);
    return;
  }
  StartReserve();
}

void GenerateCall::FailNow(const absl::Status& status) {
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    ended = FailLocked(status);
  }
  if (ended) AfterEnd(/*abort_workers=*/false);
  Pump();
}

void GenerateCall::WaitForRoomOrFail(const absl::Status& why) {
  if (!no_room_now_) {
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
  router_->admission().Add(this);
}

AdmissionQueue::Waiter::Outcome GenerateCall::RetryAdmission(absl::Time now) {
  // Ended meanwhile (the client left): leave the queue.
  if (ExpireIfDue(absl::InfinitePast())) return Outcome::kEnded;
  absl::Status st = PickDecodeCandidates();
  if (st.ok()) {
    if (waiting_.exchange(false)) router_->metrics().requests_waiting->Add(-1);
    StartReserve();
    return Outcome::kAdmitted;
  }
  if (no_room_now_ && now < queue_deadline_) {
    last_no_room_ = st;
    return Outcome::kStillWaiting;
  }
  last_no_room_ = st;
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
  return absl::Status(why.code(), absl::StrCat(why.message(), " (waited ",
                                               absl::FormatDuration(absl::Trunc(
                                                   absl::Now() - start_time_, absl::Milliseconds(1))),
                                               " for room)"));
}

grpc::ClientContext* GenerateCall::StreamContextLocked() {
  return stream_ ? &stream_->context() : nullptr;
}

GenerateCall::~GenerateCall() { router_->CallEnded(); }

void GenerateCall::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

absl::Status GenerateCall::Prepare(const absl::StatusOr<v1::GenerateRequest>& request) {
  if (!request.ok()) return request.status();
  const v1::GenerateRequest& req = *request;

  RETURN_IF_ERROR(common::ValidateRequestId(req.request_id()));
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
  sampling_ = SamplingFromProto(req.sampling());
  RETURN_IF_ERROR(ValidateAndResolveSampling(sampling_, static_cast<int32_t>(prompt_ids_.size()),
                                             limits));
  if (!sampling_.seed.has_value()) {
    absl::BitGen gen;
    sampling_.seed = absl::Uniform<uint64_t>(gen);
  }
  include_token_ids_ = !req.output().has_include_token_ids() || req.output().include_token_ids();
  include_text_ = !req.output().has_include_text() || req.output().include_text();

  request_id_ = req.request_id().empty() ? router_->NewRequestId() : req.request_id();
  {
    absl::MutexLock lock(&mu_);
    output_.emplace(router_->codec().NewDetokenizer(prompt_ids_, sampling_.skip_special_tokens),
                    StopStringMatcher(sampling_.stop, sampling_.include_stop_str_in_output));
  }
  RETURN_IF_ERROR(router_->requests().Insert(request_id_, this));
  registered_ = true;
  router_->total_requests().fetch_add(1);
  router_->metrics().requests_total->Increment();
  router_->metrics().requests_running->Add(1);
  router_->metrics().prompt_tokens_total->Increment(static_cast<double>(prompt_ids_.size()));
  return absl::OkStatus();
}

absl::Status GenerateCall::PickDecodeCandidates() {
  no_room_now_ = false;
  WorkerRegistry& registry = router_->registry();
  std::vector<WorkerSnapshot> decode = registry.Routable(WorkerRole::kDecode);
  if (decode.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "no healthy decode worker: ", DescribeWorkers(registry.List(WorkerRole::kDecode))));
  }
  const int64_t prompt = static_cast<int64_t>(prompt_ids_.size());
  const int32_t pages_now = static_cast<int32_t>(kernels::PagesFor(prompt + 1));
  const int32_t pages_at_most =
      static_cast<int32_t>(kernels::PagesFor(prompt + *sampling_.max_new_tokens));
  std::vector<std::string> ranked = RankDecodeWorkers(decode, pages_now, pages_at_most);
  if (ranked.empty()) {
    const auto most = std::max_element(decode.begin(), decode.end(), [](const auto& a, const auto& b) {
      return a.estimated_free_pages < b.estimated_free_pages;
    });
    const auto largest = std::max_element(decode.begin(), decode.end(), [](const auto& a, const auto& b) {
      return a.descriptor.load.kv_pages_total < b.descriptor.load.kv_pages_total;
    });
    if (largest->descriptor.load.kv_pages_total > 0 &&
        largest->descriptor.load.kv_pages_total < pages_at_most) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no decode worker can ever hold ", pages_at_most, " KV pages (", prompt,
          " prompt tokens + max_new_tokens ", *sampling_.max_new_tokens, "); the largest pool is ",
          largest->descriptor.load.kv_pages_total, " pages on ", largest->id));
    }
    no_room_now_ = true;
    return absl::ResourceExhaustedError(absl::StrCat(
        "no decode worker has room for ", pages_now, " KV pages now (", prompt,
        " prompt tokens and the first new token); the most free is ", most->estimated_free_pages,
        " pages on ", most->id, " (or it is at its request limit)"));
  }
  const size_t keep = std::max(1, router_->options().max_reserve_attempts);
  if (ranked.size() > keep) ranked.resize(keep);
  absl::MutexLock lock(&mu_);
  decode_candidates_ = std::move(ranked);
  next_candidate_ = 0;
  return absl::OkStatus();
}

absl::Time GenerateCall::CallDeadline(absl::Duration step_timeout) const {
  return std::min(absl::Now() + step_timeout, request_deadline_);
}

absl::Status GenerateCall::WorkerError(const std::string& what, const std::string& worker_id,
                                       const std::string& address,
                                       const grpc::Status& status) const {
  absl::StatusCode code = static_cast<absl::StatusCode>(status.error_code());
  // Codes that describe the worker's internal bookkeeping mean "retry" to a client.
  switch (code) {
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOk:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(what, " ", worker_id, " (", address, ") failed: ",
                                         status.error_message().empty() ? "no message"
                                                                        : status.error_message()));
}

void GenerateCall::StartReserve() {
  std::shared_ptr<v1::DecodeWorker::Stub> stub;
  ReserveAttempt* attempt = nullptr;
  size_t index = 0;
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kReserving) return;
    WorkerRegistry& registry = router_->registry();
    std::optional<WorkerSnapshot> decode;
    while (next_candidate_ < decode_candidates_.size() && !decode.has_value()) {
      auto snap = registry.Get(decode_candidates_[next_candidate_++]);
      if (snap.ok() && snap->state == WorkerState::kHealthy) decode = *std::move(snap);
    }
    if (!decode.has_value()) {
      ended = FailLocked(absl::UnavailableError(absl::StrCat(
          "no decode worker accepted the request: ",
          DescribeWorkers(registry.List(WorkerRole::kDecode)))));
    } else {
      decode_id_ = decode->id;
      decode_address_ = decode->address;
      const int32_t prompt_len = static_cast<int32_t>(prompt_ids_.size());
      local_prefill_ = ShouldPrefillLocally(prompt_len, *decode);
      if (!local_prefill_ && prefill_id_.empty()) {
        std::vector<WorkerSnapshot> prefill = registry.Routable(WorkerRole::kPrefill);
        std::vector<std::string> ranked = RankPrefillWorkers(prefill, prompt_len);
        if (ranked.empty()) {
          ended = FailLocked(absl::UnavailableError(absl::StrCat(
              "no healthy prefill worker for a prompt of ", prompt_len, " tokens (above ",
              decode_id_, "'s local-prefill threshold of ",
              decode->descriptor.profile.local_prefill_threshold,
              "): ", DescribeWorkers(registry.List(WorkerRole::kPrefill)))));
        } else {
          for (const WorkerSnapshot& p : prefill) {
            if (p.id != ranked.front()) continue;
            prefill_id_ = p.id;
            prefill_address_ = p.address;
            prefill_kv_compat_hash_ = p.descriptor.model.kv_compat_hash;
          }
        }
      }
      if (!ended) {
        // What Reserve takes (the prompt and the first new token); the worker's answer
        // corrects it, and pages taken later while decoding show in its load reports.
        decode_charged_pages_ = kernels::PagesFor(prompt_len + 1);
        registry.AddRouterLoad(decode_id_, {.inflight = 1, .reserved_pages = decode_charged_pages_});
        decode_charged_ = true;
        decode_contacted_ = true;
        reserve_attempts_.push_back(std::make_unique<ReserveAttempt>());
        index = reserve_attempts_.size() - 1;
        attempt = reserve_attempts_.back().get();
        attempt->request.set_request_id(request_id_);
        attempt->request.mutable_prompt_token_ids()->Assign(prompt_ids_.begin(), prompt_ids_.end());
        *attempt->request.mutable_sampling() = SamplingToProto(sampling_);
        attempt->request.set_local_prefill(local_prefill_);
        if (!local_prefill_) attempt->request.set_prefill_kv_compat_hash(prefill_kv_compat_hash_);
        attempt->context.set_deadline(
            absl::ToChronoTime(CallDeadline(router_->options().reserve_timeout)));
        stub = router_->channels().Decode(decode_address_);
      }
    }
  }
  if (ended) {
    AfterEnd(/*abort_workers=*/false);
    Pump();
    return;
  }
  Ref();
  stub->async()->Reserve(&attempt->context, &attempt->request, &attempt->response,
                         [this, index](grpc::Status s) {
                           OnReserveDone(index, s);
                           Unref();
                         });
}

void GenerateCall::OnReserveDone(size_t index, const grpc::Status& status) {
  bool ended = false, retry = false, start = false, late_success = false;
  std::optional<absl::Status> wait_for_room;
  v1::ReserveResponse reserved;
  std::shared_ptr<v1::DecodeWorker::Stub> hung_decode_stub;
  {
    absl::MutexLock lock(&mu_);
    ReserveAttempt& attempt = *reserve_attempts_[index];
    WorkerRegistry& registry = router_->registry();
    if (phase_ != Phase::kReserving) {
      // The call ended while Reserve was in flight: the Abort sent then may have reached
      // the worker before the reservation did, so send another.
      late_success = status.ok();
    } else if (!status.ok()) {
      registry.AddRouterLoad(decode_id_, {.inflight = -1, .reserved_pages = -decode_charged_pages_});
      decode_charged_ = false;
      // Reserve's own step deadline passed while the client's has not: the worker hangs (a
      // frozen process keeps its connection open, so nothing else fails). That is the
      // worker's failure, reported as UNAVAILABLE naming it, and another worker may serve.
      grpc::Status seen = status;
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
          absl::Now() < request_deadline_) {
        seen = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("no answer within the reserve timeout of ",
                                         absl::FormatDuration(router_->options().reserve_timeout),
                                         " (", status.error_message(), ")"));
        // Should it wake up, the reservation it may still make must be let go.
        hung_decode_stub = router_->channels().Decode(decode_address_);
        spdlog::warn("decode worker {} ({}) did not answer Reserve of request {} within {}; "
                     "marking it unhealthy{}",
                     decode_id_, decode_address_, common::IdForMessages(request_id_),
                     absl::FormatDuration(router_->options().reserve_timeout),
                     next_candidate_ < decode_candidates_.size() ? " and trying another" : "");
      }
      const absl::Status error = WorkerError("reserve on decode worker", decode_id_,
                                             decode_address_, seen);
      if (seen.error_code() == grpc::StatusCode::UNAVAILABLE) {
        registry.ReportFailure(decode_id_, std::string(error.message()), absl::Now());
      }
      const bool retryable = seen.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                             seen.error_code() == grpc::StatusCode::UNAVAILABLE;
      if (retryable && next_candidate_ < decode_candidates_.size()) {
        retry = true;
      } else if (seen.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        // Every candidate was full by its own count (the router's estimate lags its load
        // reports): wait for room like a request that found none.
        wait_for_room = error;
      } else {
        ended = FailLocked(error);
      }
    } else {
      reserved = attempt.response;
      const int32_t pages = reserved.reserved_pages();
      registry.AddRouterLoad(decode_id_, {.reserved_pages = pages - decode_charged_pages_});
      decode_charged_pages_ = pages;
      phase_ = Phase::kRunning;
      start = true;
    }
  }
  if (late_success) SendWorkerAborts();
  if (hung_decode_stub) {
    SendDecodeAbort(std::move(hung_decode_stub));
  }
  if (retry) StartReserve();
  if (wait_for_room.has_value()) {
    no_room_now_ = true;
    WaitForRoomOrFail(*wait_for_room);
  }
  if (ended) {
    AfterEnd(/*abort_workers=*/false);
    Pump();
  }
  if (start) StartStreamAndPrefill(reserved);
}

void GenerateCall::StartStreamAndPrefill(const v1::ReserveResponse& reserved) {
  std::shared_ptr<v1::DecodeWorker::Stub> decode_stub;
  std::shared_ptr<v1::PrefillWorker::Stub> prefill_stub;
  DecodeStreamReader* reader;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kRunning) return;  // ended meanwhile; aborts were sent
    stream_ = std::make_unique<DecodeStreamReader>(this);
    reader = stream_.get();
    decode_stub = router_->channels().Decode(decode_address_);
    if (local_prefill_) {
      router_->metrics().local_prefill_total->Increment();
    } else {
      prefill_context_ = std::make_unique<grpc::ClientContext>();
      prefill_context_->set_deadline(
          absl::ToChronoTime(CallDeadline(router_->options().prefill_timeout)));
      prefill_request_.set_request_id(request_id_);
      prefill_request_.mutable_token_ids()->Assign(prompt_ids_.begin(), prompt_ids_.end());
      *prefill_request_.mutable_sampling() = SamplingToProto(sampling_);
      *prefill_request_.mutable_kv_session() = reserved.session();
      router_->registry().AddRouterLoad(
          prefill_id_, {.inflight = 1, .prefill_tokens = static_cast<int64_t>(prompt_ids_.size())});
      prefill_charged_ = true;
      prefill_contacted_ = true;
      prefill_stub = router_->channels().Prefill(prefill_address_);
    }
  }
  // The decode worker starts decoding once its Stream is open and the KV has landed; opening
  // the stream first lets it see the first token as soon as it exists.
  Ref();
  reader->Start(decode_stub.get(), reserved.session_id(), request_deadline_);
  if (prefill_stub) {
    Ref();
    prefill_stub->async()->Prefill(prefill_context_.get(), &prefill_request_, &prefill_response_,
                                   [this](grpc::Status s) {
                                     OnPrefillDone(s);
                                     Unref();
                                   });
  }
}

void GenerateCall::OnDecodeMessage(const v1::DecodeStreamResponse& message) {
  bool ended = false, abort_workers = false;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kRunning) return;
    if (message.has_tokens()) {
      const auto& ids = message.tokens().token_ids();
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
      int added = 0;
      for (int32_t id : ids) {
        ++added;
        if (output_->AddToken(id)) {
          ended = CompleteLocked(v1::FINISH_REASON_STOP, std::nullopt);
          abort_workers = true;  // the decode worker does not know about stop strings
          break;
        }
      }
      m.generation_tokens_total->Increment(added);
    } else if (message.has_finished()) {
      const v1::DecodeFinished& f = message.finished();
      std::optional<int32_t> matched;
      if (f.has_matched_token_id()) matched = f.matched_token_id();
      ended = CompleteLocked(f.finish_reason(), matched);
    }
  }
  if (ended) AfterEnd(abort_workers);
  Pump();
}

void GenerateCall::OnDecodeStreamDone(const grpc::Status& status) {
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) {
      // The call already ended (e.g. the prefill worker reported the failed KV transfer
      // first), but a decode worker that went away must still be marked unhealthy.
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        const absl::Status error =
            WorkerError("token stream from decode worker", decode_id_, decode_address_, status);
        router_->registry().ReportFailure(decode_id_, std::string(error.message()), absl::Now());
      }
      return;
    }
    if (status.ok()) {
      ended = FailLocked(absl::UnavailableError(absl::StrCat(
          "decode worker ", decode_id_, " (", decode_address_,
          ") ended the token stream without a final message")));
    } else {
      const absl::Status error =
          WorkerError("token stream from decode worker", decode_id_, decode_address_, status);
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        router_->registry().ReportFailure(decode_id_, std::string(error.message()), absl::Now());
      }
      ended = FailLocked(error);
    }
  }
  if (ended) AfterEnd(/*abort_workers=*/true);
  Pump();
}

void GenerateCall::OnPrefillDone(const grpc::Status& status) {
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    ReleasePrefillLoadLocked();
    if (phase_ == Phase::kDone || status.ok()) return;  // the first token comes from D's stream
    if (status.error_code() == grpc::StatusCode::ABORTED) {
      // The prefill worker is fine; its KV transfer to the decode worker failed (the decode
      // worker died or stalled). Tell the client so, naming the decode worker; its own stream
      // failure, if any, marks it unhealthy.
      ended = FailLocked(absl::UnavailableError(absl::StrCat(
          "KV transfer from prefill worker ", prefill_id_, " to decode worker ", decode_id_,
          " (", decode_address_, ") failed: ", status.error_message())));
    } else {
      const absl::Status error =
          WorkerError("prefill on prefill worker", prefill_id_, prefill_address_, status);
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        router_->registry().ReportFailure(prefill_id_, std::string(error.message()), absl::Now());
      }
      ended = FailLocked(error);
    }
  }
  if (ended) AfterEnd(/*abort_workers=*/true);
  Pump();
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
  Pump();
}

void GenerateCall::OnCancel() {
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    ended = FailLocked(absl::CancelledError("the client cancelled the request"));
  }
  if (ended) {
    router_->metrics().requests_aborted_total->Increment();
    AfterEnd(/*abort_workers=*/true);
  }
  Pump();
}

void GenerateCall::OnWriteDone(bool ok) {
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      client_gone_ = true;
      ended = FailLocked(absl::CancelledError("the client went away"));
    }
  }
  if (ended) AfterEnd(/*abort_workers=*/true);
  Pump();
}

void GenerateCall::OnDone() { Unref(); }

}  // namespace mlaserve::router
