// DecodeRunner, the RPC threads' half: reservations, streams, aborts and load. These only
// record intents under mu_ (and hand pages to the KV receiver); the loop thread acts on them
// (decode_runner.cc).
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/affinity_balance.h"
#include "common/status.h"
#include "decode_worker/decode_request.h"
#include "decode_worker/decode_runner.h"
#include "kernels/common/page.h"

namespace mlaserve::decode {

using kernels::PagesFor;

namespace {
// A rank's prefix cache draws a request there only while the rank is not overloaded against
// the least loaded rank with room: else a prefix every request shares (a system prompt) that
// one rank caches would pile every request onto it, to wait for its batch slots and make every
// step as slow as its share, while the other ranks idle. Overloaded: its batch is full
// (requests, running and pending, at the scheduler's max_running) while that rank has a free
// slot, or as the router's decode affinity judges workers (common::AffinityBalance, its defaults).
bool RankOverloaded(int requests, int least_requests, int max_running) {
  return (requests >= max_running && least_requests < max_running) ||
         common::AffinityBalance{}.Overloaded(requests, least_requests);
}
}  // namespace

ReserveBounds DecodeRunner::bounds() const {
  return ReserveBounds{.vocab_size = engine_->config().vocab_size,
                       .max_context = engine_->config().max_position_embeddings,
                       .max_lease = options_.max_lease,
                       .json_vocabulary = options_.json_vocabulary};
}

absl::StatusOr<int> DecodeRunner::PickRank(int prompt_len, int pages_needed,
                                           const DecodeSequence* cached_from) {
  // Each running request keeps a page free to grow (vLLM keeps a watermark too): a new
  // reservation that would take them would only make a running request give its pages back at
  // its next step.
  const int ranks = engine_->data_ranks();
  std::vector<int> growing(ranks, 0), requests(ranks, 0);
  for (const auto& [id, other] : by_session_) {
    growing[other->seq->rank] += other->running ? 1 : 0;
    requests[other->seq->rank] += 1;
  }
  std::vector<int> free(ranks), room(ranks), cached(ranks, 0), held(ranks, 0);
  int least_requests = std::numeric_limits<int>::max();
  for (int r = 0; r < ranks; ++r) {
    free[r] = engine_->rank_pool(r).free_pages();
    // A request that takes the cached pages of its prompt's start (TakePages): those other
    // requests hold cost it no free page, and it goes to the rank that caches most of them
    // (each rank's pool has its own cache), as the prefill scheduler places prompts, unless
    // that rank is overloaded (RankOverloaded).
    if (cached_from != nullptr) {
      cached[r] = engine_->rank_pool(r).CachedPrefixPages(
          cached_from->tokens, cached_from->MaxCachedPages(), cached_from->cache_salt, &held[r]);
    }
    room[r] = free[r] - (pages_needed - held[r]) - growing[r];
    if (room[r] >= 0) least_requests = std::min(least_requests, requests[r]);
  }
  int best = -1;
  int best_room = 0;
  int best_cached = 0;
  for (int r = 0; r < ranks; ++r) {
    if (room[r] < 0) continue;
    // An overloaded rank is ranked as if it cached nothing (its held pages no room either).
    const bool overloaded = cached[r] > 0 && RankOverloaded(requests[r], least_requests,
                                                            options_.scheduler.max_running);
    const int worth = overloaded ? 0 : cached[r];
    const int rank_room = overloaded ? room[r] - held[r] : room[r];
    const bool better =
        best < 0 || worth > best_cached ||
        (worth == best_cached &&
         (rank_room > best_room || (rank_room == best_room && requests[r] < requests[best])));
    if (better) {
      best = r;
      best_room = rank_room;
      best_cached = worth;
    }
  }
  if (best >= 0) return best;
  if (ranks == 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt of ", prompt_len, " tokens needs ", pages_needed, " KV pages; ", free[0],
        " are free and ", growing[0], " stay free for the ", growing[0],
        " running requests to grow"));
  }
  std::string per_rank;
  for (int r = 0; r < ranks; ++r) {
    absl::StrAppend(&per_rank, r == 0 ? "" : "; ", "rank ", r, ": ", free[r], " free, ",
                    growing[r], " kept for its running requests");
  }
  return absl::ResourceExhaustedError(absl::StrCat("prompt of ", prompt_len, " tokens needs ",
                                                   pages_needed, " KV pages on one data-parallel "
                                                   "rank; none has them (", per_rank, ")"));
}

