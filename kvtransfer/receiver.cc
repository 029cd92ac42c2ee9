#include "kvtransfer/receiver.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kvtransfer/checksum.h"
#include "spdlog/spdlog.h"

namespace mlaserve::kvtransfer {

struct KvReceiver::Session {
  std::string id;
  model::KvPool* pool = nullptr;  // where the pages are (a data-parallel rank's pool)
  uint64_t write_order = 0;  // KvPool::WritePagesAsync order key: this session's writes in order
  int transfer_pages = 0;
  absl::Time lease_deadline;

  // Serialises page writes with the session's end, so no write lands in a freed page.
  absl::Mutex mu;
  std::vector<int32_t> pages ABSL_GUARDED_BY(mu);
  DoneFn on_done ABSL_GUARDED_BY(mu);
  std::function<void(const absl::Status&)> on_failure ABSL_GUARDED_BY(mu);
  bool opened ABSL_GUARDED_BY(mu) = false;
  int addressed_rank ABSL_GUARDED_BY(mu) = 0;  // the decode rank the sender named at Open
  // pages[0, cached_pages) hold the KV already; the transfer writes [cached_pages,
  // transfer_pages). Fixed at CreateSession, or 0 from an Open whose sender ships every page.
  int cached_pages ABSL_GUARDED_BY(mu) = 0;
  bool ended ABSL_GUARDED_BY(mu) = false;
  absl::Time last_progress ABSL_GUARDED_BY(mu);
  // [layer * shipped() + page_index - cached_pages]: the pages the transfer writes.
  std::vector<uint8_t> received ABSL_GUARDED_BY(mu);
  int64_t bytes ABSL_GUARDED_BY(mu) = 0;
  int32_t pages_written ABSL_GUARDED_BY(mu) = 0;
  int pins ABSL_GUARDED_BY(mu) = 0;                      // AcquireDirect pins held
  std::vector<int32_t> deferred_free ABSL_GUARDED_BY(mu);  // ended while pinned
  // WritePages still landing on the device: waited before the pages are handed on or freed.
  std::vector<model::KvCopyFence> writes ABSL_GUARDED_BY(mu);

  int shipped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return transfer_pages - cached_pages; }
};

namespace {
// Completed writes are dropped once this many are pending, so a long session's list stays short.
constexpr size_t kPruneWritesAt = 64;

// Where a session's pages land: the pool's rank label when it has one (a multi-rank engine),
// else the rank the sender named; plus the pool's replicas (tensor attention).
RankRoute MakeRoute(const model::KvPool& pool, int addressed_rank, int source_rank) {
  RankRoute route;
  route.source_rank = source_rank;
  route.dest_rank = pool.rank() >= 0 ? pool.rank() : addressed_rank;
  route.replica_ranks = pool.replica_ranks();
  return route;
}
}  // namespace

absl::Status KvReceiver::WaitWrites(const std::string& session_id,
                                    std::vector<model::KvCopyFence> writes) const {
  const absl::Time deadline = absl::Now() + options_.no_progress_timeout;
  absl::Status first;
  for (const model::KvCopyFence& w : writes) {
    absl::Status s = w.Wait(deadline);
    if (first.ok() && !s.ok()) {
      first = absl::Status(s.code(), absl::StrCat("KV session ", session_id,
                                                  ": writing pages into the pool: ", s.message()));
    }
  }
  return first;
}

KvReceiver::KvReceiver(model::KvPool* pool, KvLayout local_layout, KvReceiverOptions options)
    : pool_(pool),
      layout_(std::move(local_layout)),
      compat_hash_(layout_.CompatHash()),
      options_(options) {
  reaper_ = std::thread([this] { ReaperLoop(); });
}

KvReceiver::~KvReceiver() {
  std::vector<std::shared_ptr<Session>> live;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    reaper_wake_.SignalAll();
    for (auto& [id, s] : sessions_) live.push_back(s);
  }
  reaper_.join();
  for (auto& s : live) End(s, absl::UnavailableError("KV receiver shutting down"));
}

