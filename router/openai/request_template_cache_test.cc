// RequestTemplateCache: a request's template is compiled once per text, least recently used
// forgotten first; too long a text is refused uncompiled; compile errors are kept too.
#include "router/openai/request_template_cache.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;

constexpr char kA[] = "A{{ messages[0].content }}";
constexpr char kB[] = "B{{ messages[0].content }}";
constexpr char kC[] = "C{% for t in tools %}{{ t }}{% endfor %}";

TEST(RequestTemplateCacheTest, TheSameTextIsCompiledOnce) {
  RequestTemplateCache cache(4);
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> first = cache.Get(kA);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> again = cache.Get(std::string(kA));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(first->get(), again->get());
  EXPECT_EQ(cache.compiles(), 1);
  EXPECT_EQ(*(*again)->tmpl.Render({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}), "Ahi");
  EXPECT_FALSE((*again)->reads_tools);

  // Another text (one byte differs) is another template.
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> c = cache.Get(kC);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->reads_tools);
  EXPECT_EQ(cache.compiles(), 2);
}

TEST(RequestTemplateCacheTest, TheLeastRecentlyUsedIsForgottenFirst) {
  RequestTemplateCache cache(2);
  ASSERT_TRUE(cache.Get(kA).ok());
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> b = cache.Get(kB);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(cache.Get(kA).ok());  // A used after B
  EXPECT_EQ(cache.compiles(), 2);
  ASSERT_TRUE(cache.Get(kC).ok());  // evicts B
  EXPECT_EQ(cache.compiles(), 3);
  ASSERT_TRUE(cache.Get(kA).ok());  // still there
  EXPECT_EQ(cache.compiles(), 3);
  // B was forgotten: compiled again; the one handed out before still renders.
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> b2 = cache.Get(kB);
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(cache.compiles(), 4);
  EXPECT_EQ(*(*b)->tmpl.Render({{"messages", {{{"content", "x"}}}}}), "Bx");
  // That evicted C (A was used after it).
  ASSERT_TRUE(cache.Get(kA).ok());
  EXPECT_EQ(cache.compiles(), 4);
  ASSERT_TRUE(cache.Get(kC).ok());
  EXPECT_EQ(cache.compiles(), 5);
}

TEST(RequestTemplateCacheTest, CompileErrorsAreTheInterpretersAndKept) {
  RequestTemplateCache cache(4);
  constexpr char kBroken[] = "ok\n{% for m in messages %}{{ m.content }}";
  const absl::Status want = chat_template::ChatTemplate::Parse(kBroken).status();
  ASSERT_FALSE(want.ok());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::shared_ptr<const RequestTemplate>> t = cache.Get(kBroken);
    EXPECT_EQ(t.status(), want);
    EXPECT_THAT(t.status().message(), HasSubstr("chat template line 2"));
  }
  EXPECT_EQ(cache.compiles(), 1);
}

TEST(RequestTemplateCacheTest, TooLongATextIsRefusedUncompiled) {
  RequestTemplateCache cache(4);
  const std::string at_bound(kMaxRequestTemplateBytes, 'x');
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> t = cache.Get(at_bound);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->tmpl.Render(nlohmann::ordered_json::object()), at_bound);
  t = cache.Get(at_bound + "x");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "the request's chat template has 65537 bytes; at most 65536 are accepted");
  EXPECT_EQ(cache.compiles(), 1);
}

}  // namespace
}  // namespace mlaserve::router::openai
