// KvTransport: how a prefill worker ships one request's KV pages to the decode worker that
// reserved them. Transports (tcp, the in-process fake, later nccl) sit behind this interface;
// the receiving side of every transport writes into a KvReceiver (receiver.h).
//
// Sender lifecycle, driven by one thread at a time (the prefill worker's KV shipping thread):
//   Open(ref)  ->  SendPages(layer, first page index, pages)*  ->  Complete(first token, done)
// or Abort(reason) at any point (Abort and status() from any thread). A page may be sent more than once (a chunk boundary inside a
// page re-sends it when the next chunk fills it); the receiver keeps the last copy.
// Failures are sticky: once the receiver refused or the stream broke, status() reports it and
// every later call returns it, so the scheduler can drop this request and go on with the rest
// of its batch. Nothing blocks past the no-progress deadline.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvtransfer/layout.h"

namespace mlaserve::kvtransfer {

// A decode worker's reservation as the sender needs it (ReserveResponse.session).
struct KvSessionRef {
  std::string session_id;
  std::string endpoint;    // host:port of the receiver's KvService
  std::string transport;   // "tcp", "fake", ...
  int num_pages = 0;       // pages per layer of the prompt: ceil(prompt tokens / page size)
  std::string compat_hash; // the receiver's KvLayout::CompatHash()
  // The receiver's data-parallel attention rank whose pool takes the pages (docs/parallel.md);
  // 0 when the decode worker has one pool (one GPU, or tensor attention's replicated cache).
  int rank = 0;
  // The prompt's leading pages the receiver already holds (its prefix cache): the sender ships
  // only page indexes [cached_pages, num_pages) of every layer, and tells the receiver so when
  // it opens. 0 <= cached_pages < num_pages (or both 0).
  int cached_pages = 0;
  int pages_to_ship() const { return num_pages - cached_pages; }
};

struct KvCompletion {
  int32_t first_token = 0;
  int num_layers = 0;
  int num_pages = 0;
  int64_t total_bytes = 0;
  // The prefill rank whose pool the pages were read from (KvSender::SetSourceRank; 0 unless
  // set). Filled in by the transport, like a direct sender's total_bytes.
  int source_rank = 0;
};

struct KvSenderOptions {
  // A send that cannot make progress (queue full, or the receiver not acknowledging) for this
  // long fails the session with DEADLINE_EXCEEDED and cancels it at the receiver.
  absl::Duration no_progress_timeout = absl::Seconds(30);
  // Payload bytes queued but not yet written to the wire before SendPage blocks.
  size_t max_inflight_bytes = 64u << 20;
  // SendPages cuts a run of pages into messages of at most this many payload bytes (at least
  // one page each): big enough that per-message costs vanish, small enough to pipeline.
  size_t max_message_bytes = 4u << 20;
  std::string sender_name;  // for the receiver's logs
};

class KvSender {
 public:
  virtual ~KvSender() = default;  // aborts the session unless it completed

  // Queues one layer page (exactly layer_page_bytes). Returns the session's failure if it has
  // failed; DEADLINE_EXCEEDED if the queue does not drain within the no-progress deadline.
  virtual absl::Status SendPage(int layer, int page_index, std::string payload) = 0;

  // Queues `num_pages` consecutive layer pages of `layer`, page indexes [first_page_index,
  // first_page_index + num_pages); `bytes` holds them back to back (bytes.size() must be a
  // multiple of num_pages). The transport copies what it keeps: `bytes` need only live through
  // the call. Failures as SendPage. The default sends page by page.
  virtual absl::Status SendPages(int layer, int first_page_index, int num_pages,
                                 std::span<const uint8_t> bytes);

  // Sends the completion. `done` runs exactly once, on a transport thread or inline, with the
  // receiver's verdict (OK once every page landed and was verified).
  virtual void Complete(const KvCompletion& completion,
                        std::function<void(absl::Status)> done) = 0;

  // Ends the session early; the receiver frees the pages. Idempotent.
  virtual void Abort(const absl::Status& reason) = 0;

  virtual absl::Status status() const = 0;
  virtual int64_t bytes_sent() const = 0;
  // The receiver's record of where the pages went, rank to rank (RankRoute::Describe(), e.g.
  // "prefill rank 1 -> decode rank 0 (replicated to ranks 1, 2, 3)"), once the receiver
  // reported it (tcp: with Complete's verdict; nccl: at Connect); empty before, or from a
  // transport that does not report it.
  virtual std::string rank_route() const { return {}; }

  // Device-to-device transports (nccl) read the pages from the sender's own KV pool instead of
  // taking host payloads: direct() is true and SendLayer replaces SendPage. The sender's pages
  // must stay allocated and unmodified until Complete's `done` ran (or Abort returned), and
  // Complete's total_bytes is then filled in by the transport.
  virtual bool direct() const { return false; }
  // Ships layer `layer` of the request's pages, once per layer and in layer order, after the
  // request's last chunk wrote it: every page from the session's cached_pages on (the receiver
  // holds the ones before). `local_pages`: all the request's page ids in the sender's pool (the
  // same list every call). Only enqueues; returns the sticky failure, if any.
  virtual absl::Status SendLayer(int layer, std::span<const int32_t> local_pages) {
    (void)layer;
    (void)local_pages;
    return absl::UnimplementedError("this KV transport takes pages through SendPage");
  }
  // The prefill rank whose pool the pages come from (docs/parallel.md), known once the
  // scheduler placed the prompt: a data-parallel prompt's rank, else 0. Call it before the
  // first SendLayer / Complete; 0 (the only pool of other workers) unless called. Direct
  // senders read that rank's pool; every transport reports it to the receiver as the route's
  // source (kvtransfer/rank_route.h).
  virtual absl::Status SetSourceRank(int rank) {
    (void)rank;
    return absl::OkStatus();
  }
};

class KvTransport {
 public:
  virtual ~KvTransport() = default;
  virtual std::string_view name() const = 0;

  // Opens a session. FAILED_PRECONDITION at once when ref.compat_hash differs from
  // local_layout's; INVALID_ARGUMENT for a malformed ref. The receiver's own checks (session
  // known, layouts field by field) arrive asynchronously through the sender's status.
  virtual absl::StatusOr<std::unique_ptr<KvSender>> Open(const KvSessionRef& ref,
                                                         const KvLayout& local_layout,
                                                         const KvSenderOptions& options) = 0;
};

// Checks what every transport checks before opening (shared by the implementations).
absl::Status ValidateSessionRef(const KvSessionRef& ref, const KvLayout& local_layout);

}  // namespace mlaserve::kvtransfer
