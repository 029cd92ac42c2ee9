// Helpers of the constraint tests: reading masks and judging them by brute force.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"

namespace mlaserve::model::testing {

inline bool Bit(std::span<const uint64_t> mask, int32_t t) { return (mask[t / 64] >> (t % 64)) & 1; }

inline std::vector<int32_t> AllowedIds(std::span<const uint64_t> mask) {
  std::vector<int32_t> ids;
  for (size_t w = 0; w < mask.size(); ++w) {
    for (uint64_t bits = mask[w]; bits != 0; bits &= bits - 1) {
      ids.push_back(static_cast<int32_t>(w * 64 + __builtin_ctzll(bits)));
    }
  }
  return ids;
}

// Bit t of `mask` is set iff a fresh constraint (JSON after `marker`; "" = from the start; held
// to `schema` when given) fed `history` then takes token t.
inline ::testing::AssertionResult MaskMatchesFeeding(
    const std::shared_ptr<const ConstraintVocabulary>& vocab, const std::string& marker,
    const std::vector<int32_t>& history, std::span<const uint64_t> mask,
    std::shared_ptr<const JsonSchema> schema = nullptr) {
  for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
    JsonConstraint replay(vocab, marker, schema);
    for (int32_t h : history) {
      if (!replay.Advance(h).ok()) return ::testing::AssertionFailure() << "replay failed";
    }
    const bool fed = replay.Advance(t).ok();
    if (Bit(mask, t) != fed) {
      return ::testing::AssertionFailure() << "token " << t << ": mask " << Bit(mask, t)
                                           << ", feeding " << fed << ", after "
                                           << history.size() << " tokens";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mlaserve::model::testing
