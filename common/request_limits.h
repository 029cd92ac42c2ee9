// Bounds on what one request may carry, shared by the router (public API) and the workers
// (which check again what the router checked: a worker port may be reached without the router).
// Each check is INVALID_ARGUMENT naming the field and the limit, and echoes at most
// kEchoedIdBytes of a client's id so an oversized id cannot inflate the error it causes.
#pragma once

#include <cstddef>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace mlaserve::common {

inline constexpr size_t kMaxRequestIdBytes = 256;
inline constexpr size_t kEchoedIdBytes = 64;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr size_t kMaxStopTokenIds = 64;

// A client's id as error messages show it: whole when short, else its first kEchoedIdBytes
// bytes, "..." and the length.
std::string IdForMessages(absl::string_view id);

// Empty is allowed (the router makes one); at most kMaxRequestIdBytes bytes of printable ASCII
// (it travels in logs, metrics-free messages and every response).
absl::Status ValidateRequestId(absl::string_view request_id);

// Counts of stop conditions (their contents are checked where they are used).
absl::Status ValidateStopCounts(size_t stop_strings, size_t stop_token_ids);
absl::Status ValidateStopString(size_t index, absl::string_view stop);

}  // namespace mlaserve::common
