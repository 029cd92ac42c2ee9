// LoadDeepseekWeights' zero padding of the hidden state and the MLP intermediates
// (model/model_widths.h) on the fixtures whose widths are not multiples of 8: every real value
// at its stored place, zeros everywhere else, on one rank and on a rank of a sharded layout.
// (model_engine_reference_test holds the padded forward to HF's logits.)
#include "model/deepseek_weights.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/loader/config.h"
#include "model/loader/weight_store.h"
#include "model/model_widths.h"
#include "model/padded_matrix.h"
#include "model/testing/engine_fixtures.h"
#include "parallel/fake_collective.h"

namespace mlaserve::model {
namespace {

struct Checkpoint {
  ModelConfig config;
  std::unique_ptr<WeightStore> store;
};

Checkpoint Open(const std::string& fixture) {
  const std::string dir = std::string(testing::kFixtureRoot) + "/" + fixture;
  Checkpoint ck;
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return ck;
  ck.config = *c;
  absl::StatusOr<std::unique_ptr<WeightStore>> s = WeightStore::Open(dir, ck.config);
  EXPECT_TRUE(s.ok()) << s.status();
  if (s.ok()) ck.store = *std::move(s);
  return ck;
}

std::vector<float> Values(const WeightTensor& t) {
  const auto* f = static_cast<const float*>(t.data());  // the CPU backend stores f32
  return std::vector<float>(f, f + t.numel);
}

PaddedAxis Axis(int real, int stored) { return PaddedAxis{1, {{real, stored}}}; }

// `got` ([rows.stored(), cols.stored()]) is the checkpoint's `want` ([rows.real(),
// cols.real()]) padded with zeros, exactly.
void ExpectPadded(const std::vector<float>& got, const std::vector<float>& want,
                  const PaddedAxis& rows, const PaddedAxis& cols, const std::string& what) {
  ASSERT_EQ(want.size(), static_cast<size_t>(rows.real()) * cols.real()) << what;
  std::vector<uint8_t> bytes(want.size() * sizeof(float));
  std::memcpy(bytes.data(), want.data(), bytes.size());
  const std::vector<uint8_t> padded = PadMatrix(bytes, sizeof(float), rows, cols);
  std::vector<float> expected(padded.size() / sizeof(float));
  std::memcpy(expected.data(), padded.data(), padded.size());
  EXPECT_TRUE(rows.padded() || cols.padded()) << what << " is not padded at all";
  EXPECT_EQ(got, expected) << what;
}

std::vector<float> Load(WeightStore& store, const std::string& name, std::vector<int64_t> shape,
                        const TensorSlice& slice = {}) {
  absl::StatusOr<std::vector<float>> v = store.LoadF32(name, shape, slice);
  EXPECT_TRUE(v.ok()) << name << ": " << v.status();
  return v.ok() ? *v : std::vector<float>{};
}

// deepseek_v3_pad: hidden 28 -> 32, dense intermediate 20 -> 24, experts' 12 -> 16 (the one
// shared expert's too), vocab 257, q_lora_rank 12 (not padded).
TEST(DeepseekWeightsPadding, V3HiddenAndIntermediates) {
  Checkpoint ck = Open("deepseek_v3_pad");
  ASSERT_NE(ck.store, nullptr);
  const ModelConfig& c = ck.config;
  ASSERT_EQ(c.hidden_size, 28);
  absl::StatusOr<DeepseekWeights> w = LoadDeepseekWeights(c, *ck.store);
  ASSERT_TRUE(w.ok()) << w.status();
  WeightStore& s = *ck.store;
  const int V = c.vocab_size, H = 28, Hs = 32, ql = *c.q_lora_rank;
  const PaddedAxis hidden = Axis(H, Hs);
  ExpectPadded(Values(w->embed), Load(s, "model.embed_tokens.weight", {V, H}), PaddedAxis::Plain(V),
               hidden, "embed");
  ExpectPadded(Values(w->lm_head.weight), Load(s, "lm_head.weight", {V, H}), PaddedAxis::Plain(V),
               hidden, "lm_head");
  EXPECT_EQ(w->lm_head.in, Hs);
  ExpectPadded(Values(w->final_norm), Load(s, "model.norm.weight", {H}), PaddedAxis::Plain(1),
               hidden, "final norm");

  const LayerWeights& dense = w->layers[0];
  ASSERT_FALSE(dense.is_moe);
  ExpectPadded(Values(dense.input_norm), Load(s, "model.layers.0.input_layernorm.weight", {H}),
               PaddedAxis::Plain(1), hidden, "input norm");
  ExpectPadded(Values(dense.post_attention_norm),
               Load(s, "model.layers.0.post_attention_layernorm.weight", {H}), PaddedAxis::Plain(1),
               hidden, "post-attention norm");
  // q_a_proj (stacked over kv_a_proj_with_mqa, both reading the hidden state): columns padded,
  // the q LoRA rows not.
  const MlaWeights& attn = dense.attn;
  EXPECT_EQ(attn.q_kv_a.in, Hs);
  const std::vector<float> q_kv_a = Values(attn.q_kv_a.weight);
  ExpectPadded(std::vector<float>(q_kv_a.begin(), q_kv_a.begin() + int64_t{ql} * Hs),
               Load(s, "model.layers.0.self_attn.q_a_proj.weight", {ql, H}), PaddedAxis::Plain(ql),
               hidden, "q_a_proj");
  EXPECT_EQ(attn.q_a_norm.numel, ql);
  EXPECT_EQ(attn.q_b_proj.in, ql);
  // o_proj writes the hidden state: rows padded.
  const int o_in = c.num_attention_heads * c.v_head_dim;
  ExpectPadded(Values(attn.o_proj.weight),
               Load(s, "model.layers.0.self_attn.o_proj.weight", {H, o_in}), hidden,
               PaddedAxis::Plain(o_in), "o_proj");
  // Dense MLP: gate and up rows [20 | 4 zero] each, columns [28 | 4 zero]; down [32, 24].
  const GatedMlpWeights& mlp = dense.mlp;
  ASSERT_EQ(mlp.gate_up_layout, kernels::MoeGateUpLayout::kStacked);
  EXPECT_EQ(mlp.inter, 24);
  const PaddedAxis inter = Axis(20, 24);
  const std::vector<float> gate_up = Values(mlp.gate_up.weight);
  const std::string mp = "model.layers.0.mlp.";
  ExpectPadded(std::vector<float>(gate_up.begin(), gate_up.begin() + 24 * Hs),
               Load(s, mp + "gate_proj.weight", {20, H}), inter, hidden, "gate_proj");
  ExpectPadded(std::vector<float>(gate_up.begin() + 24 * Hs, gate_up.end()),
               Load(s, mp + "up_proj.weight", {20, H}), inter, hidden, "up_proj");
  ExpectPadded(Values(mlp.down.weight), Load(s, mp + "down_proj.weight", {H, 20}), hidden, inter,
               "down_proj");

  // MoE layer: router columns, every expert's [2 x 16, 32] gate_up and [32, 16] down, and the
  // shared expert like the dense MLP.
  const LayerWeights& moe_layer = w->layers[1];
  ASSERT_TRUE(moe_layer.is_moe);
  const MoeWeights& moe = moe_layer.moe;
  const int E = c.n_routed_experts;
  const std::string ep = "model.layers.1.mlp.";
  ExpectPadded(Values(moe.router.weight), Load(s, ep + "gate.weight", {E, H}), PaddedAxis::Plain(E),
               hidden, "router");
  EXPECT_EQ(moe.correction_bias.numel, E);
  ASSERT_EQ(moe.experts_gate_up_layout, kernels::MoeGateUpLayout::kStacked);
  const PaddedAxis expert_inter = Axis(12, 16);
  const std::vector<float> gu = Values(moe.experts_gate_up), dn = Values(moe.experts_down);
  ASSERT_EQ(gu.size(), static_cast<size_t>(E) * 2 * 16 * Hs);
  ASSERT_EQ(dn.size(), static_cast<size_t>(E) * Hs * 16);
  for (int e = 0; e < E; ++e) {
    const std::string p = ep + "experts." + std::to_string(e) + ".";
    const auto at = gu.begin() + int64_t{e} * 2 * 16 * Hs;
    ExpectPadded(std::vector<float>(at, at + 16 * Hs), Load(s, p + "gate_proj.weight", {12, H}),
                 expert_inter, hidden, p + "gate_proj");
    ExpectPadded(std::vector<float>(at + 16 * Hs, at + 32 * Hs),
                 Load(s, p + "up_proj.weight", {12, H}), expert_inter, hidden, p + "up_proj");
    const auto d = dn.begin() + int64_t{e} * Hs * 16;
    ExpectPadded(std::vector<float>(d, d + Hs * 16), Load(s, p + "down_proj.weight", {H, 12}),
                 hidden, expert_inter, p + "down_proj");
  }
  EXPECT_EQ(moe.shared.inter, 16);
  ExpectPadded(Values(moe.shared.down.weight),
               Load(s, ep + "shared_experts.down_proj.weight", {H, 12}), hidden, expert_inter,
               "shared down_proj");
}

// deepseek_v2_pad on rank 1 of 2 (data-parallel attention, tensor-parallel MoE): mlp_bias and
// attention_bias padded with the rows they belong to, the dense intermediate 44 split into 22
// (stored 24), the experts' 12 into 6 (stored 8) and the 3 shared experts' 36 into 18 (stored
// 24) after the split, the tied LM head's vocab rows 128-255 over the padded embedding columns.
TEST(DeepseekWeightsPadding, V2BiasesAndARanksSlices) {
  Checkpoint ck = Open("deepseek_v2_pad");
  ASSERT_NE(ck.store, nullptr);
  const ModelConfig& c = ck.config;
  ASSERT_EQ(c.hidden_size, 36);
  ASSERT_TRUE(c.mlp_bias && c.attention_bias && c.tie_word_embeddings);
  auto comms = parallel::FakeCollectiveGroup::Create(2);
  ASSERT_TRUE(comms.ok()) << comms.status();
  ParallelOptions o;
  o.size = 2;
  o.rank = 1;
  o.attention = AttentionParallel::kData;
  o.moe = MoeParallel::kTensor;
  o.comm = (*comms)[1].get();
  absl::StatusOr<ParallelLayout> layout = ResolveParallelLayout(c, o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(StoredWidths(c, *layout), (ModelWidths{40, 24, 24, 8}));
  absl::StatusOr<DeepseekWeights> w =
      LoadDeepseekWeights(c, *ck.store, kernels::Backend::kCpu, &*layout);
  ASSERT_TRUE(w.ok()) << w.status();
  WeightStore& s = *ck.store;
  const int V = c.vocab_size, H = 36, Hs = 40;
  const PaddedAxis hidden = Axis(H, Hs);
  ExpectPadded(Values(w->lm_head.weight),
               Load(s, "model.embed_tokens.weight", {V, H}, TensorSlice::Rows(V / 2, V / 2)),
               PaddedAxis::Plain(V / 2), hidden, "the tied LM head's rows of rank 1");

  const MlaWeights& attn = w->layers[0].attn;
  ExpectPadded(Values(attn.o_proj.bias), Load(s, "model.layers.0.self_attn.o_proj.bias", {H}),
               hidden, PaddedAxis::Plain(1), "o_proj bias");
  EXPECT_EQ(attn.kv_a_proj.in, Hs);

  // Dense MLP, rank 1's slice [22, 44) of the intermediate, stored 24 wide.
  const GatedMlpWeights& mlp = w->layers[0].mlp;
  EXPECT_EQ(mlp.inter, 24);
  const PaddedAxis inter = Axis(22, 24);
  const std::string mp = "model.layers.0.mlp.";
  const std::vector<float> bias = Values(mlp.gate_up.bias);
  ASSERT_EQ(bias.size(), 48u);
  ExpectPadded(std::vector<float>(bias.begin(), bias.begin() + 24),
               Load(s, mp + "gate_proj.bias", {44}, TensorSlice::Rows(22, 22)), inter,
               PaddedAxis::Plain(1), "gate_proj bias");
  ExpectPadded(std::vector<float>(bias.begin() + 24, bias.end()),
               Load(s, mp + "up_proj.bias", {44}, TensorSlice::Rows(22, 22)), inter,
               PaddedAxis::Plain(1), "up_proj bias");
  ExpectPadded(Values(mlp.down.weight),
               Load(s, mp + "down_proj.weight", {H, 44}, TensorSlice::Cols(22, 22)), hidden, inter,
               "down_proj columns of rank 1");
  EXPECT_TRUE(mlp.down.bias.empty()) << "a row-parallel down_proj's bias stays with rank 0";

  // The shared experts' slice [18, 36) of their 36 features, stored 24 wide.
  EXPECT_EQ(w->layers[1].moe.shared.inter, 24);
  ExpectPadded(Values(w->layers[1].moe.shared.down.weight),
               Load(s, "model.layers.1.mlp.shared_experts.down_proj.weight", {H, 36},
                    TensorSlice::Cols(18, 18)),
               hidden, Axis(18, 24), "shared down_proj columns of rank 1");
  // Routed experts split by their intermediate: columns [6, 12) of each, stored 8 wide.
  const MoeWeights& moe = w->layers[1].moe;
  const std::vector<float> dn = Values(moe.experts_down);
  ASSERT_EQ(dn.size(), static_cast<size_t>(c.n_routed_experts) * Hs * 8);
  ExpectPadded(
      std::vector<float>(dn.begin(), dn.begin() + Hs * 8),
      Load(s, "model.layers.1.mlp.experts.0.down_proj.weight", {H, 12}, TensorSlice::Cols(6, 6)),
      hidden, Axis(6, 8), "expert 0's down_proj columns of rank 1");
}

// A config.json num_hidden_layers beyond the checkpoint's layers is refused naming both before
// anything is sized by it (the count alone once made a multi-gigabyte reservation throw).
TEST(DeepseekWeightsLoad, RefusesMoreLayersThanTheCheckpointHolds) {
  Checkpoint ck = Open("deepseek_v3_pad");
  ASSERT_NE(ck.store, nullptr);
  ModelConfig c = ck.config;
  c.num_hidden_layers = 1000000;
  c.layer_is_moe.resize(c.num_hidden_layers, true);
  absl::StatusOr<DeepseekWeights> w = LoadDeepseekWeights(c, *ck.store);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(w.status().message().find("num_hidden_layers 1000000, but the checkpoint has no "
                                      "'model.layers.999999.input_layernorm.weight'"),
            std::string::npos)
      << w.status();
}

}  // namespace
}  // namespace mlaserve::model
