#include "router/decode_placement.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/page.h"
#include "router/routing_policy.h"

namespace mlaserve::router {

absl::Status WorkerError(const std::string& what, const std::string& worker_id,
                         const std::string& address, const grpc::Status& status) {
  absl::StatusCode code = static_cast<absl::StatusCode>(status.error_code());
  switch (code) {
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOk:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(what, " ", worker_id, " (", address, ") failed: ",
                                         status.error_message().empty() ? "no message"
                                                                        : status.error_message()));
}

bool WorkerLooksGone(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::UNKNOWN;
}

std::string DescribeWorkers(const std::vector<WorkerSnapshot>& all) {
  if (all.empty()) return "none is registered";
  std::vector<std::string> parts;
  for (const WorkerSnapshot& w : all) {
    std::string part = absl::StrCat(w.id, " at ", w.address, " is ", StateName(w.state));
    if (!w.last_error.empty()) absl::StrAppend(&part, " (", w.last_error, ")");
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, "; ");
}

namespace {
// The prompt ids and salt are the caller's and read once: a placement keeps no view of them.
DecodePlacement::Options WithoutPromptIds(DecodePlacement::Options options) {
  options.prompt_ids = {};
  options.cache_salt = {};
  return options;
}
}  // namespace

DecodePlacement::DecodePlacement(WorkerRegistry* registry, Options options,
                                 int32_t prompt_tokens, int32_t max_new_tokens)
    : registry_(registry),
      options_(WithoutPromptIds(options)),
      prompt_tokens_(prompt_tokens),
      max_new_tokens_(max_new_tokens) {
  if (options.prefix_affinity != nullptr) {
    prompt_pages_.emplace(options.prompt_ids, options.cache_salt);
  }
}

DecodePlacement::~DecodePlacement() {
  ReleaseDecode();
  ReleasePrefill();
}

absl::Status DecodePlacement::Rank() {
  no_room_now_ = false;
  std::vector<WorkerSnapshot> decode = registry_->Routable(WorkerRole::kDecode);
  if (decode.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "no healthy decode worker: ", DescribeWorkers(registry_->List(WorkerRole::kDecode))));
  }
  const int64_t prompt = prompt_tokens_;
  const int32_t pages_now = static_cast<int32_t>(kernels::PagesFor(prompt + 1));
  const int32_t pages_at_most = static_cast<int32_t>(kernels::PagesFor(prompt + max_new_tokens_));
  std::vector<std::string> ranked = RankDecodeWorkers(decode, pages_now, pages_at_most);
  if (ranked.empty()) {
    const auto most = std::max_element(
        decode.begin(), decode.end(),
        [](const auto& a, const auto& b) { return a.estimated_free_pages < b.estimated_free_pages; });
    const auto largest = std::max_element(
        decode.begin(), decode.end(), [](const auto& a, const auto& b) {
          return a.descriptor.load.request_pages_total() < b.descriptor.load.request_pages_total();
        });
    if (largest->descriptor.load.kv_pages_total > 0 &&
        largest->descriptor.load.request_pages_total() < pages_at_most) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no decode worker can ever hold ", pages_at_most, " KV pages (", prompt,
          " prompt tokens + max_new_tokens ", max_new_tokens_, "); the largest pool is ",
          largest->descriptor.load.request_pages_total(), " pages on ", largest->id,
          largest->descriptor.load.ranks.empty() ? "" : " (one data-parallel rank's)"));
    }
    no_room_now_ = true;
    return absl::ResourceExhaustedError(absl::StrCat(
        "no decode worker has room for ", pages_now, " KV pages now (", prompt,
        " prompt tokens and the first new token); the most free is ", most->estimated_free_pages,
        " pages on ", most->id, " (or it is at its request limit)"));
  }
  decode_affinity_rebalanced_ = false;
  if (prompt_pages_.has_value() && options_.decode_affinity.enabled) {
    ranked = PreferCachedPrefix(decode, std::move(ranked));
  }
  const size_t keep = std::max(1, options_.max_attempts);
  if (ranked.size() > keep) ranked.resize(keep);
  candidates_ = std::move(ranked);
  next_candidate_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<DecodePlacement::Target> DecodePlacement::Next() {
  std::optional<WorkerSnapshot> decode;
  while (next_candidate_ < candidates_.size() && !decode.has_value()) {
    auto snap = registry_->Get(candidates_[next_candidate_++]);
    if (snap.ok() && snap->state == WorkerState::kHealthy) decode = *std::move(snap);
  }
  if (!decode.has_value()) {
    return absl::UnavailableError(absl::StrCat(
        "no decode worker accepted the request: ",
        DescribeWorkers(registry_->List(WorkerRole::kDecode))));
  }
  decode_id_ = decode->id;
  decode_address_ = decode->address;
  decode_prefix_cache_ = decode->descriptor.prefix_cache;
  decode_expected_cached_ = ExpectedCachedOn(*decode);
  local_prefill_ = PrefillsLocally(*decode, decode_expected_cached_);
  if (!local_prefill_ && prefill_id_.empty()) {
    if (absl::Status s = PickPrefill(*decode); !s.ok()) return s;
  }
  // What Reserve takes (the prompt and the first new token); the worker's answer corrects
  // it, and pages taken later while decoding show in its load reports.
  decode_charged_pages_ = kernels::PagesFor(prompt_tokens_ + 1);
  registry_->AddRouterLoad(decode_id_, {.inflight = 1, .reserved_pages = decode_charged_pages_});
  decode_charged_ = true;
  decode_contacted_ = true;
  Target target;
  target.decode_address = decode_address_;
  target.local_prefill = local_prefill_;
  if (!local_prefill_) {
    target.prefill_kv_compat_hash = prefill_kv_compat_hash_;
    // Asked even where the router expects nothing there (the worker's cache decides), but only
    // of a worker that says it can.
    target.reuse_cached_pages = ReusesRemotely(*decode);
  }
  return target;
}

