#include "router/prefix_affinity.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/page.h"

namespace mlaserve::router {
namespace {

constexpr int64_t kPage = kernels::kPageSize;

// `n` token ids, distinct for each `seed`.
std::vector<int32_t> Tokens(int64_t n, int32_t seed) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(seed * 100'000 + static_cast<int32_t>(i));
  return t;
}

// `prefix` followed by `n` tokens of `seed`.
std::vector<int32_t> Extend(std::vector<int32_t> prefix, int64_t n, int32_t seed) {
  for (int32_t t : Tokens(n, seed)) prefix.push_back(t);
  return prefix;
}

TEST(PrefixAffinity, APromptMatchesItsWholePagesOnTheWorkerItWasRecordedFor) {
  PrefixAffinity table({});
  const std::vector<int32_t> a = Tokens(300, 1);  // 4 whole pages and 44 tokens
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), 0);
  EXPECT_EQ(table.Record("prefill-1", a), 0);  // nothing was expected cached
  EXPECT_EQ(table.entries(), 4);
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), 4 * kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-2", a), 0);
  EXPECT_EQ(table.Record("prefill-1", a), 4 * kPage);  // sent again: expected cached
  EXPECT_EQ(table.entries(), 4);  // refreshed, not added
  // A longer prompt that starts with it reuses its whole pages.
  EXPECT_EQ(table.MatchedTokens("prefill-1", Extend(a, 500, 2)), 4 * kPage);
}

TEST(PrefixAffinity, OnlyLeadingPagesSharedToTheLastTokenCount) {
  PrefixAffinity table({});
  const std::vector<int32_t> a = Tokens(300, 1);
  table.Record("prefill-1", a);
  const std::vector<int32_t> first130(a.begin(), a.begin() + 130);
  const std::vector<int32_t> first127(a.begin(), a.begin() + 127);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Extend(first130, 200, 3)), 2 * kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Extend(first127, 200, 3)), 1 * kPage);
  // One token differs in page 1: pages 1.. hang from a different chain, page 0 still matches.
  std::vector<int32_t> b = a;
  b[70] = -1;
  EXPECT_EQ(table.MatchedTokens("prefill-1", b), 1 * kPage);
  // The first token differs: nothing matches, though pages 1.. hold the same tokens.
  b = a;
  b[0] = -1;
  EXPECT_EQ(table.MatchedTokens("prefill-1", b), 0);
}

TEST(PrefixAffinity, AtMostThePromptLessItsLastTokenIsExpectedCached) {
  PrefixAffinity table({});
  const std::vector<int32_t> a = Tokens(2 * kPage, 1);  // exactly 2 pages
  table.Record("prefill-1", a);
  EXPECT_EQ(table.entries(), 2);  // the worker keeps both pages
  // The same prompt again: its last token is computed, so the second page is not reused.
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Extend(a, 1, 2)), 2 * kPage);
  const std::vector<int32_t> one_page(a.begin(), a.begin() + kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-1", one_page), 0);
  // Prompts shorter than a page have nothing to record or match.
  EXPECT_EQ(table.Record("prefill-1", Tokens(kPage - 1, 5)), 0);
  EXPECT_EQ(table.Record("prefill-1", std::vector<int32_t>{}), 0);
  EXPECT_EQ(table.entries(), 2);
  EXPECT_EQ(PrefixAffinity::PromptPages(a).reusable_pages(), 1u);
  EXPECT_EQ(PrefixAffinity::PromptPages(a).keys().size(), 2u);
  EXPECT_EQ(PrefixAffinity::PromptPages(std::vector<int32_t>{}).reusable_pages(), 0u);
}

TEST(PrefixAffinity, ASaltIsMixedIntoTheChainSoOtherSaltsNeverMatch) {
  PrefixAffinity table({});
  const std::vector<int32_t> a = Tokens(300, 1);  // 4 whole pages
  using Pages = PrefixAffinity::PromptPages;
  EXPECT_EQ(table.Record("prefill-1", Pages(a, "tenant-a")), 0);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Pages(a, "tenant-a")), 4 * kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Pages(Extend(a, 100, 2), "tenant-a")), 4 * kPage);
  // Another salt, the default (spelled either way) or a prefix of the salt: nothing, on every
  // page (each key hangs from page 0's).
  EXPECT_EQ(table.MatchedTokens("prefill-1", Pages(a, "tenant-b")), 0);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Pages(a, "")), 0);
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), 0);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Pages(a, "tenant-")), 0);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NE(Pages(a, "tenant-a").keys()[i], Pages(a, "tenant-b").keys()[i]) << i;
    EXPECT_NE(Pages(a, "tenant-a").keys()[i], Pages(a).keys()[i]) << i;
  }
  // The same tokens under the default salt are entries of their own.
  EXPECT_EQ(table.Record("prefill-1", a), 0);
  EXPECT_EQ(table.entries(), 8);
  EXPECT_EQ(table.MatchedTokens("prefill-1", Pages(a, "")), 4 * kPage);
  EXPECT_EQ(Pages(a, "").keys(), Pages(a).keys());
}

