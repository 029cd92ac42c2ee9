// KvPool's batched page copies (ReadPages, WritePages, ReadPagesAsync) against the pool's raw
// buffers, on random pages, permuted ids (more than one kernel call's worth), poisoned
// destinations, the fp8 layout and an indexer plane. Built twice: model_kv_pool_test runs it on
// the CPU backend; model_kv_pool_cuda_test (label gpu, MLASERVE_KV_POOL_TEST_CUDA) on a GPU.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/kv_pack/api.h"
#include "model/kv_pool.h"

#if defined(MLASERVE_KV_POOL_TEST_CUDA)
#include <cuda_runtime.h>
#endif

namespace mlaserve::model {
namespace {

#if defined(MLASERVE_KV_POOL_TEST_CUDA)
constexpr kernels::Backend kBackend = kernels::Backend::kCuda;
#else
constexpr kernels::Backend kBackend = kernels::Backend::kCpu;
#endif
constexpr uint8_t kPoison = 0xA5;

using Bytes = std::vector<uint8_t>;

// Copies between host memory and a pool buffer without going through the API under test.
void RawCopy(void* dst, const void* src, size_t n, bool to_pool) {
#if defined(MLASERVE_KV_POOL_TEST_CUDA)
  ASSERT_EQ(cudaMemcpy(dst, src, n, to_pool ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
            cudaSuccess);
#else
  (void)to_pool;
  std::memcpy(dst, src, n);
#endif
}

Bytes RandomBytes(size_t n, std::mt19937_64& rng) {
  Bytes b(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = rng();
    std::memcpy(b.data() + i, &w, 8);
  }
  for (; i < n; ++i) b[i] = static_cast<uint8_t>(rng());
  return b;
}

struct PoolCase {
  const char* name;
  KvCacheFormat format;
  int latent_dim;
  int index_dim;
};

class KvPoolBatchTest : public ::testing::TestWithParam<PoolCase> {
 protected:
  void SetUp() override {
    const uint64_t seed = std::random_device{}();
    rng_.seed(seed);
    RecordProperty("seed", std::to_string(seed));
    options_.backend = kBackend;
    options_.dtype = kernels::DType::kBF16;
    options_.cache_format = GetParam().format;
    options_.num_layers = 2;
    options_.num_pages = 320;  // > kMaxPageCopyPages: batches span several kernel calls
    options_.latent_dim = GetParam().latent_dim;
    options_.index_dim = GetParam().index_dim;
    auto pool = KvPool::Create(options_);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
    // Random contents in every plane of every layer, written around the API under test.
    for (int l = 0; l < options_.num_layers; ++l) {
      latent_.push_back(RandomBytes(pool_->latent_page_bytes() * options_.num_pages, rng_));
      RawCopy(pool_->latent(l), latent_[l].data(), latent_[l].size(), true);
      index_.push_back(RandomBytes(pool_->index_page_bytes() * options_.num_pages, rng_));
      if (!index_[l].empty()) RawCopy(pool_->index_keys(l), index_[l].data(), index_[l].size(), true);
    }
  }

  // The layer page `page` of `layer` as the raw planes hold it now.
  Bytes RawPage(int layer, int32_t page) {
    const size_t lb = pool_->latent_page_bytes(), ib = pool_->index_page_bytes();
    Bytes b(lb + ib);
    RawCopy(b.data(), static_cast<uint8_t*>(pool_->latent(layer)) + lb * page, lb, false);
    if (ib > 0) RawCopy(b.data() + lb, static_cast<uint8_t*>(pool_->index_keys(layer)) + ib * page, ib, false);
    return b;
  }
  // The layer page as the test last put it there.
  Bytes ExpectedPage(int layer, int32_t page) {
    const size_t lb = pool_->latent_page_bytes(), ib = pool_->index_page_bytes();
    Bytes b(latent_[layer].begin() + lb * page, latent_[layer].begin() + lb * (page + 1));
    b.insert(b.end(), index_[layer].begin() + ib * page, index_[layer].begin() + ib * (page + 1));
    return b;
  }
  std::vector<int32_t> PermutedIds(size_t n) {
    std::vector<int32_t> ids(options_.num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(n);
    return ids;
  }
  void ExpectStaged(int layer, const std::vector<int32_t>& ids, const uint8_t* staged) {
    const size_t pb = pool_->layer_page_bytes();
    for (size_t i = 0; i < ids.size(); ++i) {
      const Bytes want = ExpectedPage(layer, ids[i]);
      ASSERT_EQ(std::memcmp(staged + i * pb, want.data(), pb), 0)
          << "staged page " << i << " = pool page " << ids[i] << " of layer " << layer;
    }
  }

  KvPoolOptions options_;
  std::unique_ptr<KvPool> pool_;
  std::vector<Bytes> latent_, index_;
  std::mt19937_64 rng_;
};

TEST_P(KvPoolBatchTest, ReadPagesGathersPermutedIds) {
  for (size_t n : {size_t{1}, size_t{17}, size_t{kernels::kMaxPageCopyPages + 45}}) {
    const std::vector<int32_t> ids = PermutedIds(n);
    Bytes out(n * pool_->layer_page_bytes(), kPoison);
    ASSERT_TRUE(pool_->ReadPages(1, ids, out.data()).ok());
    ExpectStaged(1, ids, out.data());
  }
  // A page listed twice is read twice.
  const std::vector<int32_t> twice = {7, 3, 7};
  Bytes out(3 * pool_->layer_page_bytes(), kPoison);
  ASSERT_TRUE(pool_->ReadPages(0, twice, out.data()).ok());
  ExpectStaged(0, twice, out.data());
}

TEST_P(KvPoolBatchTest, ReadPagesAsyncIntoAHostBuffer) {
  const std::vector<int32_t> ids = PermutedIds(kernels::kMaxPageCopyPages + 50);
  const size_t bytes = ids.size() * pool_->layer_page_bytes();
  auto buffer = pool_->AllocateHostBuffer(bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  ASSERT_EQ(buffer->size(), bytes);
  std::memset(buffer->data(), kPoison, bytes);
  auto fence = pool_->ReadPagesAsync(0, ids, buffer->data());
  ASSERT_TRUE(fence.ok()) << fence.status();
  ASSERT_TRUE(fence->Wait(absl::Now() + absl::Seconds(30)).ok());
  ExpectStaged(0, ids, buffer->data());
  // A moved-from fence is complete; the moved-to one still waits correctly.
  KvCopyFence moved = std::move(*fence);
  EXPECT_TRUE(fence->Wait(absl::Now()).ok());
  EXPECT_TRUE(moved.Wait(absl::Now() + absl::Seconds(30)).ok());
}

TEST_P(KvPoolBatchTest, WritePagesScattersOnlyThoseIds) {
  const std::vector<int32_t> ids = PermutedIds(kernels::kMaxPageCopyPages + 9);
  const size_t pb = pool_->layer_page_bytes();
  const Bytes src = RandomBytes(ids.size() * pb, rng_);
  ASSERT_TRUE(pool_->WritePages(1, ids, src.data()).ok());
  const size_t lb = pool_->latent_page_bytes(), ib = pool_->index_page_bytes();
  for (size_t i = 0; i < ids.size(); ++i) {  // what the pages should now hold
    std::copy(src.begin() + i * pb, src.begin() + i * pb + lb, latent_[1].begin() + lb * ids[i]);
    std::copy(src.begin() + i * pb + lb, src.begin() + (i + 1) * pb,
              index_[1].begin() + ib * ids[i]);
  }
  for (int l = 0; l < options_.num_layers; ++l) {
    for (int32_t p = 0; p < options_.num_pages; ++p) {
      ASSERT_EQ(RawPage(l, p), ExpectedPage(l, p)) << "layer " << l << " page " << p;
    }
  }
  // The single-page calls are the same copies.
  Bytes one(pb, kPoison);
  ASSERT_TRUE(pool_->ReadPage(1, ids[4], one.data()).ok());
  EXPECT_EQ(one, Bytes(src.begin() + 4 * pb, src.begin() + 5 * pb));
  const Bytes fresh = RandomBytes(pb, rng_);
  ASSERT_TRUE(pool_->WritePage(0, 319, fresh.data()).ok());
  EXPECT_EQ(RawPage(0, 319), fresh);
}

TEST_P(KvPoolBatchTest, RefusesBadIdsBeforeMovingAnything) {
  const size_t pb = pool_->layer_page_bytes();
  const Bytes src = RandomBytes(3 * pb, rng_);
  Bytes out(3 * pb, kPoison);
  absl::Status s = pool_->ReadPages(0, std::vector<int32_t>{1, 320, 2}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("page 320 (position 1) out of range [0, 320)"), std::string::npos)
      << s;
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == kPoison; }));
  s = pool_->WritePages(0, std::vector<int32_t>{4, -1, 5}, src.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = pool_->WritePages(1, std::vector<int32_t>{4, 9, 4}, src.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("page 4 is listed twice"), std::string::npos) << s;
  s = pool_->ReadPagesAsync(2, std::vector<int32_t>{0}, out.data()).status();
  EXPECT_NE(s.message().find("layer 2 out of range"), std::string::npos) << s;
  for (int32_t p : {4, 5, 9}) {  // nothing was written
    EXPECT_EQ(RawPage(0, p), ExpectedPage(0, p));
    EXPECT_EQ(RawPage(1, p), ExpectedPage(1, p));
  }
  EXPECT_TRUE(pool_->ReadPages(0, {}, nullptr).ok());  // an empty batch moves nothing
}

TEST_P(KvPoolBatchTest, WritePagesReachesReplicas) {
  auto replica = KvPool::Create(options_);
  ASSERT_TRUE(replica.ok()) << replica.status();
  ASSERT_TRUE(pool_->AddReplica(replica->get()).ok());
  const std::vector<int32_t> ids = PermutedIds(40);
  const Bytes src = RandomBytes(ids.size() * pool_->layer_page_bytes(), rng_);
  ASSERT_TRUE(pool_->WritePages(0, ids, src.data()).ok());
  Bytes a(src.size(), kPoison), b(src.size(), kPoison);
  ASSERT_TRUE(pool_->ReadPages(0, ids, a.data()).ok());
  ASSERT_TRUE((*replica)->ReadPages(0, ids, b.data()).ok());
  EXPECT_EQ(a, src);
  EXPECT_EQ(b, src);
}

// A device-to-device KV import lands in rank 0's pool only; SyncReplicas copies exactly those
// pages (runs of consecutive ids and lone ones, unsorted) into every replica, every layer and
// plane, and leaves the replicas' other pages alone (CUDA: peer copies, one per run).
TEST_P(KvPoolBatchTest, SyncReplicasCopiesThePagesIntoEveryReplica) {
  std::vector<std::unique_ptr<KvPool>> replicas;
  std::vector<std::vector<Bytes>> before;  // [replica][layer]: raw latent + index planes
  const size_t lb = pool_->latent_page_bytes(), ib = pool_->index_page_bytes();
  for (int r = 0; r < 2; ++r) {
    auto replica = KvPool::Create(options_);
    ASSERT_TRUE(replica.ok()) << replica.status();
    before.emplace_back();
    for (int l = 0; l < options_.num_layers; ++l) {
      Bytes latent = RandomBytes(lb * options_.num_pages, rng_);
      Bytes index = RandomBytes(ib * options_.num_pages, rng_);
      RawCopy((*replica)->latent(l), latent.data(), latent.size(), true);
      if (ib > 0) RawCopy((*replica)->index_keys(l), index.data(), index.size(), true);
      latent.insert(latent.end(), index.begin(), index.end());
      before.back().push_back(std::move(latent));
    }
    ASSERT_TRUE(pool_->AddReplica(replica->get()).ok());
    replicas.push_back(*std::move(replica));
  }
  const std::vector<int32_t> pages = {31, 5, 6, 7, 8, 100, 30, 319, 0, 9, 200, 201};
  ASSERT_TRUE(pool_->SyncReplicas(pages).ok());
  for (size_t r = 0; r < replicas.size(); ++r) {
    for (int l = 0; l < options_.num_layers; ++l) {
      for (int32_t p = 0; p < options_.num_pages; ++p) {
        Bytes got(lb + ib);
        RawCopy(got.data(), static_cast<uint8_t*>(replicas[r]->latent(l)) + lb * p, lb, false);
        if (ib > 0) {
          RawCopy(got.data() + lb, static_cast<uint8_t*>(replicas[r]->index_keys(l)) + ib * p,
                  ib, false);
        }
        const bool synced = std::find(pages.begin(), pages.end(), p) != pages.end();
        Bytes want;
        if (synced) {
          want = ExpectedPage(l, p);
        } else {
          const Bytes& b = before[r][l];
          const size_t plane = lb * options_.num_pages;
          want.assign(b.begin() + lb * p, b.begin() + lb * (p + 1));
          want.insert(want.end(), b.begin() + plane + ib * p, b.begin() + plane + ib * (p + 1));
        }
        ASSERT_EQ(got, want) << "replica " << r << " layer " << l << " page " << p
                             << (synced ? " (synced)" : " (not synced)");
      }
    }
  }
  // Bad ids are refused before anything moves; an empty list moves nothing.
  absl::Status s = pool_->SyncReplicas(std::vector<int32_t>{1, 320});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = pool_->SyncReplicas(std::vector<int32_t>{4, 4});
  EXPECT_NE(s.message().find("page 4 is listed twice"), std::string::npos) << s;
  EXPECT_TRUE(pool_->SyncReplicas({}).ok());
}

#if defined(MLASERVE_KV_POOL_TEST_CUDA)
// A tensor-parallel decode worker's replicas live on the other GPUs: SyncReplicas copies peer
// to peer (peer access enabled by AddReplica where the GPUs allow it). Needs 2 GPUs.
TEST_P(KvPoolBatchTest, SyncReplicasReachesAReplicaOnAnotherGpu) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) {
    GTEST_SKIP() << "needs 2 GPUs, found " << gpus;
  }
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  auto replica = KvPool::Create(options_);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(replica.ok()) << replica.status();
  ASSERT_TRUE(pool_->AddReplica(replica->get()).ok());
  const std::vector<int32_t> pages = PermutedIds(kernels::kMaxPageCopyPages + 7);
  ASSERT_TRUE(pool_->SyncReplicas(pages).ok());
  const size_t lb = pool_->latent_page_bytes(), ib = pool_->index_page_bytes();
  for (int l = 0; l < options_.num_layers; ++l) {
    for (int32_t p : pages) {
      Bytes got(lb + ib);
      RawCopy(got.data(), static_cast<uint8_t*>((*replica)->latent(l)) + lb * p, lb, false);
      if (ib > 0) {
        RawCopy(got.data() + lb, static_cast<uint8_t*>((*replica)->index_keys(l)) + ib * p, ib,
                false);
      }
      ASSERT_EQ(got, ExpectedPage(l, p)) << "layer " << l << " page " << p;
    }
  }
}
#endif

// The receiver's path: the source may be reused as soon as the call returned; the pages hold
// the bytes once the fences (one per pool: this one and its replica) completed.
TEST_P(KvPoolBatchTest, WritePagesAsyncConsumesTheSourceAtOnce) {
  auto replica = KvPool::Create(options_);
  ASSERT_TRUE(replica.ok()) << replica.status();
  ASSERT_TRUE(pool_->AddReplica(replica->get()).ok());
  const std::vector<int32_t> ids = PermutedIds(kernels::kMaxPageCopyPages + 3);
  const Bytes want = RandomBytes(ids.size() * pool_->layer_page_bytes(), rng_);
  Bytes src = want;
  std::vector<KvCopyFence> fences;
  ASSERT_TRUE(pool_->WritePagesAsync(1, ids, src.data(), &fences).ok());
  std::fill(src.begin(), src.end(), kPoison);  // the caller's buffer is free again
  EXPECT_EQ(fences.size(), kBackend == kernels::Backend::kCuda ? 2u : 0u);
  for (const KvCopyFence& f : fences) ASSERT_TRUE(f.Wait(absl::Now() + absl::Seconds(30)).ok());
  for (const KvCopyFence& f : fences) EXPECT_TRUE(f.Ready());
  Bytes a(want.size(), kPoison), b(want.size(), kPoison);
  ASSERT_TRUE(pool_->ReadPages(1, ids, a.data()).ok());
  ASSERT_TRUE((*replica)->ReadPages(1, ids, b.data()).ok());
  EXPECT_EQ(a, want);
  EXPECT_EQ(b, want);
  // The same pages twice under one order key (a page re-sent by a later message): the second
  // copy wins, and it waited for the first's DMA before reusing the lane's host staging.
  const Bytes second = RandomBytes(want.size(), rng_);
  fences.clear();
  ASSERT_TRUE(pool_->WritePagesAsync(0, ids, want.data(), &fences, 12345).ok());
  ASSERT_TRUE(pool_->WritePagesAsync(0, ids, second.data(), &fences, 12345).ok());
  for (const KvCopyFence& f : fences) ASSERT_TRUE(f.Wait(absl::Now() + absl::Seconds(30)).ok());
  ASSERT_TRUE(pool_->ReadPages(0, ids, a.data()).ok());
  EXPECT_EQ(a, second);
}

// Receivers write from several RPC threads at once: more threads than copy lanes, disjoint
// pages, each checked afterwards.
TEST_P(KvPoolBatchTest, ConcurrentBatchesOnDisjointPages) {
  constexpr int kThreads = 6, kRounds = 10, kPagesEach = 30;
  const std::vector<int32_t> ids = PermutedIds(kThreads * kPagesEach);
  const size_t pb = pool_->layer_page_bytes();
  std::vector<Bytes> last(kThreads);
  std::vector<absl::Status> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::span<const int32_t> mine(ids.data() + t * kPagesEach, kPagesEach);
      for (int r = 0; r < kRounds && failures[t].ok(); ++r) {
        last[t] = RandomBytes(kPagesEach * pb, rng);
        if (t % 2 == 0) {
          failures[t] = pool_->WritePages(r % 2, mine, last[t].data());
        } else {  // the receiver's way: asynchronous, keyed by session
          std::vector<KvCopyFence> fences;
          failures[t] = pool_->WritePagesAsync(r % 2, mine, last[t].data(), &fences, t);
          for (const KvCopyFence& f : fences) {
            if (failures[t].ok()) failures[t] = f.Wait(absl::Now() + absl::Seconds(30));
          }
        }
        Bytes back(last[t].size());
        if (failures[t].ok()) failures[t] = pool_->ReadPages(r % 2, mine, back.data());
        if (failures[t].ok() && back != last[t]) {
          failures[t] = absl::DataLossError(absl::StrCat("thread ", t, " round ", r));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(failures[t].ok()) << failures[t];
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, KvPoolBatchTest,
    ::testing::Values(PoolCase{"V2LiteBf16", KvCacheFormat::kNative, 576, 0},
                      PoolCase{"DsaBf16", KvCacheFormat::kNative, 576, 128},
                      PoolCase{"Fp8Ds", KvCacheFormat::kFp8Ds, 576, 128},
                      PoolCase{"OddWidth", KvCacheFormat::kNative, 13, 3}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mlaserve::model