absl::Status KvReceiver::CreateSession(const std::string& session_id, std::vector<int32_t> pages,
                                       int transfer_pages, absl::Time lease_deadline,
                                       DoneFn on_done, model::KvPool* pool, int cached_pages) {
  if (transfer_pages < 0 || static_cast<size_t>(transfer_pages) > pages.size()) {
    return absl::InvalidArgumentError(absl::StrCat("session ", session_id, ": transfer_pages ",
                                                   transfer_pages, " not in [0, ",
                                                   pages.size(), "]"));
  }
  if (cached_pages < 0 || (cached_pages > 0 && cached_pages >= transfer_pages)) {
    return absl::InvalidArgumentError(absl::StrCat("session ", session_id, ": cached_pages ",
                                                   cached_pages, " not in [0, transfer_pages ",
                                                   transfer_pages, ")"));
  }
  auto s = std::make_shared<Session>();
  s->id = session_id;
  s->pool = pool != nullptr ? pool : pool_;
  s->write_order = std::hash<std::string>{}(session_id);
  s->transfer_pages = transfer_pages;
  s->lease_deadline = lease_deadline;
  {
    absl::MutexLock sl(&s->mu);
    s->pages = std::move(pages);
    s->on_done = std::move(on_done);
    s->cached_pages = cached_pages;
    s->received.assign(static_cast<size_t>(layout_.num_layers) * s->shipped(), 0);
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("KV receiver shutting down");
  if (!sessions_.emplace(session_id, s).second) {
    return absl::AlreadyExistsError(absl::StrCat("KV session ", session_id, " already exists"));
  }
  reaper_wake_.Signal();
  return absl::OkStatus();
}

std::shared_ptr<KvReceiver::Session> KvReceiver::Find(const std::string& session_id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  return it == sessions_.end() ? nullptr : it->second;
}

void KvReceiver::End(const std::shared_ptr<Session>& s, absl::StatusOr<KvReceivedKv> result) {
  DoneFn on_done;
  std::function<void(const absl::Status&)> on_failure;
  std::vector<int32_t> pages;
  std::vector<model::KvCopyFence> writes;
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) return;
    s->ended = true;
    on_done = std::move(s->on_done);
    on_failure = std::move(s->on_failure);
    pages = std::move(s->pages);
    writes = std::move(s->writes);
  }
  // No write may land in a page after it was handed on or freed.
  if (absl::Status w = WaitWrites(s->id, std::move(writes)); !w.ok() && result.ok()) {
    result = w;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(s->id);
    if (it != sessions_.end() && it->second == s) sessions_.erase(it);
  }
  if (result.ok()) {
    result->pages = std::move(pages);
  } else {
    spdlog::warn("KV session {} failed: {}", s->id, result.status().ToString());
    ReleasePages(*s, std::move(pages));
    if (on_failure) on_failure(result.status());
  }
  if (on_done) on_done(std::move(result));
}

bool KvReceiver::Cancel(const std::string& session_id) {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) return false;
  std::vector<int32_t> pages;
  std::vector<model::KvCopyFence> writes;
  std::function<void(const absl::Status&)> on_failure;
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) return false;
    s->ended = true;
    s->on_done = nullptr;
    on_failure = std::move(s->on_failure);
    pages = std::move(s->pages);
    writes = std::move(s->writes);
  }
  (void)WaitWrites(session_id, std::move(writes));  // before the pages go back to the pool
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it != sessions_.end() && it->second == s) sessions_.erase(it);
  }
  ReleasePages(*s, std::move(pages));
  if (on_failure) {
    on_failure(absl::CancelledError(absl::StrCat("KV session ", session_id,
                                                 " was cancelled by the decode worker")));
  }
  return true;
}

absl::Status KvReceiver::ShipEveryPage(Session& s, int sender_cached_pages) {
  if (sender_cached_pages != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV session ", s.id, ": the sender skips the first ", sender_cached_pages,
        " pages but this decode worker holds ", s.cached_pages, " of them (KvSessionRef."
        "cached_pages): the two disagree on which pages the transfer writes"));
  }
  // A sender that predates KvSessionRef.cached_pages ships every page. The cached pages are
  // shared with other requests and must never be written: the session lets them go and holds
  // fresh ones in their place (what it would have held without the cache). Holds first, so a
  // page only it held may come back fresh in a nearly full pool (as without the cache).
  s.pool->Free(std::span<const int32_t>(s.pages).first(s.cached_pages));
  absl::StatusOr<std::vector<int32_t>> fresh = s.pool->Allocate(s.cached_pages);
  if (!fresh.ok()) {
    s.pages.erase(s.pages.begin(), s.pages.begin() + s.cached_pages);  // let go above
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV session ", s.id, ": the sender ships every page (it predates KvSessionRef."
        "cached_pages) and this decode worker has no ", s.cached_pages,
        " free pages for the ones it held in its prefix cache: ", fresh.status().message()));
  }
  spdlog::info("KV session {}: the sender ships every page (it predates KvSessionRef."
               "cached_pages); {} pages held from the prefix cache replaced by fresh ones",
               s.id, s.cached_pages);
  std::copy(fresh->begin(), fresh->end(), s.pages.begin());
  s.cached_pages = 0;
  s.received.assign(static_cast<size_t>(layout_.num_layers) * s.shipped(), 0);
  return absl::OkStatus();
}