TEST(PrefixAffinity, WorkersAreRecordedApart) {
  PrefixAffinity table({});
  const std::vector<int32_t> a = Tokens(5 * kPage, 1), b = Tokens(3 * kPage, 2);
  table.Record("prefill-1", a);
  table.Record("prefill-2", b);
  table.Record("prefill-2", std::vector<int32_t>(a.begin(), a.begin() + 2 * kPage));
  EXPECT_EQ(table.entries(), 5 + 3 + 2);
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), 4 * kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-2", a), 2 * kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-1", b), 0);
  EXPECT_EQ(table.MatchedTokens("prefill-2", b), 2 * kPage);
}

TEST(PrefixAffinity, TheBoundEvictsTheLeastRecentlyRecordedPagesFirst) {
  PrefixAffinity table({.max_entries = 8});
  const std::vector<int32_t> a = Extend(Tokens(4 * kPage, 1), 1, 9);  // 4 reusable pages
  const std::vector<int32_t> b = Extend(Tokens(4 * kPage, 2), 1, 9);
  const std::vector<int32_t> c = Extend(Tokens(4 * kPage, 3), 1, 9);
  table.Record("prefill-1", a);
  table.Record("prefill-1", b);
  EXPECT_EQ(table.entries(), 8);
  table.Record("prefill-1", a);  // a is now more recent than b
  table.Record("prefill-1", c);  // evicts b, the least recent
  EXPECT_EQ(table.entries(), 8);
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), 4 * kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-1", b), 0);
  EXPECT_EQ(table.MatchedTokens("prefill-1", c), 4 * kPage);
  // A partly evicted prompt loses its deepest pages first and keeps a usable prefix.
  table.Record("prefill-2", std::vector<int32_t>(b.begin(), b.begin() + 2 * kPage));
  EXPECT_EQ(table.entries(), 8);
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), 2 * kPage);
  EXPECT_EQ(table.MatchedTokens("prefill-1", c), 4 * kPage);
}

TEST(PrefixAffinity, APromptLongerThanTheBoundKeepsItsFirstPages) {
  PrefixAffinity table({.max_entries = 3});
  const std::vector<int32_t> a = Tokens(10 * kPage, 1);
  EXPECT_EQ(table.Record("prefill-1", a), 0);
  EXPECT_EQ(table.entries(), 3);
  EXPECT_EQ(table.MatchedTokens("prefill-1", a), 3 * kPage);
  EXPECT_EQ(PrefixAffinity({.max_entries = 0}).max_entries(), 1);
  EXPECT_EQ(PrefixAffinity({.max_entries = int64_t{1} << 40}).max_entries(),
            PrefixAffinity::kMaxEntries);
}

TEST(PrefixAffinity, ConcurrentRecordsAndMatchesKeepTheBound) {
  constexpr int kThreads = 8;
  constexpr int kPrompts = 200;
  PrefixAffinity table({.max_entries = 64});
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string worker = "prefill-" + std::to_string(t % 3);
      for (int i = 0; i < kPrompts; ++i) {
        // Prompts of 1 to 5 pages sharing the thread's first page, plus a token.
        const std::vector<int32_t> p =
            Extend(Extend(Tokens(kPage, t), (i % 5) * kPage, 1000 + i), 1, 7);
        const int64_t before = table.MatchedTokens(worker, p);
        const int64_t expected = table.Record(worker, p);
        const int64_t most = static_cast<int64_t>(p.size() - 1) / kPage * kPage;
        if (before % kPage != 0 || before > most || expected % kPage != 0 || expected > most) {
          ++bad[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_EQ(table.entries(), 64);
  const std::vector<int32_t> last = Extend(Tokens(3 * kPage, 99), 1, 7);
  table.Record("prefill-9", last);
  EXPECT_EQ(table.MatchedTokens("prefill-9", last), 3 * kPage);
  EXPECT_EQ(table.entries(), 64);
}

}  // namespace
}  // namespace mlaserve::router
