// The policy's choice as the engine takes it (model/engine.h knows kMha, kMhaOurs, kMhaCudnn,
// kMla and kSplit; the engine runs sparse-fwd itself for every multi-token sparse DSA batch, so
// kSparseFwd maps to kMla).
#pragma once

#include "kernels/mha_prefill/api.h"
#include "model/engine.h"
#include "profiles/attention_path_policy.h"

namespace mlaserve::profiles {

inline model::AttentionPath ToEnginePath(PrefillPath p) {
  switch (p) {
    case PrefillPath::kMha: return model::AttentionPath::kMha;
    case PrefillPath::kSplit: return model::AttentionPath::kSplit;  // fresh part: default provider
    case PrefillPath::kMla:
    case PrefillPath::kSparseFwd: break;
  }
  return model::AttentionPath::kMla;
}

// The MHA provider to run a kMha choice on: ours where the profile found ours faster in the
// batch's cell; kPreferCudnn where it found cuDNN faster (cuDNN where it can run the call, ours
// where it cannot: a cell tuned on cuDNN never turns into an error on a call cuDNN refuses or a
// process without it; the policy has already said kOurs for cuDNN cells where cuDNN cannot
// load, one warning at its Create); kAuto (the engine's default) where the cell names none.
inline kernels::MhaPrefillProvider ToEngineMhaProvider(const PathChoice& c) {
  if (c.path != PrefillPath::kMha) return kernels::MhaPrefillProvider::kAuto;
  switch (c.mha_provider) {
    case kernels::MhaPrefillProvider::kOurs: return kernels::MhaPrefillProvider::kOurs;
    case kernels::MhaPrefillProvider::kCudnn:
    case kernels::MhaPrefillProvider::kPreferCudnn: return kernels::MhaPrefillProvider::kPreferCudnn;
    case kernels::MhaPrefillProvider::kAuto: break;
  }
  return kernels::MhaPrefillProvider::kAuto;
}

// The path and MHA provider of a choice in one engine path: kMhaOurs / kMhaCudnn where the
// cell names a provider, else as ToEnginePath(c.path) (kMha then runs on the engine's default).
inline model::AttentionPath ToEnginePath(const PathChoice& c) {
  switch (ToEngineMhaProvider(c)) {
    case kernels::MhaPrefillProvider::kOurs: return model::AttentionPath::kMhaOurs;
    case kernels::MhaPrefillProvider::kPreferCudnn: return model::AttentionPath::kMhaCudnn;
    default: return ToEnginePath(c.path);
  }
}

}  // namespace mlaserve::profiles
