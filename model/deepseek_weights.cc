#include "model/deepseek_weights.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/mla_dims.h"
#include "model/padded_matrix.h"
#include "model/weights.h"

namespace mlaserve::model {
namespace {

using Shape = std::vector<int64_t>;

int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Reads tensors through the store and places them in the engine's backend memory, in the
// storage dtype (f32 on the CPU backend, bf16 on CUDA) unless a tensor asks for f32.
class Loader {
 public:
  Loader(WeightStore& store, kernels::Backend backend)
      : store_(store), backend_(backend), dtype_(StorageDType(backend)) {}

  bool Has(const std::string& name) const { return store_.Has(name); }

  // The tensor's host bytes in `dtype` (f32 or bf16).
  absl::StatusOr<std::vector<uint8_t>> Bytes(const std::string& name, const Shape& shape,
                                             kernels::DType dtype) const {
    std::vector<uint8_t> bytes;
    if (dtype == kernels::DType::kF32) {
      ASSIGN_OR_RETURN(std::vector<float> v, store_.LoadF32(name, shape));
      bytes.resize(v.size() * sizeof(float));
      std::memcpy(bytes.data(), v.data(), bytes.size());
    } else {
      ASSIGN_OR_RETURN(std::vector<uint16_t> v, store_.LoadBf16(name, shape));
      bytes.resize(v.size() * sizeof(uint16_t));
      std::memcpy(bytes.data(), v.data(), bytes.size());
    }
    return bytes;
  }

  absl::StatusOr<WeightTensor> Upload(const std::vector<uint8_t>& bytes, kernels::DType dtype,
                                      int64_t numel) const {
    WeightTensor t;
    t.dtype = dtype;
    t.numel = numel;
    ASSIGN_OR_RETURN(t.buffer, DeviceBuffer::FromHost(backend_, bytes.data(), bytes.size()));
    return t;
  }

  absl::StatusOr<WeightTensor> Tensor(const std::string& name, const Shape& shape) const {
    return Tensor(name, shape, dtype_);
  }
  absl::StatusOr<WeightTensor> Tensor(const std::string& name, const Shape& shape,
                                      kernels::DType dtype) const {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Bytes(name, shape, dtype));
    return Upload(bytes, dtype, Numel(shape));
  }

  // name.weight [out, in], plus name.bias [out] when `bias` (attention_bias).
  absl::StatusOr<LinearWeight> Linear(const std::string& name, int out, int in,
                                      bool bias = false) const {
    LinearWeight w;
    w.out = out;
    w.in = in;
    ASSIGN_OR_RETURN(w.weight, Tensor(name + ".weight", {out, in}));
    if (bias) {
      ASSIGN_OR_RETURN(w.bias, Tensor(name + ".bias", {out}));
    }
    return w;
  }

  // name.weight [rows.real(), cols.real()] stored as [rows.stored(), cols.stored()] with zero
  // padding (model/mla_dims.h), plus name.bias [rows] padded alike when `bias`.
  absl::StatusOr<LinearWeight> PaddedLinear(const std::string& name, const PaddedAxis& rows,
                                            const PaddedAxis& cols, bool bias = false) const {
    if (!rows.padded() && !cols.padded()) return Linear(name, rows.real(), cols.real(), bias);
    const size_t es = kernels::DTypeSize(dtype_);
    LinearWeight w;
    w.out = rows.stored();
    w.in = cols.stored();
    ASSIGN_OR_RETURN(std::vector<uint8_t> weight, Bytes(name + ".weight", {rows.real(), cols.real()}, dtype_));
    ASSIGN_OR_RETURN(w.weight, Upload(PadMatrix(weight, es, rows, cols), dtype_,
                                      int64_t{w.out} * w.in));
    if (bias) {
      ASSIGN_OR_RETURN(std::vector<uint8_t> b, Bytes(name + ".bias", {rows.real()}, dtype_));
      ASSIGN_OR_RETURN(w.bias, Upload(PadMatrix(b, es, rows, PaddedAxis::Plain(1)), dtype_, w.out));
    }
    return w;
  }

  // gate_proj and up_proj of `prefix` stacked into one [2I, hidden] matrix.
  absl::StatusOr<GatedMlpWeights> GatedMlp(const std::string& prefix, int hidden, int inter) const {
    GatedMlpWeights m;
    m.inter = inter;
    ASSIGN_OR_RETURN(std::vector<uint8_t> gate, Bytes(prefix + ".gate_proj.weight", {inter, hidden}, dtype_));
    ASSIGN_OR_RETURN(std::vector<uint8_t> up, Bytes(prefix + ".up_proj.weight", {inter, hidden}, dtype_));
    gate.insert(gate.end(), up.begin(), up.end());
    m.gate_up.out = 2 * inter;
    m.gate_up.in = hidden;
    ASSIGN_OR_RETURN(m.gate_up.weight, Upload(gate, dtype_, int64_t{2} * inter * hidden));
    ASSIGN_OR_RETURN(m.down, Linear(prefix + ".down_proj", hidden, inter));
    return m;
  }

