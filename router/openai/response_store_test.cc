#include "router/openai/response_store.h"

#include <set>

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
  EXPECT_EQ(a->response["output"][0]["content"][0]["text"], "1");
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
  EXPECT_EQ(store.Get("resp_d")->response["output"][0]["content"][0]["text"], "y");
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
