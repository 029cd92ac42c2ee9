#include "model/deepseek_weights.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/env_switch.h"
#include "model/mla_dims.h"
#include "model/model_widths.h"
#include "model/padded_matrix.h"
#include "model/loader/weight_store.h"
#include "model/weight_loader.h"

namespace mlaserve::model {
namespace {

// The layout of `num_experts` stacked gate_up matrices [2 inter, hidden] at `gate_up` that the
// expert GEMMs read fastest on this backend (rearranged in place, once): interleaved for the
// Hopper GEMM's fused SiLU epilogue, else left stacked.
absl::StatusOr<kernels::MoeGateUpLayout> PrepareGateUp(const WeightLoader& ld,
                                                       int64_t num_experts, int64_t inter,
                                                       int64_t hidden, void* gate_up) {
  kernels::MoePrepareParams prep;
  prep.dtype = ld.dtype();
  prep.num_experts = static_cast<int>(num_experts);
  prep.hidden = static_cast<int>(hidden);
  prep.inter = static_cast<int>(inter);
  prep.gate_up = gate_up;
  return kernels::MoePrepareExpertWeights(prep, kernels::KernelContext{ld.backend(), nullptr, 0});
}

// A gated MLP's gate_up (the shared experts', a dense layer's), as one expert, in the layout
// the routed stack gets (interleaved on Hopper: FeedForward then fuses SiLU * up into its
// gate_up GEMM). Biased gate_up rows stay stacked (the bias would need the same permutation).
absl::Status PrepareGatedMlp(const WeightLoader& ld, int64_t hidden, GatedMlpWeights* mlp) {
  if (!mlp->gate_up.bias.empty() || mlp->inter == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(mlp->gate_up_layout,
                   PrepareGateUp(ld, 1, mlp->inter, hidden, mlp->gate_up.weight.buffer.data()));
  return absl::OkStatus();
}

// name.weight [out, hidden_size], whole, stored with the hidden axis' zero columns (no bias):
// a projection that reads the hidden state (model/model_widths.h).
absl::StatusOr<LinearWeight> ReadsHidden(const WeightLoader& ld, const std::string& name, int out,
                                         const PaddedAxis& hidden) {
  return ld.PaddedLinear(name, out, hidden.real(), TensorSlice{}, PaddedAxis::Plain(out), hidden,
                         false);
}

// gate_proj and up_proj of `prefix` stacked into one [2I, hidden] matrix (I: this rank's
// slice of the intermediate size, `inter`, stored at inter_axis's width; down_proj's
// matching columns). With `bias` (V2's mlp_bias) the gate and up biases are stacked alike,
// and down_proj's bias, added once to the all-reduced sums of a row-parallel down_proj, stays
// with rank 0 (`rank0`). `hidden`: the hidden state's axis (model/model_widths.h).
absl::StatusOr<GatedMlpWeights> GatedMlp(const WeightLoader& ld, const std::string& prefix,
                                         const PaddedAxis& hidden, Shard inter,
                                         const PaddedAxis& inter_axis, bool bias, bool rank0) {
  GatedMlpWeights m;
  const int I = inter.total, H = hidden.real();
  m.inter = inter_axis.stored();
  const TensorSlice rows =
      inter.whole() ? TensorSlice{} : TensorSlice::Rows(inter.begin, inter.count);
  ASSIGN_OR_RETURN(std::vector<uint8_t> gate,
                   ld.PaddedBytes(prefix + ".gate_proj.weight", {I, H}, rows, inter_axis, hidden));
  ASSIGN_OR_RETURN(std::vector<uint8_t> up,
                   ld.PaddedBytes(prefix + ".up_proj.weight", {I, H}, rows, inter_axis, hidden));
  gate.insert(gate.end(), up.begin(), up.end());
  m.gate_up.out = 2 * m.inter;
  m.gate_up.in = hidden.stored();
  ASSIGN_OR_RETURN(m.gate_up.weight,
                   ld.Upload(gate, ld.dtype(), int64_t{m.gate_up.out} * m.gate_up.in));
  if (bias) {
    const PaddedAxis one = PaddedAxis::Plain(1);
    ASSIGN_OR_RETURN(std::vector<uint8_t> gate_b,
                     ld.PaddedBytes(prefix + ".gate_proj.bias", {I}, rows, inter_axis, one));
    ASSIGN_OR_RETURN(std::vector<uint8_t> up_b,
                     ld.PaddedBytes(prefix + ".up_proj.bias", {I}, rows, inter_axis, one));
    gate_b.insert(gate_b.end(), up_b.begin(), up_b.end());
    ASSIGN_OR_RETURN(m.gate_up.bias, ld.Upload(gate_b, ld.dtype(), m.gate_up.out));
  }
  const TensorSlice cols =
      inter.whole() ? TensorSlice{} : TensorSlice::Cols(inter.begin, inter.count);
  ASSIGN_OR_RETURN(m.down, ld.PaddedLinear(prefix + ".down_proj", H, I, cols, hidden, inter_axis,
                                           bias && (inter.whole() || rank0)));
  return m;
}

// Whether `prefix`'s routed experts are stored transformers-5 fused (experts.gate_up_proj and
// experts.down_proj: either one marks the form, so a missing half is named as missing) rather
// than as the published per-expert tensors (experts.<e>.*). INVALID_ARGUMENT: both forms in
// the layer (one would go unread), or a per-expert tensor of an expert past n_routed_experts
// (the config is not the checkpoint's). Other tensors the model does not use stay unread, as
// HF only warns of unexpected keys (an MTP layer's); these belong to the layer being loaded,
// and the config says they cannot exist.
absl::StatusOr<bool> ExpertsAreFused(const WeightLoader& ld, const ModelConfig& c,
                                     const std::string& prefix) {
  const std::string gate_up = prefix + ".experts.gate_up_proj";
  const std::string down = prefix + ".experts.down_proj";
  const std::string fused = ld.Has(gate_up) ? gate_up : ld.Has(down) ? down : "";
  const std::string experts = prefix + ".experts.";
  for (const std::string& name : ld.TensorNames(experts)) {
    const absl::string_view rest = absl::string_view(name).substr(experts.size());
    const absl::string_view index = rest.substr(0, rest.find('.'));
    if (index.empty() || index.find_first_not_of("0123456789") != absl::string_view::npos) {
      continue;  // not a per-expert tensor (the fused ones)
    }
    if (!fused.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "routed experts of ", prefix, " are stored both fused ('", fused, "') and per expert ('",
          name, "'); a checkpoint holds one form or the other"));
    }
    int64_t e = 0;
    if (!absl::SimpleAtoi(index, &e) || e >= c.n_routed_experts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' is of expert ", index, ", but config.json has n_routed_experts ",
          c.n_routed_experts, " (experts 0 to ", c.n_routed_experts - 1,
          "): the config is not this checkpoint's"));
    }
  }
  return !fused.empty();
}

