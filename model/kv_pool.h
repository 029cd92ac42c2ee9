// KvPool: the paged latent KV cache of one model instance, and its page accounting.
//
// Layout: for every layer one buffer [num_pages, kPageSize, latent_dim] (kv_lora_rank + rope
// dim as the engine stores them, model/mla_dims.h) of the pool's dtype (f32 on the CPU backend,
// bf16 on CUDA); DSA models have a second buffer per layer for the indexer keys [num_pages,
// kPageSize, index_head_dim]. A page id indexes every layer's buffers alike, so a request
// holds one list of page ids for all layers.
//
// With cache_format kFp8Ds the buffers hold DeepSeek's fp8 cache layouts instead
// (kernels/kv_fp8/api.h): the latent plane is [num_pages, kPageSize, 656 bytes] (512 e4m3 +
// 4 f32 scales + 64 bf16 rope; a model with a smaller kv_lora_rank / rope dim zero-pads into
// it), the indexer plane kPageSize * (index_dim + 4) bytes per page (e4m3 keys, then one f32
// scale per token). The pool only stores bytes; the engine quantizes and dequantizes.
//
// Page accounting is thread-safe (workers reserve from RPC threads). Page payloads are moved
// in "layer page" units: the bytes of one page of one layer (latent, then indexer keys).
//
// Moving pages to and from host memory (KV transfer): ReadPages / WritePages copy one layer's
// pages, any number and order of page ids, to or from host memory that holds them back to
// back. On CUDA a batch costs one gather (or scatter) kernel through a device staging buffer
// and one DMA copy on a copy stream of the pool's own, instead of a synchronous copy per page;
// on the CPU backend it is a memcpy per page. ReadPagesAsync does the same without waiting:
// into page-locked memory (AllocateHostBuffer) it returns a KvCopyFence at once, so a prefill
// step can stream a layer's pages out while later layers compute. All three are thread-safe
// (a few copy lanes, each with its stream and staging buffer, serve concurrent callers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/common/types.h"
#include "model/kv_prefix_index.h"

namespace mlaserve::model {

// Host memory for batched page copies: page-locked (cudaHostAlloc) for a CUDA pool, so copies
// into it run asynchronously on the DMA engines; 64-byte aligned ordinary memory on the CPU.
class KvHostBuffer {
 public:
  KvHostBuffer() = default;
  KvHostBuffer(KvHostBuffer&& o) noexcept { *this = std::move(o); }
  KvHostBuffer& operator=(KvHostBuffer&& o) noexcept;
  KvHostBuffer(const KvHostBuffer&) = delete;
  KvHostBuffer& operator=(const KvHostBuffer&) = delete;
  ~KvHostBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  friend class KvPool;
  kernels::Backend backend_ = kernels::Backend::kCpu;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A batched read in flight (KvPool::ReadPagesAsync). Movable; destroying a fence does not wait
// (the copy still lands), so the destination must outlive the copy: Wait for it first.
class KvCopyFence {
 public:
  KvCopyFence() = default;  // complete
  KvCopyFence(KvCopyFence&& o) noexcept { *this = std::move(o); }
  KvCopyFence& operator=(KvCopyFence&& o) noexcept;
  KvCopyFence(const KvCopyFence&) = delete;
  KvCopyFence& operator=(const KvCopyFence&) = delete;
  ~KvCopyFence();

  // OK once the bytes are in host memory; DEADLINE_EXCEEDED (naming the wait) if they are not
  // by `deadline`; INTERNAL for a device error. Polls, so it never blocks past the deadline.
  absl::Status Wait(absl::Time deadline) const;
  // Whether Wait would return at once (a device error counts as ready: Wait reports it).
  bool Ready() const;

 private:
  friend class KvPool;
  void* event_ = nullptr;  // cudaEvent_t recorded after the copy; null: complete
  int device_ = 0;
};
// How a pool stores its pages. kNative: values of KvPoolOptions::dtype. kFp8Ds: DeepSeek's
// fp8 layouts of kernels/kv_fp8 (dtype is then the dtype of the rows the engine quantizes
// from and dequantizes to, not of the stored bytes).
enum class KvCacheFormat : uint8_t { kNative, kFp8Ds };
const char* KvCacheFormatName(KvCacheFormat f);  // "native" / "fp8_ds"

struct KvPoolOptions {
  kernels::Backend backend = kernels::Backend::kCpu;
  kernels::DType dtype = kernels::DType::kF32;
  KvCacheFormat cache_format = KvCacheFormat::kNative;
  int num_layers = 0;
  int num_pages = 0;
  int latent_dim = 0;   // stored kv_lora_rank + rope dim (kFp8Ds: <= 576)
  int index_dim = 0;    // index_head_dim for DSA models, else 0 (kFp8Ds: a multiple of 16)
};

class KvPool {
 public:
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(const KvPoolOptions& options);
  ~KvPool();
  // The bytes one page takes over every layer (latent, then indexer keys), for sizing a pool
  // before it exists.
  static size_t PageBytes(const KvPoolOptions& options);

