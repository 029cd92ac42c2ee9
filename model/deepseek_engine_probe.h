// DeepseekEngineProbe: reads values a DeepseekEngine step computes inside, for diagnostics
// (tools and tests), without hooks in the serving path: it is a friend of the engine and runs
// the step itself, through the engine's own planning, kernels and scratch.
//
// RouterLogits answers "which experts did this backend route each token to, and how close
// was that choice?" (issue 14: a CUDA-only divergence suspected to be a routing near-tie
// flipped by bf16 activations). It runs the batch exactly as Forward would (same plan,
// attention form, KV writes) and keeps, per MoE layer, the router's f32 logits for every
// token -- the values kernels/moe's routing ranks -- and the experts the backend's routing
// kernel chose from them. (tools/device/routing_probe.py recomputes choices and margins from
// the logits the same way for Hugging Face and both backends.)
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deepseek_engine.h"

namespace mlaserve::model {

class DeepseekEngineProbe {
 public:
  explicit DeepseekEngineProbe(DeepseekEngine& engine) : engine_(engine) {}

  struct RouterRows {
    int layer = 0;
    int num_tokens = 0;
    int num_experts = 0;
    int top_k = 0;
    std::vector<float> logits;     // [num_tokens, num_experts] f32, the batch's tokens in order
    std::vector<int32_t> experts;  // [num_tokens, top_k]: what the backend's routing chose
  };

  // One Forward's worth of work over `batch` (writing its KV as Forward does), returning the
  // router logits and routed experts of every MoE layer. No logits of the LM head.
  absl::StatusOr<std::vector<RouterRows>> RouterLogits(std::span<const SequenceChunk> batch,
                                                       AttentionPath path = AttentionPath::kAuto);

 private:
  DeepseekEngine& engine_;
};

}  // namespace mlaserve::model
