// KvPool: per-layer paged buffers and thread-safe page accounting (see kv_pool.h).
//
// CPU backend: host buffers (zeroed, 64-byte aligned). CUDA backend: device buffers through
// the CUDA runtime, available only when the model runtime is built with CUDA
// (MLASERVE_MODEL_HAS_CUDA); otherwise Create refuses with FAILED_PRECONDITION.
#include "model/kv_pool.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/kv_fp8/api.h"

#if defined(MLASERVE_MODEL_HAS_CUDA)
#include <cuda_runtime.h>
#endif

namespace mlaserve::model {
namespace {

constexpr size_t kHostAlignment = 64;

size_t LatentPageBytes(const KvPoolOptions& o) {
  if (o.cache_format == KvCacheFormat::kFp8Ds) {
    return static_cast<size_t>(kernels::kPageSize) * kernels::kFp8LatentBytes;
  }
  return static_cast<size_t>(kernels::kPageSize) * o.latent_dim * kernels::DTypeSize(o.dtype);
}
size_t IndexPageBytes(const KvPoolOptions& o) {
  if (o.index_dim == 0) return 0;
  if (o.cache_format == KvCacheFormat::kFp8Ds) {
    return static_cast<size_t>(kernels::IndexKFp8PageBytes(o.index_dim));
  }
  return static_cast<size_t>(kernels::kPageSize) * o.index_dim * kernels::DTypeSize(o.dtype);
}

absl::StatusOr<void*> AllocBuffer(kernels::Backend backend, size_t bytes) {
  if (backend == kernels::Backend::kCpu) {
    const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    void* p = std::aligned_alloc(kHostAlignment, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("KvPool: host allocation of ", bytes, " bytes failed"));
    }
    std::memset(p, 0, rounded);
    return p;
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("KvPool: cudaMalloc of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(err)));
  }
  err = cudaMemset(p, 0, bytes);
  if (err != cudaSuccess) {
    cudaFree(p);
    return absl::InternalError(absl::StrCat("KvPool: cudaMemset failed: ", cudaGetErrorString(err)));
  }
  return p;
#else
  return absl::FailedPreconditionError(
      "KvPool: backend cuda requested but this build has no CUDA support");
#endif
}

void FreeBuffer(kernels::Backend backend, void* p) {
  if (p == nullptr) return;
  if (backend == kernels::Backend::kCpu) {
    std::free(p);
    return;
  }
#if defined(MLASERVE_MODEL_HAS_CUDA)
  cudaFree(p);
#endif
}

}  // namespace

const char* KvCacheFormatName(KvCacheFormat f) {
  return f == KvCacheFormat::kFp8Ds ? "fp8_ds" : "native";
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Create(const KvPoolOptions& options) {
  if (options.num_layers <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvPool: num_layers is ", options.num_layers, "; it must be positive"));
  }
  if (options.num_pages <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvPool: num_pages is ", options.num_pages, "; it must be positive"));
  }
  if (options.latent_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvPool: latent_dim is ", options.latent_dim, "; it must be positive"));
  }
  if (options.index_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvPool: index_dim is ", options.index_dim, "; it must be >= 0"));
  }
  if (options.dtype != kernels::DType::kF32 && options.dtype != kernels::DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvPool: cache dtype ", kernels::DTypeName(options.dtype),
                     " is not supported (f32 or bf16)"));
  }
  if (options.cache_format == KvCacheFormat::kFp8Ds) {
    constexpr int kMaxLatent = kernels::kFp8LatentRank + kernels::kFp8RopeDim;
    if (options.latent_dim > kMaxLatent) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KvPool: latent_dim is ", options.latent_dim, "; the fp8 cache layout holds at most ",
          kMaxLatent, " (512 latent + 64 rope)"));
    }
    if (options.index_dim % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KvPool: index_dim is ", options.index_dim,
          "; the fp8 indexer key layout needs a multiple of 16"));
    }
  }
  std::unique_ptr<KvPool> pool(new KvPool(options));
