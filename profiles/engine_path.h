// The policy's choice as the engine takes it (model/engine.h knows kMha and kMla; the engine
// runs sparse-fwd itself for every multi-token sparse DSA batch, so kSparseFwd maps to kMla).
#pragma once

#include "model/engine.h"
#include "profiles/attention_path_policy.h"

namespace mlaserve::profiles {

inline model::AttentionPath ToEnginePath(PrefillPath p) {
  return p == PrefillPath::kMha ? model::AttentionPath::kMha : model::AttentionPath::kMla;
}

}  // namespace mlaserve::profiles
