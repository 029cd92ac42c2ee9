#include "model/constraint/schema_choices.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "model/constraint/json_schema.h"

namespace mlaserve::model::choice_internal {
namespace {

constexpr char kByteUnit = 0;
constexpr char kAddedUnit = 1;
constexpr size_t kAddedUnitBytes = 5;

}  // namespace

void AppendByteUnits(std::string& units, std::string_view bytes) {
  for (const char b : bytes) {
    units.push_back(kByteUnit);
    units.push_back(b);
  }
}

void AppendAddedUnit(std::string& units, int32_t id) {
  units.push_back(kAddedUnit);
  for (int shift = 24; shift >= 0; shift -= 8) units.push_back(static_cast<char>((id >> shift) & 0xff));
}

std::optional<std::string> BytesOf(std::string_view units) {
  std::string bytes;
  for (size_t i = 0; i < units.size(); i += 2) {
    if (units[i] != kByteUnit) return std::nullopt;
    bytes.push_back(units[i + 1]);
  }
  return bytes;
}

void AddedTokenTexts::Add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  if (by_text_.emplace(std::string(text), id).second) by_id_.emplace(id, std::string(text));
  longest_ = std::max(longest_, text.size());
}

std::string AddedTokenTexts::Units(std::string_view text) const {
  std::string units;
  for (size_t i = 0; i < text.size();) {
    size_t matched = 0;
    for (size_t n = std::min(longest_, text.size() - i); n > 0 && matched == 0; --n) {
      const std::string_view piece = text.substr(i, n);
      if (auto it = by_text_.find(absl::string_view(piece.data(), piece.size())); it != by_text_.end()) {
        AppendAddedUnit(units, it->second);
        matched = n;
      }
    }
    if (matched == 0) {
      AppendByteUnits(units, text.substr(i, 1));
      matched = 1;
    }
    i += matched;
  }
  return units;
}

std::string AddedTokenTexts::Text(std::string_view units) const {
  std::string text;
  for (size_t i = 0; i < units.size();) {
    if (units[i] == kByteUnit) {
      text.push_back(units[i + 1]);
      i += 2;
      continue;
    }
    int32_t id = 0;
    for (size_t k = 1; k < kAddedUnitBytes; ++k) id = (id << 8) | static_cast<uint8_t>(units[i + k]);
    if (auto it = by_id_.find(id); it != by_id_.end()) text += it->second;
    i += kAddedUnitBytes;
  }
  return text;
}

ChoiceSet MakeChoiceSet(std::vector<SchemaChoice> choices, const AddedTokenTexts& added) {
  std::vector<std::pair<std::string, size_t>> order;  // (units, index given)
  for (size_t i = 0; i < choices.size(); ++i) order.emplace_back(added.Units(choices[i].prefix), i);
  std::sort(order.begin(), order.end());
  ChoiceSet set;
  for (auto& [units, i] : order) {
    const uint32_t size = static_cast<uint32_t>(choices[i].prefix.size());
    const uint64_t serial = choices[i].schema != nullptr ? choices[i].schema->serial() : 0;
    set.key.append(reinterpret_cast<const char*>(&size), sizeof(size));
    set.key += choices[i].prefix;
    set.key.append(reinterpret_cast<const char*>(&serial), sizeof(serial));
    set.sorted.push_back(std::move(choices[i]));
    set.units.push_back(std::move(units));
    set.given_index.push_back(i);
  }
  return set;
}

ChoiceRead ReadChoice(const ChoiceSet& set, std::string_view text, size_t& chosen) {
  const auto after = std::upper_bound(set.units.begin(), set.units.end(), text,
                                      [](std::string_view t, const std::string& u) { return t < u; });
  if (after != set.units.begin() && text.starts_with(*std::prev(after))) {
    chosen = static_cast<size_t>(std::prev(after) - set.units.begin());
    return ChoiceRead::kChosen;
  }
  if (after != set.units.end() && std::string_view(*after).starts_with(text)) return ChoiceRead::kOpen;
  return ChoiceRead::kRefused;
}

}  // namespace mlaserve::model::choice_internal
