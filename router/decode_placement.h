// DecodePlacement: where one Generate runs. It ranks the decode workers with room for the
// request's KV pages, hands out the next healthy one for each Reserve attempt (up to
// --max-reserve-attempts of them), decides whether that worker prefills the prompt itself
// (conditional disaggregation) or which prefill worker does, judges a failed Reserve (try the
// next worker, wait for room, or fail), and keeps the router's own load bookkeeping
// (WorkerRegistry::AddRouterLoad) for both workers while the call holds them, so that a burst
// of requests spreads out before the workers' load reports catch up. With prefix affinity
// (router/prefix_affinity.h) the prefill worker is ranked by the prompt tokens it is expected
// not to have cached, and the prompt is recorded for the worker it is sent to; the decode
// workers, by the prompt tokens they are expected to hold in their own prefix caches
// (DecodeAffinityOptions: a local prefill computes only the rest, a remote one, with
// Options::remote_prefill_reuse on a worker that advertises it, receives only the rest), unless
// that worker is overloaded.
//
// Not thread-safe: the Generate call owns one and uses it under its own lock. It makes no RPC;
// the call does (router/generate_call.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/affinity_balance.h"
#include "router/prefix_affinity.h"
#include "router/worker_registry.h"

namespace mlaserve::router {

// A worker call's failure as the client sees it: `what` on `worker_id` (`address`), with the
// worker's message. Codes that describe the worker's internal bookkeeping (CANCELLED,
// NOT_FOUND, ALREADY_EXISTS, ABORTED, UNKNOWN, DATA_LOSS, OK) become UNAVAILABLE: retry.
absl::Status WorkerError(const std::string& what, const std::string& worker_id,
                         const std::string& address, const grpc::Status& status);

// Whether a worker call's failure says the worker process is gone or unreachable, so the
// registry should stop routing to it until it answers again: UNAVAILABLE (connection refused
// or reset), or UNKNOWN, which gRPC gives a call whose connection dropped mid-stream ("Stream
// removed"); a killed worker's open stream ends with either. A live worker answers with
// neither (its own errors carry their codes).
bool WorkerLooksGone(const grpc::Status& status);

// "decode-1 at HOST:PORT is healthy; ..." or "none is registered", for error messages.
std::string DescribeWorkers(const std::vector<WorkerSnapshot>& workers);

// How prefix affinity ranks the decode workers (mlaserve-router's --decode-affinity,
// --decode-affinity-balance-abs and --decode-affinity-balance-rel; docs/serving.md, "Prefix
// affinity"). A candidate is worth the prompt tokens it is expected to hold in its prefix cache:
// a prompt it prefills itself computes only the rest, and a remotely prefilled one receives
// only the rest (with DecodePlacement::Options::remote_prefill_reuse, on a candidate whose
// descriptor says remote_prefill_reuse; otherwise a remote prefill ships the whole prompt's KV,
// and the candidate is worth nothing for it: a decode worker older than that field is ranked by
// load for such prompts, whatever it caches, during a rolling upgrade). The request
// goes to the candidate worth the most, unless that one is overloaded against the least loaded
// candidate (by requests, estimated_running_requests): it then yields to the candidates that are
// not, the load order deciding where none is worth anything. Every candidate already has room.
struct DecodeAffinityOptions {
  bool enabled = true;
  // Overloaded: more than balance_abs requests more than the least loaded candidate and more
  // than balance_rel times as many (common::AffinityBalance, whose defaults these are).
  int32_t balance_abs = common::AffinityBalance{}.abs;
  double balance_rel = common::AffinityBalance{}.rel;