#if defined(MLASERVE_MODEL_HAS_CUDA)
  if (options.backend == kernels::Backend::kCuda && cudaGetDevice(&pool->device_) != cudaSuccess) {
    return absl::FailedPreconditionError("KvPool: no CUDA device is usable");
  }
#endif
  const size_t latent_bytes = LatentPageBytes(options) * options.num_pages;
  const size_t index_bytes = IndexPageBytes(options) * options.num_pages;
  for (int l = 0; l < options.num_layers; ++l) {
    auto latent = AllocBuffer(options.backend, latent_bytes);
    if (!latent.ok()) return latent.status();
    pool->latent_.push_back(*latent);
    if (options.index_dim > 0) {
      auto index = AllocBuffer(options.backend, index_bytes);
      if (!index.ok()) return index.status();
      pool->index_.push_back(*index);
    }
  }
  absl::MutexLock lock(&pool->mu_);
  // A stack popped from the back: page 0 is handed out first.
  pool->free_list_.resize(options.num_pages);
  for (int i = 0; i < options.num_pages; ++i) pool->free_list_[i] = options.num_pages - 1 - i;
  pool->holders_.assign(options.num_pages, 0);
  return pool;
}

KvPool::~KvPool() {
  DestroyLanes();
  for (void* p : latent_) FreeBuffer(options_.backend, p);
  for (void* p : index_) FreeBuffer(options_.backend, p);
}

absl::StatusOr<std::vector<int32_t>> KvPool::Allocate(int n) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("KvPool: cannot allocate ", n, " pages"));
  }
  absl::MutexLock lock(&mu_);
  const size_t plain = free_list_.size();
  if (static_cast<size_t>(n) > plain + cached_free_.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KvPool: ", n, " pages requested but only ", plain + cached_free_.size(),
                     " of ", options_.num_pages, " are free"));
  }
  const size_t from_plain = std::min(plain, static_cast<size_t>(n));
  std::vector<int32_t> pages(free_list_.end() - from_plain, free_list_.end());
  std::reverse(pages.begin(), pages.end());
  free_list_.resize(plain - from_plain);
  // Then free pages that cache a prefix, least recently freed first: they forget it.
  while (pages.size() < static_cast<size_t>(n)) {
    const int32_t p = cached_free_.front();
    cached_free_.pop_front();
    prefix_->Erase(p);
    pages.push_back(p);
  }
  for (int32_t p : pages) holders_[p] = 1;
  return pages;
}

void KvPool::Free(std::span<const int32_t> pages) {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> cached;  // freed pages that cache a prefix, in the caller's order
  for (int32_t p : pages) {
    // Out-of-range or already-free ids are ignored so that a double free cannot corrupt the
    // free list (it would hand the same page to two requests).
    if (p < 0 || p >= options_.num_pages || holders_[p] == 0) continue;
    if (--holders_[p] > 0) continue;
    if (prefix_ != nullptr && prefix_->cached(p)) {
      cached.push_back(p);
    } else {
      free_list_.push_back(p);
    }
  }
  // Last to first onto the back of cached_free_ (taken last): the caller's first pages, the
  // start of a prompt that every longer prompt needs, are kept longest.
  for (auto it = cached.rbegin(); it != cached.rend(); ++it) {
    cached_slot_[*it] = cached_free_.insert(cached_free_.end(), *it);
  }
}

int KvPool::free_pages() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(free_list_.size() + cached_free_.size());
}

void KvPool::EnablePrefixCache() {
  absl::MutexLock lock(&mu_);
  if (prefix_ != nullptr) return;
  prefix_ = std::make_unique<KvPrefixIndex>(options_.num_pages);
  cached_slot_.assign(options_.num_pages, cached_free_.end());
}

bool KvPool::prefix_cache_enabled() const {
  absl::MutexLock lock(&mu_);
  return prefix_ != nullptr;
}