// Every tensor the rank's routed experts are read from, checked against the config (presence,
// shape, dtype, fp8 scales) before the stack is sized from the config: a checkpoint whose
// experts disagree with n_routed_experts / moe_intermediate_size is refused naming the tensor
// and both shapes, not by an allocation of the config's size first (terabytes, for a wrong but
// plausible moe_intermediate_size). Then the stack holds no more than the checkpoint does.
absl::Status CheckExperts(const WeightLoader& ld, const ModelConfig& c, const std::string& prefix,
                          bool fused, Shard experts, int64_t H) {
  const int64_t E = c.n_routed_experts;
  const int64_t I = c.moe_intermediate_size;
  const auto check = [&](const std::string& name, const WeightLoader::Shape& shape) {
    absl::Status s = ld.Check(name, shape);
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("routed experts of ", prefix, " (n_routed_experts ",
                                               E, ", moe_intermediate_size ", I, ", hidden_size ",
                                               H, "): ", s.message()));
  };
  if (fused) {
    RETURN_IF_ERROR(check(prefix + ".experts.gate_up_proj", {E, 2 * I, H}));
    return check(prefix + ".experts.down_proj", {E, H, I});
  }
  for (int64_t e = experts.begin; e < int64_t{experts.begin} + experts.count; ++e) {
    const std::string p = absl::StrCat(prefix, ".experts.", e);
    RETURN_IF_ERROR(check(p + ".gate_proj.weight", {I, H}));
    RETURN_IF_ERROR(check(p + ".up_proj.weight", {I, H}));
    RETURN_IF_ERROR(check(p + ".down_proj.weight", {H, I}));
  }
  return absl::OkStatus();
}