  const KvPoolOptions& options() const { return options_; }

  // Page accounting. Allocate fails with RESOURCE_EXHAUSTED (naming the counts) when fewer
  // than n pages are free; it never allocates part of a request.
  absl::StatusOr<std::vector<int32_t>> Allocate(int n);
  // Gives back one hold on each page (pages taken by AcquirePrefix may have several holders;
  // every other page has one). A page with no holder left is free again.
  void Free(std::span<const int32_t> pages);
  // Free pages, those that still hold a cached prefix included (Allocate takes them last).
  int free_pages() const;
  int total_pages() const { return options_.num_pages; }

  // Prefix cache (the prefill worker's; docs/serving.md "Prefix cache"). Off until enabled
  // (before serving). With it on, a freed page that holds the KV of a whole page of a
  // published prompt keeps it while it is free: AcquirePrefix hands it to a later prompt that
  // starts with the same tokens, and Allocate hands out such pages only when no other page is
  // free, least recently freed first, forgetting what they held. Within one Free call the
  // pages are taken as freed last to first, so a prompt's first pages, which every longer
  // prompt with that start needs, are kept longest.
  void EnablePrefixCache();
  bool prefix_cache_enabled() const;
  // `salt` (api.proto GenerateRequest.cache_salt; empty: the shared default) partitions the
  // cache: a prompt finds only pages published under its own salt (KvPrefixIndex).
  //
  // Takes a hold on each page caching the longest run of `tokens`' leading whole pages, at
  // most `max_pages`, and returns them in order (page i holds tokens [64 i, 64 i + 64)). Free
  // them like allocated pages. Empty with the cache off.
  std::vector<int32_t> AcquirePrefix(std::span<const int32_t> tokens, int max_pages,
                                     std::string_view salt = {});
  // How many pages AcquirePrefix would return now (takes nothing); `held` (if set): how many of
  // them other holders have now, which taking them costs no free page (the others are free
  // pages, and taking them leaves fewer).
  int CachedPrefixPages(std::span<const int32_t> tokens, int max_pages,
                        std::string_view salt = {}, int* held = nullptr) const;
  // `pages` (held by the caller; pages[i] holding the KV of tokens [64 i, 64 i + 64)) become the
  // cache of `tokens`' first `full_pages` pages, where no page caches them yet. No-op with the
  // cache off. The pages' KV must be complete (written) before the call.
  //
  // A caller that publishes a growing prompt again after each chunk passes the same `cursor`
  // each time (one per prompt, KvPrefixCursor): the call then hashes only the pages added
  // since the last one instead of walking from page 0, with the same result. Without one, the
  // call walks from page 0 (a prompt published once).
  void PublishPrefix(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                     int full_pages, std::string_view salt = {},
                     KvPrefixCursor* cursor = nullptr);
  // Pages holding a cached prefix now (free or held), and of those the free ones.
  int cached_pages() const;
  int cached_free_pages() const;
  // The most leading pages a prompt of `tokens` tokens takes from the cache: its last token is
  // always computed (its logits give the next token), so (tokens - 1) / 64.
  static int MaxReusedPages(int tokens);

  // Device (or host, on the CPU backend) base pointers of a layer's buffers.
  void* latent(int layer) const { return latent_[layer]; }
  void* index_keys(int layer) const { return index_.empty() ? nullptr : index_[layer]; }

  // Bytes of one layer page (latent + indexer keys), and of each plane's share of it. Code
  // that moves pages (transports) must take sizes from here, never from latent_dim * dtype:
  // the fp8 format's bytes are not a whole number of elements.
  size_t layer_page_bytes() const;
  size_t latent_page_bytes() const;
  size_t index_page_bytes() const;
  // Copy one layer page to / from host memory (dst/src hold layer_page_bytes()).
  absl::Status ReadPage(int layer, int32_t page, void* host_dst) const;
  absl::Status WritePage(int layer, int32_t page, const void* host_src);

  // Batched copies of layer `layer` of `pages` (pool page ids, any order) to / from host memory
  // holding pages.size() layer pages back to back (page i at i * layer_page_bytes()). Every id
  // is checked before anything moves (INVALID_ARGUMENT naming the position and the id);
  // WritePages also refuses an id listed twice. Both return once the copy is complete, and
  // WritePages reaches the replicas too (AddReplica). host memory may be pageable; from a
  // KvHostBuffer the DMA needs no bounce.
  absl::Status ReadPages(int layer, std::span<const int32_t> pages, void* host_dst) const;
  absl::Status WritePages(int layer, std::span<const int32_t> pages, const void* host_src);
  // ReadPages without waiting: enqueues the copy and returns its fence. `host_dst` must be a
  // KvHostBuffer's memory (page-locked) on CUDA. `after_stream` (a cudaStream_t, or null):
  // the copy starts only after the work queued on that stream so far (the engine's stream:
  // the layer's KV writes). On the CPU backend the copy is done on return.
  absl::StatusOr<KvCopyFence> ReadPagesAsync(int layer, std::span<const int32_t> pages,
                                             void* host_dst, void* after_stream = nullptr) const;
  // WritePages without waiting for the device: `host_src` is consumed (copied into the copy
  // lane's page-locked staging) before return, and one fence per pool written (this one, then
  // each replica) is appended to `fences`; the pages hold the bytes once they are complete.
  // Wait for them before the pages are read by another stream, freed, or handed on. Writes
  // with the same `order_key` land in call order (they share a copy lane), so a page written
  // twice holds the second copy; writes with different keys must not share pages. On the CPU
  // backend the write is done on return and nothing is appended.
  absl::Status WritePagesAsync(int layer, std::span<const int32_t> pages, const void* host_src,
                               std::vector<KvCopyFence>* fences, uint64_t order_key = 0);
  // Host memory for ReadPagesAsync.
  absl::StatusOr<KvHostBuffer> AllocateHostBuffer(size_t bytes) const;

