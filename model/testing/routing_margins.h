// Test helper: how close each token's MoE routing choice is, as the f32 CPU engine computes it
// (which routes as Hugging Face's f32 reference does on the fixtures: docs/cuda_engine.md,
// "Expert routing under bf16 activations"). A bf16 backend may pick the other expert where the
// margin is small (model_engine_routing_cuda_test's kNearTie), so the CUDA engine tests use
// these margins to tell a legitimate flip from a wrong forward at positions the fixture does
// not record routing for (decode steps).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/deepseek_engine.h"
#include "model/deepseek_engine_probe.h"
#include "model/loader/weight_store.h"

namespace mlaserve::model::testing {

// The smaller of the group and the expert margin of one token's router logits under `c`'s
// routing (kernels/moe/api.h): scores are softmax or sigmoid of the logits, plus the
// correction bias for the choice under noaux_tc; groups rank by their best score (group-limited
// greedy) or the sum of their best two (noaux_tc); a margin is the gap between the last chosen
// and the first left-out entry.
inline double RoutingMargin(const ModelConfig& c, std::span<const float> logits,
                            std::span<const float> bias) {
  const int E = static_cast<int>(logits.size());
  std::vector<double> s(E);
  if (c.scoring == RoutingScoring::kSigmoid) {
    for (int e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  } else {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += s[e] = std::exp(logits[e] - mx);
    for (double& v : s) v /= sum;
  }
  if (c.routing_method == RoutingMethod::kNoauxTc && !bias.empty()) {
    for (int e = 0; e < E; ++e) s[e] += bias[e];
  }
  const auto gap = [](std::vector<double> v, int keep) {  // v[keep-1] - v[keep], descending
    if (keep <= 0 || keep >= static_cast<int>(v.size())) return std::numeric_limits<double>::infinity();
    std::sort(v.begin(), v.end(), std::greater<double>());
    return v[keep - 1] - v[keep];
  };
  std::vector<bool> allowed(E, true);
  double group_margin = std::numeric_limits<double>::infinity();
  if (c.routing_method != RoutingMethod::kGreedy && c.n_group > 1) {
    const int per = E / c.n_group;
    std::vector<double> gs(c.n_group);
    for (int g = 0; g < c.n_group; ++g) {
      std::vector<double> m(s.begin() + g * per, s.begin() + (g + 1) * per);
      std::sort(m.begin(), m.end(), std::greater<double>());
      gs[g] = c.routing_method == RoutingMethod::kNoauxTc ? m[0] + (per > 1 ? m[1] : 0.0) : m[0];
    }
    group_margin = gap(gs, c.topk_group);
    std::vector<int> order(c.n_group);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return gs[a] > gs[b]; });
    for (int e = 0; e < E; ++e) allowed[e] = false;
    for (int i = 0; i < c.topk_group; ++i) {
      for (int e = order[i] * per; e < (order[i] + 1) * per; ++e) allowed[e] = true;
    }
  }
  std::vector<double> candidates;
  for (int e = 0; e < E; ++e) {
    if (allowed[e]) candidates.push_back(s[e]);
  }
  return std::min(group_margin, gap(candidates, c.num_experts_per_tok));
}

// Per position of `ids` (one prefill, teacher forced), the smallest RoutingMargin over the MoE
// layers, from a CPU engine on the checkpoint in `dir`. Empty for models without MoE layers.
inline absl::StatusOr<std::vector<double>> CpuRoutingMargins(const std::string& dir,
                                                             std::span<const int32_t> ids) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend = kernels::Backend::kCpu;
  o.max_batch_tokens = static_cast<int>(ids.size());
  o.max_batch_seqs = 1;
  o.num_kv_pages = kernels::PagesFor(static_cast<int64_t>(ids.size())) + 1;
  ASSIGN_OR_RETURN(std::unique_ptr<DeepseekEngine> engine, DeepseekEngine::Create(o));
  const ModelConfig& c = engine->config();
  ASSIGN_OR_RETURN(std::vector<int32_t> pages,
                   engine->kv_pool().Allocate(kernels::PagesFor(static_cast<int64_t>(ids.size()))));
  SequenceChunk chunk;
  chunk.tokens = ids;
  chunk.start_pos = 0;
  chunk.pages = pages;
  DeepseekEngineProbe probe(*engine);
  ASSIGN_OR_RETURN(std::vector<DeepseekEngineProbe::RouterRows> layers,
                   probe.RouterLogits({&chunk, 1}, AttentionPath::kMha));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::Open(dir, c));
  std::vector<double> margin(ids.size(), std::numeric_limits<double>::infinity());
  for (const auto& rows : layers) {
    std::vector<float> bias;
    if (c.has_correction_bias) {
      ASSIGN_OR_RETURN(bias, store->LoadF32(absl::StrCat("model.layers.", rows.layer,
                                                         ".mlp.gate.e_score_correction_bias"),
                                            {rows.num_experts}));
    }
    for (int t = 0; t < rows.num_tokens; ++t) {
      const std::span<const float> row(rows.logits.data() + static_cast<size_t>(t) * rows.num_experts,
                                       rows.num_experts);
      margin[t] = std::min(margin[t], RoutingMargin(c, row, bias));
    }
  }
  engine->kv_pool().Free(pages);
  return margin;
}

}  // namespace mlaserve::model::testing