std::vector<int32_t> KvPool::AcquirePrefix(std::span<const int32_t> tokens, int max_pages,
                                           std::string_view salt) {
  absl::MutexLock lock(&mu_);
  if (prefix_ == nullptr) return {};
  std::vector<int32_t> pages = prefix_->Match(tokens, max_pages, salt);
  for (int32_t p : pages) {
    if (holders_[p]++ == 0) cached_free_.erase(cached_slot_[p]);
  }
  return pages;
}

int KvPool::CachedPrefixPages(std::span<const int32_t> tokens, int max_pages,
                              std::string_view salt, int* held) const {
  absl::MutexLock lock(&mu_);
  if (held != nullptr) *held = 0;
  if (prefix_ == nullptr) return 0;
  const std::vector<int32_t> pages = prefix_->Match(tokens, max_pages, salt);
  if (held != nullptr) {
    for (int32_t p : pages) *held += holders_[p] > 0 ? 1 : 0;
  }
  return static_cast<int>(pages.size());
}

void KvPool::PublishPrefix(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                           int full_pages, std::string_view salt, KvPrefixCursor* cursor) {
  absl::MutexLock lock(&mu_);
  if (prefix_ == nullptr) return;
  // Only held pages: a free page is not the caller's to register.
  const int limit = std::min(static_cast<int>(pages.size()), std::max(full_pages, 0));
  int held = 0;
  while (held < limit && pages[held] >= 0 && pages[held] < options_.num_pages &&
         holders_[pages[held]] > 0) {
    ++held;
  }
  prefix_->Insert(tokens, pages, held, salt, cursor);
}

int KvPool::cached_pages() const {
  absl::MutexLock lock(&mu_);
  return prefix_ == nullptr ? 0 : prefix_->size();
}

int KvPool::cached_free_pages() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(cached_free_.size());
}

int KvPool::MaxReusedPages(int tokens) {
  return std::max(tokens - 1, 0) / kernels::kPageSize;
}

size_t KvPool::layer_page_bytes() const {
  return LatentPageBytes(options_) + IndexPageBytes(options_);
}
size_t KvPool::PageBytes(const KvPoolOptions& options) {
  return static_cast<size_t>(std::max(options.num_layers, 0)) *
         (LatentPageBytes(options) + IndexPageBytes(options));
}
size_t KvPool::latent_page_bytes() const { return LatentPageBytes(options_); }
size_t KvPool::index_page_bytes() const { return IndexPageBytes(options_); }

absl::Status KvPool::CheckPages(const char* what, int layer, std::span<const int32_t> pages,
                              bool distinct) const {
  if (layer < 0 || layer >= options_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("KvPool::", what, ": layer ", layer,
                                                   " out of range [0, ", options_.num_layers, ")"));
  }
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= options_.num_pages) {
      return absl::InvalidArgumentError(absl::StrCat("KvPool::", what, ": page ", pages[i],
                                                     " (position ", i, ") out of range [0, ",
                                                     options_.num_pages, ")"));
    }
  }
  if (distinct && pages.size() > 1) {
    std::vector<int32_t> sorted(pages.begin(), pages.end());
    std::sort(sorted.begin(), sorted.end());
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KvPool::", what, ": page ", *dup, " is listed twice; a batch writes distinct pages"));
    }
  }
  return absl::OkStatus();
}

absl::Status KvPool::ReadPage(int layer, int32_t page, void* host_dst) const {
  return ReadPages(layer, std::span<const int32_t>(&page, 1), host_dst);
}

absl::Status KvPool::WritePage(int layer, int32_t page, const void* host_src) {
  return WritePages(layer, std::span<const int32_t>(&page, 1), host_src);
}

absl::Status KvPool::ReadPages(int layer, std::span<const int32_t> pages, void* host_dst) const {
  if (absl::Status s = CheckPages("ReadPages", layer, pages, false); !s.ok()) return s;
  return CopyPages(layer, pages, host_dst, /*to_host=*/true, nullptr, nullptr, -1);
}

