#include "kvtransfer/kv_shipper.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace mlaserve::kvtransfer {
namespace {

// Staging slots grow in steps of this size, so that batches of slightly different sizes reuse
// a slot instead of reallocating page-locked memory (slow: it maps the pages).
constexpr size_t kSlotGranule = size_t{2} << 20;

}  // namespace

KvShipper::KvShipper(model::KvPool* pool, void* device_stream, KvShipperOptions options)
    : pool_(pool),
      device_stream_(device_stream),
      options_(options),
      page_bytes_(pool->layer_page_bytes()),
      buffers_(std::max(1, options.num_slots)) {
  const int threads = std::max(1, options.num_threads);
  {
    absl::MutexLock lock(&mu_);
    slot_parts_.assign(buffers_.size(), 0);
    queues_.resize(threads);
  }
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { Run(t); });
}

KvShipper::~KvShipper() { Stop(); }

int KvShipper::ThreadOf(const KvSender* sender) const {
  // Senders are heap objects: drop the alignment bits, mix, and spread over the threads.
  uint64_t h = reinterpret_cast<uintptr_t>(sender) >> 4;
  h *= 0x9e3779b97f4a7c15ULL;
  return static_cast<int>((h >> 32) % threads_.size());
}

absl::StatusOr<int> KvShipper::AcquireSlot(size_t bytes) {
  int slot = -1;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + options_.no_progress_timeout;
    while (!stopping_) {
      for (size_t i = 0; i < slot_parts_.size() && slot < 0; ++i) {
        if (slot_parts_[i] == 0) slot = static_cast<int>(i);
      }
      if (slot >= 0) break;
      // Expiry is read from absl::Now(), the clock the deadline came from. The wait's own
      // timeout runs on the kernel's clock, which absl::Now() (an estimate) can trail: taken
      // as the verdict, it could end the wait before the full no_progress_timeout had passed.
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "KV shipping: no staging slot came free in ",
            absl::FormatDuration(options_.no_progress_timeout),
            " (the shipping threads are waiting on decode workers that take nothing)"));
      }
      changed_.WaitWithDeadline(&mu_, deadline);
    }
    if (stopping_) return absl::UnavailableError("KV shipping stopped");
    slot_parts_[slot] = 1;  // held by this thread until the parts are queued
  }
  if (buffers_[slot].size() < bytes) {
    buffers_[slot] = model::KvHostBuffer();  // free the old one first
    auto grown =
        pool_->AllocateHostBuffer((bytes + kSlotGranule - 1) / kSlotGranule * kSlotGranule);
    if (!grown.ok()) {
      absl::MutexLock lock(&mu_);
      slot_parts_[slot] = 0;
      changed_.SignalAll();
      return grown.status();
    }
    buffers_[slot] = std::move(*grown);
  }
  return slot;
}

absl::Status KvShipper::ShipLayer(int layer, std::vector<KvShipRun> runs) {
  // Cut into slots of at most max_slot_pages pages, runs split at page boundaries. A sender's
  // pieces are queued in order on its one shipping thread, so they leave in order.
  const size_t cap = static_cast<size_t>(std::max(1, options_.max_slot_pages));
  std::vector<KvShipRun> slot;
  size_t in_slot = 0;
  for (KvShipRun& r : runs) {
    for (size_t done = 0; done < r.pages.size();) {
      if (in_slot == cap) {
        RETURN_IF_ERROR(ShipSlot(layer, std::move(slot)));
        slot.clear();
        in_slot = 0;
      }
      const size_t n = std::min(r.pages.size() - done, cap - in_slot);
      slot.push_back({r.sender, r.first_page_index + static_cast<int>(done),
                      std::vector<int32_t>(r.pages.begin() + done, r.pages.begin() + done + n)});
      done += n;
      in_slot += n;
    }
  }
  return ShipSlot(layer, std::move(slot));
}