// The rank's routed experts: experts [experts.begin, + count) (expert parallel), each with
// the intermediate slice `inter` (tensor-parallel experts), stored at inter_axis's width and
// the hidden axis's (model/model_widths.h). Whole, unpadded shards load the stack as it is.
absl::Status Experts(const WeightLoader& ld, const ModelConfig& c, const std::string& prefix,
                     Shard experts, Shard inter, const PaddedAxis& inter_axis,
                     const PaddedAxis& hidden, MoeWeights* moe) {
  const int64_t E = c.n_routed_experts;
  const int64_t I = c.moe_intermediate_size;
  const int64_t H = hidden.real();
  ASSIGN_OR_RETURN(const bool fused, ExpertsAreFused(ld, c, prefix));
  RETURN_IF_ERROR(CheckExperts(ld, c, prefix, fused, experts, H));
  const bool whole = experts.whole() && inter.whole() && !inter_axis.padded() && !hidden.padded();
  // transformers-5 style: already fused [E, 2I, H] / [E, H, I].
  if (fused && whole) {
    ASSIGN_OR_RETURN(moe->experts_gate_up,
                     ld.Tensor(prefix + ".experts.gate_up_proj", {E, 2 * I, H}));
    ASSIGN_OR_RETURN(moe->experts_down, ld.Tensor(prefix + ".experts.down_proj", {E, H, I}));
    ASSIGN_OR_RETURN(moe->experts_gate_up_layout,
                     PrepareGateUp(ld, E, I, H, moe->experts_gate_up.buffer.data()));
    return absl::OkStatus();
  }
  // Expert by expert (no host copy of the whole stack): the published per-expert tensors,
  // or a rank's blocks of the fused ones.
  const int64_t stack = experts.count;
  const int64_t Ir = inter.count;
  const int64_t i0 = inter.begin;
  const int64_t Is = inter_axis.stored(), Hs = hidden.stored();  // as stored
  const size_t es = kernels::DTypeSize(ld.dtype());
  moe->experts_gate_up.dtype = moe->experts_down.dtype = ld.dtype();
  moe->experts_gate_up.numel = stack * 2 * Is * Hs;
  moe->experts_down.numel = stack * Hs * Is;
  // Every byte is written below, expert by expert (no host copy of the whole stack).
  ASSIGN_OR_RETURN(
      moe->experts_gate_up.buffer,
      DeviceBuffer::Allocate(ld.backend(), static_cast<size_t>(moe->experts_gate_up.numel) * es));
  ASSIGN_OR_RETURN(
      moe->experts_down.buffer,
      DeviceBuffer::Allocate(ld.backend(), static_cast<size_t>(moe->experts_down.numel) * es));
  const kernels::KernelContext ctx{ld.backend(), nullptr, 0};
  auto* gu = static_cast<char*>(moe->experts_gate_up.buffer.data());
  auto* dn = static_cast<char*>(moe->experts_down.buffer.data());
  const std::string fused_gu = prefix + ".experts.gate_up_proj";
  const std::string fused_dn = prefix + ".experts.down_proj";
  for (int64_t j = 0; j < stack; ++j) {
    const int64_t e = experts.begin + j;
    std::vector<uint8_t> gate, up, down;
    if (fused) {
      ASSIGN_OR_RETURN(
          gate, ld.PaddedBytes(fused_gu, {E, 2 * I, H}, TensorSlice::Rows(e * 2 * I + i0, Ir),
                               inter_axis, hidden));
      ASSIGN_OR_RETURN(
          up, ld.PaddedBytes(fused_gu, {E, 2 * I, H}, TensorSlice::Rows(e * 2 * I + I + i0, Ir),
                             inter_axis, hidden));
      ASSIGN_OR_RETURN(down, ld.PaddedBytes(fused_dn, {E, H, I}, TensorSlice{e * H, H, i0, Ir},
                                            hidden, inter_axis));
    } else {
      const std::string p = absl::StrCat(prefix, ".experts.", e);
      const TensorSlice rows = inter.whole() ? TensorSlice{} : TensorSlice::Rows(i0, Ir);
      const TensorSlice cols = inter.whole() ? TensorSlice{} : TensorSlice::Cols(i0, Ir);
      ASSIGN_OR_RETURN(gate,
                       ld.PaddedBytes(p + ".gate_proj.weight", {I, H}, rows, inter_axis, hidden));
      ASSIGN_OR_RETURN(up, ld.PaddedBytes(p + ".up_proj.weight", {I, H}, rows, inter_axis, hidden));
      ASSIGN_OR_RETURN(down,
                       ld.PaddedBytes(p + ".down_proj.weight", {H, I}, cols, hidden, inter_axis));
    }
    char* at = gu + j * 2 * Is * Hs * es;
    RETURN_IF_ERROR(CopyBytes(ctx, at, gate.data(), gate.size(), CopyKind::kHostToDevice));
    RETURN_IF_ERROR(
        CopyBytes(ctx, at + Is * Hs * es, up.data(), up.size(), CopyKind::kHostToDevice));
    RETURN_IF_ERROR(
        CopyBytes(ctx, dn + j * Hs * Is * es, down.data(), down.size(), CopyKind::kHostToDevice));
  }
  RETURN_IF_ERROR(Synchronize(ctx));
  ASSIGN_OR_RETURN(moe->experts_gate_up_layout, PrepareGateUp(ld, stack, Is, Hs, gu));
  return absl::OkStatus();
}

