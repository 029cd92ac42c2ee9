// moe routing CPU backend: HF DeepseekV2/V3 router semantics (see api.h), f32 scores,
// deterministic tie-breaking towards the lower index.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "common/status.h"
#include "kernels/moe/api.h"

namespace mlaserve::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The k indices of the largest values, by descending value, ties towards the lower index; a NaN
// value counts as -inf (as in the CUDA routing), which keeps the comparison a strict order.
void TopK(const float* values, int n, int k, int* out) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto key = [&](int i) { return std::isnan(values[i]) ? kNegInf : values[i]; };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return key(a) > key(b) || (key(a) == key(b) && a < b);
  });
  std::copy(idx.begin(), idx.begin() + k, out);
}

}  // namespace

absl::Status MoeRoutingCpu(const MoeRoutingParams& p) {
  const int E = p.num_experts;
  const int group_size = E / p.n_group;
  std::vector<float> scores(E), choice(E), group_scores(p.n_group);
  std::vector<int> chosen(p.top_k), kept_groups(p.topk_group);
  for (int t = 0; t < p.num_tokens; ++t) {
    const float* logits = p.logits + static_cast<int64_t>(t) * E;
    if (p.scoring == MoeScoring::kSoftmax) {
      const float m = *std::max_element(logits, logits + E);
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e]) - m);
      for (int e = 0; e < E; ++e)
        scores[e] = static_cast<float>(std::exp(static_cast<double>(logits[e]) - m) / sum);
    } else {
      for (int e = 0; e < E; ++e)
        scores[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))));
    }
    choice = scores;
    if (p.method == MoeTopkMethod::kNoauxTc && p.correction_bias != nullptr) {
      for (int e = 0; e < E; ++e) choice[e] += p.correction_bias[e];
    }
    if (p.method != MoeTopkMethod::kGreedy) {
      for (int g = 0; g < p.n_group; ++g) {
        const float* c = choice.data() + g * group_size;
        if (p.method == MoeTopkMethod::kGroupLimitedGreedy) {
          group_scores[g] = *std::max_element(c, c + group_size);
        } else {  // noaux_tc: sum of the group's two best choices
          int top2[2];
          TopK(c, group_size, 2, top2);
          group_scores[g] = c[top2[0]] + c[top2[1]];
        }
      }
      TopK(group_scores.data(), p.n_group, p.topk_group, kept_groups.data());
      std::vector<bool> keep(p.n_group, false);
      for (int g : kept_groups) keep[g] = true;
      // Masked experts: 0 for group_limited_greedy (HF masked_fill 0.0), -inf for noaux_tc.
      const float masked = p.method == MoeTopkMethod::kNoauxTc ? kNegInf : 0.0f;
      for (int e = 0; e < E; ++e)
        if (!keep[e / group_size]) choice[e] = masked;
    }
    TopK(choice.data(), E, p.top_k, chosen.data());
    int32_t* ids = p.topk_ids + static_cast<int64_t>(t) * p.top_k;
    float* w = p.topk_weights + static_cast<int64_t>(t) * p.top_k;
    double sum = 0;
    for (int j = 0; j < p.top_k; ++j) {
      ids[j] = chosen[j];
      // noaux_tc weighs by the unbiased score; the other methods by the (masked) score itself.
      w[j] = p.method == MoeTopkMethod::kNoauxTc ? scores[chosen[j]] : choice[chosen[j]];
      sum += w[j];
    }
    const float denom = p.norm_topk_prob ? static_cast<float>(sum) + 1e-20f : 1.0f;
    for (int j = 0; j < p.top_k; ++j) {
      if (p.norm_topk_prob) w[j] /= denom;
      w[j] *= p.routed_scaling_factor;
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