  absl::Status Experts(const ModelConfig& c, const std::string& prefix, MoeWeights* moe) const {
    const int64_t E = c.n_routed_experts;
    const int64_t I = c.moe_intermediate_size;
    const int64_t H = c.hidden_size;
    // transformers-5 style: already fused [E, 2I, H] / [E, H, I].
    if (store_.Has(prefix + ".experts.gate_up_proj")) {
      ASSIGN_OR_RETURN(moe->experts_gate_up, Tensor(prefix + ".experts.gate_up_proj", {E, 2 * I, H}));
      ASSIGN_OR_RETURN(moe->experts_down, Tensor(prefix + ".experts.down_proj", {E, H, I}));
      return absl::OkStatus();
    }
    // Published layout: one nn.Linear per expert, placed expert by expert (no host copy of
    // the whole stack).
    const size_t es = kernels::DTypeSize(dtype_);
    for (WeightTensor* t : {&moe->experts_gate_up, &moe->experts_down}) {
      t->dtype = dtype_;
      t->numel = E * 2 * I * H;
    }
    moe->experts_down.numel = E * H * I;
    ASSIGN_OR_RETURN(moe->experts_gate_up.buffer,
                     DeviceBuffer::Allocate(backend_, static_cast<size_t>(E * 2 * I * H) * es));
    ASSIGN_OR_RETURN(moe->experts_down.buffer,
                     DeviceBuffer::Allocate(backend_, static_cast<size_t>(E * H * I) * es));
    const kernels::KernelContext ctx{backend_, nullptr, 0};
    auto* gu = static_cast<char*>(moe->experts_gate_up.buffer.data());
    auto* dn = static_cast<char*>(moe->experts_down.buffer.data());
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = absl::StrCat(prefix, ".experts.", e);
      ASSIGN_OR_RETURN(std::vector<uint8_t> gate, Bytes(p + ".gate_proj.weight", {I, H}, dtype_));
      ASSIGN_OR_RETURN(std::vector<uint8_t> up, Bytes(p + ".up_proj.weight", {I, H}, dtype_));
      ASSIGN_OR_RETURN(std::vector<uint8_t> down, Bytes(p + ".down_proj.weight", {H, I}, dtype_));
      char* at = gu + e * 2 * I * H * es;
      RETURN_IF_ERROR(CopyBytes(ctx, at, gate.data(), gate.size(), CopyKind::kHostToDevice));
      RETURN_IF_ERROR(CopyBytes(ctx, at + I * H * es, up.data(), up.size(), CopyKind::kHostToDevice));
      RETURN_IF_ERROR(CopyBytes(ctx, dn + e * H * I * es, down.data(), down.size(), CopyKind::kHostToDevice));
    }
    return Synchronize(ctx);
  }

  kernels::DType dtype() const { return dtype_; }

 private:
  WeightStore& store_;
  kernels::Backend backend_;
  kernels::DType dtype_;
};

