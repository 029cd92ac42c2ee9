// Bounds on what one request may carry, shared by the router (public API) and the workers
// (which check again what the router checked: a worker port may be reached without the router).
// Each check is INVALID_ARGUMENT naming the field and the limit, and echoes at most
// kEchoedIdBytes of a client's id so an oversized id cannot inflate the error it causes.
#pragma once

#include <cstddef>
#include <cstdint>
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

// The sampling knobs of one request, with the defaults and ranges of api.proto's
// SamplingParams. The router's request and the model's SamplingOptions extend it.
struct SamplingValues {
  float temperature = 1.0f;         // >= 0 and finite; 0 = greedy
  int32_t top_k = 0;                // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0 and finite; 1 = off
};

// The one sampling check, made once at each process edge: the router's API
// (router::ValidateAndResolveSampling), the workers' RPCs (worker::ToSamplingOptions) and
// mlaserve-run's flags. Past an edge the values are trusted: the engine's per-step sampling
// does not check them again. INVALID_ARGUMENT naming the field, its value and the range
// ("top_p 1.5 is out of range; it must be in (0, 1]"); NaN fails every range.
absl::Status ValidateSamplingValues(const SamplingValues& values);

}  // namespace mlaserve::common
