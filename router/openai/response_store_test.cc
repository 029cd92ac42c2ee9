#include "router/openai/response_store.h"

#include <malloc.h>
#include <pthread.h>

#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

Json Response(const std::string& id, const std::string& text) {
  return Json{{"id", id},
              {"object", "response"},
              {"output", Json::array({Json{{"type", "message"},
                                           {"role", "assistant"},
                                           {"content", Json::array({Json{{"type", "output_text"}, {"text", text}}})}}})}};
}

Json UserInput(const std::string& text) {
  return Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", text}}});
}

TEST(ResponseStoreTest, KeepsReadsAndDeletes) {
  ResponseStore store({.max_responses = 4});
  EXPECT_EQ(store.Get("resp_a"), nullptr);
  ASSERT_TRUE(store.Put(Response("resp_a", "1"), UserInput("q"), nullptr));
  std::shared_ptr<const ResponseStore::Entry> a = store.Get("resp_a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(Json::parse(a->response)["output"][0]["content"][0]["text"], "1");
  EXPECT_EQ(store.size(), 1u);
  EXPECT_GT(store.bytes(), 0u);
  EXPECT_TRUE(store.Erase("resp_a"));
  EXPECT_FALSE(store.Erase("resp_a"));
  EXPECT_EQ(store.Get("resp_a"), nullptr);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_NE(a, nullptr);  // a reader keeps what it read
}

// A continued conversation: every turn's input then output, oldest first.
TEST(ResponseStoreTest, ConversationFollowsTheChain) {
  ResponseStore store({.max_responses = 4});
  store.Put(Response("resp_a", "1"), UserInput("q1"), nullptr);
  store.Put(Response("resp_b", "2"), UserInput("q2"), store.Get("resp_a"));
  const Json items = ResponseStore::Conversation(*store.Get("resp_b"));
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0]["content"], "q1");
  EXPECT_EQ(items[1]["content"][0]["text"], "1");
  EXPECT_EQ(items[2]["content"], "q2");
  EXPECT_EQ(items[3]["content"][0]["text"], "2");
  // The chain outlives its evicted head: b keeps a's turn alive.
  store.Erase("resp_a");
  EXPECT_EQ(ResponseStore::Conversation(*store.Get("resp_b")).size(), 4u);
}

TEST(ResponseStoreTest, EvictsTheLeastRecentlyUsed) {
  ResponseStore store({.max_responses = 3});
  for (const char* id : {"resp_a", "resp_b", "resp_c"}) store.Put(Response(id, "x"), UserInput("q"), nullptr);
  ASSERT_NE(store.Get("resp_a"), nullptr);  // a is now the most recent; b the least
  store.Put(Response("resp_d", "x"), UserInput("q"), nullptr);
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.Get("resp_b"), nullptr);
  for (const char* id : {"resp_a", "resp_c", "resp_d"}) EXPECT_NE(store.Get(id), nullptr) << id;
  // The same id again replaces it.
  store.Put(Response("resp_d", "y"), UserInput("q"), nullptr);
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(Json::parse(store.Get("resp_d")->response)["output"][0]["content"][0]["text"], "y");
}

// The byte bound counts each response's whole conversation (what it keeps alive).
TEST(ResponseStoreTest, BytesBoundTheKeptConversations) {
  const std::string big(1000, 'x');
  const size_t one = [&] {
    ResponseStore probe({});
    probe.Put(Response("resp_0", big), UserInput("q"), nullptr);
    return probe.bytes();
  }();
  ResponseStore store({.max_responses = 100, .max_bytes = 3 * one + one / 2});
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store.Put(Response("resp_" + std::to_string(i), big), UserInput("q"), nullptr));
    EXPECT_LE(store.bytes(), 3 * one + one / 2);
  }
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.Get("resp_1"), nullptr);
  // A continuation counts its history: two turns' worth.
  ASSERT_TRUE(store.Put(Response("resp_5", big), UserInput("q"), store.Get("resp_4")));
  EXPECT_GE(store.Get("resp_5")->conversation_bytes, 2 * one);
  EXPECT_LE(store.bytes(), 3 * one + one / 2);
  // A conversation over the bound alone is not kept.
  ResponseStore tiny({.max_responses = 100, .max_bytes = one / 2});
  EXPECT_FALSE(tiny.Put(Response("resp_x", big), UserInput("q"), nullptr));
  EXPECT_EQ(tiny.Get("resp_x"), nullptr);
  ResponseStore none({.max_responses = 0});
  EXPECT_FALSE(none.Put(Response("resp_x", "1"), UserInput("q"), nullptr));
}