absl::StatusOr<LayerWeights> LoadLayer(const ModelConfig& c, const Loader& ld, int l) {
  LayerWeights lw;
  const std::string p = absl::StrCat("model.layers.", l);
  const int H = c.hidden_size;
  const int heads = c.num_attention_heads;
  ASSIGN_OR_RETURN(lw.input_norm, ld.Tensor(p + ".input_layernorm.weight", {H}));
  ASSIGN_OR_RETURN(lw.post_attention_norm, ld.Tensor(p + ".post_attention_layernorm.weight", {H}));

  const std::string a = p + ".self_attn";
  MlaWeights& m = lw.attn;
  // Stored with every MLA width padded to MlaDims (model/mla_dims.h).
  const MlaDims d = StoredMlaDims(c);
  const PaddedAxis q_rows{heads, {{c.qk_nope_head_dim, d.nope}, {c.qk_rope_head_dim, d.rope}}};
  const PaddedAxis latent_rows{1, {{c.kv_lora_rank, d.rank}, {c.qk_rope_head_dim, d.rope}}};
  const PaddedAxis kv_b_rows{heads, {{c.qk_nope_head_dim, d.nope}, {c.v_head_dim, d.v}}};
  const PaddedAxis rank_cols{1, {{c.kv_lora_rank, d.rank}}};
  const PaddedAxis o_cols{heads, {{c.v_head_dim, d.v}}};
  if (c.q_lora_rank.has_value()) {
    const int ql = *c.q_lora_rank;
    ASSIGN_OR_RETURN(m.q_a_proj, ld.Linear(a + ".q_a_proj", ql, H, c.attention_bias));
    ASSIGN_OR_RETURN(m.q_a_norm, ld.Tensor(a + ".q_a_layernorm.weight", {ql}));
    ASSIGN_OR_RETURN(m.q_b_proj, ld.PaddedLinear(a + ".q_b_proj", q_rows, PaddedAxis::Plain(ql)));
  } else {
    ASSIGN_OR_RETURN(m.q_proj, ld.PaddedLinear(a + ".q_proj", q_rows, PaddedAxis::Plain(H)));
  }
  ASSIGN_OR_RETURN(m.kv_a_proj, ld.PaddedLinear(a + ".kv_a_proj_with_mqa", latent_rows,
                                                 PaddedAxis::Plain(H), c.attention_bias));
  ASSIGN_OR_RETURN(m.kv_a_norm, ld.Tensor(a + ".kv_a_layernorm.weight", {c.kv_lora_rank}));
  ASSIGN_OR_RETURN(m.kv_b_proj, ld.PaddedLinear(a + ".kv_b_proj", kv_b_rows, rank_cols));
  ASSIGN_OR_RETURN(m.o_proj, ld.PaddedLinear(a + ".o_proj", PaddedAxis::Plain(H), o_cols,
                                              c.attention_bias));

  if (c.has_indexer) {
    const std::string ix = a + ".indexer";
    IndexerWeights& iw = lw.indexer;
    ASSIGN_OR_RETURN(iw.wq_b, ld.Linear(ix + ".wq_b", c.index_n_heads * c.index_head_dim,
                                         *c.q_lora_rank));
    ASSIGN_OR_RETURN(iw.wk, ld.Linear(ix + ".wk", c.index_head_dim, H));
    ASSIGN_OR_RETURN(iw.k_norm_w, ld.Tensor(ix + ".k_norm.weight", {c.index_head_dim}));
    ASSIGN_OR_RETURN(iw.k_norm_b, ld.Tensor(ix + ".k_norm.bias", {c.index_head_dim}));
    ASSIGN_OR_RETURN(iw.weights_proj, ld.Linear(ix + ".weights_proj", c.index_n_heads, H));
  }

  lw.is_moe = c.layer_is_moe[l];
  const std::string mp = p + ".mlp";
  if (!lw.is_moe) {
    ASSIGN_OR_RETURN(lw.mlp, ld.GatedMlp(mp, H, c.intermediate_size));
    return lw;
  }
  MoeWeights& moe = lw.moe;
  ASSIGN_OR_RETURN(moe.router, ld.Linear(mp + ".gate", c.n_routed_experts, H));
  if (c.has_correction_bias) {
    // f32 on every backend: the routing kernel adds it to f32 scores.
    ASSIGN_OR_RETURN(moe.correction_bias, ld.Tensor(mp + ".gate.e_score_correction_bias",
                                                    {c.n_routed_experts}, kernels::DType::kF32));
  }
  RETURN_IF_ERROR(ld.Experts(c, mp, &moe));
  if (c.n_shared_experts > 0) {
    ASSIGN_OR_RETURN(moe.shared, ld.GatedMlp(mp + ".shared_experts", H,
                                              c.moe_intermediate_size * c.n_shared_experts));
  }
  return lw;
}

}  // namespace

KvBViews MlaWeights::kv_b_views(const ModelConfig& c) const {
  const MlaDims d = StoredMlaDims(c);
  KvBViews v;
  v.row_stride = d.rank;
  v.head_stride = static_cast<int64_t>(d.nope + d.v) * d.rank;
  v.w_uk = kv_b_proj.weight.data();
  v.w_uv = kv_b_proj.weight.at(static_cast<int64_t>(d.nope) * d.rank);
  return v;
}

kernels::DType StorageDType(kernels::Backend backend) {
  return backend == kernels::Backend::kCpu ? kernels::DType::kF32 : kernels::DType::kBF16;
}

absl::StatusOr<DeepseekWeights> LoadDeepseekWeights(const ModelConfig& c, WeightStore& store,
                                                    kernels::Backend backend) {
  const Loader ld(store, backend);
  DeepseekWeights w;
  const int64_t V = c.vocab_size;
  const int64_t H = c.hidden_size;
  ASSIGN_OR_RETURN(w.embed, ld.Tensor("model.embed_tokens.weight", {V, H}));
  ASSIGN_OR_RETURN(w.final_norm, ld.Tensor("model.norm.weight", {H}));
  w.lm_head.out = static_cast<int>(V);
  w.lm_head.in = static_cast<int>(H);
  if (c.tie_word_embeddings) {  // HF ties lm_head to the embedding, ignoring a stored copy
    w.lm_head.weight.view = w.embed.data();
    w.lm_head.weight.dtype = w.embed.dtype;
    w.lm_head.weight.numel = w.embed.numel;
  } else {
    ASSIGN_OR_RETURN(w.lm_head.weight, ld.Tensor("lm_head.weight", {V, H}));
  }
  if (static_cast<int>(c.layer_is_moe.size()) != c.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat("config: layer_is_moe has ",
                                                   c.layer_is_moe.size(), " entries for ",
                                                   c.num_hidden_layers, " layers"));
  }
  w.layers.reserve(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    ASSIGN_OR_RETURN(LayerWeights lw, LoadLayer(c, ld, l));
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace mlaserve::model
