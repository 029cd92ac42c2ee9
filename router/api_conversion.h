// api.proto <-> router domain conversion, as small free functions tested on their own.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "mlaserve/v1/api.pb.h"
#include "router/request.h"

namespace mlaserve::router {

// Fills the documented defaults for unset optionals; ranges are checked later by
// ValidateAndResolveSampling.
SamplingConfig SamplingFromProto(const v1::SamplingParams& proto);

// What SamplingFromProto cannot carry, checked on the proto before it: INVALID_ARGUMENT for a
// response_format value this router does not know (a newer client's: refused rather than served
// as free text), a response_format_schema without RESPONSE_FORMAT_JSON_SCHEMA (the conversion
// would constrain by it all the same), and logprobs / prompt_logprobs set to a negative value
// (the conversion's "unset" is -1, so -1 would pass as none). The ranges are
// ValidateAndResolveSampling's.
absl::Status ValidateSamplingProto(const v1::SamplingParams& proto);

// For worker requests: every optional set (the workers take them as given). `sampling`
// must have been resolved (seed and max_new_tokens set).
v1::SamplingParams SamplingToProto(const SamplingConfig& sampling);

// Why `wire` (a serialized GenerateRequest that failed to parse) is malformed, as
// INVALID_ARGUMENT naming the field: protobuf refuses invalid UTF-8 in string fields before
// the router sees them, and users deserve the same message as for other bad values.
absl::Status DiagnoseUnparsableGenerateRequest(const std::string& wire);

}  // namespace mlaserve::router