// The heap glibc's allocator has handed out (small and mmapped blocks).
size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// A response whose output text carries logprobs (top 5 each): small JSON values, which as a
// parsed JSON tree take several times their text's size.
Json LogprobsResponse(const std::string& id, int tokens) {
  Json logprobs = Json::array();
  for (int t = 0; t < tokens; ++t) {
    Json top = Json::array();
    for (int k = 0; k < 5; ++k) top.push_back(Json{{"token", "ab"}, {"logprob", -1.25}, {"bytes", {97, 98}}});
    logprobs.push_back(Json{{"token", "ab"}, {"logprob", -0.5}, {"bytes", {97, 98}}, {"top_logprobs", std::move(top)}});
  }
  Json r = Response(id, std::string(2 * tokens, 'x'));
  r["output"][0]["content"][0]["logprobs"] = std::move(logprobs);
  return r;
}

// What the byte bound counts is the memory the kept responses take.
TEST(ResponseStoreTest, BytesAreTheMemoryHeld) {
  {  // calibration: this allocator's heap is the one mallinfo2 reports
    const size_t before = HeapInUse();
    std::vector<char> probe(1 << 20, 'x');
    if (HeapInUse() < before + probe.size()) GTEST_SKIP() << "mallinfo2 does not see this allocator's heap";
  }
  constexpr size_t kMaxBytes = 4u << 20;
  const size_t before = HeapInUse();
  {
    ResponseStore store({.max_responses = 1000, .max_bytes = kMaxBytes});
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(store.Put(LogprobsResponse("resp_" + std::to_string(i), 200), UserInput("q"), nullptr));
    }
    ASSERT_GT(store.size(), 10u);
    ASSERT_LT(store.size(), 200u);  // the byte bound evicted some
    EXPECT_LE(store.bytes(), kMaxBytes);
    const size_t held = HeapInUse() - before;
    EXPECT_LE(held, kMaxBytes + kMaxBytes / 8) << store.size() << " responses counted as " << store.bytes()
                                               << " bytes";
    // Read back as they were given.
    const std::shared_ptr<const ResponseStore::Entry> last = store.Get("resp_199");
    ASSERT_NE(last, nullptr);
    EXPECT_EQ(Json::parse(last->response), LogprobsResponse("resp_199", 200));
    EXPECT_EQ(ResponseStore::Conversation(*last)[1], LogprobsResponse("resp_199", 200)["output"][0]);
  }
}

// A long chain of continuations (each kept response holds the one it continues) is released
// without stack frames per turn: here on a thread with a 1 MiB stack, which recursive release
// overflows at some 30,000 turns.
TEST(ResponseStoreTest, ALongChainIsReleasedInALoop) {
  constexpr int kTurns = 200000;
  auto chain = std::make_unique<ResponseStore>(
      ResponseStore::Options{.max_responses = 1, .max_bytes = size_t{1} << 40});
  std::shared_ptr<const ResponseStore::Entry> last;
  for (int i = 0; i < kTurns; ++i) {
    const std::string id = "resp_" + std::to_string(i);
    ASSERT_TRUE(chain->Put(Json{{"id", id}, {"output", Json::array()}}, Json::array(), std::move(last)));
    last = chain->Get(id);
  }
  EXPECT_EQ(chain->size(), 1u);  // the last turn keeps the others alive
  EXPECT_EQ(ResponseStore::Conversation(*last).size(), 0u);
  last.reset();
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 1 << 20), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* store) -> void* {
                  // Drops the last turn, and the chain with it.
                  static_cast<std::unique_ptr<ResponseStore>*>(store)->reset();
                  return nullptr;
                },
                &chain),
            0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(chain, nullptr);
}

TEST(ResponseStoreTest, IdsAreRandom) {
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    const std::string id = NewResponseId();
    EXPECT_THAT(id, ::testing::MatchesRegex("resp_[0-9a-f]{32}"));
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100u);
}

}  // namespace
}  // namespace mlaserve::router::openai
