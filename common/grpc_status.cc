#include "common/grpc_status.h"

#include <string>

namespace mlaserve::common {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  // grpc::StatusCode has no value outside google.rpc.Code's 1..16 in practice; anything else
  // (a future or corrupt code) is reported as UNKNOWN rather than cast blindly.
  if (code < 1 || code > 16) {
    return absl::UnknownError(status.error_message());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace mlaserve::common
