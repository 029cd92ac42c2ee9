// DecodeService: the DecodeWorker gRPC service (worker.proto) over a DecodeRunner. The KV
// data plane (KvService, kvtransfer/tcp_transport.h) is registered next to it on the same
// server. Proto <-> domain conversion lives in the free functions below.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "common/call_auth.h"
#include "decode_worker/decode_runner.h"
#include "mlaserve/v1/worker.grpc.pb.h"

namespace mlaserve::decode {

// The decode worker's one check of a Reserve (ReserveSpec says what a valid spec is):
// INVALID_ARGUMENT naming the field and value (request id, prompt ids, sampling values,
// max_new_tokens unset or out of range, stop ids, kv_lease_ms < 0 or above bounds.max_lease,
// a missing prefill hash); FAILED_PRECONDITION for JSON mode where bounds.json_vocabulary has
// no vocabulary.
absl::StatusOr<ReserveSpec> ToReserveSpec(const mlaserve::v1::ReserveRequest& request,
                                          const ReserveBounds& bounds);
void ToProto(const Reservation& reservation, mlaserve::v1::ReserveResponse* response);
mlaserve::v1::DecodeStreamResponse FinishedMessage(const DecodeFinish& finish);

// What this decode worker does that older ones do not, told to the router in the descriptor it
// registers with and answers GetInfo with (mlaserve-decode's Describe): remote_prefill_reuse,
// since Reserve passes reuse_cached_pages on (ToReserveSpec) and the runner keeps the cached
// leading pages when its prefix cache is on (the descriptor's prefix_cache says whether it is).
void DescribeCapabilities(mlaserve::v1::WorkerDescriptor& descriptor);

class DecodeService final : public mlaserve::v1::DecodeWorker::CallbackService {
 public:
  using DescribeFn = std::function<mlaserve::v1::WorkerDescriptor()>;
  // Every RPC needs the cluster credential (`authorizer`; null: open, for in-process tests).
  DecodeService(DecodeRunner* runner, DescribeFn describe,
                const common::CallAuthorizer* authorizer = nullptr)
      : runner_(runner), describe_(std::move(describe)), authorizer_(authorizer) {}

  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* context,
                                    const mlaserve::v1::ReserveRequest* request,
                                    mlaserve::v1::ReserveResponse* response) override;
  grpc::ServerWriteReactor<mlaserve::v1::DecodeStreamResponse>* Stream(
      grpc::CallbackServerContext* context,
      const mlaserve::v1::DecodeStreamRequest* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const mlaserve::v1::WorkerAbortRequest* request,
                                  mlaserve::v1::WorkerAbortResponse* response) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const mlaserve::v1::GetWorkerInfoRequest* request,
                                    mlaserve::v1::WorkerDescriptor* response) override;

 private:
  DecodeRunner* const runner_;
  const DescribeFn describe_;
  const common::CallAuthorizer* const authorizer_;
};

}  // namespace mlaserve::decode
