#include "common/request_limits.h"

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

}  // namespace mlaserve::common