absl::StatusOr<Reservation> DecodeRunner::Reserve(ReserveSpec spec) {
  const int prompt_len = static_cast<int>(spec.prompt.size());

  // 1. The request against this worker (the request itself is valid: ReserveSpec).
  if (spec.sampling.wants_prompt_logprobs()) {
    // Before any page is taken: an engine that cannot score prompt rows says why (a
    // data-parallel layout), rather than failing the step the request would share.
    RETURN_IF_ERROR(engine_->CheckPromptLogprobs());
  }
  if (!spec.local_prefill && spec.prefill_compat_hash != compat_hash_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the prefill worker's KV compatibility hash is ", spec.prefill_compat_hash,
        " but this decode worker's is ", compat_hash_, " (", receiver_->layout().Describe(),
        ")"));
  }
  // The whole request must fit the pool one day; now it takes pages for the prompt and the
  // first new token only, and grows a page at a time while it decodes (Grow).
  // (Every rank's pool has the same size; a request's pages are all on one rank.)
  const int pages_at_most = PagesFor(prompt_len + spec.max_new_tokens);
  const int pool_pages = engine_->rank_pool(0).total_pages();
  if (pages_at_most > pool_pages) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt of ", prompt_len, " tokens + max_new_tokens ", spec.max_new_tokens, " needs ",
        pages_at_most, " KV pages; this decode worker has ", pool_pages,
        engine_->data_ranks() > 1 ? " per data-parallel rank" : ""));
  }
  const int pages_needed = PagesFor(prompt_len + 1);
  const int transfer_pages = PagesFor(prompt_len);
  const model::ModelConfig& config = engine_->config();
  auto r = std::make_shared<Request>();
  r->request_id = spec.request_id;
  r->reserved_at = absl::Now();
  r->lease_deadline =
      r->reserved_at + (spec.lease > absl::ZeroDuration() ? spec.lease : options_.default_lease);
  r->kv_pending = !spec.local_prefill;
  auto seq = std::make_shared<DecodeSequence>();
  seq->tokens = std::move(spec.prompt);
  seq->prompt_len = prompt_len;
  seq->prefill_len = prompt_len;
  seq->local_prefill = spec.local_prefill;
  seq->cache_salt = std::move(spec.cache_salt);
  seq->sampling = spec.sampling;
  seq->stop.max_new_tokens = spec.max_new_tokens;
  seq->stop.stop_token_ids = std::move(spec.stop_token_ids);
  seq->stop.ignore_eos = spec.ignore_eos;
  seq->stop.eos_token_ids = config.eos_token_ids;
  if (spec.json_vocabulary != nullptr) {
    absl::StatusOr<model::JsonConstraint> constraint =
        worker::ConstraintForRequest(std::move(spec.json_vocabulary), seq->sampling);
    if (!constraint.ok()) return constraint.status();
    seq->json.emplace(std::move(*constraint));
  }
  r->seq = seq;

  // 2. Admission, in one locked section: serving, a new id, and room now on some rank. The
  // pages are taken here too, so two reservations cannot both count the same free pages.
  std::string kv_endpoint;
  std::vector<int32_t> pages;
  model::KvPool* pool = nullptr;
  // Remote prefill from this worker's prefix cache: the session's pages start with the cached
  // ones, which the prefill worker does not ship.
  const bool reuse = !spec.local_prefill && spec.reuse_cached_pages && options_.prefix_cache;
  int cached_pages = 0;
  {
    absl::MutexLock lock(&mu_);
    if (kv_endpoint_.empty()) return absl::UnavailableError("decode worker is starting");
    if (draining_ || stopping_) return absl::UnavailableError("decode worker is shutting down");
    if (session_of_.contains(r->request_id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("request ", r->request_id, " already has a reservation here"));
    }
    ASSIGN_OR_RETURN(seq->rank, PickRank(prompt_len, pages_needed,
                                         spec.local_prefill || reuse ? seq.get() : nullptr));
    pool = &engine_->rank_pool(seq->rank);
    if (spec.local_prefill || reuse) {
      // From the prefix cache where this worker holds the prompt's start; it computes (a local
      // prefill) or receives (a remote one) the rest. The holds on the cached pages keep them
      // from being handed out while the transfer runs.
      RETURN_IF_ERROR(TakePages(*seq, *pool, pages_needed));
      pages = seq->pages;
      if (reuse) {
        cached_pages = seq->cached / kernels::kPageSize;
        seq->pages.clear();  // the KV session owns them until the KV has landed
        seq->cached = 0;     // not a local prefill's cached tokens (OnPromptCached)
        seq->num_computed = 0;
      }
    } else {
      absl::StatusOr<std::vector<int32_t>> allocated = pool->Allocate(pages_needed);
      if (!allocated.ok()) return allocated.status();
      pages = *std::move(allocated);
    }
    kv_endpoint = kv_endpoint_;
    r->session_id = absl::StrCat(r->request_id, "#", next_session_++);
    seq->id = r->session_id;
    session_of_[r->request_id] = r->session_id;
    by_session_[r->session_id] = r;
    if (spec.local_prefill) {
      seq->pages = pages;  // a local prefill holds its pages itself
      r->kv_ready = true;
    }
  }

  // 3. Remote prefill: a KV session owns the pages until the KV has landed (OnKvDone).
  if (!spec.local_prefill) {
    const std::string id = r->session_id;
    absl::Status s = receiver_->CreateSession(
        id, pages, transfer_pages, r->lease_deadline,
        [this, guard = guard_, id, pool](absl::StatusOr<kvtransfer::KvReceivedKv> kv) {
          bool delivered = false;
          guard->Run([&] {
            delivered = true;
            OnKvDone(id, pool, std::move(kv));
          });
          // The runner is gone: the pages have no other owner.
          if (!delivered && kv.ok()) pool->Free(kv->pages);
        },
        pool, cached_pages);
    if (!s.ok()) {  // the receiver did not take the pages (it is shutting down)
      absl::MutexLock lock(&mu_);
      session_of_.erase(r->request_id);
      by_session_.erase(r->session_id);
      pool->Free(pages);
      return s;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    wake_.Signal();
  }
  Reservation out;
  out.session_id = r->session_id;
  out.rank = seq->rank;
  out.reserved_pages = pages_needed;
  out.session.session_id = r->session_id;
  out.session.endpoint = kv_endpoint;
  out.session.transport = options_.kv_transport;
  out.session.num_pages = spec.local_prefill ? 0 : transfer_pages;
  out.session.compat_hash = compat_hash_;
  out.session.rank = seq->rank;
  out.session.cached_pages = cached_pages;
  out.lease_deadline = r->lease_deadline;
  return out;
}