absl::Status KvShipper::ShipSlot(int layer, std::vector<KvShipRun> runs) {
  std::vector<int32_t> ids;
  for (const KvShipRun& r : runs) ids.insert(ids.end(), r.pages.begin(), r.pages.end());
  if (ids.empty()) return absl::OkStatus();
  auto slot = AcquireSlot(ids.size() * page_bytes_);
  if (!slot.ok()) return slot.status();
  auto fence = pool_->ReadPagesAsync(layer, ids, buffers_[*slot].data(), device_stream_);
  if (!fence.ok()) {
    absl::MutexLock lock(&mu_);
    slot_parts_[*slot] = 0;
    changed_.SignalAll();
    return fence.status();
  }
  auto shared = std::make_shared<model::KvCopyFence>(std::move(*fence));
  step_fences_.push_back(shared);
  // One job per shipping thread that has runs in this layer.
  std::vector<Job> parts(threads_.size());
  size_t offset = 0;
  for (KvShipRun& r : runs) {
    const size_t bytes = r.pages.size() * page_bytes_;
    if (r.pages.empty()) continue;
    parts[ThreadOf(r.sender.get())].runs.emplace_back(offset, std::move(r));
    offset += bytes;
  }
  absl::MutexLock lock(&mu_);
  slot_parts_[*slot] = 0;
  for (size_t t = 0; t < parts.size(); ++t) {
    if (parts[t].runs.empty()) continue;
    parts[t].layer = layer;
    parts[t].slot = *slot;
    parts[t].fence = shared;
    ++slot_parts_[*slot];
    queues_[t].push_back(std::move(parts[t]));
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

void KvShipper::Complete(std::shared_ptr<KvSender> sender, KvCompletion completion,
                         std::function<void(absl::Status)> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      const int t = ThreadOf(sender.get());
      Job job;
      job.sender = std::move(sender);
      job.completion = completion;
      job.done = std::move(done);
      queues_[t].push_back(std::move(job));
      changed_.SignalAll();
      return;
    }
  }
  done(absl::UnavailableError("KV shipping stopped"));
}

absl::Status KvShipper::WaitCopies(absl::Time deadline) {
  absl::Status first;
  for (const auto& fence : step_fences_) {
    absl::Status s = fence->Wait(deadline);
    if (first.ok()) first = s;
  }
  step_fences_.clear();
  return first;
}

absl::Status KvShipper::Flush(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    if (working_ > 0) return false;
    return std::all_of(queues_.begin(), queues_.end(), [](const auto& q) { return q.empty(); });
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&idle), deadline)) {
    return absl::DeadlineExceededError("KV shipping: jobs still queued at the deadline");
  }
  return absl::OkStatus();
}

int64_t KvShipper::pages_shipped() const {
  absl::MutexLock lock(&mu_);
  return pages_shipped_;
}

void KvShipper::Run(int thread) {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      // Idle until work arrives: nothing to make progress on, so no deadline here.
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queues_[thread].empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queues_[thread].front());
      queues_[thread].pop_front();
      ++working_;
    }
    const int64_t shipped = ShipJob(job);
    absl::MutexLock lock(&mu_);
    --working_;
    pages_shipped_ += shipped;
    if (job.slot >= 0) --slot_parts_[job.slot];
    changed_.SignalAll();
  }
}

int64_t KvShipper::ShipJob(Job& job) {
  if (job.sender != nullptr) {  // a completion: every page of the sender was handed over
    job.completion.total_bytes = job.sender->bytes_sent();
    job.sender->Complete(job.completion, std::move(job.done));
    return 0;
  }
  const absl::Status copied = job.fence->Wait(absl::Now() + options_.no_progress_timeout);
  const uint8_t* staged = buffers_[job.slot].data();
  int64_t shipped = 0;
  for (auto& [offset, run] : job.runs) {
    const int n = static_cast<int>(run.pages.size());
    if (!copied.ok()) {
      run.sender->Abort(copied);  // sticky: the loop thread fails the request
    } else if (run.sender->status().ok() &&
               run.sender->SendPages(job.layer, run.first_page_index, n,
                                     std::span<const uint8_t>(staged + offset, n * page_bytes_))
                   .ok()) {
      shipped += n;
    }
  }
  return shipped;
}

void KvShipper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  std::vector<std::deque<Job>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(queues_);
    queues_.resize(left.size());
  }
  for (auto& queue : left) {
    for (Job& job : queue) {
      if (job.done) job.done(absl::UnavailableError("KV shipping stopped before this completion"));
      // A copy may still be landing in its slot: let it finish before the slot is freed.
      if (job.fence != nullptr) (void)job.fence->Wait(absl::Now() + options_.no_progress_timeout);
    }
  }
}

}  // namespace mlaserve::kvtransfer
