// config.json: the MLP layout (which layers are MoE) and the MoE router, as HF runs them.
// Part of the config parser (config.cc); see config_reader.h.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/loader/config.h"
#include "model/loader/config_reader.h"

namespace mlaserve::model::config_internal {

// layer_is_moe: HF's V2 and V3 use `layer_idx >= first_k_dense_replace`; V3.2 follows
// mlp_layer_types ("dense"/"sparse"), derived from first_k_dense_replace when absent.
absl::Status ParseMlpLayers(FieldReader& r, ModelConfig& c) {
  const bool is_v2 = c.model_type == ModelType::kDeepseekV2;
  const bool is_v32 = c.model_type == ModelType::kDeepseekV32;
  const int n = c.num_hidden_layers;
  int first_dense = is_v2 ? 0 : 3;
  RETURN_IF_ERROR(r.Int("first_k_dense_replace", &first_dense, 0));
  std::vector<bool> from_first_k(n);
  for (int i = 0; i < n; ++i) from_first_k[i] = i >= first_dense;
  c.layer_is_moe = from_first_k;

  std::vector<std::string> types;
  RETURN_IF_ERROR(r.StringList("mlp_layer_types", &types));
  if (!types.empty()) {
    if (static_cast<int>(types.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: mlp_layer_types has ",
                                                     types.size(),
                                                     " entries but num_hidden_layers is ", n));
    }
    for (int i = 0; i < n; ++i) {
      if (types[i] != "dense" && types[i] != "sparse") {
        return absl::InvalidArgumentError(absl::StrCat("config.json: mlp_layer_types[", i, "] is '",
                                                       types[i], "'; expected dense or sparse"));
      }
      const bool moe = types[i] == "sparse";
      if (is_v32) {
        c.layer_is_moe[i] = moe;
      } else if (moe != from_first_k[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: mlp_layer_types[", i, "] is '", types[i], "' but first_k_dense_replace ",
            first_dense, " makes layer ", i, (from_first_k[i] ? " MoE" : " dense"), " and HF's ",
            c.model_type_name, " follows first_k_dense_replace"));
      }
    }
  }
  int freq = 1;
  RETURN_IF_ERROR(r.Int("moe_layer_freq", &freq, 1));
  if (freq != 1) {
    AddWarning(c, absl::StrCat("moe_layer_freq ", freq,
                               " is ignored: HF makes every layer from "
                               "first_k_dense_replace on an MoE layer"));
  }
  return absl::OkStatus();
}