  // Tensor-parallel attention replicates the latent cache on every rank (docs/parallel.md):
  // the other ranks' pools, same options, registered here before serving starts, receive
  // every WritePage too (a KV import lands on every rank). Page accounting stays here.
  absl::Status AddReplica(KvPool* replica);
  bool has_replicas() const { return !replicas_.empty(); }
  // The rank this pool belongs to in a multi-rank engine (ParallelEngine labels every rank's
  // pool before serving starts); -1 for a pool outside one. KV transports report it as the
  // destination (or source) of a session (kvtransfer/rank_route.h).
  void set_rank(int rank) { rank_ = rank; }
  int rank() const { return rank_; }
  // The replicas' ranks, in AddReplica order (an unlabelled replica counts as its position + 1:
  // ParallelEngine adds ranks 1..N-1 in order).
  std::vector<int> replica_ranks() const;
  // Copies every layer of `pages` from this pool into every replica: for bytes that reached
  // this pool without WritePages (a device-to-device KV transfer, kvtransfer/nccl, writes the
  // pages directly), so every tensor-parallel rank holds them too. CUDA: device to device
  // (cudaMemcpyPeerAsync; peer access enabled at AddReplica where the GPUs allow it), one copy
  // per run of consecutive page ids per layer and plane, on one of this pool's copy lanes,
  // returning once every copy landed. CPU: through host memory, a layer at a time. No-op
  // without replicas; the caller must not write the pages meanwhile, and on CUDA their
  // earlier writes must be complete.
  absl::Status SyncReplicas(std::span<const int32_t> pages);

 private:
  struct CopyLane;  // kv_pool_copy.cc: a copy stream and its device staging buffer
  explicit KvPool(const KvPoolOptions& options) : options_(options) {}
  absl::Status CheckPages(const char* what, int layer, std::span<const int32_t> pages,
                          bool distinct) const;
  // kv_pool_copy.cc: the batched copies on either backend. `fence` null: wait for the copy.
  // WritePagesAsync's body; `lane_key` < 0: any free copy lane, else always the same lane for
  // the same key.
  absl::Status WritePagesOnLane(int layer, std::span<const int32_t> pages, const void* host_src,
                                std::vector<KvCopyFence>* fences, int64_t lane_key);
  absl::Status CopyPages(int layer, std::span<const int32_t> pages, void* host, bool to_host,
                         void* after_stream, KvCopyFence* fence, int64_t lane_key) const;
  // kv_pool_copy.cc: SyncReplicas on CUDA, and AddReplica's peer access for it.
  absl::Status CopyToReplicasOnDevice(std::span<const int32_t> pages);
  absl::Status EnablePeerCopies(const KvPool& replica);
  absl::StatusOr<CopyLane*> AcquireLane(size_t staging_bytes, size_t host_bytes,
                                        int64_t lane_key) const;
  void ReleaseLane(CopyLane* lane) const;
  void DestroyLanes();

  KvPoolOptions options_;
  int device_ = 0;  // CUDA: the device current at Create, where the buffers live
  std::vector<void*> latent_;
  std::vector<void*> index_;
  std::vector<KvPool*> replicas_;  // set before use, then read-only
  int rank_ = -1;                  // set before use, then read-only
  mutable absl::Mutex lanes_mu_;
  mutable absl::CondVar lane_free_;
  mutable std::vector<CopyLane*> lanes_ ABSL_GUARDED_BY(lanes_mu_);  // created on first use
  mutable absl::Mutex mu_;
  std::vector<int32_t> free_list_ ABSL_GUARDED_BY(mu_);  // free pages caching nothing
  std::vector<int32_t> holders_ ABSL_GUARDED_BY(mu_);    // by page: 0 = free
  // Prefix cache (null: off). Free pages that cache a prefix, least recently freed first;
  // `cached_slot_` is each such page's place in it.
  std::unique_ptr<KvPrefixIndex> prefix_ ABSL_GUARDED_BY(mu_);
  std::list<int32_t> cached_free_ ABSL_GUARDED_BY(mu_);
  std::vector<std::list<int32_t>::iterator> cached_slot_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::model
