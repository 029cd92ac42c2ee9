// GenerateClient: the client end of one Generate call, as GenerateCall sees it.
//
// GenerateCall (router/generate_call.h) is the one implementation of a Generate: validation,
// tokenization, routing, admission, streaming, stop strings and aborts. It talks to whoever
// asked through this interface, so the public gRPC API (GenerationService, whose
// grpc::ServerWriteReactor implements it) and the OpenAI HTTP API (router/openai, in the
// same process) run the same code.
//
// Protocol (that of grpc::ServerWriteReactor):
//  - The call sends messages one at a time with Send(); the client reports the end of each
//    with GenerateCall::OnWriteDone(ok), ok = false when it could not deliver it (gone).
//  - The call ends with exactly one End(status), after the last OnWriteDone. The client then
//    calls GenerateCall::OnDone() once; after End the call never touches the client again.
//  - A client that goes away calls GenerateCall::OnCancel() (at most once, before OnDone).
// Send and End run without the call's lock held, so the client may call back into the call
// from inside them.
#pragma once

#include "absl/status/status.h"
#include "mlaserve/v1/api.pb.h"

namespace mlaserve::router {

class GenerateClient {
 public:
  virtual ~GenerateClient() = default;
  // One message (chunk, complete or error) of the Generate stream.
  virtual void Send(const v1::GenerateResponse& message) = 0;
  // The call's status: OK after `complete`, else the error (api.proto's codes).
  virtual void End(const absl::Status& status) = 0;
};

}  // namespace mlaserve::router
