#include "router/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

// Feeds pieces one by one; returns everything emitted (plus Flush when nothing matched).
struct FeedResult {
  std::string text;
  std::optional<std::string> matched;
};
FeedResult Feed(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  FeedResult run;
  for (const auto& p : pieces) {
    auto r = m.Append(p);
    run.text += r.emit;
    if (r.matched) {
      run.matched = r.matched;
      return run;
    }
  }
  run.text += m.Flush();
  return run;
}

TEST(StopStringMatcher, NoStopsPassesTextThrough) {
  StopStringMatcher m({}, false);
  auto r = m.Append("hello");
  EXPECT_EQ(r.emit, "hello");
  EXPECT_FALSE(r.matched);
}

TEST(StopStringMatcher, HoldsBackAPossiblePrefixThenReleasesIt) {
  StopStringMatcher m({"END"}, false);
  auto r1 = m.Append("abc E");
  EXPECT_EQ(r1.emit, "abc ");  // "E" may begin "END"
  auto r2 = m.Append("N");
  EXPECT_EQ(r2.emit, "");      // "EN" still may
  auto r3 = m.Append("x");
  EXPECT_EQ(r3.emit, "ENx");   // it did not
  EXPECT_FALSE(r3.matched);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcher, MatchAcrossPiecesCutsTheStopAndEverythingAfter) {
  StopStringMatcher m({"END"}, false);
  FeedResult run = Feed(m, {"The answer", " is 4.E", "N", "D and more"});
  EXPECT_EQ(run.text, "The answer is 4.");
  EXPECT_EQ(run.matched, "END");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.Append("ignored").emit, "");
}

TEST(StopStringMatcher, IncludeStopInOutputKeepsIt) {
  StopStringMatcher m({"\n\n"}, true);
  FeedResult run = Feed(m, {"line one\n", "\nline two"});
  EXPECT_EQ(run.text, "line one\n\n");
  EXPECT_EQ(run.matched, "\n\n");
}

TEST(StopStringMatcher, EarliestMatchWinsAmongSeveralStops) {
  StopStringMatcher m({"world", "lo w"}, false);
  FeedResult run = Feed(m, {"hello world"});
  EXPECT_EQ(run.text, "hel");
  EXPECT_EQ(run.matched, "lo w");
}

TEST(StopStringMatcher, UnmatchedHeldTextComesOutOnFlush) {
  StopStringMatcher m({"STOP"}, false);
  FeedResult run = Feed(m, {"go ST", "O"});
  EXPECT_EQ(run.text, "go STO");
  EXPECT_FALSE(run.matched);
}

TEST(StopStringMatcher, MultiByteStopStrings) {
  StopStringMatcher m({"\xE4\xB8\xAD\xE6\x96\x87"}, false);  // "中文"
  FeedResult run = Feed(m, {"ab\xE4\xB8\xAD", "\xE6\x96\x87", "cd"});
  EXPECT_EQ(run.text, "ab");
  ASSERT_TRUE(run.matched);
}

TEST(StopStringMatcher, RepeatedPrefixCharactersDoNotLoseText) {
  StopStringMatcher m({"aab"}, false);
  FeedResult run = Feed(m, {"a", "a", "a", "b"});
  EXPECT_EQ(run.text, "a");
  EXPECT_EQ(run.matched, "aab");
}

}  // namespace
}  // namespace mlaserve::router
