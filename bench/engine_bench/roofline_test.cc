// The roofline's bytes and FLOPs against hand counts of the two shapes the benchmarks run:
// DeepSeek-V3 (three layers, one dense, as tools/make_random_model.py --shape v3 writes them for
// one GPU) and V2-Lite (27 layers, no q LoRA), each parsed from its config.json text; and the
// bench's SM clock cell.
#include "bench/engine_bench/roofline.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/loader/config.h"

namespace mlaserve::bench {
namespace {

constexpr char kV3ThreeLayers[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
  "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 128,
  "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1,
  "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
  "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5,
  "vocab_size": 129280, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
  "rope_theta": 10000, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1,
  "num_nextn_predict_layers": 0, "tie_word_embeddings": false, "attention_bias": false
})";

constexpr char kV2Lite[] = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
  "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
  "num_hidden_layers": 27, "first_k_dense_replace": 1, "num_attention_heads": 16,
  "num_key_value_heads": 16, "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2,
  "num_experts_per_tok": 6, "n_group": 1, "topk_group": 1, "topk_method": "greedy",
  "scoring_func": "softmax", "norm_topk_prob": false, "routed_scaling_factor": 1.0,
  "vocab_size": 102400, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
  "rope_theta": 10000, "hidden_act": "silu", "bos_token_id": 100000, "eos_token_id": 100001,
  "tie_word_embeddings": false, "attention_bias": false
})";

model::ModelConfig Parse(const char* json) {
  auto c = model::ParseModelConfig(json);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : model::ModelConfig{};
}

TEST(EngineRoofline, V3DecodeStepBytes) {
  const model::ModelConfig c = Parse(kV3ThreeLayers);
  ASSERT_EQ(c.num_hidden_layers, 3);
  // Attention: q_a 1536 x 7168, q_b 128 x 192 x 1536, kv_a 576 x 7168, kv_b 128 x 256 x 512,
  // o_proj 7168 x 128 x 128.
  const double attn = 1536.0 * 7168 + 128.0 * 192 * 1536 + 576.0 * 7168 + 128.0 * 256 * 512 + 7168.0 * 128 * 128;
  const double expert = 3.0 * 7168 * 2048, dense = 3.0 * 7168 * 18432, router = 256.0 * 7168;
  const double lm_head = 129280.0 * 7168;
  // Batch 1: the token's 8 experts exactly (1 - (1 - 8/256)^1 = 8/256).
  const ForwardWork b1 = DecodeStepWork(c, 1, 1024);
  EXPECT_NEAR(b1.touched_experts, 8.0, 1e-9);
  const double b1_params = 3 * attn + dense + 2 * (router + expert * (1 + 8)) + lm_head;
  EXPECT_NEAR(b1.weight_bytes, 2 * b1_params, 1.0);
  EXPECT_NEAR(b1.weight_bytes / 1e9, 5.36, 0.01);  // docs/BENCHMARKS.md's V3 rows
  EXPECT_NEAR(b1.kv_bytes, 1024.0 * 576 * 2 * 3, 1e-6);
  // FLOPs: 2 per parameter a token multiplies, and 2 x heads x keys x (576 + 512) a layer.
  const double b1_flops = 2 * b1_params + 3 * 2.0 * 128 * 1025 * (576 + 512);
  EXPECT_NEAR(b1.flops / b1_flops, 1.0, 1e-12);
  // Batch 32: 256 x (1 - (31/32)^32) experts a layer; the weights grow by those, not 32 x 8.
  const ForwardWork b32 = DecodeStepWork(c, 32, 1024);
  const double touched = 256 * (1 - std::pow(1 - 8.0 / 256, 32));
  EXPECT_NEAR(b32.touched_experts, touched, 1e-9);
  EXPECT_NEAR(b32.touched_experts, 163.3, 0.1);
  EXPECT_NEAR(b32.weight_bytes, 2 * (b1_params + 2 * (touched - 8) * expert), 1.0);
  EXPECT_NEAR(b32.kv_bytes, 32 * b1.kv_bytes, 1e-3);
  EXPECT_NEAR(b32.flops / b1.flops, 32.0, 1e-9);
}

TEST(EngineRoofline, V3PrefillFlops) {
  const model::ModelConfig c = Parse(kV3ThreeLayers);
  const ForwardWork p = PrefillWork(c, 4096);
  const double attn = 1536.0 * 7168 + 128.0 * 192 * 1536 + 576.0 * 7168 + 128.0 * 256 * 512 + 7168.0 * 128 * 128;
  const double expert = 3.0 * 7168 * 2048, dense = 3.0 * 7168 * 18432, router = 256.0 * 7168;
  const double per_token = 3 * attn + dense + 2 * (router + 9 * expert);
  const double causal = 4096.0 * 4097 / 2 * 2 * 128 * (192 + 128) * 3;
  const double want = 2 * per_token * 4096 + 2 * 129280.0 * 7168 + causal;
  EXPECT_NEAR(p.flops / want, 1.0, 1e-12);
  EXPECT_NEAR(p.flops / 1e12, 16.4, 0.1);  // docs/BENCHMARKS.md's V3 prefill row
  EXPECT_NEAR(p.touched_experts, 256.0, 1e-6);  // 4096 tokens touch every expert
  EXPECT_EQ(p.kv_bytes, 0.0);
}