int64_t DecodePlacement::ExpectedCachedOn(const WorkerSnapshot& decode) const {
  if (!prompt_pages_.has_value() || !decode.descriptor.prefix_cache ||
      !options_.decode_cache_usable) {
    return 0;
  }
  return options_.prefix_affinity->MatchedTokens(decode.id, *prompt_pages_);
}

bool DecodePlacement::PrefillsLocally(const WorkerSnapshot& decode, int64_t cached) const {
  // A decode worker with a prefix cache computes only what it does not hold of the prompt (a
  // conversation's earlier turns that ended there): that is what its threshold weighs.
  return options_.prefill_locally ||
         ShouldPrefillLocally(prompt_tokens_ - static_cast<int32_t>(cached), decode);
}

bool DecodePlacement::ReusesRemotely(const WorkerSnapshot& decode) const {
  return options_.remote_prefill_reuse && decode.descriptor.remote_prefill_reuse;
}

std::vector<std::string> DecodePlacement::PreferCachedPrefix(
    const std::vector<WorkerSnapshot>& decode, std::vector<std::string> by_load) {
  struct Candidate {
    std::string id;
    int64_t worth = 0;  // prompt tokens its prefix cache saves
    int32_t requests = 0;
  };
  std::vector<Candidate> candidates;
  int32_t least_requests = std::numeric_limits<int32_t>::max();
  int64_t most_worth = 0;
  for (std::string& id : by_load) {
    const auto w = std::find_if(decode.begin(), decode.end(),
                                [&](const WorkerSnapshot& s) { return s.id == id; });
    const int64_t cached = ExpectedCachedOn(*w);
    // A prompt the worker prefills itself computes only what it does not hold; a remotely
    // prefilled one receives only that where the worker reuses its pages for it (the router's
    // flag and the worker's descriptor: ReusesRemotely), else it arrives whole.
    const int64_t worth =
        cached > 0 && (ReusesRemotely(*w) || PrefillsLocally(*w, cached)) ? cached : 0;
    candidates.push_back({std::move(id), worth, w->estimated_running_requests});
    least_requests = std::min(least_requests, w->estimated_running_requests);
    most_worth = std::max(most_worth, worth);
  }
  // Worth something and not overloaded: most worth first; the rest after them. Stable, so that
  // equal worth (a system prompt every worker holds) and the rest keep the load order, and
  // nothing moves when no candidate is worth anything.
  const DecodeAffinityOptions& balance = options_.decode_affinity;
  auto key = [&](const Candidate& c) -> int64_t {
    return c.worth > 0 && !balance.Overloaded(c.requests, least_requests) ? -c.worth : 0;
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
  decode_affinity_rebalanced_ = candidates.front().worth < most_worth;
  std::vector<std::string> ranked;
  for (Candidate& c : candidates) ranked.push_back(std::move(c.id));
  return ranked;
}

absl::Status DecodePlacement::PickPrefill(const WorkerSnapshot& decode) {
  std::vector<WorkerSnapshot> prefill = registry_->Routable(WorkerRole::kPrefill);
  std::vector<int64_t> cached;
  if (prompt_pages_.has_value()) {
    for (const WorkerSnapshot& p : prefill) {
      cached.push_back(options_.prefix_affinity->MatchedTokens(p.id, *prompt_pages_));
    }
  }
  std::vector<std::string> ranked = RankPrefillWorkers(prefill, prompt_tokens_, cached);
  if (ranked.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "no healthy prefill worker for a prompt of ", prompt_tokens_, " tokens (above ",
        decode.id, "'s local-prefill threshold of ",
        decode.descriptor.profile.local_prefill_threshold,
        "): ", DescribeWorkers(registry_->List(WorkerRole::kPrefill))));
  }
  for (const WorkerSnapshot& p : prefill) {
    if (p.id != ranked.front()) continue;
    prefill_id_ = p.id;
    prefill_address_ = p.address;
    prefill_kv_compat_hash_ = p.descriptor.model.kv_compat_hash;
  }
  return absl::OkStatus();
}

