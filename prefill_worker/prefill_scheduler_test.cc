#include "prefill_worker/prefill_scheduler.h"

#include <numeric>

#include "gtest/gtest.h"

namespace mlaserve::prefill {
namespace {

std::unique_ptr<model::KvPool> Pool(int pages) {
  model::KvPoolOptions o;
  o.num_layers = 1;
  o.num_pages = pages;
  o.latent_dim = 4;
  return std::move(*model::KvPool::Create(o));
}

std::shared_ptr<PrefillSequence> Seq(const std::string& id, int n) {
  auto s = std::make_shared<PrefillSequence>();
  s->id = id;
  s->tokens.assign(n, 1);
  return s;
}

// (id, start, len, last) of a batch, for readable expectations.
std::vector<std::tuple<std::string, int, int, bool>> Shape(const std::vector<PrefillChunk>& b) {
  std::vector<std::tuple<std::string, int, int, bool>> out;
  for (const auto& c : b) out.emplace_back(c.seq->id, c.start, c.len, c.last);
  return out;
}

// A prompt's later chunk and a one-token prompt come before the fresh prompts (the policy may
// then split the batch's attention), the budget still given in admission order.
TEST(PrefillSchedulerTest, FreshPromptsAfterLaterChunks) {
  auto pool = Pool(64);
  PrefillScheduler s({.max_batch_tokens = 40, .chunk_size = 16, .max_batch_seqs = 8},
                     pool.get());
  s.Add(Seq("long", 40));
  using T = std::tuple<std::string, int, int, bool>;
  auto b1 = s.Schedule();
  EXPECT_EQ(Shape(b1), (std::vector<T>{{"long", 0, 16, false}}));
  s.Advance(b1);
  s.Add(Seq("fresh1", 30));
  s.Add(Seq("one", 1));
  s.Add(Seq("fresh2", 40));
  // Budget 40: long 16, fresh1 16, one 1, fresh2 what is left (7).
  auto b2 = s.Schedule();
  EXPECT_EQ(Shape(b2), (std::vector<T>{{"long", 16, 16, false}, {"one", 0, 1, true},
                                       {"fresh1", 0, 16, false}, {"fresh2", 0, 7, false}}));
  s.Advance(b2);
  EXPECT_EQ(Shape(s.Schedule()), (std::vector<T>{{"long", 32, 8, true}, {"fresh1", 16, 14, true},
                                                 {"fresh2", 7, 16, false}}));
}

TEST(PrefillSchedulerTest, ChunksUnderTokenBudgetRunningFirst) {
  auto pool = Pool(64);
  PrefillScheduler s({.max_batch_tokens = 256, .chunk_size = 128, .max_batch_seqs = 8},
                     pool.get());
  s.Add(Seq("a", 100));
  s.Add(Seq("b", 300));
  s.Add(Seq("c", 50));
  using T = std::tuple<std::string, int, int, bool>;

  auto b1 = s.Schedule();
  EXPECT_EQ(Shape(b1), (std::vector<T>{{"a", 0, 100, true}, {"b", 0, 128, false},
                                       {"c", 0, 28, false}}));
  EXPECT_EQ(pool->free_pages(), 64 - 2 - 5 - 1);
  auto done = s.Advance(b1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->id, "a");
  EXPECT_EQ(pool->free_pages(), 64 - 5 - 1);  // a's pages freed once it is done
  EXPECT_EQ(s.pending_tokens(), 172 + 22);

  auto b2 = s.Schedule();
  EXPECT_EQ(Shape(b2), (std::vector<T>{{"b", 128, 128, false}, {"c", 28, 22, true}}));
  s.Advance(b2);
  auto b3 = s.Schedule();
  EXPECT_EQ(Shape(b3), (std::vector<T>{{"b", 256, 44, true}}));
  EXPECT_EQ(s.Advance(b3).size(), 1u);
  EXPECT_TRUE(s.Schedule().empty());
  EXPECT_EQ(pool->free_pages(), 64);
}

TEST(PrefillSchedulerTest, BudgetNeverExceededAndEveryTokenScheduledOnce) {
  auto pool = Pool(256);
  PrefillScheduler s({.max_batch_tokens = 200, .chunk_size = 64, .max_batch_seqs = 3},
                     pool.get());
  const std::vector<int> lens = {1, 64, 65, 130, 500, 7, 200};
  for (size_t i = 0; i < lens.size(); ++i) s.Add(Seq(std::to_string(i), lens[i]));
  std::vector<int> scheduled(lens.size(), 0);
  int steps = 0;
  while (true) {
    auto b = s.Schedule();
    if (b.empty()) break;
    int tokens = 0;
    for (const auto& c : b) {
      EXPECT_LE(c.len, 64);
      EXPECT_EQ(c.start, scheduled[std::stoi(c.seq->id)]);  // contiguous, in order
      scheduled[std::stoi(c.seq->id)] += c.len;
      tokens += c.len;
    }
    EXPECT_LE(tokens, 200);
    EXPECT_LE(b.size(), 3u);
    s.Advance(b);
    ASSERT_LT(++steps, 100);
  }
  EXPECT_EQ(scheduled, lens);
  EXPECT_EQ(pool->free_pages(), 256);
}

TEST(PrefillSchedulerTest, AdmissionWaitsForPagesInArrivalOrder) {
  auto pool = Pool(4);
  PrefillScheduler s({.max_batch_tokens = 1000, .chunk_size = 1000, .max_batch_seqs = 8},
                     pool.get());
  s.Add(Seq("big", 3 * 64));   // 3 pages
  s.Add(Seq("next", 2 * 64));  // 2 pages: must wait for big
  s.Add(Seq("tiny", 1));       // 1 page would fit, but does not overtake
  auto b1 = s.Schedule();
  ASSERT_EQ(b1.size(), 1u);
  EXPECT_EQ(b1[0].seq->id, "big");
  EXPECT_EQ(s.num_waiting(), 2);
  s.Advance(b1);
  auto b2 = s.Schedule();
  ASSERT_EQ(b2.size(), 2u);  // both admitted in arrival order; the one-token prompt listed first
  EXPECT_EQ(b2[0].seq->id, "tiny");
  EXPECT_EQ(b2[1].seq->id, "next");
}

std::shared_ptr<PrefillSequence> SeqOf(const std::string& id, std::vector<int32_t> tokens) {
  auto s = std::make_shared<PrefillSequence>();
  s->id = id;
  s->tokens = std::move(tokens);
  return s;
}

std::vector<int32_t> Iota(int n, int32_t from) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), from);
  return t;
}

