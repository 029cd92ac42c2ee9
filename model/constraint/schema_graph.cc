#include "model/constraint/schema_graph.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/constraint/json_recognizer.h"

namespace mlaserve::model::schema_internal {

using json_internal::kMaxDepth;

void ComputeLeaves(CompiledSchema& schema) {
  for (size_t id = 0; id < schema.nodes.size(); ++id) {
    std::vector<uint32_t> leaves;
    std::vector<bool> seen(schema.nodes.size(), false);
    std::vector<uint32_t> stack = {static_cast<uint32_t>(id)};
    while (!stack.empty()) {
      const uint32_t n = stack.back();
      stack.pop_back();
      if (seen[n]) continue;
      seen[n] = true;
      const Node& node = schema.nodes[n];
      if (node.kind != NodeKind::kAnyOf) {
        leaves.push_back(n);
        continue;
      }
      for (auto it = node.alternatives.rbegin(); it != node.alternatives.rend(); ++it) {
        stack.push_back(*it);
      }
    }
    schema.nodes[id].leaves = std::move(leaves);
  }
}

void ComputeMinDepth(CompiledSchema& schema) {
  for (Node& n : schema.nodes) n.min_depth = kUnsatisfiable;
  auto nested = [&](uint32_t child) -> uint64_t {
    return child == kNone ? kUnsatisfiable : schema.nodes[child].min_depth;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (Node& n : schema.nodes) {
      uint64_t d = kUnsatisfiable;
      switch (n.kind) {
        case NodeKind::kAnyOf:
          for (uint32_t a : n.alternatives) d = std::min(d, nested(a));
          break;
        case NodeKind::kString:
          d = n.dfa != kNone && schema.dfas[n.dfa].Empty() ? kUnsatisfiable : 0;
          break;
        case NodeKind::kNumber:
        case NodeKind::kInteger:
          d = 0;
          break;
        case NodeKind::kLiteral:
          d = n.literals.empty() ? kUnsatisfiable : n.literal_depth;
          break;
        case NodeKind::kObject:
          d = 1;
          for (const PropertyEntry& e : n.entries) {
            if (e.required) d = std::max(d, 1 + nested(e.value));
          }
          break;
        case NodeKind::kArray:
          d = 1;
          for (uint64_t i = 0; i < n.min_items; ++i) {
            d = std::max(d, 1 + nested(i < n.prefix.size() ? n.prefix[i] : n.items));
            if (i >= n.prefix.size()) break;  // the rest are all `items`
          }
          break;
      }
      if (d > static_cast<uint64_t>(kMaxDepth)) d = kUnsatisfiable;
      if (d != n.min_depth) {
        n.min_depth = static_cast<uint32_t>(d);
        changed = true;
      }
    }
  }
}

}  // namespace mlaserve::model::schema_internal