absl::Status KvReceiver::Open(const std::string& session_id, const KvLayout& sender_layout,
                              std::function<void(const absl::Status&)> on_failure,
                              int addressed_rank, int sender_cached_pages) {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrCat("KV session ", session_id,
                                            " is unknown here (never reserved, aborted, or its "
                                            "lease ended)"));
  }
  {
    // A second open (another stream: a stray retry, a broken or hostile peer) is refused
    // before its layout is looked at: the session goes on with the stream that opened it.
    absl::MutexLock sl(&s->mu);
    if (s->opened && !s->ended) {
      return absl::AlreadyExistsError(absl::StrCat("KV session ", session_id, " is already open"));
    }
  }
  absl::Status compatible = CheckCompatible(layout_, sender_layout);
  if (compatible.ok() && s->pool->rank() >= 0 && addressed_rank != s->pool->rank()) {
    compatible = absl::FailedPreconditionError(absl::StrCat(
        "KV session ", session_id, ": the sender addressed decode rank ", addressed_rank,
        "; the session's pages are in rank ", s->pool->rank(), "'s pool"));
  }
  if (!compatible.ok()) {
    End(s, compatible);
    return compatible;
  }
  absl::Status refused;
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) {
      return absl::NotFoundError(absl::StrCat("KV session ", session_id, " has ended"));
    }
    if (s->opened) {
      return absl::AlreadyExistsError(absl::StrCat("KV session ", session_id, " is already open"));
    }
    if (sender_cached_pages != s->cached_pages) refused = ShipEveryPage(*s, sender_cached_pages);
  }
  if (!refused.ok()) {
    End(s, refused);
    return refused;
  }
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) {
      return absl::NotFoundError(absl::StrCat("KV session ", session_id, " has ended"));
    }
    s->opened = true;
    s->addressed_rank = addressed_rank;
    s->last_progress = absl::Now();
    s->on_failure = std::move(on_failure);
  }
  // The session's deadline is now the no-progress one, possibly earlier than its lease.
  absl::MutexLock lock(&mu_);
  reaper_wake_.Signal();
  return absl::OkStatus();
}

