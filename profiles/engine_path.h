// The policy's choice as the engine takes it (model/engine.h knows kMha, kMhaOurs and kMla; the
// engine runs sparse-fwd itself for every multi-token sparse DSA batch, so kSparseFwd maps to
// kMla).
#pragma once

#include "kernels/mha_prefill/api.h"
#include "model/engine.h"
#include "profiles/attention_path_policy.h"

namespace mlaserve::profiles {

inline model::AttentionPath ToEnginePath(PrefillPath p) {
  return p == PrefillPath::kMha ? model::AttentionPath::kMha : model::AttentionPath::kMla;
}

// The MHA provider to run a kMha choice on: ours where the profile found ours faster in the
// batch's cell; kAuto everywhere else, i.e. cuDNN where it can run the call and ours where it
// cannot (the engine's default). So a cell tuned on cuDNN never turns into an error on a call
// cuDNN refuses or a process without it; the policy has already said kOurs for cuDNN cells
// where cuDNN cannot load (one warning at its Create).
inline kernels::MhaPrefillProvider ToEngineMhaProvider(const PathChoice& c) {
  return c.path == PrefillPath::kMha && c.mha_provider == kernels::MhaPrefillProvider::kOurs
             ? kernels::MhaPrefillProvider::kOurs
             : kernels::MhaPrefillProvider::kAuto;
}

// The path and MHA provider of a choice in one engine path: kMhaOurs where the cell found our
// kernel faster, else as ToEnginePath(c.path) (kMha then runs on the engine's default, cuDNN
// where it can run the call).
inline model::AttentionPath ToEnginePath(const PathChoice& c) {
  return ToEngineMhaProvider(c) == kernels::MhaPrefillProvider::kOurs
             ? model::AttentionPath::kMhaOurs
             : ToEnginePath(c.path);
}

}  // namespace mlaserve::profiles
