// The one place where absl::Status and grpc::Status are converted into each other.
//
// Codes are preserved (absl::StatusCode and grpc::StatusCode share their numbering, both
// being google.rpc.Code), so a RESOURCE_EXHAUSTED raised deep in a worker reaches the client
// as RESOURCE_EXHAUSTED and the retry meaning survives every hop.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace mlaserve::common {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace mlaserve::common
