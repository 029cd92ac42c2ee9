#include "router/output_assembler.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router {
namespace {

using testing::ByteCodec;

OutputAssembler Make(std::vector<std::string> stops = {}, bool skip_special = true) {
  ByteCodec codec;
  return OutputAssembler(codec.NewDetokenizer({}, skip_special),
                         StopStringMatcher(std::move(stops), false));
}

TEST(OutputAssembler, ChunksCoalesceUntilTaken) {
  OutputAssembler out = Make();
  EXPECT_FALSE(out.has_pending());
  out.AddToken('a');
  out.AddToken('b');
  ASSERT_TRUE(out.has_pending());
  PendingChunk c = out.TakeChunk();
  EXPECT_THAT(c.token_ids, ::testing::ElementsAre('a', 'b'));
  EXPECT_EQ(c.text, "ab");
  EXPECT_FALSE(out.has_pending());
  EXPECT_EQ(out.completion_tokens(), 2);
}

TEST(OutputAssembler, MultiByteCharactersWaitForTheirLastByte) {
  OutputAssembler out = Make();
  out.AddToken(0xE4);
  out.AddToken(0xB8);
  PendingChunk c = out.TakeChunk();
  EXPECT_EQ(c.token_ids.size(), 2u);  // ids go out at once
  EXPECT_EQ(c.text, "");              // the text waits
  out.AddToken(0xAD);
  EXPECT_EQ(out.TakeChunk().text, "\xE4\xB8\xAD");
}

TEST(OutputAssembler, StopStringEndsAndLaterTokensAreIgnored) {
  OutputAssembler out = Make({"cd"});
  EXPECT_FALSE(out.AddToken('a'));
  EXPECT_FALSE(out.AddToken('c'));
  EXPECT_EQ(out.TakeChunk().text, "a");  // 'c' held: it may start "cd"
  EXPECT_TRUE(out.AddToken('d'));
  EXPECT_TRUE(out.AddToken('e'));
  EXPECT_EQ(out.completion_tokens(), 3);
  EXPECT_EQ(out.matched_stop(), "cd");
  PendingChunk c = out.TakeChunk();
  EXPECT_EQ(c.text, "");
  EXPECT_THAT(c.token_ids, ::testing::ElementsAre('d'));  // 'c' went out with "a"
}

TEST(OutputAssembler, FinishReleasesHeldTextAndPartialCharacters) {
  OutputAssembler out = Make({"xyz"});
  out.AddToken('x');
  out.AddToken('y');
  out.AddToken(0xC3);
  EXPECT_FALSE(out.Finish());
  EXPECT_EQ(out.TakeChunk().text, "xy\xEF\xBF\xBD");
}

TEST(OutputAssembler, SpecialTokensFollowSkipSpecialTokens) {
  OutputAssembler skip = Make({}, true);
  skip.AddToken(ByteCodec::kEos);
  EXPECT_EQ(skip.TakeChunk().text, "");
  OutputAssembler keep = Make({}, false);
  keep.AddToken(ByteCodec::kEos);
  EXPECT_EQ(keep.TakeChunk().text, "<eos>");
}

}  // namespace
}  // namespace mlaserve::router
