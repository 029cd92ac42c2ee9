#include "router/output_assembler.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router {
namespace {

using testing::ByteCodec;

OutputAssembler Make(std::vector<std::string> stops = {}, bool skip_special = true,
                     std::vector<int32_t> stop_tokens = {}) {
  ByteCodec codec;
  return OutputAssembler(codec.NewDetokenizer({}, skip_special),
                         StopStringMatcher(std::move(stops), false), std::move(stop_tokens));
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

TEST(StopTokensWithoutText, AreTheStopTokensAndEosUnlessIgnoredNoneWhenIncluded) {
  SamplingConfig s;
  s.stop_token_ids = {'l', 'q'};
  EXPECT_THAT(StopTokensWithoutText(s, {ByteCodec::kEos}),
              ::testing::UnorderedElementsAre('l', 'q', ByteCodec::kEos));
  s.ignore_eos = true;  // EOS does not end generation: its text is output like any token's
  EXPECT_THAT(StopTokensWithoutText(s, {ByteCodec::kEos}),
              ::testing::UnorderedElementsAre('l', 'q'));
  s.include_stop_str_in_output = true;
  EXPECT_THAT(StopTokensWithoutText(s, {ByteCodec::kEos}), ::testing::IsEmpty());
}

// vLLM's rule: the token that ended generation keeps its id (and count), not its text, whatever
// skip_special_tokens says.
TEST(OutputAssembler, TheStopTokenThatEndedGenerationAddsItsIdButNotItsText) {
  for (bool skip_special : {true, false}) {
    SCOPED_TRACE(skip_special ? "skip_special_tokens" : "special tokens shown");
    OutputAssembler eos = Make({}, skip_special, {ByteCodec::kEos, 'l'});
    eos.AddToken('h');
    eos.AddToken('i');
    eos.AddToken(ByteCodec::kEos);
    PendingChunk c = eos.TakeChunk();
    EXPECT_THAT(c.token_ids, ::testing::ElementsAre('h', 'i', ByteCodec::kEos));  // the id at once
    EXPECT_EQ(c.text, "hi");
    EXPECT_FALSE(eos.Finish(ByteCodec::kEos));
    EXPECT_FALSE(eos.has_pending());
    EXPECT_EQ(eos.completion_tokens(), 3);

    // An ordinary stop token.
    OutputAssembler plain = Make({}, skip_special, {ByteCodec::kEos, 'l'});
    plain.AddToken('o');
    plain.AddToken('l');
    EXPECT_EQ(plain.TakeChunk().text, "o");
    plain.Finish('l');
    EXPECT_FALSE(plain.has_pending());
  }
  // Without stop tokens (include_stop_str_in_output), the text is output as skip_special_tokens
  // says.
  OutputAssembler included = Make({}, false);
  included.AddToken('l');
  included.AddToken(ByteCodec::kEos);
  included.Finish(ByteCodec::kEos);
  EXPECT_EQ(included.TakeChunk().text, "l<eos>");
}

// The worker decides: a possible stop token that did not end generation (the output was cut by
// length, or generation went on) is text like any other token.
TEST(OutputAssembler, APossibleStopTokenThatDidNotEndGenerationIsText) {
  OutputAssembler cut = Make({}, true, {'l'});
  cut.AddToken('o');
  cut.AddToken('l');
  EXPECT_EQ(cut.TakeChunk().text, "o");
  cut.Finish(std::nullopt);
  EXPECT_EQ(cut.TakeChunk().text, "l");

  OutputAssembler went_on = Make({}, true, {'l'});
  went_on.AddToken('l');
  went_on.AddToken('a');
  EXPECT_EQ(went_on.TakeChunk().text, "la");

  // Its text completes a stop string only once the next token shows it was text; that token
  // comes after the end and is not taken.
  OutputAssembler stop = Make({"ol"}, true, {'l'});
  EXPECT_FALSE(stop.AddToken('o'));
  EXPECT_FALSE(stop.AddToken('l'));
  EXPECT_TRUE(stop.AddToken('a'));
  EXPECT_EQ(stop.matched_stop(), "ol");
  EXPECT_EQ(stop.completion_tokens(), 2);
  PendingChunk c = stop.TakeChunk();
  EXPECT_THAT(c.token_ids, ::testing::ElementsAre('o', 'l'));
  EXPECT_EQ(c.text, "");
}

// The held token's logprobs go out with its id, at once: ids and logprobs pair up in every
// chunk, whatever becomes of the token's text.
TEST(OutputAssembler, TheHeldStopTokensLogprobsGoOutWithItsId) {
  OutputAssembler out = Make({}, false, {ByteCodec::kEos});
  v1::TokenLogprobs h, eos;
  h.set_logprob(-0.25f);
  eos.set_logprob(-0.5f);
  out.AddToken('h', &h);
  out.AddToken(ByteCodec::kEos, &eos);
  PendingChunk c = out.TakeChunk();
  EXPECT_THAT(c.token_ids, ::testing::ElementsAre('h', ByteCodec::kEos));
  ASSERT_EQ(c.logprobs.size(), 2u);
  EXPECT_EQ(c.logprobs[0].logprob(), -0.25f);
  EXPECT_EQ(c.logprobs[1].logprob(), -0.5f);
  EXPECT_EQ(c.text, "h");
  EXPECT_FALSE(out.Finish(ByteCodec::kEos));
  EXPECT_FALSE(out.has_pending());

  // A token after the end (the held text completed a stop string) brings no logprobs either.
  OutputAssembler stop = Make({"ol"}, true, {'l'});
  stop.AddToken('o', &h);
  stop.AddToken('l', &eos);
  EXPECT_TRUE(stop.AddToken('a', &h));
  c = stop.TakeChunk();
  EXPECT_EQ(c.token_ids.size(), 2u);
  EXPECT_EQ(c.logprobs.size(), 2u);
}

// As vLLM, which does not detokenize the stop token: a stop string that only its text would
// complete does not match, and the text held for it is released.
TEST(OutputAssembler, AStopStringOnlyTheStopTokensTextWouldCompleteDoesNotMatch) {
  OutputAssembler out = Make({"ol", "o<eos>"}, false, {ByteCodec::kEos, 'l'});
  out.AddToken('o');
  out.AddToken('l');
  EXPECT_EQ(out.TakeChunk().text, "");  // "o" may start a stop string
  EXPECT_FALSE(out.Finish('l'));
  EXPECT_FALSE(out.matched_stop().has_value());
  EXPECT_EQ(out.TakeChunk().text, "o");

  OutputAssembler eos = Make({"o<eos>"}, false, {ByteCodec::kEos});
  eos.AddToken('o');
  eos.AddToken(ByteCodec::kEos);
  EXPECT_FALSE(eos.Finish(ByteCodec::kEos));
  EXPECT_EQ(eos.TakeChunk().text, "o");
}

// Bytes of a character the stop token would never have completed are flushed as U+FFFD, as
// whole-text decoding of the ids before the stop token gives.
TEST(OutputAssembler, APartialCharacterBeforeTheStopTokenIsFlushed) {
  OutputAssembler out = Make({}, false, {ByteCodec::kEos});
  out.AddToken(0xE4);
  out.AddToken(ByteCodec::kEos);
  out.Finish(ByteCodec::kEos);
  EXPECT_EQ(out.TakeChunk().text, "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace mlaserve::router
