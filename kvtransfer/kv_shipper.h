// KvShipper: the sending half of the host-payload transports (tcp, fake) as the prefill worker
// drives it: a step's KV pages leave layer by layer without the forward waiting on a page copy
// or on the network.
//
//   ShipLayer(layer, runs)  (from the engine's layer callback: the prefill loop thread, or
//                            the pool's rank thread of a data-parallel engine)
//       one KvPool::ReadPagesAsync of every run's pages of that layer into a page-locked
//       staging slot, ordered after the engine's stream; the slot is queued, the call returns.
//   shipping threads
//       wait for the slot's copy (fence, with a deadline), then hand each run to its sender
//       (KvSender::SendPages: a run is one message, or a few at the size cap: copied once into
//       the message and checksummed there), and free the slot, while later layers compute.
//       A sender always ships from the same thread (its pages stay in order, its completion
//       after them); different senders' runs are copied and checksummed in parallel.
//   Complete(sender, completion, done)  (loop thread)
//       queued behind the sender's pages, so a request completes only after they all left;
//       total_bytes is filled in from the sender when it is sent.
//   WaitCopies(deadline)  (loop thread, before the step's pages may be freed or rewritten)
//       waits until every read queued so far landed in host memory.
//
// Bounded: at most `num_slots` layers are queued or in flight; ShipLayer waits for a free slot
// up to the no-progress deadline and otherwise refuses (DEADLINE_EXCEEDED), failing those runs'
// requests rather than the whole worker. A sender's failures are sticky (KvSender::status()),
// which is how the loop thread learns that a run it queued could not be sent.
//
// Threads: ShipLayer / Complete / WaitCopies from one thread at a time (the loop thread, or
// during a step the engine's thread of this pool's rank while the loop waits); the shipping
// threads are the only callers of the senders' SendPages and Complete for the runs queued
// here. Stop() (or the destructor) drains nothing: it answers queued completions with
// UNAVAILABLE.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvtransfer/transport.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer {

// Consecutive pages of one request: page indexes [first_page_index, first_page_index +
// pages.size()) in the request's page list, `pages` their ids in the local pool.
struct KvShipRun {
  std::shared_ptr<KvSender> sender;
  int first_page_index = 0;
  std::vector<int32_t> pages;
};

struct KvShipperOptions {
  int num_slots = 8;    // layers queued or in flight at once
  int num_threads = 4;  // shipping threads
  // Pages one slot stages at most: a layer with more (a prompt's first chunk also ships the
  // pages it took from the prefix cache, thousands for a long cached prefix) goes through
  // several slots in order. A slot keeps the largest page-locked buffer it ever needed, so
  // this bounds the shipper's page-locked memory to num_slots x max_slot_pages pages.
  int max_slot_pages = 256;
  // Longest wait for a free slot, a page copy or a flush before giving up.
  absl::Duration no_progress_timeout = absl::Seconds(30);
};

class KvShipper {
 public:
  // `pool`: where the pages are read (must outlive the shipper). `device_stream`: the stream
  // that writes the pool's pages (Engine::rank_stream of the pool's rank), or null.
  KvShipper(model::KvPool* pool, void* device_stream, KvShipperOptions options = {});
  ~KvShipper();  // Stop()

  absl::Status ShipLayer(int layer, std::vector<KvShipRun> runs);
  void Complete(std::shared_ptr<KvSender> sender, KvCompletion completion,
                std::function<void(absl::Status)> done);
  absl::Status WaitCopies(absl::Time deadline);
  // Waits until everything queued so far was handed to the senders (tests that drive the
  // prefill loop by hand); DEADLINE_EXCEEDED past `deadline`.
  absl::Status Flush(absl::Time deadline);
  void Stop();

  int64_t pages_shipped() const;

 private:
  struct Job {
    // A layer: the slot's copy and this thread's runs in it, each with its byte offset.
    int layer = -1;
    int slot = -1;
    std::shared_ptr<model::KvCopyFence> fence;
    std::vector<std::pair<size_t, KvShipRun>> runs;
    // Or a completion.
    std::shared_ptr<KvSender> sender;
    KvCompletion completion;
    std::function<void(absl::Status)> done;
  };
  absl::StatusOr<int> AcquireSlot(size_t bytes);
  // ShipLayer's work for runs of at most max_slot_pages pages in all: one read, one slot.
  absl::Status ShipSlot(int layer, std::vector<KvShipRun> runs);
  int ThreadOf(const KvSender* sender) const;
  void Run(int thread);
  int64_t ShipJob(Job& job);

  model::KvPool* const pool_;
  void* const device_stream_;
  const KvShipperOptions options_;
  const size_t page_bytes_;

  std::vector<std::shared_ptr<model::KvCopyFence>> step_fences_;  // loop thread
  // Staging slots (fixed count). A busy slot's buffer belongs to whoever holds it: the loop
  // thread while it starts the copy, then the shipping thread until the job is done.
  std::vector<model::KvHostBuffer> buffers_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // a job queued or finished, a slot freed, stopping
  std::vector<int> slot_parts_ ABSL_GUARDED_BY(mu_);  // per slot: jobs using it; 0 = free
  std::vector<std::deque<Job>> queues_ ABSL_GUARDED_BY(mu_);  // per shipping thread
  int working_ ABSL_GUARDED_BY(mu_) = 0;  // shipping threads holding a job
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t pages_shipped_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace mlaserve::kvtransfer
