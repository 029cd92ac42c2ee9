#include "common/request_limits.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mlaserve::common {

std::string IdForMessages(absl::string_view id) {
  if (id.size() <= kEchoedIdBytes) return std::string(id);
  return absl::StrCat(id.substr(0, kEchoedIdBytes), "... (", id.size(), " bytes)");
}

absl::Status ValidateRequestId(absl::string_view id) {
  if (id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("request_id has ", id.size(),
                                                   " bytes; at most ", kMaxRequestIdBytes,
                                                   " are allowed (it starts \"",
                                                   id.substr(0, kEchoedIdBytes), "\")"));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("request_id has byte 0x", absl::Hex(c, absl::kZeroPad2), " at offset ", i,
                       "; it must be printable ASCII"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateStopCounts(size_t stop_strings, size_t stop_token_ids) {
  if (stop_strings > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stop has ", stop_strings,
                                                   " strings; at most ", kMaxStopStrings,
                                                   " are allowed"));
  }
  if (stop_token_ids > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat("stop_token_ids has ", stop_token_ids,
                                                   " ids; at most ", kMaxStopTokenIds,
                                                   " are allowed"));
  }
  return absl::OkStatus();
}

absl::Status ValidateStopString(size_t index, absl::string_view stop) {
  if (stop.size() > kMaxStopStringBytes) {
    return absl::InvalidArgumentError(absl::StrCat("stop string ", index, " has ", stop.size(),
                                                   " bytes; at most ", kMaxStopStringBytes,
                                                   " are allowed"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSamplingValues(const SamplingValues& v) {
  const auto out_of_range = [](absl::string_view field, auto value, absl::string_view range) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", value, " is out of range; it must be ", range));
  };
  // Written as !(x in range) so NaN fails too.
  if (!(v.temperature >= 0.0f) || std::isinf(v.temperature)) {
    return out_of_range("temperature", v.temperature, ">= 0 (0 = greedy)");
  }
  if (!(v.top_p > 0.0f && v.top_p <= 1.0f)) return out_of_range("top_p", v.top_p, "in (0, 1]");
  if (v.top_k < 0) return out_of_range("top_k", v.top_k, ">= 0 (0 = off)");
  if (!(v.min_p >= 0.0f && v.min_p <= 1.0f)) return out_of_range("min_p", v.min_p, "in [0, 1]");
  if (!(v.repetition_penalty > 0.0f) || std::isinf(v.repetition_penalty)) {
    return out_of_range("repetition_penalty", v.repetition_penalty, "> 0 (1 = off)");
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::common