// With a prefix cache, admission takes the cached pages of a prompt's start and counts them
// against the pages it needs; a prompt that fits only with them is admitted.
TEST(PrefillSchedulerTest, CachedPagesStartThePromptAndCountAsRoom) {
  auto pool = Pool(4);
  pool->EnablePrefixCache();
  PrefillScheduler s({.max_batch_tokens = 1000, .chunk_size = 1000, .max_batch_seqs = 8},
                     pool.get());
  s.Add(SeqOf("a", Iota(3 * 64, 0)));
  auto b1 = s.Schedule();
  ASSERT_EQ(b1.size(), 1u);
  s.Advance(b1);  // published: 3 cached pages, all free
  EXPECT_EQ(pool->cached_pages(), 3);
  // Holding the one plain page elsewhere leaves a's 3 cached pages free; b (a's first two
  // pages, then 60 tokens of its own) needs 3 pages: a's first two, and one more, for which
  // a's third page is forgotten.
  auto other = pool->Allocate(1);
  ASSERT_TRUE(other.ok());
  auto tokens = Iota(2 * 64, 0);
  for (int i = 0; i < 60; ++i) tokens.push_back(7);
  s.Add(SeqOf("b", tokens));
  auto b2 = s.Schedule();
  ASSERT_EQ(b2.size(), 1u);
  EXPECT_EQ(b2[0].start, 128);
  EXPECT_EQ(b2[0].len, 60);
  EXPECT_EQ(b2[0].seq->cached, 128);
  EXPECT_EQ(pool->free_pages(), 0);
  EXPECT_EQ(pool->cached_pages(), 2);
  s.Advance(b2);
  pool->Free(*other);
  EXPECT_EQ(pool->free_pages(), 4);
}

