#include "router/client_outbox.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router {
namespace {

using testing::ByteCodec;
using testing::BytesToIds;

// Records what the outbox writes; a write stays "in flight" until the test completes it.
class RecordingClient final : public GenerateClient {
 public:
  void Send(const v1::GenerateResponse& message) override { sent.push_back(message); }
  void End(const absl::Status& status) override {
    ++ends;
    end = status;
  }
  std::vector<v1::GenerateResponse> sent;
  int ends = 0;
  absl::Status end;
};

class ClientOutboxTest : public ::testing::Test {
 protected:
  void Open(std::vector<std::string> stops = {}, bool skip_special = true,
            std::vector<int32_t> stop_tokens = {}) {
    ByteCodec codec;
    outbox_.Open({.request_id = "req-1", .prompt_tokens = 3},
                 OutputAssembler(codec.NewDetokenizer({}, skip_special),
                                 StopStringMatcher(std::move(stops), false),
                                 std::move(stop_tokens)));
  }
  ClientOutbox::Added Add(const std::string& text) {
    const std::vector<int32_t> ids = BytesToIds(text);
    return outbox_.AddTokens(ids);
  }
  // Completes the write in flight and lets the outbox start the next.
  void WriteDone(bool ok = true) {
    outbox_.WriteDone(ok);
    outbox_.Pump();
  }

  RecordingClient client_;
  ClientOutbox outbox_{&client_};
};

TEST_F(ClientOutboxTest, TokensCoalesceWhileAWriteIsInFlight) {
  Open();
  Add("ab");
  outbox_.Pump();
  ASSERT_EQ(client_.sent.size(), 1u);
  EXPECT_EQ(client_.sent[0].chunk().text(), "ab");
  EXPECT_EQ(client_.sent[0].request_id(), "req-1");
  Add("c");
  Add("d");
  outbox_.Pump();  // the first write is still in flight: nothing more goes out
  EXPECT_EQ(client_.sent.size(), 1u);
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 2u);
  EXPECT_EQ(client_.sent[1].chunk().text(), "cd");
  EXPECT_THAT(client_.sent[1].chunk().token_ids(), ::testing::ElementsAre('c', 'd'));
  EXPECT_EQ(client_.sent[1].chunk().prompt_tokens(), 3);
  EXPECT_EQ(client_.sent[1].chunk().completion_tokens(), 4);
}

// Prompt logprobs (5000 entries, as a long prompt's worker messages bring them) leave in
// chunks of at most 2048 ahead of the generated tokens, which share the last one; the chunks
// before carry no tokens and completion_tokens 0.
TEST_F(ClientOutboxTest, PromptLogprobsLeaveInBoundedChunksBeforeTheTokens) {
  Open();
  google::protobuf::RepeatedPtrField<v1::PromptTokenLogprobs> entries;
  for (int i = 0; i < 5000; ++i) {
    v1::PromptTokenLogprobs* e = entries.Add();
    e->set_token_id(i % 256);
    if (i > 0) e->set_logprob(-0.5f);
  }
  outbox_.AddPromptLogprobs(entries);
  Add("ab");
  outbox_.Pump();
  std::vector<int> sizes;
  int next = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(client_.sent.size(), static_cast<size_t>(i + 1));
    const v1::GenerateChunk& c = client_.sent[i].chunk();
    sizes.push_back(c.prompt_logprobs_size());
    for (const v1::PromptTokenLogprobs& e : c.prompt_logprobs()) {
      EXPECT_EQ(e.token_id(), next % 256);
      EXPECT_EQ(e.has_logprob(), next > 0);
      ++next;
    }
    EXPECT_EQ(c.text(), i < 2 ? "" : "ab");
    EXPECT_EQ(c.token_ids_size(), i < 2 ? 0 : 2);
    EXPECT_EQ(c.completion_tokens(), i < 2 ? 0 : 2);
    WriteDone();
  }
  EXPECT_EQ(sizes, (std::vector<int>{2048, 2048, 904}));
  EXPECT_EQ(client_.sent.size(), 3u);
}

