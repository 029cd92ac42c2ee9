#include "model/kv_pool.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::model {
namespace {

KvPoolOptions SmallOptions(int index_dim = 0) {
  KvPoolOptions o;
  o.num_layers = 3;
  o.num_pages = 8;
  o.latent_dim = 12;
  o.index_dim = index_dim;
  return o;
}

TEST(KvPoolTest, RejectsBadOptions) {
  KvPoolOptions o = SmallOptions();
  o.num_pages = 0;
  auto pool = KvPool::Create(o);
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pool.status().message().find("num_pages is 0"), std::string::npos);
  o = SmallOptions();
  o.latent_dim = -1;
  EXPECT_EQ(KvPool::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvPoolTest, AllocateIsAllOrNothing) {
  auto pool = KvPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok()) << pool.status();
  KvPool& p = **pool;
  auto a = p.Allocate(5);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 5u);
  EXPECT_EQ(p.free_pages(), 3);
  auto b = p.Allocate(4);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("4 pages requested but only 3"), std::string::npos);
  EXPECT_EQ(p.free_pages(), 3);  // nothing taken by the failed request
  auto c = p.Allocate(3);
  ASSERT_TRUE(c.ok());
  std::set<int32_t> all(a->begin(), a->end());
  all.insert(c->begin(), c->end());
  EXPECT_EQ(all.size(), 8u);  // every page handed out once
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 7);
  p.Free(*a);
  EXPECT_EQ(p.free_pages(), 5);
  p.Free(*a);  // double free is ignored
  EXPECT_EQ(p.free_pages(), 5);
  p.Free(std::vector<int32_t>{-1, 100});
  EXPECT_EQ(p.free_pages(), 5);
}

TEST(KvPoolTest, PageRoundTripWithIndexKeys) {
  auto pool = KvPool::Create(SmallOptions(/*index_dim=*/4));
  ASSERT_TRUE(pool.ok()) << pool.status();
  KvPool& p = **pool;
  const size_t bytes = p.layer_page_bytes();
  EXPECT_EQ(bytes, 64u * (12 + 4) * sizeof(float));
  std::vector<float> src(bytes / sizeof(float));
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f + 1.0f;
  ASSERT_TRUE(p.WritePage(2, 5, src.data()).ok());
  // The latent part lands in the layer's latent buffer at page 5, the rest in the index buffer.
  const float* latent = static_cast<const float*>(p.latent(2)) + 5 * 64 * 12;
  EXPECT_EQ(latent[0], src[0]);
  EXPECT_EQ(latent[64 * 12 - 1], src[64 * 12 - 1]);
  const float* index = static_cast<const float*>(p.index_keys(2)) + 5 * 64 * 4;
  EXPECT_EQ(index[0], src[64 * 12]);
  std::vector<float> dst(src.size(), -7.0f);
  ASSERT_TRUE(p.ReadPage(2, 5, dst.data()).ok());
  EXPECT_EQ(dst, src);
  // Other layers and pages stay untouched (zeroed at creation).
  ASSERT_TRUE(p.ReadPage(1, 5, dst.data()).ok());
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](float v) { return v == 0.0f; }));
  EXPECT_EQ(p.ReadPage(3, 0, dst.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.WritePage(0, 8, src.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.index_keys(0) != nullptr, true);
}

TEST(KvPoolTest, NoIndexBufferWithoutIndexer) {
  auto pool = KvPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->index_keys(0), nullptr);
  EXPECT_EQ((*pool)->layer_page_bytes(), 64u * 12 * sizeof(float));
}

TEST(KvPoolTest, ConcurrentAllocateFree) {
  KvPoolOptions o = SmallOptions();
  o.num_pages = 64;
  auto pool = KvPool::Create(o);
  ASSERT_TRUE(pool.ok());
  KvPool& p = **pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&p] {
      for (int i = 0; i < 200; ++i) {
        auto pages = p.Allocate(4);
        if (pages.ok()) p.Free(*pages);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(p.free_pages(), 64);
}

// DeepSeek's fp8 layouts: 656 bytes per token of latent (whatever the engine's dtype), then
// 64 * (index_dim + 4) bytes of fp8 indexer keys and their scales; pages copy unchanged.
TEST(KvPoolTest, Fp8FormatHoldsDeepSeekPages) {
  KvPoolOptions o = SmallOptions(/*index_dim=*/128);
  o.latent_dim = 576;
  o.cache_format = KvCacheFormat::kFp8Ds;
  auto pool = KvPool::Create(o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  KvPool& p = **pool;
  EXPECT_EQ(p.latent_page_bytes(), size_t{656} * 64);
  EXPECT_EQ(p.index_page_bytes(), size_t{64} * (128 + 4));
  EXPECT_EQ(p.layer_page_bytes(), size_t{656} * 64 + 64 * 132);
  o.dtype = kernels::DType::kBF16;  // the engine's dtype does not change the stored bytes
  o.backend = kernels::Backend::kCpu;
  EXPECT_EQ((*KvPool::Create(o))->layer_page_bytes(), p.layer_page_bytes());

  std::vector<uint8_t> page(p.layer_page_bytes());
  for (size_t i = 0; i < page.size(); ++i) page[i] = static_cast<uint8_t>(i * 131 + 7);
  ASSERT_TRUE(p.WritePage(2, 5, page.data()).ok());
  std::vector<uint8_t> back(page.size(), 0xee);
  ASSERT_TRUE(p.ReadPage(2, 5, back.data()).ok());
  EXPECT_EQ(back, page);
  // The latent plane's bytes sit at page * 656 * 64 of the layer's buffer.
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(p.latent(2)) + size_t{5} * 656 * 64, page.data(),
                        p.latent_page_bytes()),
            0);
  EXPECT_EQ(std::string(KvCacheFormatName(o.cache_format)), "fp8_ds");

  KvPoolOptions bad = o;
  bad.latent_dim = 600;
  EXPECT_NE(KvPool::Create(bad).status().message().find("latent_dim is 600"), std::string::npos);
  bad = o;
  bad.index_dim = 40;
  EXPECT_NE(KvPool::Create(bad).status().message().find("index_dim is 40"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve::model
