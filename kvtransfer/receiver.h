// KvReceiver: the decode side of KV transfer, shared by every transport.
//
// The decode worker creates one session per reserved request (CreateSession), handing the
// session the request's pages. The first `cached_pages` of them may already hold the prompt's
// KV (pages the decode worker took from its prefix cache, shared with other holders): the
// transfer then writes only the pages after them, and a sender says at Open that it skips them
// (a sender that predates this ships them all: Open swaps fresh pages in for the cached ones,
// which are never written). A transport's server side then feeds the session:
//   Open(id, sender layout) -> WritePages(id, layer, first page index, n, bytes, crc)* ->
//   Complete(id)
// or Fail(id, why) when its stream breaks.
//
// Ownership: a session owns its pages until it ends. On success they are handed to the
// session's on_done callback (with the first token); on any failure (lease expired, no
// progress, refused layout, bad checksum, stream broken, receiver shut down) the session frees
// them back to the pool and on_done receives the error. Cancel() (the owner aborting) frees
// them without calling on_done.
//
// Deadlines: a session not opened by its lease deadline expires (NOT_FOUND for a late sender;
// DEADLINE_EXCEEDED to on_done); an opened session that receives nothing for
// no_progress_timeout fails with DEADLINE_EXCEEDED. A reaper thread enforces both.
//
// Thread-safety: all methods are thread-safe. on_done runs without the receiver's locks held,
// on the calling transport thread or the reaper thread; it must not call Cancel for its own
// session (the session has already ended).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/rank_route.h"
#include "kvtransfer/transport.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer {

struct KvReceiverOptions {
  absl::Duration no_progress_timeout = absl::Seconds(30);
  // Wait for each write to land before taking the next message, as receivers did before KV
  // protocol 2 (kept to measure what the asynchronous writes buy: mlaserve-kv-tcp-bench).
  bool wait_each_write = false;
};

struct KvReceivedKv {
  std::vector<int32_t> pages;  // every page of the session, now owned by the callee
  // Of them, the leading pages that were held at CreateSession and not received (0 when the
  // session had none, or its sender shipped every page).
  int cached_pages = 0;
  int32_t first_token = 0;
  int64_t bytes = 0;
  RankRoute route;  // the prefill rank the pages came from, the decode ranks that hold them
};

struct KvPushStats {
  int64_t bytes_received = 0;
  int32_t pages_written = 0;
  RankRoute route;
};

class KvReceiver {
 public:
  using DoneFn = std::function<void(absl::StatusOr<KvReceivedKv>)>;

  KvReceiver(model::KvPool* pool, KvLayout local_layout, KvReceiverOptions options = {});
  ~KvReceiver();  // fails every open session (UNAVAILABLE) and frees its pages

  const KvLayout& layout() const { return layout_; }
  // How long an opened session may receive nothing; transports bound their own waits on a
  // sender (e.g. for its open) by it too.
  absl::Duration no_progress_timeout() const { return options_.no_progress_timeout; }

  // Takes ownership of `pages` (one hold on each: KvPool::Free gives them back); page indexes
  // [cached_pages, transfer_pages) of them receive the transfer, the first `cached_pages` hold
  // the KV already (a prefix-cache match, KvSessionRef::cached_pages). `pool`: the pool the
  // pages are from, when not the receiver's own (the request's rank's pool on a data-parallel
  // decode worker, docs/parallel.md; same layout). ALREADY_EXISTS for a live id,
  // INVALID_ARGUMENT when transfer_pages > pages.size() or cached_pages is not in
  // [0, transfer_pages) (0 with no transfer pages).
  absl::Status CreateSession(const std::string& session_id, std::vector<int32_t> pages,
                             int transfer_pages, absl::Time lease_deadline, DoneFn on_done,
                             model::KvPool* pool = nullptr, int cached_pages = 0);
  // Ends the session and frees its pages without calling on_done. False if it had ended.
  bool Cancel(const std::string& session_id);

