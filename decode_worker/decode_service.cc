#include "decode_worker/decode_service.h"

#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/request_limits.h"
#include "common/status.h"
#include "worker/worker_proto.h"
#include "kvtransfer/proto_convert.h"

namespace mlaserve::decode {

namespace v1 = ::mlaserve::v1;
using common::ToGrpcStatus;

absl::StatusOr<ReserveSpec> ToReserveSpec(const v1::ReserveRequest& request,
                                          const ReserveBounds& bounds) {
  // What the router checked, checked again: this port may be reached without the router. This
  // is the one check on this worker (ReserveSpec); the runner takes the spec as valid.
  const v1::SamplingParams& sampling = request.sampling();
  if (absl::Status s = common::ValidateRequestId(request.request_id()); !s.ok()) return s;
  if (absl::Status s = common::ValidateStopCounts(0, sampling.stop_token_ids_size()); !s.ok()) {
    return s;
  }
  ReserveSpec spec;
  spec.request_id = request.request_id();
  spec.prompt.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  ASSIGN_OR_RETURN(spec.sampling, worker::ToSamplingOptions(sampling, bounds.vocab_size));
  if (!sampling.has_max_new_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request ", common::IdForMessages(request.request_id()),
        ": sampling.max_new_tokens must be set"));
  }
  spec.max_new_tokens = sampling.max_new_tokens();
  spec.stop_token_ids.assign(sampling.stop_token_ids().begin(), sampling.stop_token_ids().end());
  spec.ignore_eos = sampling.ignore_eos();
  spec.local_prefill = request.local_prefill();
  spec.reuse_cached_pages = request.reuse_cached_pages() && !spec.local_prefill;
  RETURN_IF_ERROR(common::ValidateCacheSalt(request.cache_salt()));
  spec.cache_salt = request.cache_salt();
  if (spec.sampling.wants_logprobs() && !spec.local_prefill) {
    // The first token is sampled by the prefill worker, which does not return its logprobs.
    return absl::InvalidArgumentError(absl::StrCat(
        "request ", common::IdForMessages(request.request_id()), ": sampling.logprobs ",
        spec.sampling.logprobs, " needs local_prefill (the router prefills such requests on "
        "the decode worker)"));
  }
  if (spec.sampling.wants_prompt_logprobs() && !spec.local_prefill) {
    // The prompt's rows are scored where they are computed; a prefill worker returns none.
    return absl::InvalidArgumentError(absl::StrCat(
        "request ", common::IdForMessages(request.request_id()), ": sampling.prompt_logprobs ",
        spec.sampling.prompt_logprobs, " needs local_prefill (the router prefills such requests "
        "on the decode worker)"));
  }
  spec.prefill_compat_hash = request.prefill_kv_compat_hash();
  if (request.kv_lease_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_lease_ms is ", request.kv_lease_ms(), "; it must be >= 0"));
  }
  spec.lease = absl::Milliseconds(request.kv_lease_ms());

  if (spec.request_id.empty()) return absl::InvalidArgumentError("request_id is empty");
  RETURN_IF_ERROR(worker::ValidatePromptTokens(spec.prompt, bounds.vocab_size, bounds.max_context));
  const int prompt_len = static_cast<int>(spec.prompt.size());
  if (spec.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens is ", spec.max_new_tokens, "; it must be >= 1"));
  }
  if (static_cast<int64_t>(prompt_len) + spec.max_new_tokens > bounds.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", prompt_len, " tokens + max_new_tokens ", spec.max_new_tokens,
        " exceeds the model's context of ", bounds.max_context));
  }
  for (int32_t id : spec.stop_token_ids) {
    if (id < 0 || id >= bounds.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop_token_ids entry ", id, " is outside the vocabulary [0, ", bounds.vocab_size, ")"));
    }
  }
  if (spec.lease > bounds.max_lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_lease_ms is ", absl::ToInt64Milliseconds(spec.lease),
                     "; this decode worker allows at most ",
                     absl::ToInt64Milliseconds(bounds.max_lease), " (--max-kv-lease-ms)"));
  }
  if (!spec.local_prefill && spec.prefill_compat_hash.empty()) {
    return absl::InvalidArgumentError(
        "prefill_kv_compat_hash is empty (required unless local_prefill)");
  }
  // Last: the first JSON-mode request builds the vocabulary, which a bad request should not.
  ASSIGN_OR_RETURN(spec.json_vocabulary,
                   worker::VocabularyForRequest(spec.sampling, bounds.json_vocabulary));
  return spec;
}

