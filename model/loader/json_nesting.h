// How deep a JSON value nests, without recursion: nlohmann's dump() recurses once per level,
// so a hostile file's "[[[[..." (a config.json field, a safetensors header entry) must be
// caught before an error message prints it.
#pragma once

#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace mlaserve::model {

// True when `v` nests arrays / objects more than `limit` deep.
inline bool JsonNestedDeeperThan(const nlohmann::json& v, int limit) {
  std::vector<std::pair<const nlohmann::json*, int>> todo = {{&v, 0}};
  while (!todo.empty()) {
    const auto [j, depth] = todo.back();
    todo.pop_back();
    if (!j->is_structured()) continue;
    if (depth >= limit) return true;
    for (const nlohmann::json& child : *j) todo.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace mlaserve::model
