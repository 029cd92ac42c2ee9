// ForwardWork of a decode step, a prefill or prompt scoring, and its floor (roofline.h).
#include "bench/engine_bench/roofline.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace mlaserve::bench {
namespace {

constexpr double kBytesPerParam = 2.0;  // bf16

// Parameters of one layer's attention projections.
double AttentionParams(const model::ModelConfig& c) {
  const double h = c.hidden_size, heads = c.num_attention_heads;
  const double q = c.q_lora_rank.has_value()
                       ? static_cast<double>(*c.q_lora_rank) * h + heads * c.qk_head_dim() * *c.q_lora_rank
                       : heads * c.qk_head_dim() * h;
  const double kv_a = static_cast<double>(c.latent_dim()) * h;
  const double kv_b = heads * (c.qk_nope_head_dim + c.v_head_dim) * static_cast<double>(c.kv_lora_rank);
  const double o = h * heads * c.v_head_dim;
  return q + kv_a + kv_b + o;
}

bool IsMoe(const model::ModelConfig& c, int layer) {
  return static_cast<size_t>(layer) < c.layer_is_moe.size() && c.layer_is_moe[layer];
}

// Expected distinct experts that `tokens` tokens of k distinct experts each touch out of E,
// under uniform routing.
double TouchedExperts(const model::ModelConfig& c, double tokens) {
  const double e = c.n_routed_experts, k = c.num_experts_per_tok;
  if (e <= 0 || k <= 0 || tokens <= 0) return 0;
  return e * (1.0 - std::pow(1.0 - k / e, tokens));
}

// Weights a Forward of `tokens` tokens reads (parameters), and the parameters each token multiplies
// (its k routed experts, not every touched one), over all layers, LM head excluded.
struct LayerParams {
  double read = 0, per_token = 0, touched = 0;
};
LayerParams Layers(const model::ModelConfig& c, double tokens) {
  const double h = c.hidden_size, layers = c.num_hidden_layers;
  double moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += IsMoe(c, l);
  const double attn = AttentionParams(c);
  const double dense = 3.0 * h * c.intermediate_size;
  const double expert = 3.0 * h * c.moe_intermediate_size;
  const double router_shared = static_cast<double>(c.n_routed_experts) * h + c.n_shared_experts * expert;
  // Every layer's attention, the dense layers' MLPs, the MoE layers' router and shared experts;
  // then the routed experts: the touched ones read, k multiplied by each token.
  const double fixed = layers * attn + (layers - moe_layers) * dense + moe_layers * router_shared;
  LayerParams p;
  p.touched = moe_layers > 0 ? TouchedExperts(c, tokens) : 0;
  p.read = fixed + moe_layers * p.touched * expert;
  p.per_token = fixed + moe_layers * c.num_experts_per_tok * expert;
  return p;
}

double LmHeadParams(const model::ModelConfig& c) { return static_cast<double>(c.vocab_size) * c.hidden_size; }

// The weights a Forward of `tokens` tokens reads, into w; the layers' parameters for the FLOPs.
LayerParams ReadWeights(const model::ModelConfig& c, double tokens, ForwardWork& w) {
  const LayerParams p = Layers(c, tokens);
  w.weight_bytes = (p.read + LmHeadParams(c)) * kBytesPerParam;
  w.touched_experts = p.touched;
  return p;
}

}  // namespace

ForwardWork DecodeStepWork(const model::ModelConfig& c, int batch, int context) {
  ForwardWork w;
  if (batch <= 0) return w;
  const LayerParams p = ReadWeights(c, batch, w);
  const double lm_head = LmHeadParams(c);
  // Each sequence attends its context and its new token: latent + rope per key, absorbed.
  const double keys = static_cast<double>(context) + 1;
  w.kv_bytes = static_cast<double>(batch) * context * c.latent_dim() * kBytesPerParam * c.num_hidden_layers;
  const double attention = 2.0 * c.num_attention_heads * keys * (c.latent_dim() + c.kv_lora_rank);
  w.flops = batch * (2.0 * (p.per_token + lm_head) + attention * c.num_hidden_layers);
  return w;
}

ForwardWork PrefillWork(const model::ModelConfig& c, int tokens) {
  ForwardWork w;
  if (tokens <= 0) return w;
  const LayerParams p = ReadWeights(c, tokens, w);
  const double lm_head = LmHeadParams(c);
  const double t = tokens;
  const double pairs = t * (t + 1) / 2;
  const double attention = 2.0 * c.num_attention_heads * pairs * (c.qk_head_dim() + c.v_head_dim);
  w.flops = 2.0 * p.per_token * t + 2.0 * lm_head + attention * c.num_hidden_layers;
  return w;
}

ForwardWork PromptScoringWork(const model::ModelConfig& c, int scored_rows) {
  ForwardWork w;
  if (scored_rows <= 0) return w;
  w.weight_bytes = LmHeadParams(c) * kBytesPerParam;
  w.flops = 2.0 * scored_rows * LmHeadParams(c);
  return w;
}

double FloorMs(const ForwardWork& w, double gemm_tflops, double copy_gbs) {
  if (gemm_tflops <= 0 || copy_gbs <= 0) return 0;
  return std::max(w.flops / (gemm_tflops * 1e12), w.bytes() / (copy_gbs * 1e9)) * 1e3;
}

std::string ClockCell(std::vector<double> mhz, double boost_mhz) {
  std::erase_if(mhz, [](double m) { return !(m > 0); });
  if (mhz.empty()) return "-";
  std::sort(mhz.begin(), mhz.end());
  const double lo = mhz.front(), hi = mhz.back(), mid = mhz[mhz.size() / 2];
  const auto pct = [&](double m) { return std::lround(100.0 * m / boost_mhz); };
  if (mhz.size() == 1) {
    if (boost_mhz <= 0) return absl::StrFormat("%.0f MHz", lo);
    return absl::StrFormat("%.0f MHz (%d%% of the %.0f MHz boost clock)", lo, pct(lo), boost_mhz);
  }
  const std::string range = absl::StrFormat("%.0f / %.0f / %.0f MHz (min / median / max of %d runs", lo, mid, hi,
                                            mhz.size());
  if (boost_mhz <= 0) return range + ")";
  return range + absl::StrFormat("; %d-%d%% of the %.0f MHz boost clock)", pct(lo), pct(hi), boost_mhz);
}

}  // namespace mlaserve::bench
