#include "kvtransfer/kv_shipper.h"

#include <utility>

#include "absl/strings/str_cat.h"

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
  {
    absl::MutexLock lock(&mu_);
    busy_.assign(buffers_.size(), false);
  }
  thread_ = std::thread([this] { Run(); });
}

KvShipper::~KvShipper() { Stop(); }

absl::StatusOr<int> KvShipper::AcquireSlot(size_t bytes) {
  int slot = -1;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + options_.no_progress_timeout;
    while (!stopping_) {
      for (size_t i = 0; i < busy_.size() && slot < 0; ++i) {
        if (!busy_[i]) slot = static_cast<int>(i);
      }
      if (slot >= 0) break;
      if (changed_.WaitWithDeadline(&mu_, deadline)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "KV shipping: no staging slot came free in ",
            absl::FormatDuration(options_.no_progress_timeout),
            " (the shipping thread is waiting on a decode worker that takes nothing)"));
      }
    }
    if (stopping_) return absl::UnavailableError("KV shipping stopped");
    busy_[slot] = true;
  }
  if (buffers_[slot].size() < bytes) {
    buffers_[slot] = model::KvHostBuffer();  // free the old one first
    auto grown = pool_->AllocateHostBuffer((bytes + kSlotGranule - 1) / kSlotGranule * kSlotGranule);
    if (!grown.ok()) {
      absl::MutexLock lock(&mu_);
      busy_[slot] = false;
      changed_.SignalAll();
      return grown.status();
    }
    buffers_[slot] = std::move(*grown);
  }
  return slot;
}

absl::Status KvShipper::ShipLayer(int layer, std::vector<KvShipRun> runs) {
  std::vector<int32_t> ids;
  for (const KvShipRun& r : runs) ids.insert(ids.end(), r.pages.begin(), r.pages.end());
  if (ids.empty()) return absl::OkStatus();
  auto slot = AcquireSlot(ids.size() * page_bytes_);
  if (!slot.ok()) return slot.status();
  auto fence = pool_->ReadPagesAsync(layer, ids, buffers_[*slot].data(), device_stream_);
  absl::MutexLock lock(&mu_);
  if (!fence.ok()) {
    busy_[*slot] = false;
    changed_.SignalAll();
    return fence.status();
  }
  Job job;
  job.layer = layer;
  job.slot = *slot;
  job.fence = std::make_shared<model::KvCopyFence>(std::move(*fence));
  job.runs = std::move(runs);
  step_fences_.push_back(job.fence);
  queue_.push_back(std::move(job));
  changed_.SignalAll();
  return absl::OkStatus();
}

void KvShipper::Complete(std::shared_ptr<KvSender> sender, KvCompletion completion,
                         std::function<void(absl::Status)> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      Job job;
      job.sender = std::move(sender);
      job.completion = completion;
      job.done = std::move(done);
      queue_.push_back(std::move(job));
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
    return stopping_ || (queue_.empty() && !working_);
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&idle), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("KV shipping: ", queue_.size(), " jobs still queued at the deadline"));
  }
  return absl::OkStatus();
}

int64_t KvShipper::pages_shipped() const {
  absl::MutexLock lock(&mu_);
  return pages_shipped_;
}

void KvShipper::Run() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      // Idle until work arrives: nothing to make progress on, so no deadline here.
      while (queue_.empty() && !stopping_) changed_.Wait(&mu_);
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      working_ = true;
    }
    ShipJob(job);
    absl::MutexLock lock(&mu_);
    working_ = false;
    if (job.slot >= 0) busy_[job.slot] = false;
    changed_.SignalAll();
  }
}

void KvShipper::ShipJob(Job& job) {
  if (job.sender != nullptr) {  // a completion: every page of the sender was handed over
    job.completion.total_bytes = job.sender->bytes_sent();
    job.sender->Complete(job.completion, std::move(job.done));
    return;
  }
  const absl::Status copied = job.fence->Wait(absl::Now() + options_.no_progress_timeout);
  const uint8_t* staged = buffers_[job.slot].data();
  int64_t shipped = 0;
  for (KvShipRun& run : job.runs) {
    const int n = static_cast<int>(run.pages.size());
    const size_t bytes = n * page_bytes_;
    if (!copied.ok()) {
      run.sender->Abort(copied);  // sticky: the loop thread fails the request
    } else if (run.sender->status().ok() &&
               run.sender->SendPages(job.layer, run.first_page_index, n,
                                     std::span<const uint8_t>(staged, bytes))
                   .ok()) {
      shipped += n;
    }
    staged += bytes;
  }
  absl::MutexLock lock(&mu_);
  pages_shipped_ += shipped;
}

void KvShipper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  std::deque<Job> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(queue_);
  }
  for (Job& job : left) {
    if (job.done) job.done(absl::UnavailableError("KV shipping stopped before this completion"));
    // A copy may still be landing in its slot: let it finish before the slot is freed.
    if (job.fence != nullptr) (void)job.fence->Wait(absl::Now() + options_.no_progress_timeout);
  }
}

}  // namespace mlaserve::kvtransfer