absl::Status KvReceiver::WritePages(const std::string& session_id, int layer,
                                    int first_page_index, int num_pages,
                                    std::span<const uint8_t> payload, uint32_t crc32) {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrCat("KV session ", session_id, " is unknown here"));
  }
  const size_t page_bytes = s->pool->layer_page_bytes();
  absl::Status error;
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) return absl::NotFoundError(absl::StrCat("KV session ", session_id, " has ended"));
    if (!s->opened) {
      error = absl::FailedPreconditionError(
          absl::StrCat("KV session ", session_id, ": page before open"));
    } else if (layer < 0 || layer >= layout_.num_layers) {
      error = absl::InvalidArgumentError(absl::StrCat("KV session ", session_id, ": layer ",
                                                      layer, " not in [0, ", layout_.num_layers,
                                                      ")"));
    } else if (num_pages < 1 || first_page_index < s->cached_pages ||
               first_page_index > s->transfer_pages - num_pages) {
      error = absl::InvalidArgumentError(absl::StrCat(
          "KV session ", session_id, ": pages [", first_page_index, ", ",
          int64_t{first_page_index} + num_pages, ") not within [", s->cached_pages, ", ",
          s->transfer_pages, ")",
          first_page_index < s->cached_pages && first_page_index >= 0
              ? " (the pages before are held from the prefix cache and never written)"
              : ""));
    } else if (payload.size() != page_bytes * num_pages) {
      error = absl::InvalidArgumentError(absl::StrCat(
          "KV session ", session_id, ": payload of ", payload.size(), " bytes for ", num_pages,
          " pages; a layer page has ", page_bytes));
    } else if (const uint32_t got = Crc32(payload); got != crc32) {
      error = absl::DataLossError(absl::StrCat("KV session ", session_id, ": layer ", layer,
                                               " pages [", first_page_index, ", ",
                                               first_page_index + num_pages, ") checksum ", got,
                                               " != sent ", crc32));
    } else {
      const std::span<const int32_t> ids =
          std::span<const int32_t>(s->pages).subspan(first_page_index, num_pages);
      if (s->writes.size() >= kPruneWritesAt) {
        std::erase_if(s->writes, [](const model::KvCopyFence& w) {
          return w.Ready() && w.Wait(absl::Now()).ok();  // a failed one stays, to be reported
        });
      }
      // Keyed by session: a page re-sent by a later message lands after the earlier copy.
      error = s->pool->WritePagesAsync(layer, ids, payload.data(), &s->writes, s->write_order);
      if (error.ok() && options_.wait_each_write) {
        error = WaitWrites(session_id, std::move(s->writes));
        s->writes.clear();
      }
      if (error.ok()) {
        auto received = s->received.begin() + static_cast<size_t>(layer) * s->shipped() +
                        (first_page_index - s->cached_pages);
        std::fill(received, received + num_pages, 1);
        s->bytes += static_cast<int64_t>(payload.size());
        s->pages_written += num_pages;
        s->last_progress = absl::Now();
        return absl::OkStatus();
      }
    }
  }
  End(s, error);
  return error;
}

absl::StatusOr<KvPushStats> KvReceiver::Complete(const std::string& session_id,
                                                 const KvCompletion& completion) {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrCat("KV session ", session_id, " is unknown here"));
  }
  absl::Status error;
  KvPushStats stats;
  KvReceivedKv kv;
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) return absl::NotFoundError(absl::StrCat("KV session ", session_id, " has ended"));
    stats.bytes_received = s->bytes;
    stats.pages_written = s->pages_written;
    if (!s->opened) {
      error = absl::FailedPreconditionError(
          absl::StrCat("KV session ", session_id, ": complete before open"));
    } else if (completion.num_layers != layout_.num_layers ||
               completion.num_pages != s->transfer_pages) {
      error = absl::FailedPreconditionError(absl::StrCat(
          "KV session ", session_id, ": sender completed ", completion.num_layers, " layers x ",
          completion.num_pages, " pages; the session expects ", layout_.num_layers, " x ",
          s->transfer_pages));
    } else if (completion.total_bytes != s->bytes) {
      error = absl::DataLossError(absl::StrCat("KV session ", session_id, ": sender sent ",
                                               completion.total_bytes, " bytes; ", s->bytes,
                                               " arrived"));
    } else {
      auto missing = std::find(s->received.begin(), s->received.end(), 0);
      if (missing != s->received.end()) {
        const size_t i = missing - s->received.begin();
        error = absl::FailedPreconditionError(
            absl::StrCat("KV session ", session_id, ": completed without layer ",
                         i / s->shipped(), " page ", s->cached_pages + i % s->shipped()));
      }
    }
    kv.first_token = completion.first_token;
    kv.cached_pages = s->cached_pages;
    kv.bytes = s->bytes;
    kv.route = MakeRoute(*s->pool, s->addressed_rank, completion.source_rank);
    stats.route = kv.route;
  }
  if (!error.ok()) {
    End(s, error);
    return error;
  }
  spdlog::debug("KV session {}: {} layers x {} pages, {}", session_id, completion.num_layers,
                completion.num_pages, stats.route.Describe());
  End(s, std::move(kv));
  return stats;
}

absl::StatusOr<RankRoute> KvReceiver::Route(const std::string& session_id,
                                            int source_rank) const {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrCat("KV session ", session_id, " is unknown here"));
  }
  absl::MutexLock sl(&s->mu);
  if (s->ended) return absl::NotFoundError(absl::StrCat("KV session ", session_id, " has ended"));
  if (!s->opened) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV session ", session_id, ": route asked before open"));
  }
  return MakeRoute(*s->pool, s->addressed_rank, source_rank);
}