TEST_F(ClientOutboxTest, CompleteFollowsThePendingChunkThenTheStatus) {
  Open();
  Add("hi");
  v1::GenerateComplete c;
  c.set_decode_worker_id("decode-1");
  outbox_.Complete(v1::FINISH_REASON_LENGTH, 257, c);
  outbox_.Pump();
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 2u);
  EXPECT_EQ(client_.sent[0].chunk().text(), "hi");
  const v1::GenerateComplete& done = client_.sent[1].complete();
  EXPECT_EQ(done.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(done.matched_token_id(), 257);
  EXPECT_EQ(done.completion_tokens(), 2);
  EXPECT_EQ(done.prompt_tokens(), 3);
  EXPECT_EQ(done.decode_worker_id(), "decode-1");
  EXPECT_EQ(client_.ends, 0);  // `complete` is still being written
  WriteDone();
  EXPECT_EQ(client_.ends, 1);
  EXPECT_TRUE(client_.end.ok());
  WriteDone();  // nothing more: End came once
  EXPECT_EQ(client_.ends, 1);
}

TEST_F(ClientOutboxTest, AStopStringEndsTheOutputAndNamesItself) {
  Open({"lo w"});
  ClientOutbox::Added added = Add("hello world");
  EXPECT_TRUE(added.stopped);
  EXPECT_EQ(added.tokens, 7);  // "hello w": the token completing the stop string is the last
  outbox_.Complete(v1::FINISH_REASON_STOP, std::nullopt, {});
  outbox_.Pump();
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 2u);
  EXPECT_EQ(client_.sent[0].chunk().text(), "hel");
  EXPECT_EQ(client_.sent[1].complete().matched_stop(), "lo w");
  EXPECT_FALSE(client_.sent[1].complete().has_matched_token_id());
}

TEST_F(ClientOutboxTest, TextHeldForAPossibleStopStringIsReleasedAtTheEnd) {
  Open({"xyz"});
  EXPECT_FALSE(Add("abxy").stopped);  // "xy" is held: it may start the stop string
  outbox_.Complete(v1::FINISH_REASON_LENGTH, std::nullopt, {});
  outbox_.Pump();
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 2u);
  EXPECT_EQ(client_.sent[0].chunk().text(), "abxy");
  EXPECT_EQ(client_.sent[1].complete().finish_reason(), v1::FINISH_REASON_LENGTH);
}

// The decode worker names the stop token after sending it: its text, held until then, is left
// out (skip_special_tokens off would show "<eos>"); its id and count stay.
TEST_F(ClientOutboxTest, TheMatchedStopTokensTextIsLeftOut) {
  Open({}, /*skip_special=*/false, {ByteCodec::kEos});
  const std::vector<int32_t> ids = {'o', 'k', ByteCodec::kEos};
  EXPECT_EQ(outbox_.AddTokens(ids).tokens, 3);
  outbox_.Complete(v1::FINISH_REASON_STOP, ByteCodec::kEos, {});
  outbox_.Pump();
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 2u);
  EXPECT_EQ(client_.sent[0].chunk().text(), "ok");
  EXPECT_THAT(client_.sent[0].chunk().token_ids(),
              ::testing::ElementsAre('o', 'k', ByteCodec::kEos));
  EXPECT_EQ(client_.sent[1].complete().matched_token_id(), ByteCodec::kEos);
  EXPECT_EQ(client_.sent[1].complete().completion_tokens(), 3);
}

// A possible stop token whose text completes a stop string once the next token shows it was
// text: that next token is not taken (the router's prefix-affinity ids and token metric count
// what AddTokens took).
TEST_F(ClientOutboxTest, ATokenAfterTheEndIsNotTaken) {
  Open({"kl"}, true, {'l'});
  const std::vector<int32_t> ids = {'o', 'k', 'l', 'a', 'b'};
  ClientOutbox::Added added = outbox_.AddTokens(ids);
  EXPECT_TRUE(added.stopped);
  EXPECT_EQ(added.tokens, 3);
}

