#include "model/constraint/schema_key_matcher.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::model::schema_internal {

absl::StatusOr<KeyMatcher> BuildKeyMatcher(const std::vector<std::string>& keys, bool others,
                                           size_t max_states) {
  // The trie of the named keys' canonical spellings.
  struct TrieNode {
    std::map<uint8_t, uint32_t> children;
    int32_t entry = -1;
    std::vector<uint32_t> below;
  };
  std::vector<TrieNode> trie(1);
  for (size_t e = 0; e < keys.size(); ++e) {
    uint32_t t = 0;
    trie[0].below.push_back(e);
    for (char c : keys[e]) {
      auto [it, inserted] = trie[t].children.emplace(static_cast<uint8_t>(c), trie.size());
      if (inserted) trie.emplace_back();
      t = it->second;
      trie[t].below.push_back(e);
    }
    if (trie[t].entry < 0) trie[t].entry = static_cast<int32_t>(e);
  }
  const Dfa& any = AnyStringDfa();
  // Product states: (any-string state, trie node or -1).
  std::map<std::pair<uint16_t, int32_t>, uint16_t> ids;
  std::vector<std::pair<uint16_t, int32_t>> states = {{0, 0}};
  ids.emplace(states[0], 0);
  std::vector<uint16_t> dense;
  std::vector<uint8_t> accept;
  for (size_t i = 0; i < states.size(); ++i) {
    const auto [a, t] = states[i];
    dense.resize((i + 1) * 256, Dfa::kDead);
    const bool named = t >= 0 && trie[t].entry >= 0;
    accept.push_back(named || (others && any.Accepting(a)));
    for (int b = 0; b < 256; ++b) {
      const uint16_t na = any.Next(a, b);
      if (na == Dfa::kDead) continue;
      int32_t nt = -1;
      if (t >= 0) {
        auto it = trie[t].children.find(b);
        if (it != trie[t].children.end()) nt = static_cast<int32_t>(it->second);
      }
      if (nt < 0 && !others) continue;
      auto [it, inserted] = ids.emplace(std::pair(na, nt), static_cast<uint16_t>(states.size()));
      if (inserted) {
        if (states.size() >= max_states || states.size() >= Dfa::kDead) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the property names need more than ", max_states, " automaton states"));
        }
        states.emplace_back(na, nt);
      }
      dense[i * 256 + b] = it->second;
    }
  }
  std::vector<uint32_t> keep;
  KeyMatcher km;
  km.dfa = Dfa::FromDense(dense, accept, &keep);
  const size_t n = km.dfa.states();
  km.entry_at.resize(n);
  km.other_accept.resize(n);
  km.other_live.assign(n, 0);
  km.below_begin.push_back(0);
  for (size_t s = 0; s < n; ++s) {
    const auto [a, t] = states[keep[s]];
    km.entry_at[s] = t >= 0 ? trie[t].entry : -1;
    km.other_accept[s] = others && any.Accepting(a) && km.entry_at[s] < 0;
    if (t >= 0) km.below.insert(km.below.end(), trie[t].below.begin(), trie[t].below.end());
    km.below_begin.push_back(static_cast<uint32_t>(km.below.size()));
  }
  // other_live: an other-key ending is reachable (backwards closure).
  bool changed = true;
  for (size_t s = 0; s < n; ++s) km.other_live[s] = km.other_accept[s];
  while (changed) {
    changed = false;
    for (size_t s = 0; s < n; ++s) {
      if (km.other_live[s]) continue;
      for (int b = 0; b < 256; ++b) {
        const uint16_t t = km.dfa.Next(static_cast<uint16_t>(s), b);
        if (t != Dfa::kDead && km.other_live[t]) {
          km.other_live[s] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  return km;
}

}  // namespace mlaserve::model::schema_internal