// Stacks `first` over `second` (both [out_i, in], no bias) into one [out_1 + out_2, in] matrix
// that both then view: `stacked` owns it.
absl::Status StackRows(kernels::Backend backend, LinearWeight* first, LinearWeight* second,
                       LinearWeight* stacked) {
  if (first->in != second->in || first->weight.dtype != second->weight.dtype) {
    return absl::InternalError(absl::StrCat("stacking weights of ", first->in, " and ",
                                            second->in, " input columns"));
  }
  const kernels::DType dtype = first->weight.dtype;
  const size_t es = kernels::DTypeSize(dtype);
  const size_t bytes1 = static_cast<size_t>(first->weight.numel) * es;
  const size_t bytes2 = static_cast<size_t>(second->weight.numel) * es;
  stacked->out = first->out + second->out;
  stacked->in = first->in;
  stacked->weight.dtype = dtype;
  stacked->weight.numel = first->weight.numel + second->weight.numel;
  ASSIGN_OR_RETURN(stacked->weight.buffer, DeviceBuffer::Allocate(backend, bytes1 + bytes2));
  const kernels::KernelContext ctx{backend, nullptr, 0};
  auto* at = static_cast<char*>(stacked->weight.buffer.data());
  RETURN_IF_ERROR(CopyBytes(ctx, at, first->weight.data(), bytes1, CopyKind::kDeviceToDevice));
  RETURN_IF_ERROR(CopyBytes(ctx, at + bytes1, second->weight.data(), bytes2, CopyKind::kDeviceToDevice));
  RETURN_IF_ERROR(Synchronize(ctx));  // before the sources are freed
  first->weight = WeightTensor{DeviceBuffer(), at, dtype, first->weight.numel};
  second->weight = WeightTensor{DeviceBuffer(), at + bytes1, dtype, second->weight.numel};
  return absl::OkStatus();
}

