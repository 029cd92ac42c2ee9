// GenerationService: the public mlaserve.v1.Generation API (api.proto) on the router.
// Generate is registered as a raw (byte buffer) method so that requests protobuf refuses to
// parse (invalid UTF-8 in a string field) still get INVALID_ARGUMENT naming the field;
// GenerateCall parses and answers it.
#pragma once

#include "mlaserve/v1/api.grpc.pb.h"
#include "router/router_context.h"

namespace mlaserve::router {

class GenerationService final
    : public v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::CallbackService> {
 public:
  explicit GenerationService(RouterContext* router) : router_(router) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::AbortRequest* request,
                                  v1::AbortResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::GetServerInfoResponse* response) override;

 private:
  RouterContext* const router_;
};

}  // namespace mlaserve::router