  // Transport side. A refused Open / WritePage / Complete fails the session (pages freed,
  // on_done told) and returns the reason, which the transport reports to its sender.
  // `on_failure` (optional) is how the transport hears that the session failed for a reason
  // it did not see itself (lease, no progress, owner shut down): it runs once, when the session
  // fails after a successful Open, so the transport can end its stream and tell the sender.
  // `addressed_rank`: the decode rank the sender addresses (its KvSessionRef::rank); when the
  // session's pool carries a rank label (KvPool::rank, a multi-rank engine's) they must agree
  // (FAILED_PRECONDITION naming both otherwise), else it is the route's destination.
  // `sender_cached_pages`: the leading pages the sender skips (its KvSessionRef::cached_pages).
  // Equal to the session's: the transfer covers the pages after them. 0 while the session has
  // some (a sender that predates the field ships every page): the session trades its cached
  // pages for fresh ones, which the transfer fills (the holds are given back first, so a page
  // only it held may return as a fresh one; RESOURCE_EXHAUSTED, failing the session, when even
  // then too few pages are free). Any other value: FAILED_PRECONDITION naming both.
  absl::Status Open(const std::string& session_id, const KvLayout& sender_layout,
                    std::function<void(const absl::Status&)> on_failure = nullptr,
                    int addressed_rank = 0, int sender_cached_pages = 0);
  // The session's route if its pages came from prefill rank `source_rank` (after Open):
  // the decode rank whose pool takes them and that pool's replicas. NOT_FOUND once ended.
  absl::StatusOr<RankRoute> Route(const std::string& session_id, int source_rank) const;
  // `num_pages` consecutive pages [first_page_index, first_page_index + num_pages) of `layer`,
  // back to back in `payload`, with the CRC-32 of all of it: checked, then written into the
  // pool in one batch without waiting for the device (KvPool::WritePagesAsync; `payload` may
  // be reused on return). The session waits for its writes before it hands its pages on
  // (Complete) or frees them (any failure). WritePage is the one-page case.
  absl::Status WritePages(const std::string& session_id, int layer, int first_page_index,
                          int num_pages, std::span<const uint8_t> payload, uint32_t crc32);
  absl::Status WritePage(const std::string& session_id, int layer, int page_index,
                         std::span<const uint8_t> payload, uint32_t crc32) {
    return WritePages(session_id, layer, page_index, 1, payload, crc32);
  }
  absl::StatusOr<KvPushStats> Complete(const std::string& session_id,
                                       const KvCompletion& completion);
  // False when the session had already ended (or never existed).
  bool Fail(const std::string& session_id, const absl::Status& reason);

  // Direct-write hook for device-to-device transports (nccl), which write the session's pages
  // themselves instead of calling WritePage. After a successful Open, AcquireDirect returns the
  // ids of the pages the transfer writes (page indexes [cached_pages, transfer_pages), in
  // order) and a pin. While any pin of a session is
  // held its pages stay out of the pool even if the session ends meanwhile (lease, no progress,
  // Cancel, Fail): they are freed when the last pin is dropped, so a device write still in
  // flight never lands in a page that another request owns. Drop the pin only once the device
  // writes stopped (completed, or the communicator was aborted and the copies drained), and
  // before the receiver is destroyed. FAILED_PRECONDITION before Open; NOT_FOUND once ended.
  struct DirectWrite {
    model::KvPool* pool = nullptr;  // the session's pool (CreateSession)
    std::vector<int32_t> pages;
    std::shared_ptr<void> pin;
  };
  absl::StatusOr<DirectWrite> AcquireDirect(const std::string& session_id);
  // Records that layers [first_layer, end_layer) landed in every page the transfer writes
  // (those AcquireDirect returned), `bytes` payload
  // bytes in all; counts as progress for the no-progress deadline. Complete() then verifies
  // coverage and totals exactly as for WritePage.
  absl::Status MarkLayersLanded(const std::string& session_id, int first_layer, int end_layer,
                                int64_t bytes);

  int active_sessions() const;

 private:
  struct Session;
  std::shared_ptr<Session> Find(const std::string& session_id) const;
  // Open's answer to a sender whose cached_pages differs from the session's (s.mu held): 0,
  // a sender that ships every page, gets fresh pages in place of the cached ones; another
  // value is refused.
  absl::Status ShipEveryPage(Session& s, int sender_cached_pages);
  // Ends `s` with `status` (freeing pages unless handed over); calls on_done after unlocking.
  void End(const std::shared_ptr<Session>& s, absl::StatusOr<KvReceivedKv> result);
  void ReaperLoop();
  // Frees pages whose release was deferred by pins (see AcquireDirect).
  void ReleasePages(Session& s, std::vector<int32_t> pages);
  void Unpin(const std::shared_ptr<Session>& s);
  // Waits (bounded) for page writes still landing; an error if one failed or is stuck.
  absl::Status WaitWrites(const std::string& session_id,
                          std::vector<model::KvCopyFence> writes) const;

  model::KvPool* const pool_;
  const KvLayout layout_;
  const std::string compat_hash_;
  const KvReceiverOptions options_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  absl::CondVar reaper_wake_;  // signalled on new sessions and on shutdown
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace mlaserve::kvtransfer
