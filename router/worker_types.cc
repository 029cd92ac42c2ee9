#include "router/worker_types.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace mlaserve::router {

int32_t WorkerLoad::request_pages_total() const {
  if (ranks.empty()) return kv_pages_total;
  int32_t most = 0;
  for (const RankLoad& r : ranks) most = std::max(most, r.kv_pages_total);
  return most;
}

int32_t WorkerLoad::request_pages_free() const {
  if (ranks.empty()) return kv_pages_free;
  int32_t most = 0;
  for (const RankLoad& r : ranks) most = std::max(most, r.kv_pages_free);
  return most;
}

double PrefillEstimate::FinishMicros(int64_t queued_tokens, int64_t prompt_tokens) const {
  const double q = static_cast<double>(std::max<int64_t>(queued_tokens, 0));
  const double l = static_cast<double>(std::max<int64_t>(prompt_tokens, 0));
  const double linear = attn_us_per_token + dense_us_per_token;
  return q * linear + l * linear + l * l * attn_us_per_token_sq;
}

std::optional<PrefillEstimate> PrefillEstimateFromProfileJson(std::string_view profile_json) {
  if (profile_json.empty()) return std::nullopt;
  const nlohmann::json doc =
      nlohmann::json::parse(profile_json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  const auto it = doc.find("prefill_estimate");
  if (it == doc.end() || !it->is_object()) return std::nullopt;
  PrefillEstimate e;
  for (auto [key, field] : {std::pair{"attn_us_per_token", &e.attn_us_per_token},
                            std::pair{"attn_us_per_token_sq", &e.attn_us_per_token_sq},
                            std::pair{"dense_us_per_token", &e.dense_us_per_token}}) {
    const auto f = it->find(key);
    if (f == it->end() || !f->is_number()) return std::nullopt;
    *field = f->get<double>();
    if (!std::isfinite(*field) || *field < 0) return std::nullopt;
  }
  if (e.attn_us_per_token + e.dense_us_per_token + e.attn_us_per_token_sq <= 0) return std::nullopt;
  return e;
}

const char* RoleName(WorkerRole role) {
  return role == WorkerRole::kPrefill ? "prefill" : "decode";
}

const char* StateName(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting: return "starting";
    case WorkerState::kHealthy: return "healthy";
    case WorkerState::kUnhealthy: return "unhealthy";
    case WorkerState::kDraining: return "draining";
    case WorkerState::kIncompatible: return "incompatible";
  }
  return "unknown";
}

const char* SourceName(WorkerSource source) {
  switch (source) {
    case WorkerSource::kStatic: return "static";
    case WorkerSource::kAdmin: return "admin";
    case WorkerSource::kSelfRegistered: return "registered";
  }
  return "unknown";
}

absl::Status CheckSameModel(const ModelIdentity& router, const ModelIdentity& worker) {
  auto differ = [&](const char* field, const auto& mine, const auto& theirs) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker serves a different model: ", field, " is ", theirs,
                     " on the worker (model '", worker.model_name, "') but ", mine,
                     " on the router (model '", router.model_name, "')"));
  };
  if (router.model_type != worker.model_type)
    return differ("model_type", router.model_type, worker.model_type);
  if (router.vocab_size != worker.vocab_size)
    return differ("vocab_size", router.vocab_size, worker.vocab_size);
  if (router.hidden_size != worker.hidden_size)
    return differ("hidden_size", router.hidden_size, worker.hidden_size);
  if (router.num_hidden_layers != worker.num_hidden_layers)
    return differ("num_hidden_layers", router.num_hidden_layers, worker.num_hidden_layers);
  if (router.kv_lora_rank != worker.kv_lora_rank)
    return differ("kv_lora_rank", router.kv_lora_rank, worker.kv_lora_rank);
  if (router.qk_rope_head_dim != worker.qk_rope_head_dim)
    return differ("qk_rope_head_dim", router.qk_rope_head_dim, worker.qk_rope_head_dim);
  if (router.max_position_embeddings != worker.max_position_embeddings)
    return differ("max_position_embeddings", router.max_position_embeddings,
                  worker.max_position_embeddings);
  return absl::OkStatus();
}

}  // namespace mlaserve::router
