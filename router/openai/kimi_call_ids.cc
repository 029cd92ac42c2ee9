#include "router/openai/kimi_call_ids.h"

#include <algorithm>
#include <utility>

namespace mlaserve::router::openai {
namespace {

constexpr std::string_view kPrefix = "functions.";

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view Trimmed(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

// `text` without a trailing ":DIGITS" (nullopt when it has none).
std::optional<std::string_view> WithoutIndex(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == text.size()) return std::nullopt;
  const std::string_view digits = text.substr(colon + 1);
  if (!std::all_of(digits.begin(), digits.end(), IsDigit)) return std::nullopt;
  return text.substr(0, colon);
}

}  // namespace

std::optional<std::string> KimiCallName(std::string_view header) {
  std::string_view name = Trimmed(header);
  if (name.starts_with(kPrefix)) name.remove_prefix(kPrefix.size());
  if (std::optional<std::string_view> bare = WithoutIndex(name)) name = *bare;
  if (name.empty()) return std::nullopt;
  return std::string(name);
}

std::string KimiCallId(std::string_view name, size_t index) {
  std::string id(kPrefix);
  id.append(name);
  id += ':';
  id += std::to_string(index);
  return id;
}

KimiCallIds::KimiCallIds(std::vector<std::string> history)
    : taken_(std::make_move_iterator(history.begin()), std::make_move_iterator(history.end())),
      calls_(history.size()) {}

std::string KimiCallIds::Take(std::string_view name, std::string_view header) {
  const std::string written(Trimmed(header));
  const std::optional<std::string_view> bare = WithoutIndex(written);
  const bool well_formed = written.starts_with(kPrefix) && bare.has_value() && bare->substr(kPrefix.size()) == name;
  std::string id;
  if (well_formed && !taken_.contains(written)) {
    id = written;
  } else {
    size_t k = calls_;
    while (taken_.contains(KimiCallId(name, k))) ++k;
    id = KimiCallId(name, k);
  }
  ++calls_;
  taken_.insert(id);
  return id;
}

}  // namespace mlaserve::router::openai