absl::StatusOr<KvCopyFence> KvPool::ReadPagesAsync(int layer, std::span<const int32_t> pages,
                                                   void* host_dst, void* after_stream) const {
  if (absl::Status s = CheckPages("ReadPagesAsync", layer, pages, false); !s.ok()) return s;
  KvCopyFence fence;
  absl::Status s =
      CopyPages(layer, pages, host_dst, /*to_host=*/true, after_stream, &fence, -1);
  if (!s.ok()) return s;
  return fence;
}

absl::Status KvPool::WritePages(int layer, std::span<const int32_t> pages, const void* host_src) {
  std::vector<KvCopyFence> fences;
  absl::Status s = WritePagesOnLane(layer, pages, host_src, &fences, -1);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (const KvCopyFence& f : fences) {  // wait even after an error: nothing may land later
    absl::Status w = f.Wait(deadline);
    if (s.ok()) s = w;
  }
  return s;
}

absl::Status KvPool::WritePagesAsync(int layer, std::span<const int32_t> pages,
                                     const void* host_src, std::vector<KvCopyFence>* fences,
                                     uint64_t order_key) {
  return WritePagesOnLane(layer, pages, host_src, fences, static_cast<int64_t>(order_key >> 1));
}

absl::Status KvPool::WritePagesOnLane(int layer, std::span<const int32_t> pages,
                                      const void* host_src, std::vector<KvCopyFence>* fences,
                                      int64_t lane_key) {
  if (absl::Status s = CheckPages("WritePages", layer, pages, true); !s.ok()) return s;
  KvCopyFence fence;
  absl::Status s = CopyPages(layer, pages, const_cast<void*>(host_src), /*to_host=*/false,
                             nullptr, &fence, lane_key);
  if (fence.event_ != nullptr) fences->push_back(std::move(fence));
  for (KvPool* replica : replicas_) {
    if (!s.ok()) break;
    s = replica->WritePagesOnLane(layer, pages, host_src, fences, lane_key);
  }
  return s;
}

absl::Status KvPool::SyncReplicas(std::span<const int32_t> pages) {
  if (replicas_.empty() || pages.empty()) return absl::OkStatus();
  if (absl::Status s = CheckPages("SyncReplicas", 0, pages, true); !s.ok()) return s;
  if (options_.backend == kernels::Backend::kCuda) return CopyToReplicasOnDevice(pages);
  // CPU backend: the pools are host memory; one batched read, then a write per replica.
  ASSIGN_OR_RETURN(KvHostBuffer staging, AllocateHostBuffer(pages.size() * layer_page_bytes()));
  for (int layer = 0; layer < options_.num_layers; ++layer) {
    RETURN_IF_ERROR(ReadPages(layer, pages, staging.data()));
    for (KvPool* replica : replicas_) {
      RETURN_IF_ERROR(replica->WritePages(layer, pages, staging.data()));
    }
  }
  return absl::OkStatus();
}

std::vector<int> KvPool::replica_ranks() const {
  std::vector<int> ranks;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    ranks.push_back(replicas_[i]->rank() >= 0 ? replicas_[i]->rank() : static_cast<int>(i) + 1);
  }
  return ranks;
}

absl::Status KvPool::AddReplica(KvPool* replica) {
  const KvPoolOptions& o = replica->options();
  if (replica == this || o.num_layers != options_.num_layers || o.num_pages != options_.num_pages ||
      layer_page_bytes() != replica->layer_page_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KvPool::AddReplica: a replica needs the same layers, pages and page bytes (", o.num_layers,
        ", ", o.num_pages, ", ", replica->layer_page_bytes(), " vs ", options_.num_layers, ", ",
        options_.num_pages, ", ", layer_page_bytes(), ")"));
  }
  if (replica->options().backend != options_.backend) {
    return absl::InvalidArgumentError(
        "KvPool::AddReplica: a replica needs the same backend (CPU and CUDA pools do not mix)");
  }
  if (options_.backend == kernels::Backend::kCuda) RETURN_IF_ERROR(EnablePeerCopies(*replica));
  replicas_.push_back(replica);
  return absl::OkStatus();
}

}  // namespace mlaserve::model
