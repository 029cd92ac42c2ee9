// Domain types for the workers the router knows about. Proto types (admin.proto) stay at the
// edge: router/admin_conversion.h turns them into these and back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace mlaserve::router {

enum class WorkerRole : uint8_t { kPrefill, kDecode };

enum class WorkerState : uint8_t {
  kStarting,      // known by address, never heard from
  kHealthy,       // answering; eligible for new requests
  kUnhealthy,     // poll failed or heartbeat overdue
  kDraining,      // answering, but takes no new requests
  kIncompatible,  // serves another model
};

enum class WorkerSource : uint8_t { kStatic, kAdmin, kSelfRegistered };

const char* RoleName(WorkerRole role);  // "prefill" / "decode"
const char* StateName(WorkerState state);  // "starting", "healthy", ...
const char* SourceName(WorkerSource source);

// One data-parallel attention rank's share of a worker's load (docs/parallel.md).
struct RankLoad {
  int32_t kv_pages_total = 0;
  int32_t kv_pages_free = 0;
  int32_t running_requests = 0;
  int32_t pending_requests = 0;
};

struct WorkerLoad {
  int32_t kv_pages_total = 0;  // every rank's together
  int32_t kv_pages_free = 0;
  int32_t running_requests = 0;
  int32_t pending_requests = 0;
  int64_t pending_prefill_tokens = 0;
  int32_t max_running_requests = 0;  // 0 = no limit
  // Data-parallel attention: each rank's own pool and requests; empty for one pool.
  std::vector<RankLoad> ranks;

  // What one request can get: a request's pages are all on one rank, so with ranks these are
  // the largest rank pool and the most free pages of one rank.
  int32_t request_pages_total() const;
  int32_t request_pages_free() const;
};

// A prefill worker's relative prefill-time model, from its GPU profile's "prefill_estimate"
// (docs/profiles.md): t(L) = L·(attn + dense) + L²·attn_sq microseconds. Only ratios between
// workers matter; the router uses it to compare unlike prefill workers.
struct PrefillEstimate {
  double attn_us_per_token = 0.0;
  double attn_us_per_token_sq = 0.0;
  double dense_us_per_token = 0.0;

  // Until a new prompt of `prompt_tokens` would be done behind `queued_tokens` already queued
  // there (the queue counted per token, since chunked prefill interleaves it).
  double FinishMicros(int64_t queued_tokens, int64_t prompt_tokens) const;
};

// The estimate in a profile JSON document, or nullopt when the text is empty, not JSON, or
// lacks a usable "prefill_estimate" (missing fields, non-finite or negative values, or all
// zero): such a worker is compared by pending tokens only.
std::optional<PrefillEstimate> PrefillEstimateFromProfileJson(std::string_view profile_json);

struct WorkerProfile {
  std::string gpu_name;
  std::string source;
  int32_t local_prefill_threshold = 0;  // decode: prompts <= this many tokens prefill locally
  int32_t chunk_size = 0;
  std::string profile_json;
  // Parsed from profile_json when the descriptor arrives (PrefillEstimateFromProfileJson).
  std::optional<PrefillEstimate> prefill_estimate;
};

// The model a process serves, as far as routing compatibility goes.
struct ModelIdentity {
  std::string model_name;  // informational
  std::string model_type;
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t kv_lora_rank = 0;
  int32_t qk_rope_head_dim = 0;
  int32_t max_position_embeddings = 0;
  std::string kv_compat_hash;  // informational
};

// OK when `worker` serves the same model as `router`; otherwise FAILED_PRECONDITION naming the
// first field that differs and both values. model_name and kv_compat_hash are not compared
// (the same checkpoint may sit in differently named folders).
absl::Status CheckSameModel(const ModelIdentity& router, const ModelIdentity& worker);

struct WorkerDescriptor {
  WorkerRole role = WorkerRole::kDecode;
  std::string address;
  ModelIdentity model;
  std::string backend;
  int32_t device = 0;
  std::string version;
  WorkerProfile profile;
  WorkerLoad load;
  std::string kv_transport;
  // GPUs (ranks) and how the model is split over them: "tp=1", "tp=8 attention=data
  // moe=expert" (docs/parallel.md); 0 / empty from workers that predate the fields.
  int32_t gpus = 0;
  std::string parallel_layout;
  bool prefix_cache = false;  // --prefix-cache (false from workers that predate the field)
  // A decode worker that keeps the prompt's cached leading pages for a remote prefill when
  // asked (ReserveRequest.reuse_cached_pages); false from decode workers that predate the field,
  // which ship every page whatever they cache.
  bool remote_prefill_reuse = false;
};

// What the registry knows about one worker at one moment (a copy; safe to keep).
struct WorkerSnapshot {
  std::string id;
  WorkerRole role = WorkerRole::kDecode;
  std::string address;
  WorkerState state = WorkerState::kStarting;
  WorkerSource source = WorkerSource::kStatic;
  bool has_descriptor = false;
  WorkerDescriptor descriptor;
  absl::Time last_seen = absl::InfinitePast();
  std::string last_error;
  // The router's own bookkeeping, updated at once (reports from the worker lag behind).
  int32_t router_inflight = 0;           // requests routed here and not finished
  int64_t router_prefill_tokens = 0;     // prompt tokens of prefill calls in flight here
  int32_t router_reserved_pages = 0;     // pages this router holds reserved here now
  // Free pages the worker reported, less what this router reserved there since the report.
  int32_t estimated_free_pages = 0;
  // Requests the worker reported (running + pending), plus those this router placed there
  // since the report, less those that ended since: a request's end makes room at once, not at
  // the next report (with several routers, the others' changes show at the report, as for
  // pages; a reservation in transit while the report was made is missed until the next one, and
  // the worker queues what that admits beyond its limit). At least router_inflight.
  int32_t estimated_running_requests = 0;
};

}  // namespace mlaserve::router
