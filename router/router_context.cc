#include "router/router_context.h"

#include "absl/strings/str_cat.h"

#include "absl/random/random.h"
#include "absl/strings/str_format.h"

namespace mlaserve::router {

namespace {
const char* ModelTypeName(const model::ModelConfig& c) {
  switch (c.model_type) {
    case model::ModelType::kDeepseekV2: return "deepseek_v2";
    case model::ModelType::kDeepseekV3: return "deepseek_v3";
    case model::ModelType::kDeepseekV32: return "deepseek_v32";
  }
  return "unknown";
}
}  // namespace

RouterModel RouterModelFromConfig(const model::ModelConfig& c, const std::string& name) {
  RouterModel m;
  m.identity.model_name = name;
  m.identity.model_type = c.model_type_name.empty() ? ModelTypeName(c) : c.model_type_name;
  m.identity.vocab_size = c.vocab_size;
  m.identity.hidden_size = c.hidden_size;
  m.identity.num_hidden_layers = c.num_hidden_layers;
  m.identity.kv_lora_rank = c.kv_lora_rank;
  m.identity.qk_rope_head_dim = c.qk_rope_head_dim;
  m.identity.max_position_embeddings = c.max_position_embeddings;
  m.limits.vocab_size = c.vocab_size;
  m.limits.max_context = c.max_position_embeddings;
  m.limits.eos_token_ids = c.eos_token_ids;
  m.limits.bos_token_id = c.bos_token_id;
  m.has_sparse_indexer = c.has_indexer;
  return m;
}

RouterMetrics::RouterMetrics(common::MetricsRegistry& r)
    : requests_total(r.GetCounter("mlaserve_router_requests_total",
                                  "Generate calls accepted by the router")),
      requests_failed_total(r.GetCounter("mlaserve_router_requests_failed_total",
                                         "Generate calls that ended with an error status")),
      requests_aborted_total(r.GetCounter("mlaserve_router_requests_aborted_total",
                                          "Generate calls aborted or cancelled by the client")),
      prompt_tokens_total(r.GetCounter("mlaserve_router_prompt_tokens_total",
                                       "Prompt tokens of accepted Generate calls")),
      generation_tokens_total(r.GetCounter("mlaserve_router_generation_tokens_total",
                                           "Tokens generated and streamed to clients")),
      local_prefill_total(r.GetCounter("mlaserve_router_local_prefill_total",
                                       "Requests prefilled on their decode worker")),
      prefix_affinity_tokens_total(
          r.GetCounter("mlaserve_router_prefix_affinity_tokens_total",
                       "Prompt tokens the router expected the chosen prefill worker to have "
                       "in its prefix cache")),
      cached_prompt_tokens_total(
          r.GetCounter("mlaserve_router_cached_prompt_tokens_total",
                       "Prompt tokens taken from prefix caches: the prefill workers', and the "
                       "decode worker's for a prompt it prefilled itself")),
      decode_affinity_tokens_total(
          r.GetCounter("mlaserve_router_decode_affinity_tokens_total",
                       "Prompt tokens the router expected the chosen decode worker to have in "
                       "its prefix cache, for prompts it prefills itself")),
      decode_affinity_rebalanced_total(
          r.GetCounter("mlaserve_router_decode_affinity_rebalanced_total",
                       "Requests sent to a less loaded decode worker than the overloaded one "
                       "expected to hold most of their prompt")),
      decode_reused_tokens_total(
          r.GetCounter("mlaserve_router_decode_reused_tokens_total",
                       "Prompt tokens decode workers held in their prefix caches for remotely "
                       "prefilled prompts, whose KV was therefore not shipped")),
      requests_running(r.GetGauge("mlaserve_router_requests_running",
                                  "Generate calls running now")),
      requests_waiting(r.GetGauge("mlaserve_router_requests_waiting",
                                  "Generate calls waiting for a decode worker with room")),
      time_to_first_token_seconds(r.GetHistogram("mlaserve_router_time_to_first_token_seconds",
                                                 "Time from Generate to the first token",
                                                 common::LatencyBucketsSeconds())),
      inter_token_latency_seconds(r.GetHistogram("mlaserve_router_inter_token_latency_seconds",
                                                 "Time between tokens of one request",
                                                 common::LatencyBucketsSeconds())),
      e2e_request_latency_seconds(r.GetHistogram("mlaserve_router_e2e_request_latency_seconds",
                                                 "Time from Generate to its completion",
                                                 common::LatencyBucketsSeconds())) {}

RouterContext::RouterContext(RouterOptions options, RouterModel model,
                             std::unique_ptr<TextCodec> codec)
    : options_(std::move(options)),
      model_(std::move(model)),
      codec_(std::move(codec)),
      registry_(WorkerRegistry::Options{model_.identity, options_.heartbeat_interval,
                                        options_.heartbeat_timeout}),
      channels_(options_.worker_dialer),
      prefix_affinity_(options_.prefix_affinity
                           ? std::make_unique<PrefixAffinity>(options_.prefix_affinity_table)
                           : nullptr),
      metrics_(metrics_registry_),
      start_time_(absl::Now()),
      id_salt_(absl::Uniform<uint64_t>(absl::BitGen())) {}

std::string RouterContext::NewRequestId() {
  const int64_t n = next_request_.fetch_add(1);
  return absl::StrFormat("req-%d-%08x", n, static_cast<uint32_t>(id_salt_ ^ (n * 0x9E3779B97F4A7C15ull)));
}

absl::StatusOr<RouterContext::TokenizingClaim> RouterContext::ClaimTokenizing(size_t bytes) {
  constexpr size_t kUncounted = 64 << 10;  // short prompts: never refused for this
  if (bytes < kUncounted) return TokenizingClaim();
  const int64_t n = static_cast<int64_t>(bytes);
  const int64_t before = tokenizing_bytes_.fetch_add(n);
  // One text alone always gets through (the request size limit bounds it).
  if (before > 0 && before + n > options_.max_tokenizing_bytes) {
    tokenizing_bytes_.fetch_sub(n);
    return absl::ResourceExhaustedError(absl::StrCat(
        "the router is tokenizing ", before, " bytes of other prompts; this one of ", n,
        " bytes would pass its limit of ", options_.max_tokenizing_bytes,
        " (--max-tokenizing-bytes); retry"));
  }
  return TokenizingClaim(this, n);
}

RouterContext::TokenizingClaim::~TokenizingClaim() {
  if (ctx_ != nullptr) ctx_->tokenizing_bytes_.fetch_sub(bytes_);
}

void RouterContext::CallStarted() {
  absl::MutexLock lock(&calls_mu_);
  ++live_calls_;
}

void RouterContext::CallEnded() {
  absl::MutexLock lock(&calls_mu_);
  --live_calls_;
}

bool RouterContext::WaitForCallsToEnd(absl::Duration timeout) {
  absl::MutexLock lock(&calls_mu_);
  auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(calls_mu_) { return live_calls_ == 0; };
  return calls_mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
}

}  // namespace mlaserve::router