bool KvReceiver::Fail(const std::string& session_id, const absl::Status& reason) {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) return false;
  End(s, reason);
  return true;
}

void KvReceiver::ReleasePages(Session& s, std::vector<int32_t> pages) {
  {
    absl::MutexLock sl(&s.mu);
    if (s.pins > 0) {  // a device write may still land: the last Unpin frees them
      s.deferred_free = std::move(pages);
      return;
    }
  }
  s.pool->Free(pages);
}

void KvReceiver::Unpin(const std::shared_ptr<Session>& s) {
  std::vector<int32_t> pages;
  {
    absl::MutexLock sl(&s->mu);
    if (--s->pins > 0) return;
    pages = std::move(s->deferred_free);
    s->deferred_free.clear();
  }
  if (!pages.empty()) s->pool->Free(pages);
}

absl::StatusOr<KvReceiver::DirectWrite> KvReceiver::AcquireDirect(const std::string& session_id) {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrCat("KV session ", session_id, " is unknown here"));
  }
  DirectWrite out;
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) return absl::NotFoundError(absl::StrCat("KV session ", session_id, " has ended"));
    if (!s->opened) {
      return absl::FailedPreconditionError(
          absl::StrCat("KV session ", session_id, ": direct write before open"));
    }
    out.pages.assign(s->pages.begin() + s->cached_pages, s->pages.begin() + s->transfer_pages);
    out.pool = s->pool;
    ++s->pins;
  }
  // The pin keeps the session (and thus its deferred pages) alive; dropping it may free them.
  out.pin = std::shared_ptr<void>(nullptr, [this, s](void*) { Unpin(s); });
  return out;
}

absl::Status KvReceiver::MarkLayersLanded(const std::string& session_id, int first_layer,
                                          int end_layer, int64_t bytes) {
  std::shared_ptr<Session> s = Find(session_id);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrCat("KV session ", session_id, " is unknown here"));
  }
  absl::Status error;
  {
    absl::MutexLock sl(&s->mu);
    if (s->ended) return absl::NotFoundError(absl::StrCat("KV session ", session_id, " has ended"));
    if (!s->opened) {
      error = absl::FailedPreconditionError(
          absl::StrCat("KV session ", session_id, ": layers landed before open"));
    } else if (first_layer < 0 || end_layer > layout_.num_layers || first_layer > end_layer ||
               bytes < 0) {
      error = absl::InvalidArgumentError(absl::StrCat(
          "KV session ", session_id, ": landed layers [", first_layer, ", ", end_layer,
          ") with ", bytes, " bytes; layers are [0, ", layout_.num_layers, ")"));
    } else {
      const size_t n = s->shipped();
      std::fill(s->received.begin() + first_layer * n, s->received.begin() + end_layer * n, 1);
      s->bytes += bytes;
      s->pages_written += static_cast<int32_t>((end_layer - first_layer) * n);
      s->last_progress = absl::Now();
      return absl::OkStatus();
    }
  }
  End(s, error);
  return error;
}

int KvReceiver::active_sessions() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

void KvReceiver::ReaperLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Time next = now + absl::Seconds(60);
    std::vector<std::pair<std::shared_ptr<Session>, absl::Status>> expired;
    for (auto& [id, s] : sessions_) {
      absl::MutexLock sl(&s->mu);
      if (s->ended) continue;
      if (!s->opened) {
        if (s->lease_deadline <= now) {
          expired.emplace_back(s, absl::DeadlineExceededError(absl::StrCat(
                                      "KV session ", id, ": lease ended before the transfer "
                                      "started")));
        } else {
          next = std::min(next, s->lease_deadline);
        }
      } else {
        const absl::Time stall = s->last_progress + options_.no_progress_timeout;
        if (stall <= now) {
          expired.emplace_back(s, absl::DeadlineExceededError(absl::StrCat(
                                      "KV session ", id, ": transfer made no progress for ",
                                      absl::FormatDuration(options_.no_progress_timeout))));
        } else {
          next = std::min(next, stall);
        }
      }
    }
    if (!expired.empty()) {
      mu_.Unlock();  // End takes the locks itself and calls on_done unlocked
      for (auto& [s, why] : expired) End(s, why);
      mu_.Lock();
      continue;
    }
    reaper_wake_.WaitWithDeadline(&mu_, next);
  }
}

}  // namespace mlaserve::kvtransfer
