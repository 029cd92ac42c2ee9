// PrefillService: the PrefillWorker gRPC service (worker.proto) over a PrefillRunner.
// Proto <-> domain conversion lives in the free functions below; the service only moves
// requests to the runner and answers.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "common/call_auth.h"
#include "mlaserve/v1/worker.grpc.pb.h"
#include "prefill_worker/prefill_runner.h"

namespace mlaserve::prefill {

// The prefill worker's one check of a request (PrefillJob says what a valid job is):
// INVALID_ARGUMENT naming the field and value (request id, prompt ids and length, sampling
// values, a missing kv_session or one whose page count is not the prompt's);
// FAILED_PRECONDITION for JSON mode where bounds.json_vocabulary has no vocabulary.
absl::StatusOr<PrefillJob> ToPrefillJob(const mlaserve::v1::PrefillRequest& request,
                                        const PrefillBounds& bounds);
void ToProto(const PrefillOutcome& outcome, mlaserve::v1::PrefillResponse* response);

class PrefillService final : public mlaserve::v1::PrefillWorker::CallbackService {
 public:
  using DescribeFn = std::function<mlaserve::v1::WorkerDescriptor()>;
  // Every RPC needs the cluster credential (`authorizer`; null: open, for in-process tests).
  PrefillService(PrefillRunner* runner, DescribeFn describe,
                 const common::CallAuthorizer* authorizer = nullptr)
      : runner_(runner), describe_(std::move(describe)), authorizer_(authorizer) {}

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const mlaserve::v1::PrefillRequest* request,
                                    mlaserve::v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const mlaserve::v1::WorkerAbortRequest* request,
                                  mlaserve::v1::WorkerAbortResponse* response) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const mlaserve::v1::GetWorkerInfoRequest* request,
                                    mlaserve::v1::WorkerDescriptor* response) override;

 private:
  PrefillRunner* const runner_;
  const DescribeFn describe_;
  const common::CallAuthorizer* const authorizer_;
};

}  // namespace mlaserve::prefill