// W_UK of every head of kv_b_proj ([heads * (nope + v), rank], stored widths) transposed to
// [heads, rank, nope], for the CUDA absorbed form (MlaWeights::w_uk_t). Load time only: a copy
// through the host.
absl::StatusOr<WeightTensor> TransposedUk(kernels::Backend backend, const LinearWeight& kv_b,
                                          int heads, const MlaDims& d) {
  const int64_t rank = d.rank, nope = d.nope, head_rows = d.nope + d.v;
  std::vector<uint16_t> kv(static_cast<size_t>(kv_b.weight.numel));
  if (kv_b.weight.dtype != kernels::DType::kBF16 || kv_b.in != rank ||
      kv_b.out != heads * head_rows) {
    return absl::InternalError(absl::StrCat("kv_b_proj is [", kv_b.out, ", ", kv_b.in,
                                            "], expected bf16 [", heads * head_rows, ", ", rank, "]"));
  }
  const kernels::KernelContext ctx{backend, nullptr, 0};
  RETURN_IF_ERROR(CopyBytes(ctx, kv.data(), kv_b.weight.data(), kv.size() * 2, CopyKind::kDeviceToHost));
  RETURN_IF_ERROR(Synchronize(ctx));
  std::vector<uint16_t> t(static_cast<size_t>(heads) * rank * nope);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t l = 0; l < rank; ++l)
        t[(h * rank + l) * nope + i] = kv[(h * head_rows + i) * rank + l];
  WeightTensor w;
  w.dtype = kernels::DType::kBF16;
  w.numel = static_cast<int64_t>(t.size());
  ASSIGN_OR_RETURN(w.buffer, DeviceBuffer::FromHost(backend, t.data(), t.size() * 2));
  return w;
}

// The hidden state's axis and this rank's intermediate slices' as stored (model/model_widths.h).
struct WidthAxes {
  PaddedAxis hidden, mlp_inter, shared_inter, expert_inter;
};

WidthAxes AxesOf(const ModelConfig& c, const ParallelLayout& pl) {
  const ModelWidths real = ConfigWidths(c, pl), stored = StoredWidths(c, pl);
  const auto axis = [](int n, int padded) { return PaddedAxis{1, {{n, padded}}}; };
  return WidthAxes{axis(real.hidden, stored.hidden), axis(real.mlp_inter, stored.mlp_inter),
                   axis(real.shared_inter, stored.shared_inter),
                   axis(real.expert_inter, stored.expert_inter)};
}