absl::Status ParseMoeRouting(FieldReader& r, ModelConfig& c) {
  const bool is_v2 = c.model_type == ModelType::kDeepseekV2;
  bool any_moe = false;
  for (bool m : c.layer_is_moe) any_moe = any_moe || m;
  RETURN_IF_ERROR(r.AliasedInt("n_routed_experts", is_v2 ? "num_experts" : "num_local_experts",
                               &c.n_routed_experts, 1, any_moe));
  if (!is_v2 && r.Contains("num_experts")) {  // V3.2's backward-compatible spelling
    RETURN_IF_ERROR(r.AliasedInt("n_routed_experts", "num_experts", &c.n_routed_experts, 1));
  }
  RETURN_IF_ERROR(r.Int("num_experts_per_tok", &c.num_experts_per_tok, 1, any_moe));
  RETURN_IF_ERROR(r.Int("moe_intermediate_size", &c.moe_intermediate_size, 1, any_moe));
  c.n_shared_experts = is_v2 ? 2 : 1;
  RETURN_IF_ERROR(r.Int("n_shared_experts", &c.n_shared_experts, 0));
  // HF's V2 still builds the shared-expert MLP at width 0 then: with mlp_bias its down_proj
  // bias is added to every MoE layer's output. The engine has no shared expert to carry it.
  if (is_v2 && any_moe && c.mlp_bias && c.n_shared_experts == 0) {
    return absl::InvalidArgumentError(
        "config.json: n_shared_experts 0 with mlp_bias true is not supported: HF's deepseek_v2 "
        "builds a zero-width shared expert whose down_proj bias it still adds");
  }
  c.routed_scaling_factor = is_v2 ? 1.0 : 2.5;
  RETURN_IF_ERROR(r.Double("routed_scaling_factor", &c.routed_scaling_factor));
  // The routing kernels scale in f32; a factor beyond its range would become inf there.
  if (!std::isfinite(static_cast<float>(c.routed_scaling_factor))) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: routed_scaling_factor ",
                                                   c.routed_scaling_factor,
                                                   " is not a finite float32"));
  }
  // Absent n_group/topk_group take HF's class defaults; an explicit null means one group.
  c.n_group = is_v2 ? 1 : 8;
  c.topk_group = is_v2 ? 1 : 4;
  if (r.IsNull("n_group")) c.n_group = 1;
  if (r.IsNull("topk_group")) c.topk_group = 1;
  RETURN_IF_ERROR(r.Int("n_group", &c.n_group, 1));
  RETURN_IF_ERROR(r.Int("topk_group", &c.topk_group, 1));
  bool norm = !is_v2;
  RETURN_IF_ERROR(r.TruthBool("norm_topk_prob", &norm));

  std::string topk_method = is_v2 ? "greedy" : "noaux_tc";
  std::string scoring = is_v2 ? "softmax" : "sigmoid";
  RETURN_IF_ERROR(r.String("topk_method", &topk_method));
  RETURN_IF_ERROR(r.String("scoring_func", &scoring));
  if (topk_method != "greedy" && topk_method != "group_limited_greedy" &&
      topk_method != "noaux_tc") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: topk_method '", topk_method,
                     "' is not one of greedy, group_limited_greedy, noaux_tc"));
  }
  if (scoring != "softmax" && scoring != "sigmoid") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: scoring_func '", scoring, "' is not one of softmax, sigmoid"));
  }
  bool grouped = true;
  if (is_v2) {
    // DeepseekV2TopkRouter: softmax scores, greedy or group-max limited top-k, no
    // normalisation, no correction bias, whatever the config says.
    if (topk_method == "noaux_tc") {
      return absl::InvalidArgumentError(
          "config.json: topk_method 'noaux_tc' is not supported by HF's deepseek_v2 router "
          "(greedy or group_limited_greedy)");
    }
    c.routing_method =
        topk_method == "greedy" ? RoutingMethod::kGreedy : RoutingMethod::kGroupLimitedGreedy;
    grouped = c.routing_method == RoutingMethod::kGroupLimitedGreedy;
    c.scoring = RoutingScoring::kSoftmax;
    if (scoring != "softmax") {
      AddWarning(c, absl::StrCat("scoring_func '", scoring,
                                 "' is ignored: HF's deepseek_v2 router uses softmax"));
    }
    if (norm)
      AddWarning(c, "norm_topk_prob true is ignored: HF's deepseek_v2 router never normalises");
    c.norm_topk_prob = false;
    c.has_correction_bias = false;
    // HF's greedy router reads neither n_group nor topk_group; the routing kernel would still
    // check and size its group arrays by them, so record the one group it effectively uses.
    if (!grouped && (c.n_group != 1 || c.topk_group != 1)) {
      AddWarning(c, absl::StrCat("n_group ", c.n_group, " and topk_group ", c.topk_group,
                                 " are ignored: HF's deepseek_v2 greedy router does not group "
                                 "experts"));
      c.n_group = 1;
      c.topk_group = 1;
    }
  } else {
    // DeepseekV3TopkRouter / DeepseekV32TopkRouter: sigmoid scores plus
    // e_score_correction_bias, groups ranked by the sum of their top-2 biased scores.
    c.routing_method = RoutingMethod::kNoauxTc;
    c.scoring = RoutingScoring::kSigmoid;
    c.has_correction_bias = true;
    c.norm_topk_prob = norm;
    if (topk_method != "noaux_tc") {
      AddWarning(
          c, absl::StrCat("topk_method '", topk_method, "' is ignored: HF's ", c.model_type_name,
                          " router always uses noaux_tc grouped selection"));
    }
    if (scoring != "sigmoid") {
      AddWarning(c, absl::StrCat("scoring_func '", scoring, "' is ignored: HF's ",
                                 c.model_type_name, " router always uses sigmoid"));
    }
  }
  if (!any_moe) return absl::OkStatus();
  const int experts = c.n_routed_experts;
  if (c.num_experts_per_tok > experts) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: num_experts_per_tok ",
                                                   c.num_experts_per_tok,
                                                   " exceeds n_routed_experts ", experts));
  }
  if (!grouped) return absl::OkStatus();
  if (experts % c.n_group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: n_routed_experts ", experts,
                                                   " is not divisible by n_group ", c.n_group));
  }
  if (c.topk_group > c.n_group) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: topk_group ", c.topk_group, " exceeds n_group ", c.n_group));
  }
  const int per_group = experts / c.n_group;
  if (!is_v2 && per_group < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: n_group ", c.n_group, " leaves ", per_group, " expert(s) per group of ",
        experts, "; HF ranks groups by their top-2 scores, which needs at least 2"));
  }
  if (c.topk_group * per_group < c.num_experts_per_tok) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: num_experts_per_tok ", c.num_experts_per_tok, " exceeds the ",
                     c.topk_group * per_group, " experts in topk_group ", c.topk_group,
                     " groups of ", per_group));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::model::config_internal