void DecodePlacement::Reserved(int32_t pages) {
  registry_->AddRouterLoad(decode_id_, {.reserved_pages = pages - decode_charged_pages_});
  decode_charged_pages_ = pages;
}

DecodePlacement::Failure DecodePlacement::ReserveFailed(const grpc::Status& status,
                                                        bool deadline_left) {
  ReleaseDecode();
  Failure failure;
  // Reserve's own step deadline passed while the client's has not: the worker hangs (a
  // frozen process keeps its connection open, so nothing else fails). That is the worker's
  // failure, reported as UNAVAILABLE naming it, and another worker may serve.
  grpc::Status seen = status;
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && deadline_left) {
    seen = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("no answer within the reserve timeout of ",
                                     absl::FormatDuration(options_.reserve_timeout), " (",
                                     status.error_message(), ")"));
    failure.hung = true;
  }
  failure.error = WorkerError("reserve on decode worker", decode_id_, decode_address_, seen);
  if (WorkerLooksGone(seen)) {
    registry_->ReportFailure(decode_id_, std::string(failure.error.message()), absl::Now());
  }
  const bool retryable =
      seen.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED || WorkerLooksGone(seen);
  if (retryable && more_candidates()) {
    failure.verdict = Failure::Verdict::kRetry;
  } else if (seen.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    // Every candidate was full by its own count (the router's estimate lags its load
    // reports): wait for room like a request that found none.
    failure.verdict = Failure::Verdict::kWaitForRoom;
  }
  return failure;
}

void DecodePlacement::RecordDecoded(std::span<const int32_t> prompt,
                                    std::span<const int32_t> generated,
                                    std::string_view cache_salt) {
  if (options_.prefix_affinity == nullptr || !decode_prefix_cache_ || decode_id_.empty()) return;
  std::vector<int32_t> computed(prompt.begin(), prompt.end());
  if (!generated.empty()) computed.insert(computed.end(), generated.begin(), generated.end() - 1);
  options_.prefix_affinity->Record(decode_id_, PrefixAffinity::PromptPages(computed, cache_salt));
}

void DecodePlacement::ChargePrefill() {
  if (prompt_pages_.has_value()) {
    prefill_expected_cached_ = options_.prefix_affinity->Record(prefill_id_, *prompt_pages_);
  }
  // The router's pending count is work queued there: the tokens the worker is to compute.
  prefill_charged_tokens_ = static_cast<int64_t>(prompt_tokens_) - prefill_expected_cached_;
  registry_->AddRouterLoad(prefill_id_,
                           {.inflight = 1, .prefill_tokens = prefill_charged_tokens_});
  prefill_charged_ = true;
  prefill_contacted_ = true;
}

void DecodePlacement::ReleasePrefill() {
  if (!prefill_charged_) return;
  prefill_charged_ = false;
  registry_->AddRouterLoad(prefill_id_,
                           {.inflight = -1, .prefill_tokens = -prefill_charged_tokens_});
}

bool DecodePlacement::ReleaseDecode() {
  if (!decode_charged_) return false;
  decode_charged_ = false;
  registry_->AddRouterLoad(decode_id_,
                           {.inflight = -1, .reserved_pages = -decode_charged_pages_});
  return true;
}

}  // namespace mlaserve::router
