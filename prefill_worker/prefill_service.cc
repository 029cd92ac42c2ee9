#include "prefill_worker/prefill_service.h"

#include "common/grpc_status.h"
#include "common/request_limits.h"
#include "common/self_owned.h"
#include "common/status.h"
#include "kernels/common/page.h"
#include "worker/worker_proto.h"
#include "kvtransfer/proto_convert.h"

namespace mlaserve::prefill {

namespace v1 = ::mlaserve::v1;
using common::ToGrpcStatus;

absl::StatusOr<PrefillJob> ToPrefillJob(const v1::PrefillRequest& request,
                                        const PrefillBounds& bounds) {
  // What the router checked, checked again: this port may be reached without the router. This
  // is the one check on this worker (PrefillJob); the runner takes the job as valid.
  if (absl::Status s = common::ValidateRequestId(request.request_id()); !s.ok()) return s;
  PrefillJob job;
  job.request_id = request.request_id();
  job.tokens.assign(request.token_ids().begin(), request.token_ids().end());
  RETURN_IF_ERROR(common::ValidateCacheSalt(request.cache_salt()));
  job.cache_salt = request.cache_salt();
  ASSIGN_OR_RETURN(job.sampling, worker::ToSamplingOptions(request.sampling(), bounds.vocab_size));
  if (!request.has_kv_session()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", common::IdForMessages(request.request_id()), " has no kv_session"));
  }
  ASSIGN_OR_RETURN(job.session, kvtransfer::FromProto(request.kv_session()));
  if (job.request_id.empty()) return absl::InvalidArgumentError("request_id is empty");
  RETURN_IF_ERROR(worker::ValidatePromptTokens(job.tokens, bounds.vocab_size, bounds.max_context));
  const int n = static_cast<int>(job.tokens.size());
  if (const int pages = kernels::PagesFor(n); job.session.num_pages != pages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_session.num_pages is ", job.session.num_pages, " but a prompt of ", n,
        " tokens fills ", pages, " pages of ", kernels::kPageSize, " tokens"));
  }
  // Last: the first JSON-mode request builds the vocabulary, which a bad request should not.
  ASSIGN_OR_RETURN(job.json_vocabulary,
                   worker::VocabularyForRequest(job.sampling, bounds.json_vocabulary));
  return job;
}

void ToProto(const PrefillOutcome& o, v1::PrefillResponse* response) {
  response->set_first_token(o.first_token);
  response->set_prompt_tokens(o.prompt_tokens);
  response->set_cached_tokens(o.cached_tokens);
  response->set_kv_bytes_sent(o.kv_bytes_sent);
  response->set_queue_time_s(absl::ToDoubleSeconds(o.queue_time));
  response->set_prefill_time_s(absl::ToDoubleSeconds(o.prefill_time));
  response->set_transfer_wait_s(absl::ToDoubleSeconds(o.transfer_wait));
}

namespace {

// One Prefill call: answered by the runner's completion; a cancelled call aborts the request.
// Self-owned (common/self_owned.h) until gRPC's OnDone; the runner's completion holds a
// reference too, so it never answers a freed reactor.
class PrefillReactor final : public grpc::ServerUnaryReactor,
                             public common::SelfOwned<PrefillReactor> {
 public:
  PrefillReactor(PrefillRunner* runner, const v1::PrefillRequest* request)
      : runner_(runner), id_(request->request_id()) {}

  void Start(const v1::PrefillRequest* request, v1::PrefillResponse* response) {
    auto job = ToPrefillJob(*request, runner_->bounds());
    if (!job.ok()) {
      Finish(ToGrpcStatus(job.status()));
      return;
    }
    absl::Status s = runner_->Submit(
        std::move(*job), [self = SelfRef(), response](absl::StatusOr<PrefillOutcome> o) {
          if (o.ok()) ToProto(*o, response);
          self->Finish(ToGrpcStatus(o.status()));
        });
    if (!s.ok()) Finish(ToGrpcStatus(s));
  }

  void OnCancel() override { (void)runner_->Abort(id_); }
  void OnDone() override { ReleaseSelf(); }

 private:
  PrefillRunner* const runner_;
  const std::string id_;
};

}  // namespace

grpc::ServerUnaryReactor* PrefillService::Prefill(grpc::CallbackServerContext* context,
                                                  const v1::PrefillRequest* request,
                                                  v1::PrefillResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kCluster)) {
    return refused;
  }
  auto reactor = common::MakeSelfOwned<PrefillReactor>(runner_, request);
  reactor->Start(request, response);
  return reactor.get();
}

grpc::ServerUnaryReactor* PrefillService::Abort(grpc::CallbackServerContext* context,
                                                const v1::WorkerAbortRequest* request,
                                                v1::WorkerAbortResponse* response) {
  return common::AnswerUnary(authorizer_, context, common::Privilege::kCluster,
                             [&] { return runner_->Abort(request->request_id()); });
}

grpc::ServerUnaryReactor* PrefillService::GetInfo(grpc::CallbackServerContext* context,
                                                  const v1::GetWorkerInfoRequest* request,
                                                  v1::WorkerDescriptor* response) {
  return common::AnswerUnary(authorizer_, context, common::Privilege::kCluster, [&] {
    *response = describe_();
    return absl::OkStatus();
  });
}

}  // namespace mlaserve::prefill