// A held token's id and logprobs leave before its text is known; when the end shows it did not
// stop generation (length), its text follows in a chunk of its own, with no ids or logprobs,
// so ids and logprobs still pair up chunk by chunk.
TEST_F(ClientOutboxTest, AHeldTokensTextFollowsItsIdWhenItDidNotEndGeneration) {
  Open({}, true, {'l'});
  v1::TokenLogprobs lp[2];
  lp[0].set_logprob(-1.0f);
  lp[1].set_logprob(-2.0f);
  const std::vector<int32_t> ids = {'o', 'l'};
  const std::vector<const v1::TokenLogprobs*> logprobs = {&lp[0], &lp[1]};
  EXPECT_EQ(outbox_.AddTokens(ids, logprobs).tokens, 2);
  outbox_.Pump();
  ASSERT_EQ(client_.sent.size(), 1u);
  EXPECT_THAT(client_.sent[0].chunk().token_ids(), ::testing::ElementsAre('o', 'l'));
  ASSERT_EQ(client_.sent[0].chunk().logprobs_size(), 2);
  EXPECT_EQ(client_.sent[0].chunk().logprobs(1).logprob(), -2.0f);
  EXPECT_EQ(client_.sent[0].chunk().text(), "o");
  outbox_.Complete(v1::FINISH_REASON_LENGTH, std::nullopt, {});
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 2u);
  const v1::GenerateChunk& rest = client_.sent[1].chunk();
  EXPECT_EQ(rest.text(), "l");
  EXPECT_EQ(rest.token_ids_size(), 0);
  EXPECT_EQ(rest.logprobs_size(), 0);
  EXPECT_EQ(rest.completion_tokens(), 2);
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 3u);
  EXPECT_EQ(client_.sent[2].complete().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_FALSE(client_.sent[2].complete().has_matched_token_id());
  EXPECT_EQ(client_.sent[2].complete().completion_tokens(), 2);
}

// A client that leaves while a stop token's text is held gets nothing more, and its End once
// the call ends: the held text goes nowhere.
TEST_F(ClientOutboxTest, AClientGoneWhileATokenIsHeldGetsOnlyItsEnd) {
  Open({}, false, {ByteCodec::kEos});
  const std::vector<int32_t> ids = {'o', ByteCodec::kEos};
  outbox_.AddTokens(ids);
  outbox_.ClientGone();
  outbox_.Pump();
  EXPECT_EQ(client_.ends, 0);  // the call has not ended yet
  outbox_.Complete(v1::FINISH_REASON_STOP, ByteCodec::kEos, {});
  outbox_.Pump();
  EXPECT_TRUE(client_.sent.empty());
  EXPECT_EQ(client_.ends, 1);
  EXPECT_TRUE(client_.end.ok());
}

TEST_F(ClientOutboxTest, AFailureBeforeAnyOutputIsTheStatusAlone) {
  outbox_.Fail(absl::InvalidArgumentError("prompt is empty"));  // refused before Open
  outbox_.Pump();
  EXPECT_TRUE(client_.sent.empty());
  EXPECT_EQ(client_.ends, 1);
  EXPECT_EQ(client_.end.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientOutboxTest, AFailureAfterOutputSendsAnErrorMessageFirst) {
  Open();
  Add("a");
  outbox_.Pump();
  outbox_.Fail(absl::UnavailableError("decode worker went away"));
  outbox_.Complete(v1::FINISH_REASON_STOP, std::nullopt, {});  // too late: the call ended
  WriteDone();
  ASSERT_EQ(client_.sent.size(), 2u);
  EXPECT_EQ(client_.sent[1].error().code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(client_.sent[1].error().message(), "decode worker went away");
  WriteDone();
  EXPECT_EQ(client_.ends, 1);
  EXPECT_EQ(client_.end.code(), absl::StatusCode::kUnavailable);
}

TEST_F(ClientOutboxTest, AGoneClientGetsNothingMoreAndItsEndOnceTheCallEnded) {
  Open();
  Add("a");
  outbox_.Pump();
  Add("b");
  WriteDone(/*ok=*/false);  // the write failed: the client is gone
  EXPECT_EQ(client_.sent.size(), 1u);
  EXPECT_EQ(client_.ends, 0);  // the call has not ended yet
  outbox_.Fail(absl::CancelledError("the client went away"));
  outbox_.Pump();
  EXPECT_EQ(client_.sent.size(), 1u);
  EXPECT_EQ(client_.ends, 1);
  EXPECT_EQ(client_.end.code(), absl::StatusCode::kCancelled);
}

TEST_F(ClientOutboxTest, ACancelledClientWaitsForTheWriteInFlight) {
  Open();
  Add("a");
  outbox_.Pump();
  outbox_.ClientGone();
  outbox_.Fail(absl::CancelledError("the client cancelled the request"));
  outbox_.Pump();
  EXPECT_EQ(client_.ends, 0);  // a write is in flight: End must come after its completion
  WriteDone(/*ok=*/false);
  EXPECT_EQ(client_.ends, 1);
  EXPECT_EQ(client_.sent.size(), 1u);
}

}  // namespace
}  // namespace mlaserve::router
