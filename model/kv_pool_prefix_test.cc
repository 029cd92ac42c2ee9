// The pool's prefix cache: what AcquirePrefix finds after PublishPrefix, holders, the order in
// which Allocate takes cached pages back, generations (an evicted page's old children
// are never matched under its new content), and publishing chunk by chunk with a cursor.
#include <algorithm>
#include <cstddef>
#include <numeric>
#include <random>
#include <span>
#include <string>
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

// As chunked prefill publishes: after each chunk of `chunk` tokens, the whole pages computed so
// far (with `cursor` when given).
void PublishInChunks(KvPool& pool, std::span<const int32_t> tokens, std::span<const int32_t> pages,
                     int chunk, KvPrefixCursor* cursor) {
  const int n = static_cast<int>(tokens.size());
  for (int done = std::min(chunk, n);; done = std::min(done + chunk, n)) {
    pool.PublishPrefix(tokens, pages, done / kPage, {}, cursor);
    if (done == n) return;
  }
}

// The cached run AcquirePrefix gives `tokens` now (taken and given back).
std::vector<int32_t> CachedRun(KvPool& pool, std::span<const int32_t> tokens,
                               std::string_view salt = {}) {
  std::vector<int32_t> run = pool.AcquirePrefix(tokens, 1 << 20, salt);
  EXPECT_EQ(pool.CachedPrefixPages(tokens, 1 << 20, salt), static_cast<int>(run.size()));
  pool.Free(run);
  return run;
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

TEST(KvPoolPrefixTest, ChunkByChunkWithACursorCachesWhatOnePublishDoes) {
  // Another prompt already caches the first two pages: the walk runs through pages the prompt
  // does not own (its own copies are left out).
  const auto shared = Tokens(2 * kPage, 30);
  const auto prompt = Concat(shared, Tokens(7 * kPage + 5, 31));  // 9 whole pages and 5 tokens
  auto chunked = MakePool(16), whole = MakePool(16);
  const auto ps = Prefill(*chunked, shared);
  ASSERT_EQ(Prefill(*whole, shared), ps);
  const int need = kernels::PagesFor(static_cast<int>(prompt.size()));
  auto pc = chunked->Allocate(need);
  auto pw = whole->Allocate(need);
  ASSERT_TRUE(pc.ok() && pw.ok());
  ASSERT_EQ(*pc, *pw);
  KvPrefixCursor cursor;
  PublishInChunks(*chunked, prompt, *pc, 100, &cursor);  // 1, 3, 4, 6, 7, 9 pages
  EXPECT_EQ(cursor.pages(), 9);
  whole->PublishPrefix(prompt, *pw, 9);
  EXPECT_EQ(chunked->cached_pages(), 9);  // 2 shared + 7 of its own
  EXPECT_EQ(whole->cached_pages(), 9);
  chunked->Free(*pc);
  whole->Free(*pw);

  std::vector<int32_t> expected = ps;
  expected.insert(expected.end(), pc->begin() + 2, pc->begin() + 9);
  EXPECT_EQ(CachedRun(*chunked, prompt), expected);
  EXPECT_EQ(CachedRun(*whole, prompt), expected);
  for (int len : {kPage - 1, kPage, 3 * kPage + 1, 5 * kPage}) {
    const auto start = std::span(prompt).first(len);
    EXPECT_EQ(CachedRun(*chunked, start), CachedRun(*whole, start)) << len;
  }
  EXPECT_EQ(CachedRun(*chunked, shared), ps);
}

TEST(KvPoolPrefixTest, ACursorPastAnEvictedPageWalksFromTheStartAgain) {
  // P = A B C D + 10 tokens, prefilled in 64-token chunks while Q = A (computed first, on page
  // qa) caches page 0: P's first publish chains B (its page pb) under qa. Q finishes; R, with
  // the pool full, takes qa back (evicting A) and publishes nothing, other tokens, or A again
  // (qa's generation changes). P's later chunks must not chain C under pb (qa's old child):
  // they register what a walk from page 0 does, P's own page for A, and stop at pb (it caches
  // another prefix). The walk from page 0 without a cursor is the reference.
  const auto a = Tokens(kPage, 40);
  const auto p = Concat(Concat(Concat(a, Tokens(kPage, 41)), Concat(Tokens(kPage, 42),
                                                                     Tokens(kPage, 43))),
                        Tokens(10, 44));
  enum class R { kNothing, kOtherTokens, kSameTokens };
  for (R r : {R::kNothing, R::kOtherTokens, R::kSameTokens}) {
    std::vector<std::vector<int32_t>> runs;  // by mode: P's cached run, then A's
    std::vector<int> cached;
    for (bool with_cursor : {true, false}) {
      SCOPED_TRACE(testing::Message() << "r " << static_cast<int>(r) << " cursor " << with_cursor);
      auto pool = MakePool(6);
      auto q = pool->Allocate(1);
      auto pp = pool->Allocate(5);
      ASSERT_TRUE(q.ok() && pp.ok());
      pool->PublishPrefix(a, *q, 1);
      KvPrefixCursor cursor;
      KvPrefixCursor* c = with_cursor ? &cursor : nullptr;
      pool->PublishPrefix(p, *pp, 2, {}, c);
      if (with_cursor) EXPECT_EQ(cursor.pages(), 2);
      EXPECT_EQ(pool->cached_pages(), 2);  // qa (A) and pb (B under it)
      pool->Free(*q);
      auto taken = pool->Allocate(1);  // the only free page: qa, forgetting A
      ASSERT_TRUE(taken.ok());
      ASSERT_EQ(*taken, *q);
      if (r == R::kOtherTokens) pool->PublishPrefix(Tokens(kPage, 45), *taken, 1);
      if (r == R::kSameTokens) pool->PublishPrefix(a, *taken, 1);
      for (int done = 3 * kPage; done <= 4 * kPage; done += kPage) {
        pool->PublishPrefix(p, *pp, done / kPage, {}, c);
      }
      if (with_cursor) EXPECT_EQ(cursor.pages(), 1);  // A (P's own page, or qa again); pb stops it
      // Not C or D: qa's caches, A (P's or qa), and pb still under qa's old generation.
      EXPECT_EQ(pool->cached_pages(), r == R::kNothing || r == R::kSameTokens ? 2 : 3);
      const std::vector<int32_t> expect_a = {r == R::kSameTokens ? (*q)[0] : (*pp)[0]};
      pool->Free(*taken);
      pool->Free(*pp);
      runs.push_back(CachedRun(*pool, p));
      EXPECT_EQ(runs.back(), expect_a);
      runs.push_back(CachedRun(*pool, a));
      cached.push_back(pool->cached_pages());
    }
    EXPECT_EQ(runs[0], runs[2]);
    EXPECT_EQ(runs[1], runs[3]);
    EXPECT_EQ(cached[0], cached[1]);
  }
}

TEST(KvPoolPrefixTest, RandomChunkedPublishingWithCursorsMatchesWalksFromTheStart) {
  // Two pools take the same random operations (prompts sharing starts admitted, prefilled in
  // random chunks side by side, finished, evicting one another's pages); one publishes with a
  // cursor per prompt, the other walks from page 0 each time. Their caches must agree
  // throughout, page ids included (so their Allocate and AcquirePrefix answers stay the same).
  constexpr int kMaxPages = 4;
  std::vector<std::vector<int32_t>> blocks;  // page-sized token blocks, 3 choices per position
  for (int i = 0; i < kMaxPages * 3; ++i) blocks.push_back(Tokens(kPage, 200 + i));
  struct Seq {
    std::vector<int32_t> tokens;
    std::string salt;
    std::vector<int32_t> pages;
    int done = 0;
    KvPrefixCursor cursor;
  };
  std::mt19937 rng(7);
  auto with_cursor = MakePool(12), walking = MakePool(12);
  std::vector<Seq> running;
  int evictions = 0, resumed = 0;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 && running.size() < 4) {  // admit a prompt
      Seq s;
      const int whole = 1 + static_cast<int>(rng() % kMaxPages);
      for (int i = 0; i < whole; ++i) {
        const auto& b = blocks[i * 3 + (rng() % 4 == 0 ? rng() % 3 : 0)];
        s.tokens.insert(s.tokens.end(), b.begin(), b.end());
      }
      s.tokens.resize(s.tokens.size() + rng() % kPage, 7);
      s.salt = rng() % 5 == 0 ? "s" : "";
      const int n = static_cast<int>(s.tokens.size());
      // Half take no cached pages (as a request whose every prompt row is computed), so their
      // walks run through other prompts' pages, which can be evicted meanwhile.
      const int max = rng() % 2 == 0 ? 0 : KvPool::MaxReusedPages(n);
      s.pages = with_cursor->AcquirePrefix(s.tokens, max, s.salt);
      ASSERT_EQ(walking->AcquirePrefix(s.tokens, max, s.salt), s.pages);
      const int before = with_cursor->cached_pages();
      auto rest = with_cursor->Allocate(kernels::PagesFor(n) - static_cast<int>(s.pages.size()));
      auto rest_w = walking->Allocate(kernels::PagesFor(n) - static_cast<int>(s.pages.size()));
      ASSERT_EQ(rest.ok(), rest_w.ok());
      if (!rest.ok()) {
        with_cursor->Free(s.pages);
        walking->Free(s.pages);
        continue;
      }
      ASSERT_EQ(*rest, *rest_w);
      evictions += before - with_cursor->cached_pages();
      s.done = static_cast<int>(s.pages.size()) * kPage;
      s.pages.insert(s.pages.end(), rest->begin(), rest->end());
      running.push_back(std::move(s));
    } else if (op <= 2 && !running.empty()) {  // a chunk of one prompt
      Seq& s = running[rng() % running.size()];
      s.done = std::min<int>(s.done + 1 + static_cast<int>(rng() % (2 * kPage)),
                             static_cast<int>(s.tokens.size()));
      resumed += s.cursor.pages() > 0 ? 1 : 0;
      with_cursor->PublishPrefix(s.tokens, s.pages, s.done / kPage, s.salt, &s.cursor);
      walking->PublishPrefix(s.tokens, s.pages, s.done / kPage, s.salt);
    } else if (op == 3 && !running.empty()) {  // a prompt finishes
      const size_t i = rng() % running.size();
      with_cursor->Free(running[i].pages);
      walking->Free(running[i].pages);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(with_cursor->cached_pages(), walking->cached_pages()) << "step " << step;
    ASSERT_EQ(with_cursor->cached_free_pages(), walking->cached_free_pages()) << "step " << step;
  }
  EXPECT_GT(evictions, 50);
  EXPECT_GT(resumed, 500);
  for (const Seq& s : running) {
    with_cursor->Free(s.pages);
    walking->Free(s.pages);
  }
  for (int i = 0; i < 3; ++i) {  // the runs of prompts the blocks spell, each salt
    for (std::string_view salt : {"", "s"}) {
      std::vector<int32_t> t;
      for (int j = 0; j < kMaxPages; ++j) {
        const auto& b = blocks[j * 3 + (j == 0 ? 0 : i)];
        t.insert(t.end(), b.begin(), b.end());
        EXPECT_EQ(CachedRun(*with_cursor, t, salt), CachedRun(*walking, t, salt)) << i << j;
      }
    }
  }
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