absl::StatusOr<LayerWeights> LoadLayer(const ModelConfig& c, const ParallelLayout& pl,
                                       const WidthAxes& widths, const WeightLoader& ld, int l) {
  LayerWeights lw;
  const std::string p = absl::StrCat("model.layers.", l);
  const int H = c.hidden_size;
  const PaddedAxis& hidden = widths.hidden;  // columns of what reads it, rows of what writes it
  const int heads = c.num_attention_heads;
  ASSIGN_OR_RETURN(lw.input_norm, ld.PaddedVector(p + ".input_layernorm.weight", hidden));
  ASSIGN_OR_RETURN(lw.post_attention_norm,
                   ld.PaddedVector(p + ".post_attention_layernorm.weight", hidden));

  const std::string a = p + ".self_attn";
  MlaWeights& m = lw.attn;
  // This rank's heads (parallel_layout.h), stored with every MLA width padded to MlaDims
  // (model/mla_dims.h): the rank's slice of the checkpoint's rows / columns, padded per head.
  const MlaDims d = StoredMlaDims(c);
  const Shard& hs = pl.heads;
  const int dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim, qk = dn + dr;
  const auto head_rows = [&hs](int block) {
    return hs.whole() ? TensorSlice{}
                      : TensorSlice::Rows(int64_t{hs.begin} * block, int64_t{hs.count} * block);
  };
  const auto head_cols = [&hs](int block) {
    return hs.whole() ? TensorSlice{}
                      : TensorSlice::Cols(int64_t{hs.begin} * block, int64_t{hs.count} * block);
  };
  const PaddedAxis q_rows{hs.count, {{dn, d.nope}, {dr, d.rope}}};
  const PaddedAxis latent_rows{1, {{c.kv_lora_rank, d.rank}, {dr, d.rope}}};
  const PaddedAxis kv_b_rows{hs.count, {{dn, d.nope}, {dv, d.v}}};
  const PaddedAxis rank_cols{1, {{c.kv_lora_rank, d.rank}}};
  const PaddedAxis o_cols{hs.count, {{dv, d.v}}};
  if (c.q_lora_rank.has_value()) {
    const int ql = *c.q_lora_rank;
    ASSIGN_OR_RETURN(m.q_a_proj, ld.PaddedLinear(a + ".q_a_proj", ql, H, TensorSlice{},
                                                 PaddedAxis::Plain(ql), hidden, c.attention_bias));
    ASSIGN_OR_RETURN(m.q_a_norm, ld.Tensor(a + ".q_a_layernorm.weight", {ql}));
    ASSIGN_OR_RETURN(m.q_b_proj, ld.PaddedLinear(a + ".q_b_proj", heads * qk, ql, head_rows(qk),
                                                 q_rows, PaddedAxis::Plain(ql), false));
  } else {
    ASSIGN_OR_RETURN(m.q_proj, ld.PaddedLinear(a + ".q_proj", heads * qk, H, head_rows(qk), q_rows,
                                               hidden, false));
  }
  ASSIGN_OR_RETURN(m.kv_a_proj, ld.PaddedLinear(a + ".kv_a_proj_with_mqa", c.latent_dim(), H,
                                                TensorSlice{}, latent_rows, hidden,
                                                c.attention_bias));
  ASSIGN_OR_RETURN(m.kv_a_norm, ld.Tensor(a + ".kv_a_layernorm.weight", {c.kv_lora_rank}));
  ASSIGN_OR_RETURN(m.kv_b_proj, ld.PaddedLinear(a + ".kv_b_proj", heads * (dn + dv),
                                                c.kv_lora_rank, head_rows(dn + dv), kv_b_rows,
                                                rank_cols, false));
  if (ld.backend() == kernels::Backend::kCuda) {
    ASSIGN_OR_RETURN(m.w_uk_t, TransposedUk(ld.backend(), m.kv_b_proj, hs.count, d));
  }
  // q_proj / q_a_proj and kv_a_proj_with_mqa both read the normed hidden state: stacked, one
  // GEMM computes both (attention_bias checkpoints keep two).
  LinearWeight& q_first = c.q_lora_rank.has_value() ? m.q_a_proj : m.q_proj;
  if (q_first.bias.empty() && m.kv_a_proj.bias.empty()) {
    RETURN_IF_ERROR(StackRows(ld.backend(), &q_first, &m.kv_a_proj, &m.q_kv_a));
  }
  // Row parallel: under tensor-parallel attention the partial sums are all-reduced, so rank 0
  // alone adds the bias (every rank does when it holds every head: data-parallel attention).
  ASSIGN_OR_RETURN(m.o_proj, ld.PaddedLinear(a + ".o_proj", H, heads * dv, head_cols(dv), hidden,
                                             o_cols,
                                             c.attention_bias && (hs.whole() || pl.rank == 0)));

  if (c.has_indexer) {
    const std::string ix = a + ".indexer";
    IndexerWeights& iw = lw.indexer;
    ASSIGN_OR_RETURN(iw.wq_b, ld.Linear(ix + ".wq_b", c.index_n_heads * c.index_head_dim,
                                         *c.q_lora_rank));
    // wk and weights_proj read the hidden state; wq_b the q LoRA residual (not padded).
    ASSIGN_OR_RETURN(iw.wk, ReadsHidden(ld, ix + ".wk", c.index_head_dim, hidden));
    ASSIGN_OR_RETURN(iw.k_norm_w, ld.Tensor(ix + ".k_norm.weight", {c.index_head_dim}));
    ASSIGN_OR_RETURN(iw.k_norm_b, ld.Tensor(ix + ".k_norm.bias", {c.index_head_dim}));
    ASSIGN_OR_RETURN(iw.weights_proj,
                     ReadsHidden(ld, ix + ".weights_proj", c.index_n_heads, hidden));
  }

  lw.is_moe = c.layer_is_moe[l];
  const std::string mp = p + ".mlp";
  if (!lw.is_moe) {
    ASSIGN_OR_RETURN(
        lw.mlp, GatedMlp(ld, mp, hidden, pl.mlp_inter, widths.mlp_inter, c.mlp_bias, pl.rank == 0));
    // gate_up interleaved where this device's fused SiLU GEMM reads it, as the shared experts'
    // (PrepareGatedMlp). MLASERVE_DENSE_MLP_INTERLEAVE=0 in the environment keeps the dense
    // layers stacked (a GEMM and a SiLU pass at prefill, as before; timing comparisons). Read once.
    static const bool keep_stacked = kernels::EnvSwitchedOff("MLASERVE_DENSE_MLP_INTERLEAVE");
    if (!keep_stacked) RETURN_IF_ERROR(PrepareGatedMlp(ld, hidden.stored(), &lw.mlp));
    return lw;
  }
  MoeWeights& moe = lw.moe;
  ASSIGN_OR_RETURN(moe.router, ReadsHidden(ld, mp + ".gate", c.n_routed_experts, hidden));
  if (c.has_correction_bias) {
    // f32 on every backend: the routing kernel adds it to f32 scores.
    ASSIGN_OR_RETURN(moe.correction_bias, ld.Tensor(mp + ".gate.e_score_correction_bias",
                                                    {c.n_routed_experts}, kernels::DType::kF32));
  }
  RETURN_IF_ERROR(
      Experts(ld, c, mp, pl.experts, pl.expert_inter, widths.expert_inter, hidden, &moe));
  if (c.n_shared_experts > 0) {
    ASSIGN_OR_RETURN(moe.shared, GatedMlp(ld, mp + ".shared_experts", hidden, pl.shared_inter,
                                          widths.shared_inter, c.mlp_bias, pl.rank == 0));
    RETURN_IF_ERROR(PrepareGatedMlp(ld, hidden.stored(), &moe.shared));
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
                                                    kernels::Backend backend,
                                                    const ParallelLayout* layout) {
  ParallelLayout single;
  if (layout == nullptr) {
    ASSIGN_OR_RETURN(single, ResolveParallelLayout(c, ParallelOptions{}));
    layout = &single;
  }
  const ParallelLayout& pl = *layout;
  const WeightLoader ld(store, backend);
  const WidthAxes widths = AxesOf(c, pl);
  const PaddedAxis& hidden = widths.hidden;  // the embedding's and the LM head's columns
  DeepseekWeights w;
  const int V = c.vocab_size;
  const int H = c.hidden_size;
  ASSIGN_OR_RETURN(LinearWeight embed, ReadsHidden(ld, "model.embed_tokens", V, hidden));
  w.embed = std::move(embed.weight);
  ASSIGN_OR_RETURN(w.final_norm, ld.PaddedVector("model.norm.weight", hidden));
  w.lm_head.out = V;
  w.lm_head.in = hidden.stored();
  // HF 5.17 ties lm_head to the embedding only when the checkpoint has no lm_head.weight of
  // its own (or an equal one): a stored, different lm_head.weight is loaded and used untied.
  const bool tied = c.tie_word_embeddings && !store.Has("lm_head.weight");
  if (tied) {
    w.lm_head.weight.view = w.embed.data();
    w.lm_head.weight.dtype = w.embed.dtype;
    w.lm_head.weight.numel = w.embed.numel;
  } else if (pl.vocab.whole()) {
    ASSIGN_OR_RETURN(w.lm_head, ReadsHidden(ld, "lm_head", V, hidden));
  }
  if (!pl.vocab.whole()) {
    // Vocab parallel: this rank's rows, zero-padded to vocab_rows (the last rank's shard is
    // short when size does not divide the vocabulary). Tied heads read the embedding's rows.
    ASSIGN_OR_RETURN(w.lm_head, ld.PaddedLinear(tied ? "model.embed_tokens" : "lm_head", V, H,
                                                TensorSlice::Rows(pl.vocab.begin, pl.vocab.count),
                                                PaddedAxis{1, {{pl.vocab.count, pl.vocab_rows}}},
                                                hidden, false));
  }
  if (static_cast<int>(c.layer_is_moe.size()) != c.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat("config: layer_is_moe has ",
                                                   c.layer_is_moe.size(), " entries for ",
                                                   c.num_hidden_layers, " layers"));
  }
  // Every layer's weights are read in order; refuse a num_hidden_layers the checkpoint does
  // not hold before sizing anything by it.
  const std::string last_layer =
      absl::StrCat("model.layers.", c.num_hidden_layers - 1, ".input_layernorm.weight");
  if (!store.Has(last_layer)) {
    return absl::NotFoundError(absl::StrCat("config.json has num_hidden_layers ",
                                            c.num_hidden_layers, ", but the checkpoint has no '",
                                            last_layer, "'"));
  }
  w.layers.reserve(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    ASSIGN_OR_RETURN(LayerWeights lw, LoadLayer(c, pl, widths, ld, l));
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace mlaserve::model
