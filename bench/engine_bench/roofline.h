// What a Forward of the engine must move and compute, from the checkpoint's config alone: the
// denominators of mlaserve-engine-bench's roofline columns (a decode step against the device's
// copy bandwidth, a prefill against the cuBLAS bf16 GEMM rate, both measured in the same run).
//
// Weights are counted at 2 bytes a parameter (bf16, as the engine runs every checkpoint but an fp8
// one), each read once per Forward:
//   attention   q_proj, or q_a_proj + q_b_proj with a q LoRA; kv_a_proj_with_mqa; kv_b_proj; o_proj
//   dense MLP   gate, up and down (layer_is_moe false)
//   MoE layer   the router, the shared experts, and the routed experts a step touches: for T tokens
//               of k distinct experts each out of E, E * (1 - (1 - k / E)^T) expected under uniform
//               routing (a trained router's balance; a skewed one touches fewer)
//   LM head     once (decode: every sequence's row; prefill: the prompt's last)
// plus, for a decode step, each sequence's latent KV cache (context x (kv_lora_rank + rope) x 2
// bytes a layer). Norms, biases, the embedding rows and V3.2's indexer weights are left out (under
// 0.1% at DeepSeek's shapes). FLOPs are 2 per parameter and token touched (the routed experts: k
// per token) plus the attention's products: the absorbed form's q . [latent | rope] and p . latent
// per head and key for a decode token, the MHA form's causal q . k (qk dims) and p . v (v dims) for
// a prefill (T (T + 1) / 2 pairs).
#pragma once

#include <string>
#include <vector>

#include "model/loader/config.h"

namespace mlaserve::bench {

struct ForwardWork {
  double weight_bytes = 0;  // weights read (see above)
  double kv_bytes = 0;      // latent cache read (decode)
  double flops = 0;
  double touched_experts = 0;  // expected routed experts touched a MoE layer (0: no MoE layer)
  double bytes() const { return weight_bytes + kv_bytes; }
};

// One decode step of `batch` sequences, each with `context` cached tokens before its new one.
ForwardWork DecodeStepWork(const model::ModelConfig& c, int batch, int context);

// One prefill of a `tokens`-token prompt with no cached prefix (the MHA form).
ForwardWork PrefillWork(const model::ModelConfig& c, int tokens);

// What prompt logprobs (model/engine.h, SequenceChunk::prompt_targets) over `scored_rows` rows
// must at least add to their prefill: the LM head over every scored row, 2 x rows x hidden x
// vocab FLOPs, reading the head once (weight_bytes). The engine reads the head once per slice of
// rows (model/deepseek_engine_prompt_logprobs.cc), an implementation's cost rather than the
// floor; the rows' logits need not leave the chip and the entries are a few bytes a row, so
// neither is counted.
ForwardWork PromptScoringWork(const model::ModelConfig& c, int scored_rows);

// The least time `w` takes at these ceilings, in ms: its FLOPs at `gemm_tflops` or its bytes at
// `copy_gbs`, whichever is longer; 0 where either ceiling is missing (<= 0: a sharded run, a
// failed measurement).
double FloorMs(const ForwardWork& w, double gemm_tflops, double copy_gbs);

// The SM clocks a row's timed runs ended at (ceilings.h's ProbeSmClockMhz after each, MHz) against
// the boost clock: "1560 / 1695 / 1710 MHz (min / median / max of 3 runs; 79-86% of the 1980 MHz
// boost clock)", one sample "1980 MHz (100% of the 1980 MHz boost clock)"; without a boost clock
// (<= 0) no share; samples of 0 (a failed probe) are left out, and none left gives "-". A prefill's FLOP rate is only comparable across
// runs at the same clock: an H100 at its power cap runs GEMM-heavy work well below its boost.
std::string ClockCell(std::vector<double> mhz, double boost_mhz);

}  // namespace mlaserve::bench