  bool Overloaded(int32_t requests, int32_t least_requests) const {
    return common::AffinityBalance{balance_abs, balance_rel}.Overloaded(requests, least_requests);
  }
};

class DecodePlacement {
 public:
  struct Options {
    int max_attempts = 3;  // decode workers tried (--max-reserve-attempts)
    absl::Duration reserve_timeout = absl::Seconds(10);  // named in the hung-worker error
    // The decode worker prefills the prompt whatever its threshold (requests with logprobs:
    // only the worker that samples every token returns every token's logprobs).
    bool prefill_locally = false;
    // The router's table of what prefill workers have cached (RouterContext::prefix_affinity);
    // null: prefill workers are ranked by their load alone. Must outlive the placement.
    PrefixAffinity* prefix_affinity = nullptr;
    // The prompt's token ids, for prefix_affinity; read by the constructor only.
    std::span<const int32_t> prompt_ids;
    // The request's cache_salt (the prefill workers' cache partition), mixed into the prompt's
    // page chain for prefix_affinity; read by the constructor only.
    std::string_view cache_salt;
    // With prefix_affinity: how it ranks the decode workers (enabled = false: by load alone; the
    // local-prefill decision still counts what the chosen one is expected to hold).
    DecodeAffinityOptions decode_affinity;
    // False: the decode worker computes the whole prompt whatever it caches (a request with
    // prompt logprobs scores every row, and cached pages carry no logits), so no decode worker
    // is worth more for its cache and the local-prefill decision counts the whole prompt.
    bool decode_cache_usable = true;
    // A remotely prefilled prompt: the decode worker is asked to keep the leading pages its
    // prefix cache holds instead of receiving them (Target::reuse_cached_pages), and with decode
    // affinity the decode workers are ranked by those too (--remote-prefill-reuse); both only
    // for decode workers whose descriptor says remote_prefill_reuse (older ones ship every
    // page). False: the whole prompt's KV is shipped and such prompts go to decode workers by
    // load.
    bool remote_prefill_reuse = true;
  };
  DecodePlacement(WorkerRegistry* registry, Options options, int32_t prompt_tokens,
                  int32_t max_new_tokens);
  ~DecodePlacement();  // releases what is still charged
  // A copy would release the same charges twice.
  DecodePlacement(const DecodePlacement&) = delete;
  DecodePlacement& operator=(const DecodePlacement&) = delete;

  // Ranks the routable decode workers with room now for the prompt and the first new token
  // and a pool that can hold prompt + max_new_tokens: by load (RankDecodeWorkers), then, with
  // prefix affinity, those expected to hold the prompt's start first (DecodeAffinityOptions).
  // RESOURCE_EXHAUSTED when none has room
  // (no_room_now() then says whether waiting can help: false when no pool could ever hold
  // the request), UNAVAILABLE when no decode worker is healthy.
  absl::Status Rank();
  bool no_room_now() const { return no_room_now_; }

  // The next ranked decode worker that is still healthy, charged with the request, and the
  // prefill worker for it (chosen once) unless it prefills the prompt itself. UNAVAILABLE
  // naming the workers when no candidate is left or no prefill worker is healthy.
  struct Target {
    std::string decode_address;
    bool local_prefill = false;
    std::string prefill_kv_compat_hash;  // unless local_prefill
    // Remote prefill with Options::remote_prefill_reuse, on a decode worker that advertises
    // remote_prefill_reuse: ReserveRequest.reuse_cached_pages.
    bool reuse_cached_pages = false;
  };
  absl::StatusOr<Target> Next();

  // The decode worker reserved `pages` pages (its count replaces the router's estimate).
  void Reserved(int32_t pages);

  // Reserve failed with `status`, the call's own deadline not passed yet when `deadline_left`.
  // The decode worker's charge is released, a worker that is unreachable (or hangs: a step
  // deadline passed while the call's did not) is reported to the registry, and the verdict:
  struct Failure {
    enum class Verdict { kRetry, kWaitForRoom, kFail } verdict = Verdict::kFail;
    absl::Status error;  // what the client is told (WorkerError)
    // The worker did not answer in time: it may still reserve, so it must be sent an Abort.
    bool hung = false;
  };
  Failure ReserveFailed(const grpc::Status& status, bool deadline_left);

  // The prefill worker's load: charged while its Prefill call runs. ChargePrefill is the
  // moment the prompt is sent: with prefix affinity it records the prompt for that worker, and
  // the charge is the tokens it is expected to compute (those not cached there).
  void ChargePrefill();
  void ReleasePrefill();
  // Releases the decode worker's charge; true when there was one (pages for waiting calls).
  bool ReleaseDecode();
  // The request ended on the decode worker after streaming `generated`: it computed the prompt
  // and all but the last generated token. With prefix affinity and that worker's prefix cache
  // on, their whole pages are recorded for it, where a later prompt that starts with them (a
  // conversation's next turn) is expected to find them.
  void RecordDecoded(std::span<const int32_t> prompt, std::span<const int32_t> generated,
                     std::string_view cache_salt);

