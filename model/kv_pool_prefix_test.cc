// The pool's prefix cache: what AcquirePrefix finds after PublishPrefix, holders, the order in
// which Allocate takes cached pages back, and generations (an evicted page's old children
// are never matched under its new content).
#include <algorithm>
#include <numeric>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "model/kv_pool.h"

namespace mlaserve::model {
namespace {

constexpr int kPage = kernels::kPageSize;

std::unique_ptr<KvPool> MakePool(int pages, bool cache = true) {
  KvPoolOptions o;
  o.num_layers = 1;
  o.num_pages = pages;
  o.latent_dim = 4;
  auto pool = KvPool::Create(o);
  EXPECT_TRUE(pool.ok()) << pool.status();
  if (cache) (*pool)->EnablePrefixCache();
  return std::move(*pool);
}

// `n` token ids from a seeded stream (distinct prompts for distinct seeds).
std::vector<int32_t> Tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 50000);
  return t;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A prompt prefilled and finished: pages allocated, published (under `salt`), freed.
std::vector<int32_t> Prefill(KvPool& pool, const std::vector<int32_t>& tokens,
                             std::string_view salt = {}) {
  auto pages = pool.Allocate(kernels::PagesFor(static_cast<int>(tokens.size())));
  EXPECT_TRUE(pages.ok()) << pages.status();
  pool.PublishPrefix(tokens, *pages, static_cast<int>(tokens.size()) / kPage, salt);
  pool.Free(*pages);
  return *pages;
}

TEST(KvPoolPrefixTest, OffByDefault) {
  auto pool = MakePool(8, /*cache=*/false);
  EXPECT_FALSE(pool->prefix_cache_enabled());
  const auto t = Tokens(3 * kPage, 1);
  Prefill(*pool, t);
  EXPECT_TRUE(pool->AcquirePrefix(t, 3).empty());
  EXPECT_EQ(pool->CachedPrefixPages(t, 3), 0);
  EXPECT_EQ(pool->cached_pages(), 0);
  EXPECT_EQ(pool->free_pages(), 8);
}

TEST(KvPoolPrefixTest, FindsWholePagesOfAPublishedPrompt) {
  auto pool = MakePool(16);
  const auto prompt = Tokens(3 * kPage + 10, 2);  // 3 whole pages and a partial one
  const std::vector<int32_t> pages = Prefill(*pool, prompt);
  EXPECT_EQ(pool->cached_pages(), 3);  // the partial page is not cached
  EXPECT_EQ(pool->cached_free_pages(), 3);
  EXPECT_EQ(pool->free_pages(), 16);  // cached pages count as free

  // The same start and more: its 3 whole pages, in order.
  const auto longer = Concat(std::vector<int32_t>(prompt.begin(), prompt.begin() + 3 * kPage),
                             Tokens(200, 3));
  int held = -1;
  EXPECT_EQ(pool->CachedPrefixPages(longer, 10, {}, &held), 3);
  EXPECT_EQ(held, 0);  // all three free
  const std::vector<int32_t> hit = pool->AcquirePrefix(longer, 10);
  EXPECT_EQ(hit, std::vector<int32_t>(pages.begin(), pages.begin() + 3));
  EXPECT_EQ(pool->CachedPrefixPages(longer, 2, {}, &held), 2);
  EXPECT_EQ(held, 2);  // taking them again costs no free page
  EXPECT_EQ(pool->free_pages(), 13);
  EXPECT_EQ(pool->cached_free_pages(), 0);
  pool->Free(hit);
  EXPECT_EQ(pool->free_pages(), 16);

  // At most max_pages; fewer tokens than a page find nothing.
  EXPECT_EQ(pool->AcquirePrefix(longer, 2).size(), 2u);
  pool->Free(pool->AcquirePrefix(longer, 2));  // (a second hold, freed at once)
  EXPECT_EQ(pool->free_pages(), 14);
  pool->Free(std::vector<int32_t>(pages.begin(), pages.begin() + 2));
  EXPECT_EQ(pool->free_pages(), 16);
  EXPECT_TRUE(pool->AcquirePrefix(std::span(prompt).first(kPage - 1), 5).empty());

  // A different token anywhere in page 1 ends the match after page 0.
  auto other = longer;
  other[kPage + 17] += 1;
  EXPECT_EQ(pool->CachedPrefixPages(other, 10), 1);
  other[3] += 1;
  EXPECT_EQ(pool->CachedPrefixPages(other, 10), 0);
}

TEST(KvPoolPrefixTest, APageHeldTwiceIsFreeAfterBothHoldersFreeIt) {
  auto pool = MakePool(8);
  const auto t = Tokens(2 * kPage, 4);
  Prefill(*pool, t);
  const auto a = pool->AcquirePrefix(t, 2);
  const auto b = pool->AcquirePrefix(t, 2);
  ASSERT_EQ(a, b);
  EXPECT_EQ(pool->free_pages(), 6);
  pool->Free(a);
  EXPECT_EQ(pool->free_pages(), 6);
  // Allocate cannot take a held cached page.
  auto rest = pool->Allocate(6);
  ASSERT_TRUE(rest.ok());
  for (int32_t p : *rest) EXPECT_EQ(std::count(b.begin(), b.end(), p), 0) << p;
  EXPECT_EQ(pool->Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  pool->Free(b);
  EXPECT_EQ(pool->free_pages(), 2);
  EXPECT_EQ(pool->AcquirePrefix(t, 2), a);  // still cached
}

TEST(KvPoolPrefixTest, AllocateTakesPlainPagesFirstThenTheLeastRecentlyFreed) {
  auto pool = MakePool(6);
  const auto x = Tokens(2 * kPage, 5);
  const auto y = Tokens(2 * kPage, 6);
  const auto px = Prefill(*pool, x);  // freed first
  const auto py = Prefill(*pool, y);
  EXPECT_EQ(pool->cached_pages(), 4);
  // Two plain pages are free: those go first, nothing forgotten.
  auto two = pool->Allocate(2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(pool->cached_pages(), 4);
  // Next: x's pages, its second page before its first.
  auto one = pool->Allocate(1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[0], px[1]);
  EXPECT_EQ(pool->CachedPrefixPages(x, 2), 1);
  EXPECT_EQ(pool->CachedPrefixPages(y, 2), 2);
  auto another = pool->Allocate(1);
  ASSERT_TRUE(another.ok());
  EXPECT_EQ((*another)[0], px[0]);
  EXPECT_EQ(pool->CachedPrefixPages(x, 2), 0);
  EXPECT_EQ(pool->CachedPrefixPages(y, 2), 2);
  EXPECT_EQ(pool->cached_pages(), 2);
}

TEST(KvPoolPrefixTest, ASaltPartitionsTheCache) {
  auto pool = MakePool(16);
  const auto t = Tokens(3 * kPage, 20);
  const std::vector<int32_t> pa = Prefill(*pool, t, "tenant-a");
  EXPECT_EQ(pool->cached_pages(), 3);
  // Only the same salt finds the pages: not another, not the default, not a prefix of it.
  EXPECT_EQ(pool->CachedPrefixPages(t, 3, "tenant-a"), 3);
  EXPECT_EQ(pool->CachedPrefixPages(t, 3, "tenant-b"), 0);
  EXPECT_EQ(pool->CachedPrefixPages(t, 3), 0);
  EXPECT_EQ(pool->CachedPrefixPages(t, 3, "tenant-"), 0);
  EXPECT_EQ(pool->CachedPrefixPages(t, 3, std::string_view("tenant-a\0", 9)), 0);
  EXPECT_TRUE(pool->AcquirePrefix(t, 3, "tenant-b").empty());
  EXPECT_EQ(pool->free_pages(), 16);

  // The same tokens published under the default salt (empty, spelled either way) get pages of
  // their own instead of being left out as cached already; each salt finds its own.
  const std::vector<int32_t> pd = Prefill(*pool, t, "");
  EXPECT_EQ(pool->cached_pages(), 6);
  for (int32_t p : pd) EXPECT_EQ(std::count(pa.begin(), pa.end(), p), 0) << p;
  const std::vector<int32_t> hit_default = pool->AcquirePrefix(t, 3);
  EXPECT_EQ(hit_default, std::vector<int32_t>(pd.begin(), pd.begin() + 3));
  const std::vector<int32_t> hit_a = pool->AcquirePrefix(t, 3, "tenant-a");
  EXPECT_EQ(hit_a, std::vector<int32_t>(pa.begin(), pa.begin() + 3));
  pool->Free(hit_default);
  pool->Free(hit_a);

  // A salted prompt that took page 0 from its salt's cache and computed page 1 itself chains
  // page 1 to it: found under that salt only.
  const auto u = Concat(std::vector<int32_t>(t.begin(), t.begin() + kPage), Tokens(kPage, 21));
  std::vector<int32_t> pages = pool->AcquirePrefix(u, 1, "tenant-a");
  ASSERT_EQ(pages, std::vector<int32_t>{pa[0]});
  auto fresh = pool->Allocate(1);
  ASSERT_TRUE(fresh.ok());
  pages.push_back((*fresh)[0]);
  pool->PublishPrefix(u, pages, 2, "tenant-a");
  pool->Free(pages);
  EXPECT_EQ(pool->CachedPrefixPages(u, 2, "tenant-a"), 2);
  EXPECT_EQ(pool->CachedPrefixPages(u, 2), 1);  // the default's own page 0 only
  EXPECT_EQ(pool->CachedPrefixPages(u, 2, "tenant-b"), 0);
  EXPECT_EQ(pool->free_pages(), 16);
}

TEST(KvPoolPrefixTest, AnEvictedPagesChildrenAreNotFoundUnderItsNewContent) {
  // x = A B. Page A is evicted while B stays cached; A's page id then caches C. A prompt C B
  // must not find B (B's KV was computed after A, not C).
  auto pool = MakePool(3);
  const auto a = Tokens(kPage, 7), b = Tokens(kPage, 8), c = Tokens(kPage, 9);
  const auto pab = Prefill(*pool, Concat(a, b));
  // Take the plain page, then A's page alone (make A the oldest free cached page by holding B
  // while A is freed).
  auto plain = pool->Allocate(1);
  ASSERT_TRUE(plain.ok());
  const auto held = pool->AcquirePrefix(Concat(a, b), 2);
  ASSERT_EQ(held.size(), 2u);
  pool->Free(std::span(held).first(1));  // A free again (oldest), B held
  auto reused = pool->Allocate(1);
  ASSERT_TRUE(reused.ok());
  ASSERT_EQ((*reused)[0], pab[0]);  // A's page, forgotten
  pool->PublishPrefix(c, *reused, 1);  // now it caches C
  pool->Free(std::span(held).subspan(1));
  pool->Free(*reused);
  EXPECT_EQ(pool->CachedPrefixPages(Concat(c, b), 2), 1);  // C, but not B after it
  EXPECT_EQ(pool->CachedPrefixPages(Concat(a, b), 2), 0);
  pool->Free(*plain);
}

TEST(KvPoolPrefixTest, APromptComputedTwiceKeepsTheFirstCopy) {
  auto pool = MakePool(8);
  const auto t = Tokens(2 * kPage, 10);
  auto first = pool->Allocate(2);
  auto second = pool->Allocate(2);
  ASSERT_TRUE(first.ok() && second.ok());
  pool->PublishPrefix(t, *first, 2);
  pool->PublishPrefix(t, *second, 2);  // same tokens, other pages: left out
  EXPECT_EQ(pool->cached_pages(), 2);
  pool->Free(*second);
  EXPECT_EQ(pool->cached_free_pages(), 0);  // plain free pages
  pool->Free(*first);
  EXPECT_EQ(pool->AcquirePrefix(t, 2), *first);
}

TEST(KvPoolPrefixTest, ATakenPrefixContinuesWithTheCallersOwnPages) {
  // A prompt that took page 0 from the cache and computed page 1 itself publishes both: the
  // cache then holds both, page 1 chained to the cached page 0.
  auto pool = MakePool(8);
  const auto a = Tokens(kPage, 11), b = Tokens(kPage, 12);
  const auto pa = Prefill(*pool, a);
  const auto ab = Concat(a, b);
  std::vector<int32_t> pages = pool->AcquirePrefix(ab, 1);
  auto fresh = pool->Allocate(1);
  ASSERT_TRUE(fresh.ok());
  pages.push_back((*fresh)[0]);
  pool->PublishPrefix(ab, pages, 2);
  pool->Free(pages);
  EXPECT_EQ(pool->AcquirePrefix(ab, 2), (std::vector<int32_t>{pa[0], (*fresh)[0]}));
}

TEST(KvPoolPrefixTest, FreePagesAreNotPublished) {
  auto pool = MakePool(4);
  const auto t = Tokens(2 * kPage, 13);
  auto pages = pool->Allocate(2);
  ASSERT_TRUE(pages.ok());
  pool->Free(*pages);
  pool->PublishPrefix(t, *pages, 2);
  EXPECT_EQ(pool->cached_pages(), 0);
}

TEST(KvPoolPrefixTest, ConcurrentHoldersKeepTheCountsRight) {
  auto pool = MakePool(64);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Tokens(4 * kPage, 100 + i));
    Prefill(*pool, prompts.back());
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int it = 0; it < 500; ++it) {
        const auto& t = prompts[(w + it) % prompts.size()];
        std::vector<int32_t> pages = pool->AcquirePrefix(t, 4);
        auto more = pool->Allocate(1 + it % 3);
        if (more.ok()) pages.insert(pages.end(), more->begin(), more->end());
        pool->Free(pages);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(pool->free_pages(), 64);
  EXPECT_LE(pool->cached_pages(), 16);
}

}  // namespace
}  // namespace mlaserve::model