// A prompt takes cached pages only from prompts of its own cache_salt (the empty salt is the
// shared default), and publishes its pages under its salt.
TEST(PrefillSchedulerTest, CachedPagesAreSharedOnlyUnderTheSameCacheSalt) {
  auto pool = Pool(16);
  pool->EnablePrefixCache();
  PrefillScheduler s({.max_batch_tokens = 1000, .chunk_size = 1000, .max_batch_seqs = 8},
                     pool.get());
  auto salted = [](const std::string& id, const std::string& salt) {
    auto seq = SeqOf(id, Iota(3 * 64 + 10, 0));
    seq->cache_salt = salt;
    return seq;
  };
  s.Add(salted("a", "tenant-a"));
  s.Advance(s.Schedule());
  EXPECT_EQ(pool->cached_pages(), 3);
  // The same tokens under another salt: computed whole, then cached beside a's pages.
  s.Add(salted("b", "tenant-b"));
  auto b1 = s.Schedule();
  ASSERT_EQ(b1.size(), 1u);
  EXPECT_EQ(b1[0].start, 0);
  EXPECT_EQ(b1[0].seq->cached, 0);
  s.Advance(b1);
  EXPECT_EQ(pool->cached_pages(), 6);
  // The default salt finds neither; tenant-a finds a's three pages.
  s.Add(salted("c", ""));
  s.Add(salted("d", "tenant-a"));
  auto b2 = s.Schedule();
  ASSERT_EQ(b2.size(), 2u);
  EXPECT_EQ(b2[0].seq->id, "d");  // continues after its cached start, so before fresh prompts
  EXPECT_EQ(b2[0].start, 192);
  EXPECT_EQ(b2[0].seq->cached, 192);
  EXPECT_EQ(b2[1].seq->id, "c");
  EXPECT_EQ(b2[1].start, 0);
  EXPECT_EQ(b2[1].seq->cached, 0);
  s.Advance(b2);
  EXPECT_EQ(pool->cached_pages(), 9);  // c published under the default salt
  EXPECT_EQ(pool->free_pages(), 16);
}

// Data-parallel pools: the rank that caches most of a prompt's start takes it, even with
// fewer free pages.
TEST(PrefillSchedulerTest, TheRankCachingThePromptsStartTakesIt) {
  auto r0 = Pool(8), r1 = Pool(8);
  r0->EnablePrefixCache();
  r1->EnablePrefixCache();
  PrefillScheduler s({.max_batch_tokens = 1000, .chunk_size = 1000, .max_batch_seqs = 8},
                     std::vector<model::KvPool*>{r0.get(), r1.get()});
  s.Add(SeqOf("a", Iota(2 * 64 + 1, 0)));
  auto b1 = s.Schedule();
  ASSERT_EQ(b1.size(), 1u);
  const int cached_rank = b1[0].seq->rank;
  s.Advance(b1);
  model::KvPool& cached_pool = cached_rank == 0 ? *r0 : *r1;
  auto busy = cached_pool.Allocate(3);  // the caching rank now has fewer free pages
  ASSERT_TRUE(busy.ok());
  s.Add(SeqOf("b", Iota(2 * 64 + 30, 0)));
  auto b2 = s.Schedule();
  ASSERT_EQ(b2.size(), 1u);
  EXPECT_EQ(b2[0].seq->rank, cached_rank);
  EXPECT_EQ(b2[0].seq->cached, 128);
  // Without a cached start, the most free pages decide as before.
  s.Add(SeqOf("c", Iota(10, 500)));
  auto b3 = s.Schedule();
  ASSERT_EQ(b3.size(), 2u);
  EXPECT_EQ(b3[0].seq->id, "b");
  EXPECT_EQ(b3[1].seq->rank, 1 - cached_rank);
  EXPECT_EQ(b3[1].seq->cached, 0);
  s.Advance(b3);
  cached_pool.Free(*busy);
}

TEST(PrefillSchedulerTest, RemoveFreesPagesAndOptionsAreValidated) {
  auto pool = Pool(8);
  PrefillScheduler s({.max_batch_tokens = 64, .chunk_size = 64, .max_batch_seqs = 8},
                     pool.get());
  s.Add(Seq("a", 300));
  ASSERT_EQ(s.Schedule().size(), 1u);
  EXPECT_EQ(pool->free_pages(), 3);
  EXPECT_TRUE(s.Remove("a"));
  EXPECT_FALSE(s.Remove("a"));
  EXPECT_EQ(pool->free_pages(), 8);
  EXPECT_EQ(ValidateSchedulerOptions({.max_batch_tokens = 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSchedulerOptions({.chunk_size = -1}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::prefill