  const std::string& decode_id() const { return decode_id_; }
  const std::string& decode_address() const { return decode_address_; }
  bool local_prefill() const { return local_prefill_; }
  const std::string& prefill_id() const { return prefill_id_; }
  const std::string& prefill_address() const { return prefill_address_; }
  // Prompt tokens the prefill worker was expected to have cached when the prompt was sent to
  // it (ChargePrefill); 0 without prefix affinity (mlaserve_router_prefix_affinity_tokens_total).
  int64_t prefill_expected_cached_tokens() const { return prefill_expected_cached_; }
  // Prompt tokens the chosen decode worker was expected to have cached (its own prefix cache,
  // from earlier requests that ended there): the local-prefill decision counts only the rest,
  // and a remote prefill that reuses them (Target::reuse_cached_pages) ships only the rest.
  int64_t decode_expected_cached_tokens() const { return decode_expected_cached_; }
  // Whether Rank's affinity put a decode worker expected to hold more of the prompt behind a
  // less loaded one, because it was overloaded (mlaserve_router_decode_affinity_rebalanced_total).
  bool decode_affinity_rebalanced() const { return decode_affinity_rebalanced_; }
  // Whether that worker may hold state for the request (it was sent a Reserve / Prefill), so
  // an early end must send it an Abort.
  bool decode_contacted() const { return decode_contacted_; }
  bool prefill_contacted() const { return prefill_contacted_; }
  bool more_candidates() const { return next_candidate_ < candidates_.size(); }

 private:
  // Picks the prefill worker for a prompt the decode worker `decode` does not prefill itself.
  absl::Status PickPrefill(const WorkerSnapshot& decode);
  // Prompt tokens `decode` is expected to hold in its prefix cache (0 without prefix affinity
  // or without its cache).
  int64_t ExpectedCachedOn(const WorkerSnapshot& decode) const;
  // Whether `decode` prefills the prompt itself when it holds `cached` of its tokens.
  bool PrefillsLocally(const WorkerSnapshot& decode, int64_t cached) const;
  // Whether `decode`, given the prompt to prefill remotely, keeps the leading pages its prefix
  // cache holds: Options::remote_prefill_reuse and a descriptor that says remote_prefill_reuse
  // (a decode worker older than the field receives every page, whatever it caches).
  bool ReusesRemotely(const WorkerSnapshot& decode) const;
  // `by_load` (ids of `decode`, best first) with the candidates worth the most by prefix affinity
  // moved ahead (DecodeAffinityOptions); sets decode_affinity_rebalanced_.
  std::vector<std::string> PreferCachedPrefix(const std::vector<WorkerSnapshot>& decode,
                                              std::vector<std::string> by_load);

  WorkerRegistry* const registry_;
  const Options options_;
  const int32_t prompt_tokens_;
  const int32_t max_new_tokens_;
  // The prompt's page chain when options_.prefix_affinity is set.
  std::optional<PrefixAffinity::PromptPages> prompt_pages_;
  bool no_room_now_ = false;
  bool decode_affinity_rebalanced_ = false;
  std::vector<std::string> candidates_;
  size_t next_candidate_ = 0;
  bool decode_prefix_cache_ = false;     // the chosen decode worker keeps a prefix cache
  int64_t decode_expected_cached_ = 0;   // of the prompt, on it
  std::string decode_id_;
  std::string decode_address_;
  int32_t decode_charged_pages_ = 0;
  bool decode_charged_ = false;
  bool decode_contacted_ = false;
  bool local_prefill_ = false;
  std::string prefill_id_;
  std::string prefill_address_;
  std::string prefill_kv_compat_hash_;
  bool prefill_charged_ = false;
  int64_t prefill_charged_tokens_ = 0;
  int64_t prefill_expected_cached_ = 0;
  bool prefill_contacted_ = false;
};

}  // namespace mlaserve::router