TEST(EngineRoofline, V2LiteHasNoQLoraAndTwoSharedExperts) {
  const model::ModelConfig c = Parse(kV2Lite);
  const double attn = 16.0 * 192 * 2048 + 576.0 * 2048 + 16.0 * 256 * 512 + 2048.0 * 16 * 128;
  const double expert = 3.0 * 2048 * 1408, dense = 3.0 * 2048 * 10944, router = 64.0 * 2048;
  const ForwardWork b1 = DecodeStepWork(c, 1, 1024);
  EXPECT_NEAR(b1.touched_experts, 6.0, 1e-9);
  const double params = 27 * attn + dense + 26 * (router + expert * (2 + 6)) + 102400.0 * 2048;
  EXPECT_NEAR(b1.weight_bytes, 2 * params, 1.0);
  EXPECT_NEAR(b1.weight_bytes / 1e9, 4.9, 0.1);  // "active weights ~4.8 GB" (issue 12's 1.6 ms on an H100)
  EXPECT_EQ(DecodeStepWork(c, 0, 1024).bytes(), 0.0);
  EXPECT_EQ(PrefillWork(c, 0).flops, 0.0);
}

TEST(EngineRoofline, PromptScoringIsTheLmHeadOverEveryScoredRow) {
  const model::ModelConfig v3 = Parse(kV3ThreeLayers);
  // A 4096-token prompt scores its first 4095 rows (the last has no next prompt token).
  const ForwardWork s = PromptScoringWork(v3, 4095);
  EXPECT_NEAR(s.flops / (2.0 * 4095 * 7168 * 129280), 1.0, 1e-12);
  EXPECT_NEAR(s.flops / 1e12, 7.59, 0.01);
  EXPECT_NEAR(s.weight_bytes, 2.0 * 129280 * 7168, 1.0);  // the head once: 1.85 GB
  EXPECT_EQ(s.kv_bytes, 0.0);
  EXPECT_EQ(s.touched_experts, 0.0);
  const model::ModelConfig v2 = Parse(kV2Lite);
  EXPECT_NEAR(PromptScoringWork(v2, 1023).flops, 2.0 * 1023 * 2048 * 102400, 1.0);
  EXPECT_EQ(PromptScoringWork(v2, 0).flops, 0.0);
  EXPECT_EQ(PromptScoringWork(v2, 0).bytes(), 0.0);
}

TEST(EngineRoofline, FloorIsTheLongerOfComputeAndTheRead) {
  const model::ModelConfig v3 = Parse(kV3ThreeLayers);
  // 4095 rows at 800 TFLOP/s: 9.49 ms of arithmetic against 0.62 ms to read the head at 3 TB/s.
  const ForwardWork many = PromptScoringWork(v3, 4095);
  EXPECT_NEAR(FloorMs(many, 800, 3000), many.flops / 800e12 * 1e3, 1e-9);
  EXPECT_NEAR(FloorMs(many, 800, 3000), 9.49, 0.01);
  // One row: 1.85 GFLOP (2.3 us) against the same 0.62 ms read.
  const ForwardWork one = PromptScoringWork(v3, 1);
  EXPECT_NEAR(FloorMs(one, 800, 3000), one.weight_bytes / 3000e9 * 1e3, 1e-9);
  EXPECT_NEAR(FloorMs(one, 800, 3000), 0.618, 0.001);
  // No ceiling, no floor (sharded runs, a failed cuBLAS measurement).
  EXPECT_EQ(FloorMs(many, 0, 3000), 0.0);
  EXPECT_EQ(FloorMs(many, 800, 0), 0.0);
}

TEST(EngineRoofline, ClockCellSaysTheRunsClocksAgainstTheBoost) {
  // The sixty-eighth session's H100 prefill runs, probed after each (unsorted, one failed probe).
  EXPECT_EQ(ClockCell({1695, 1560, 0, 1710}, 1980),
            "1560 / 1695 / 1710 MHz (min / median / max of 3 runs; 79-86% of the 1980 MHz boost clock)");
  EXPECT_EQ(ClockCell({1980}, 1980), "1980 MHz (100% of the 1980 MHz boost clock)");
  EXPECT_EQ(ClockCell({1755, 1980}, 0), "1755 / 1980 / 1980 MHz (min / median / max of 2 runs)");
  EXPECT_EQ(ClockCell({1755}, -1), "1755 MHz");
  EXPECT_EQ(ClockCell({}, 1980), "-");
  EXPECT_EQ(ClockCell({0, 0}, 1980), "-");
}

}  // namespace
}  // namespace mlaserve::bench
