// mlaservectl output: tables for people (-o table) and JSON for scripts (-o json, the proto
// JSON mapping with the .proto field names), plus the exit codes scripts rely on.
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <grpcpp/support/status.h>

#include "absl/time/time.h"
#include "mlaserve/v1/admin.pb.h"

namespace mlaserve::router::ctl {

// Exit codes: 0 ok, 1 usage, 2 the server answered with an error, 3 the server is unavailable
// (not reachable, or it says UNAVAILABLE / DEADLINE_EXCEEDED).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitServerError = 2;
inline constexpr int kExitUnavailable = 3;
int ExitCodeFor(const grpc::Status& status);
// "INVALID_ARGUMENT: prompt is empty"
std::string DescribeStatus(const grpc::Status& status);

// Left-aligned columns separated by two spaces; the header in capitals as given.
std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

std::string RoleLabel(v1::WorkerRole role);     // "prefill" / "decode" / "?"
std::string StateLabel(v1::WorkerState state);  // "healthy", ...
std::string SourceLabel(v1::WorkerSource source);

std::string WorkersTable(const v1::ListWorkersResponse& response, absl::Time now);
std::string WorkerDetail(const v1::WorkerStatus& status, absl::Time now);
std::string LoadsTable(const v1::GetLoadsResponse& response);
std::string ProfilesTable(const v1::GetProfilesResponse& response);

// One JSON document (pretty when `pretty`), field names as in the .proto files.
std::string ToJson(const google::protobuf::Message& message, bool pretty = true);

}  // namespace mlaserve::router::ctl
