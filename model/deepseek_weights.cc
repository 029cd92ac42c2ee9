#include "model/deepseek_weights.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/weights.h"

namespace mlaserve::model {
namespace {

using Shape = std::vector<int64_t>;

absl::StatusOr<std::vector<float>> Load(WeightStore& store, const std::string& name,
                                        const Shape& shape) {
  return store.LoadF32(name, shape);
}

// name.weight [out, in], plus name.bias [out] when `bias` (attention_bias).
absl::StatusOr<LinearWeight> LoadLinear(WeightStore& store, const std::string& name, int out,
                                        int in, bool bias = false) {
  LinearWeight w;
  w.out = out;
  w.in = in;
  ASSIGN_OR_RETURN(w.weight, Load(store, name + ".weight", {out, in}));
  if (bias) {
    ASSIGN_OR_RETURN(w.bias, Load(store, name + ".bias", {out}));
  }
  return w;
}

// gate_proj and up_proj of `prefix` stacked into one [2I, hidden] matrix.
absl::StatusOr<GatedMlpWeights> LoadGatedMlp(WeightStore& store, const std::string& prefix,
                                             int hidden, int inter) {
  GatedMlpWeights m;
  m.inter = inter;
  ASSIGN_OR_RETURN(std::vector<float> gate, Load(store, prefix + ".gate_proj.weight", {inter, hidden}));
  ASSIGN_OR_RETURN(std::vector<float> up, Load(store, prefix + ".up_proj.weight", {inter, hidden}));
  m.gate_up.out = 2 * inter;
  m.gate_up.in = hidden;
  m.gate_up.weight = std::move(gate);
  m.gate_up.weight.insert(m.gate_up.weight.end(), up.begin(), up.end());
  ASSIGN_OR_RETURN(m.down, LoadLinear(store, prefix + ".down_proj", hidden, inter));
  return m;
}

absl::Status LoadExperts(const ModelConfig& c, WeightStore& store, const std::string& prefix,
                         MoeWeights* moe) {
  const int64_t E = c.n_routed_experts;
  const int64_t I = c.moe_intermediate_size;
  const int64_t H = c.hidden_size;
  // transformers-5 style: already fused [E, 2I, H] / [E, H, I].
  if (store.Has(prefix + ".experts.gate_up_proj")) {
    ASSIGN_OR_RETURN(moe->experts_gate_up, Load(store, prefix + ".experts.gate_up_proj", {E, 2 * I, H}));
    ASSIGN_OR_RETURN(moe->experts_down, Load(store, prefix + ".experts.down_proj", {E, H, I}));
    return absl::OkStatus();
  }
  // Published layout: one nn.Linear per expert.
  moe->experts_gate_up.resize(static_cast<size_t>(E * 2 * I * H));
  moe->experts_down.resize(static_cast<size_t>(E * H * I));
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = absl::StrCat(prefix, ".experts.", e);
    ASSIGN_OR_RETURN(std::vector<float> gate, Load(store, p + ".gate_proj.weight", {I, H}));
    ASSIGN_OR_RETURN(std::vector<float> up, Load(store, p + ".up_proj.weight", {I, H}));
    ASSIGN_OR_RETURN(std::vector<float> down, Load(store, p + ".down_proj.weight", {H, I}));
    float* gu = moe->experts_gate_up.data() + e * 2 * I * H;
    std::copy(gate.begin(), gate.end(), gu);
    std::copy(up.begin(), up.end(), gu + I * H);
    std::copy(down.begin(), down.end(), moe->experts_down.data() + e * H * I);
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerWeights> LoadLayer(const ModelConfig& c, WeightStore& store, int l) {
  LayerWeights lw;
  const std::string p = absl::StrCat("model.layers.", l);
  const int H = c.hidden_size;
  const int heads = c.num_attention_heads;
  const int qk = c.qk_head_dim();
  ASSIGN_OR_RETURN(lw.input_norm, Load(store, p + ".input_layernorm.weight", {H}));
  ASSIGN_OR_RETURN(lw.post_attention_norm, Load(store, p + ".post_attention_layernorm.weight", {H}));

  const std::string a = p + ".self_attn";
  MlaWeights& m = lw.attn;
  if (c.q_lora_rank.has_value()) {
    const int ql = *c.q_lora_rank;
    ASSIGN_OR_RETURN(m.q_a_proj, LoadLinear(store, a + ".q_a_proj", ql, H, c.attention_bias));
    ASSIGN_OR_RETURN(m.q_a_norm, Load(store, a + ".q_a_layernorm.weight", {ql}));
    ASSIGN_OR_RETURN(m.q_b_proj, LoadLinear(store, a + ".q_b_proj", heads * qk, ql));
  } else {
    ASSIGN_OR_RETURN(m.q_proj, LoadLinear(store, a + ".q_proj", heads * qk, H));
  }
  ASSIGN_OR_RETURN(m.kv_a_proj, LoadLinear(store, a + ".kv_a_proj_with_mqa", c.latent_dim(), H,
                                           c.attention_bias));
  ASSIGN_OR_RETURN(m.kv_a_norm, Load(store, a + ".kv_a_layernorm.weight", {c.kv_lora_rank}));
  ASSIGN_OR_RETURN(m.kv_b_proj, LoadLinear(store, a + ".kv_b_proj",
                                           heads * (c.qk_nope_head_dim + c.v_head_dim),
                                           c.kv_lora_rank));
  ASSIGN_OR_RETURN(m.o_proj, LoadLinear(store, a + ".o_proj", H, heads * c.v_head_dim,
                                        c.attention_bias));

  if (c.has_indexer) {
    const std::string ix = a + ".indexer";
    IndexerWeights& iw = lw.indexer;
    ASSIGN_OR_RETURN(iw.wq_b, LoadLinear(store, ix + ".wq_b", c.index_n_heads * c.index_head_dim,
                                         *c.q_lora_rank));
    ASSIGN_OR_RETURN(iw.wk, LoadLinear(store, ix + ".wk", c.index_head_dim, H));
    ASSIGN_OR_RETURN(iw.k_norm_w, Load(store, ix + ".k_norm.weight", {c.index_head_dim}));
    ASSIGN_OR_RETURN(iw.k_norm_b, Load(store, ix + ".k_norm.bias", {c.index_head_dim}));
    ASSIGN_OR_RETURN(iw.weights_proj, LoadLinear(store, ix + ".weights_proj", c.index_n_heads, H));
  }

  lw.is_moe = c.layer_is_moe[l];
  const std::string mp = p + ".mlp";
  if (!lw.is_moe) {
    ASSIGN_OR_RETURN(lw.mlp, LoadGatedMlp(store, mp, H, c.intermediate_size));
    return lw;
  }
  MoeWeights& moe = lw.moe;
  ASSIGN_OR_RETURN(moe.router, LoadLinear(store, mp + ".gate", c.n_routed_experts, H));
  if (c.has_correction_bias) {
    ASSIGN_OR_RETURN(moe.correction_bias,
                     Load(store, mp + ".gate.e_score_correction_bias", {c.n_routed_experts}));
  }
  RETURN_IF_ERROR(LoadExperts(c, store, mp, &moe));
  if (c.n_shared_experts > 0) {
    ASSIGN_OR_RETURN(moe.shared, LoadGatedMlp(store, mp + ".shared_experts", H,
                                              c.moe_intermediate_size * c.n_shared_experts));
  }
  return lw;
}

}  // namespace

KvBViews MlaWeights::kv_b_views(const ModelConfig& c) const {
  KvBViews v;
  v.row_stride = c.kv_lora_rank;
  v.head_stride = static_cast<int64_t>(c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;
  v.w_uk = kv_b_proj.weight.data();
  v.w_uv = kv_b_proj.weight.data() + static_cast<int64_t>(c.qk_nope_head_dim) * c.kv_lora_rank;
  return v;
}

absl::StatusOr<DeepseekWeights> LoadDeepseekWeights(const ModelConfig& c, WeightStore& store) {
  DeepseekWeights w;
  const int64_t V = c.vocab_size;
  const int64_t H = c.hidden_size;
  ASSIGN_OR_RETURN(w.embed, Load(store, "model.embed_tokens.weight", {V, H}));
  ASSIGN_OR_RETURN(w.final_norm, Load(store, "model.norm.weight", {H}));
  w.lm_head.out = static_cast<int>(V);
  w.lm_head.in = static_cast<int>(H);
  if (c.tie_word_embeddings) {  // HF ties lm_head to the embedding, ignoring a stored copy
    w.lm_head.weight = w.embed;
  } else {
    ASSIGN_OR_RETURN(w.lm_head.weight, Load(store, "lm_head.weight", {V, H}));
  }
  if (static_cast<int>(c.layer_is_moe.size()) != c.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat("config: layer_is_moe has ",
                                                   c.layer_is_moe.size(), " entries for ",
                                                   c.num_hidden_layers, " layers"));
  }
  w.layers.reserve(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    ASSIGN_OR_RETURN(LayerWeights lw, LoadLayer(c, store, l));
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace mlaserve::model