void DecodeRunner::OnKvDone(const std::string& session_id, model::KvPool* pool,
                            absl::StatusOr<kvtransfer::KvReceivedKv> kv) {
  absl::MutexLock lock(&mu_);
  auto it = by_session_.find(session_id);
  if (it == by_session_.end() || it->second->ended) {
    if (kv.ok()) pool->Free(kv->pages);  // nobody wants them any more
    return;
  }
  Request& r = *it->second;
  r.kv_pending = false;
  if (kv.ok()) {
    kv_bytes_in_->Increment(static_cast<double>(kv->bytes));
    pages_reused_->Increment(kv->cached_pages);
    r.seq->pages = std::move(kv->pages);
    r.seq->num_computed = r.seq->prompt_len;
    r.seq->tokens.push_back(kv->first_token);
    r.kv_ready = true;
  } else {
    kv_failures_->Increment();
    r.failure = kv.status();
  }
  wake_.Signal();
}

absl::Status DecodeRunner::OpenStream(const std::string& session_id,
                                      std::shared_ptr<TokenSink> sink) {
  absl::MutexLock lock(&mu_);
  auto it = by_session_.find(session_id);
  if (it == by_session_.end()) {
    return absl::NotFoundError(absl::StrCat("session ", session_id,
                                            " is unknown here (never reserved, ended, or its "
                                            "lease expired)"));
  }
  if (it->second->sink != nullptr || it->second->stream_gone) {
    return absl::AlreadyExistsError(
        absl::StrCat("session ", session_id, " already has a token stream"));
  }
  it->second->sink = std::move(sink);
  wake_.Signal();
  return absl::OkStatus();
}

void DecodeRunner::CancelStream(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  auto it = by_session_.find(session_id);
  if (it == by_session_.end()) return;
  it->second->stream_gone = true;
  it->second->sink = nullptr;
  wake_.Signal();
}

absl::Status DecodeRunner::Abort(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  auto it = session_of_.find(request_id);
  if (it == session_of_.end()) {
    return absl::NotFoundError(
        absl::StrCat("request ", request_id, " is not reserved or running on this decode worker"));
  }
  by_session_.at(it->second)->abort = true;
  wake_.Signal();
  return absl::OkStatus();
}

DecodeLoad DecodeRunner::load() const {
  DecodeLoad l;
  const int ranks = engine_->data_ranks();
  std::vector<DecodeRankLoad> per(ranks);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, r] : by_session_) {
      (r->running ? l.running : l.pending) += 1;
      (r->running ? per[r->seq->rank].running : per[r->seq->rank].pending) += 1;
    }
  }
  for (int r = 0; r < ranks; ++r) {
    const model::KvPool& pool = engine_->rank_pool(r);
    per[r].kv_pages_free = pool.free_pages();
    per[r].kv_pages_total = pool.total_pages();
    l.kv_pages_free += per[r].kv_pages_free;
    l.kv_pages_total += per[r].kv_pages_total;
  }
  if (ranks > 1) l.ranks = std::move(per);
  return l;
}


}  // namespace mlaserve::decode