void ToProto(const Reservation& r, v1::ReserveResponse* response) {
  response->set_session_id(r.session_id);
  response->set_reserved_pages(r.reserved_pages);
  *response->mutable_session() = kvtransfer::ToProto(r.session);
  response->set_lease_deadline_unix_ms(absl::ToUnixMillis(r.lease_deadline));
}

v1::DecodeStreamResponse FinishedMessage(const DecodeFinish& f) {
  v1::DecodeStreamResponse m;
  auto* fin = m.mutable_finished();
  switch (f.reason) {
    case FinishReason::kStop: fin->set_finish_reason(v1::FINISH_REASON_STOP); break;
    case FinishReason::kLength: fin->set_finish_reason(v1::FINISH_REASON_LENGTH); break;
    case FinishReason::kAbort: fin->set_finish_reason(v1::FINISH_REASON_ABORT); break;
  }
  if (f.matched_token) fin->set_matched_token_id(*f.matched_token);
  fin->set_prompt_tokens(f.prompt_tokens);
  fin->set_completion_tokens(f.completion_tokens);
  fin->set_local_prefill(f.local_prefill);
  return m;
}

void DescribeCapabilities(v1::WorkerDescriptor& descriptor) {
  descriptor.set_remote_prefill_reuse(true);
}

namespace {

// An entry of DecodeTokens.prompt_logprobs this many at most (see OnPromptLogprobs).
constexpr int kPromptLogprobsPerMessage = 2048;

void PromptLogprobsToProto(const model::PromptTokenLogprobs& e, v1::PromptTokenLogprobs* m) {
  m->set_token_id(e.token_id);
  m->set_logprob(e.logprob);
  m->set_rank(e.rank);
  for (const model::TopLogprob& t : e.top) {
    v1::TopLogprob* top = m->add_top_logprobs();
    top->set_token_id(t.token_id);
    top->set_logprob(t.logprob);
  }
}

// One Stream call. The runner pushes tokens from its loop thread; writes go out one at a time,
// tokens arriving meanwhile are merged into the queued message. Self-owned
// (common/self_owned.h) until gRPC's OnDone; the runner holds a reference as its sink, so
// either side may outlive the other; after OnDone every sink call is ignored.
class DecodeStreamReactor final : public grpc::ServerWriteReactor<v1::DecodeStreamResponse>,
                                  public TokenSink,
                                  public common::SelfOwned<DecodeStreamReactor> {
 public:
  DecodeStreamReactor(DecodeRunner* runner, std::string session_id)
      : runner_(runner), session_id_(std::move(session_id)) {}

  void Open() {
    absl::Status s = runner_->OpenStream(session_id_, SelfRef());
    if (!s.ok()) FinishOnce(ToGrpcStatus(s));
  }

  void OnTokens(std::span<const int32_t> tokens,
                std::span<const model::TokenLogprobs> logprobs) override {
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      // Merge into the last queued token message unless it is the one being written.
      if (queue_.empty() || !queue_.back().has_tokens() || (writing_ && queue_.size() == 1)) {
        queue_.emplace_back();
        queue_.back().mutable_tokens();
      }
      v1::DecodeTokens* out = queue_.back().mutable_tokens();
      if (cached_ > 0) {
        out->set_cached_prompt_tokens(cached_);
        cached_ = 0;
      }
      for (int32_t t : tokens) out->add_token_ids(t);
      for (const model::TokenLogprobs& lp : logprobs) {
        v1::TokenLogprobs* m = out->add_logprobs();
        m->set_logprob(lp.logprob);
        for (const model::TopLogprob& t : lp.top) {
          v1::TopLogprob* top = m->add_top_logprobs();
          top->set_token_id(t.token_id);
          top->set_logprob(t.logprob);
        }
      }
    }
    Pump();
  }
  // Messages of their own, at most kPromptLogprobsPerMessage entries each, so that a long
  // prompt's entries (up to ~280 bytes each with 20 alternatives) stay far below gRPC's 4 MB
  // message bound; they are queued before the first tokens, which come after them.
  void OnPromptLogprobs(std::span<const model::PromptTokenLogprobs> entries) override {
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      for (size_t i = 0; i < entries.size(); ++i) {
        const bool full = !queue_.empty() && queue_.back().has_tokens() &&
                          queue_.back().tokens().prompt_logprobs_size() >= kPromptLogprobsPerMessage;
        if (queue_.empty() || !queue_.back().has_tokens() ||
            queue_.back().tokens().token_ids_size() > 0 || full ||
            (writing_ && queue_.size() == 1)) {
          queue_.emplace_back();
          queue_.back().mutable_tokens();
        }
        PromptLogprobsToProto(entries[i], queue_.back().mutable_tokens()->add_prompt_logprobs());
      }
    }
    Pump();
  }
  void OnPromptCached(int tokens) override {
    absl::MutexLock lock(&mu_);
    cached_ = tokens;  // sent with the first tokens
  }
  void OnFinished(const DecodeFinish& finish) override {
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      queue_.push_back(FinishedMessage(finish));
      closing_ = true;
      final_ = grpc::Status::OK;
    }
    Pump();
  }
  void OnError(const absl::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      closing_ = true;
      final_ = ToGrpcStatus(status);
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      queue_.pop_front();
      if (!ok) {  // the client is gone; OnCancel / OnDone follow
        queue_.clear();
        closing_ = true;
        final_ = grpc::Status(grpc::StatusCode::CANCELLED, "token stream write failed");
      }
    }
    Pump();
  }
  // gRPC still needs Finish after a cancellation before it calls OnDone (and before a server
  // Shutdown can complete), and the runner stops calling this sink once told, so the reactor
  // finishes by itself: at once, or when the write in flight completes.
  void OnCancel() override {
    runner_->CancelStream(session_id_);
    {
      absl::MutexLock lock(&mu_);
      // Keep only the message being written: StartWrite holds a pointer to it.
      if (writing_) {
        queue_.erase(std::next(queue_.begin()), queue_.end());
      } else {
        queue_.clear();
      }
      if (!closing_) {
        closing_ = true;
        final_ = grpc::Status(grpc::StatusCode::CANCELLED, "token stream cancelled by the client");
      }
    }
    Pump();
  }
  void OnDone() override {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    ReleaseSelf();  // the runner may still hold a reference: its later calls are ignored
  }

 private:
  // Starts the next write, or finishes once the queue drained after the last event.
  void Pump() {
    const v1::DecodeStreamResponse* next = nullptr;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (done_ || writing_ || finished_) return;
      if (!queue_.empty()) {
        writing_ = true;
        next = &queue_.front();
      } else if (closing_) {
        finished_ = true;
        finish = true;
        status = final_;
      }
    }
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(status);
  }
  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      closing_ = true;
    }
    Finish(status);
  }

  DecodeRunner* const runner_;
  const std::string session_id_;
  absl::Mutex mu_;
  std::deque<v1::DecodeStreamResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // no more messages will be queued
  int cached_ ABSL_GUARDED_BY(mu_) = 0;          // OnPromptCached, until the first tokens
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerUnaryReactor* DecodeService::Reserve(grpc::CallbackServerContext* context,
                                                 const v1::ReserveRequest* request,
                                                 v1::ReserveResponse* response) {
  return common::AnswerUnary(authorizer_, context, common::Privilege::kCluster, [&] {
    ASSIGN_OR_RETURN(ReserveSpec spec, ToReserveSpec(*request, runner_->bounds()));
    ASSIGN_OR_RETURN(Reservation reservation, runner_->Reserve(std::move(spec)));
    ToProto(reservation, response);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::DecodeStreamResponse>* DecodeService::Stream(
    grpc::CallbackServerContext* context, const v1::DecodeStreamRequest* request) {
  if (authorizer_ != nullptr) {
    if (grpc::Status s = authorizer_->Check(*context, common::Privilege::kCluster); !s.ok()) {
      return common::RefuseWrite<v1::DecodeStreamResponse>(s);
    }
  }
  auto reactor = common::MakeSelfOwned<DecodeStreamReactor>(runner_, request->session_id());
  reactor->Open();
  return reactor.get();
}

grpc::ServerUnaryReactor* DecodeService::Abort(grpc::CallbackServerContext* context,
                                               const v1::WorkerAbortRequest* request,
                                               v1::WorkerAbortResponse* response) {
  return common::AnswerUnary(authorizer_, context, common::Privilege::kCluster,
                             [&] { return runner_->Abort(request->request_id()); });
}

grpc::ServerUnaryReactor* DecodeService::GetInfo(grpc::CallbackServerContext* context,
                                                 const v1::GetWorkerInfoRequest* request,
                                                 v1::WorkerDescriptor* response) {
  return common::AnswerUnary(authorizer_, context, common::Privilege::kCluster, [&] {
    *response = describe_();
    return absl::OkStatus();
  });
}

}  // namespace mlaserve::decode
