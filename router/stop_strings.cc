#include "router/stop_strings.h"

#include <algorithm>

namespace mlaserve::router {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop_in_output)
    : include_stop_(include_stop_in_output) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Result StopStringMatcher::Append(std::string_view text) {
  Result result;
  if (matched_) return result;
  if (stops_.empty()) {
    result.emit.assign(text);
    return result;
  }
  std::string buffer = std::move(held_);
  held_.clear();
  buffer.append(text);

  // The earliest match wins; among matches at the same position, the longest.
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stops_) {
    const size_t pos = buffer.find(stop);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stop.size() > best->size())) {
      best_pos = pos;
      best = &stop;
    }
  }
  if (best != nullptr) {
    matched_ = true;
    result.emit = buffer.substr(0, include_stop_ ? best_pos + best->size() : best_pos);
    result.matched = *best;
    return result;
  }

  // Hold back the longest suffix of `buffer` that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(buffer.size(), stop.size() - 1);
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(buffer).substr(buffer.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  held_ = buffer.substr(buffer.size() - hold);
  buffer.resize(buffer.size() - hold);
  result.emit = std::move(buffer);
  return result;
}

std::string StopStringMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace mlaserve::router
