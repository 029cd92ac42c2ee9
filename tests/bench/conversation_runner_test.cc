// The multi-turn workload's parts: conversations drawn from the seed (conversation.h),
// LoadRunner sending each conversation's turns in order (the next built from the previous
// answer) and different conversations side by side, and the summary's per-turn split.
// multi_turn_bench_test.cc runs the whole bench on it.
#include <algorithm>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "bench/serving/conversation.h"
#include "bench/serving/load_runner.h"
#include "bench/serving/stats.h"
#include "tests/bench/fake_generation_server.h"

namespace mlaserve::bench {
namespace {

using ::testing::HasSubstr;
using testing::FakeBehaviour;
using testing::FakeGenerationServer;
using testing::IndexOfRequestId;
using testing::SeenRequest;

const VocabInfo kVocab{.vocab_size = 1000, .max_context_length = 4096, .excluded_ids = {0, 1}};

ConversationOptions Conversations(int conversations, int turns, int input_len = 40,
                                  int output_len = 6, int message_len = 9, uint64_t seed = 3) {
  return {.first_turns = {.num_prompts = conversations, .input_len = input_len,
                          .output_len = output_len, .seed = seed},
          .turns = turns,
          .message_len = message_len};
}

ConversationDataset MustMake(const ConversationOptions& options) {
  absl::StatusOr<ConversationDataset> d = MakeConversations(options, kVocab);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : ConversationDataset{};
}

std::vector<int32_t> Concat(std::initializer_list<const std::vector<int32_t>*> parts) {
  std::vector<int32_t> out;
  for (const std::vector<int32_t>* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

TEST(ConversationDatasetTest, FirstTurnsAreTheRandomDatasetsAndMessagesAreFixedBySeed) {
  const ConversationOptions options = Conversations(3, 4);
  const ConversationDataset d = MustMake(options);
  ASSERT_EQ(d.first_turns.size(), 3u);
  EXPECT_EQ(d.total_requests(), 12);
  const absl::StatusOr<std::vector<RequestSpec>> plain =
      MakeRandomDataset(options.first_turns, kVocab);
  ASSERT_TRUE(plain.ok());
  for (int c = 0; c < 3; ++c) {
    SCOPED_TRACE(c);
    const RequestSpec& first = d.first_turns[c];
    EXPECT_EQ(first.prompt_token_ids, (*plain)[c].prompt_token_ids);  // the same seed's prompt
    EXPECT_EQ(first.index, c * 4);
    EXPECT_EQ(first.conversation, c);
    EXPECT_EQ(first.turn, 0);
    EXPECT_EQ(first.follow_ups, 3);
    EXPECT_TRUE(first.keep_output_ids);
    ASSERT_EQ(d.messages[c].size(), 3u);
    ASSERT_EQ(d.output_lens[c].size(), 4u);
    for (const std::vector<int32_t>& m : d.messages[c]) {
      EXPECT_EQ(m.size(), 9u);
      for (int32_t id : m) EXPECT_TRUE(id >= 2 && id < 1000) << id;  // no EOS / BOS
    }
    for (int len : d.output_lens[c]) EXPECT_EQ(len, 6);  // range ratio 1
  }
  EXPECT_NE(d.messages[0][0], d.messages[1][0]);
  const ConversationDataset again = MustMake(options);
  EXPECT_EQ(again.messages, d.messages);
  EXPECT_EQ(again.output_lens, d.output_lens);
  EXPECT_NE(MustMake(Conversations(3, 4, 40, 6, 9, /*seed=*/4)).messages, d.messages);
}

TEST(ConversationDatasetTest, NextTurnIsThePromptThenTheAnswerThenTheNextMessage) {
  ConversationOptions options = Conversations(2, 3);
  options.first_turns.range_ratio = 0.5;  // later turns' output lengths drawn too
  const ConversationDataset d = MustMake(options);
  const RequestSpec& first = d.first_turns[1];
  const std::vector<int32_t> answer1 = {7, 8, 9};
  const RequestSpec second = NextTurn(d, first, answer1);
  EXPECT_EQ(second.prompt_token_ids,
            Concat({&first.prompt_token_ids, &answer1, &d.messages[1][0]}));
  EXPECT_EQ(second.input_len, static_cast<int>(second.prompt_token_ids.size()));
  EXPECT_EQ(second.index, 4);
  EXPECT_EQ(second.conversation, 1);
  EXPECT_EQ(second.turn, 1);
  EXPECT_EQ(second.follow_ups, 1);
  EXPECT_TRUE(second.keep_output_ids);
  EXPECT_EQ(second.output_len, d.output_lens[1][1]);
  EXPECT_GE(second.output_len, 3);
  EXPECT_LE(second.output_len, 6);

  const std::vector<int32_t> answer2 = {11};
  const RequestSpec third = NextTurn(d, second, answer2);
  EXPECT_EQ(third.prompt_token_ids,
            Concat({&second.prompt_token_ids, &answer2, &d.messages[1][1]}));
  EXPECT_EQ(third.index, 5);
  EXPECT_EQ(third.turn, 2);
  EXPECT_EQ(third.follow_ups, 0);
  EXPECT_FALSE(third.keep_output_ids);  // the last turn's answer is not needed
}

TEST(ConversationDatasetTest, ConversationsThatCanOutgrowTheContextAreRefusedUpFront) {
  VocabInfo vocab = kVocab;
  vocab.max_context_length = 400;
  // 100 + 4 x (29 + 35) + 29 = 385 fits; one more turn is 449.
  EXPECT_TRUE(MakeConversations(Conversations(2, 5, 100, 29, 35), vocab).ok());
  const absl::Status status = MakeConversations(Conversations(2, 6, 100, 29, 35), vocab).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "multi-turn-turns 6: the last turn's prompt can reach 420 tokens (random-input-len "
            "100 + 5 x (random-output-len 29 + multi-turn-message-len 35)), + "
            "random-output-len 29 = 449 tokens; this model's context is 400");
  ConversationOptions prefixed = Conversations(2, 6, 100, 29, 35);
  prefixed.first_turns.shared_prefix_groups = 1;
  prefixed.first_turns.shared_prefix_len = 8;
  EXPECT_THAT(std::string(MakeConversations(prefixed, vocab).status().message()),
              HasSubstr("(shared-prefix-len 8 + random-input-len 100 + 5 x"));
  EXPECT_THAT(std::string(MakeConversations(Conversations(2, 1), kVocab).status().message()),
              HasSubstr("multi-turn-turns 1 must be >= 2"));
  EXPECT_THAT(std::string(MakeConversations(Conversations(2, 3, 40, 6, 0), kVocab)
                              .status().message()),
              HasSubstr("multi-turn-message-len 0 must be >= 1"));
}

TEST(ConversationStatsTest, TtftAndHitRateAreSplitByTurn) {
  LoadResult result;
  result.duration_s = 1.0;
  result.not_sent_after_failure = 2;
  const auto turn = [](int index, int conversation, int t, double ttft, int input, int cached) {
    return RequestRecord{.index = index, .input_len = input, .cached_prompt_tokens = cached,
                         .output_len = 1, .conversation = conversation, .turn = t,
                         .ttft_s = ttft, .e2e_s = ttft};
  };
  RequestRecord failed = turn(5, 1, 1, 9.0, 500, 500);
  failed.outcome = Outcome::kFailed;
  failed.error_class = "UNAVAILABLE";
  result.records = {turn(0, 0, 0, 0.4, 100, 0),   turn(1, 0, 1, 0.1, 164, 128),
                    turn(2, 0, 2, 0.2, 228, 192), turn(3, 1, 0, 0.6, 100, 0),
                    turn(4, 1, 1, 0.3, 164, 64),  failed};
  const BenchSummary s = Summarize(result, 8);
  EXPECT_EQ(s.not_sent_after_failure, 2);
  EXPECT_EQ(s.ttft_first_turn.count, 2);
  EXPECT_DOUBLE_EQ(s.ttft_first_turn.mean, 0.5);
  EXPECT_EQ(s.ttft_later_turns.count, 3);  // the failed turn's is not counted
  EXPECT_DOUBLE_EQ(s.ttft_later_turns.mean, 0.2);
  EXPECT_DOUBLE_EQ(s.ttft_later_turns.median, 0.2);
  EXPECT_EQ(s.later_turns_input_tokens, 164 + 228 + 164);
  EXPECT_EQ(s.later_turns_cached_prompt_tokens, 128 + 192 + 64);
  EXPECT_DOUBLE_EQ(s.later_turns_hit_rate, 384.0 / 556.0);
  EXPECT_EQ(s.ttft.count, 5);  // every turn in the overall TTFT

  LoadResult single;
  single.records = {RequestRecord{.index = 0, .input_len = 10, .ttft_s = 0.1}};
  const BenchSummary plain = Summarize(single, 1);
  EXPECT_EQ(plain.ttft_first_turn.count, 0);  // outside conversations: no split
  EXPECT_EQ(plain.ttft_later_turns.count, 0);
}

struct Client {
  explicit Client(const std::string& address)
      : channel(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        stub(v1::Generation::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Generation::Stub> stub;
};

LoadOptions RunnerOptions(int max_concurrency) {
  LoadOptions o;
  o.max_concurrency = max_concurrency;
  o.call.timeout = absl::Seconds(60);
  o.request_id_prefix = "bench-test";
  return o;
}

NextTurnFn NextTurnOf(const ConversationDataset& d) {
  return [&d](const RequestSpec& sent, const RequestRecord& record) {
    return NextTurn(d, sent, record.output_token_ids);
  };
}

// The server's view of each request, by the bench's index.
std::map<int, SeenRequest> SeenByIndex(const FakeGenerationServer& server) {
  std::map<int, SeenRequest> by_index;
  for (const SeenRequest& s : server.seen()) by_index[IndexOfRequestId(s.request_id)] = s;
  return by_index;
}

TEST(ConversationRunnerTest, EachTurnIsThePreviousPromptItsAnswerAndANewMessage) {
  FakeGenerationServer server(FakeBehaviour{.answers_depend_on_prompt = true});
  Client client(server.address());
  const ConversationDataset d = MustMake(Conversations(3, 4));
  LoadRunner runner(client.stub.get(), RunnerOptions(2));
  const LoadResult result =
      runner.Run(d.first_turns, std::vector<double>(3, 0.0), NextTurnOf(d));

  ASSERT_EQ(result.records.size(), 12u);
  EXPECT_EQ(result.not_started, 0);
  EXPECT_EQ(result.not_sent_after_failure, 0);
  EXPECT_LE(result.peak_in_flight, 2);
  const std::map<int, SeenRequest> seen = SeenByIndex(server);
  ASSERT_EQ(seen.size(), 12u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(seen.at(c * 4).prompt_ids, d.first_turns[c].prompt_token_ids);
    for (int t = 1; t < 4; ++t) {
      SCOPED_TRACE(::testing::Message() << "conversation " << c << " turn " << t);
      const SeenRequest& previous = seen.at(c * 4 + t - 1);
      const SeenRequest& now = seen.at(c * 4 + t);
      ASSERT_EQ(previous.answer_ids.size(), 6u);
      EXPECT_EQ(now.prompt_ids, Concat({&previous.prompt_ids, &previous.answer_ids,
                                        &d.messages[c][t - 1]}));
      EXPECT_EQ(now.prompt_tokens, 40 + t * (6 + 9));
      // Sent only once the previous turn's answer was in (it is in the prompt, too).
      EXPECT_GT(now.arrival_s, previous.arrival_s);
    }
  }
  // The prompt-dependent answers differ between conversations: each turn used its own.
  EXPECT_NE(seen.at(0).answer_ids, seen.at(4).answer_ids);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.error;
    EXPECT_EQ(r.conversation, r.index / 4);
    EXPECT_EQ(r.turn, r.index % 4);
    EXPECT_EQ(r.input_len, 40 + r.turn * 15);
    EXPECT_TRUE(r.output_token_ids.empty());  // handed on, not kept in the records
  }
}

TEST(ConversationRunnerTest, OneSlotRunsEachConversationToItsEndBeforeTheNext) {
  FakeGenerationServer server(FakeBehaviour{});
  Client client(server.address());
  const ConversationDataset d = MustMake(Conversations(3, 3));
  LoadRunner runner(client.stub.get(), RunnerOptions(1));
  const LoadResult result =
      runner.Run(d.first_turns, std::vector<double>(3, 0.0), NextTurnOf(d));
  ASSERT_EQ(result.records.size(), 9u);
  std::vector<int> order;
  for (const SeenRequest& s : server.seen()) order.push_back(IndexOfRequestId(s.request_id));
  // A finished turn hands its slot to its conversation's next turn, never to a new one.
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(server.peak_concurrency(), 1);
}

// Waits, with a deadline, until `n` callers have arrived.
class ArrivalBarrier {
 public:
  explicit ArrivalBarrier(int n) : n_(n) {}
  bool ArriveAndWait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    ++arrived_;
    auto all_here = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrived_ >= n_; };
    return mu_.AwaitWithTimeout(absl::Condition(&all_here), timeout);
  }

 private:
  absl::Mutex mu_;
  const int n_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(ConversationRunnerTest, ConversationsRunSideBySide) {
  // Every first turn is held until all three are at the server: the run only completes if
  // the three conversations are in flight at once (a barrier, not a sleep).
  ArrivalBarrier firsts(3);
  FakeBehaviour behaviour;
  behaviour.fail_if = [&firsts](const v1::GenerateRequest& request) {
    if (IndexOfRequestId(request.request_id()) % 3 != 0) return grpc::Status::OK;
    return firsts.ArriveAndWait(absl::Seconds(20))
               ? grpc::Status::OK
               : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "first turns not together");
  };
  FakeGenerationServer server(behaviour);
  Client client(server.address());
  const ConversationDataset d = MustMake(Conversations(3, 3));
  LoadRunner runner(client.stub.get(), RunnerOptions(3));
  const LoadResult result =
      runner.Run(d.first_turns, std::vector<double>(3, 0.0), NextTurnOf(d));
  const BenchSummary s = Summarize(result, 9);
  EXPECT_EQ(s.completed, 9) << (s.failures.empty() ? "" : s.failures.begin()->second.first_error);
  EXPECT_EQ(server.peak_concurrency(), 3);
  EXPECT_EQ(result.peak_in_flight, 3);
}

TEST(ConversationRunnerTest, AFailedTurnEndsItsConversationOnly) {
  FakeBehaviour behaviour;
  behaviour.fail_if = [](const v1::GenerateRequest& request) {
    return IndexOfRequestId(request.request_id()) == 5  // conversation 1, turn 1
               ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no free KV pages")
               : grpc::Status::OK;
  };
  FakeGenerationServer server(behaviour);
  Client client(server.address());
  const ConversationDataset d = MustMake(Conversations(3, 4));
  LoadRunner runner(client.stub.get(), RunnerOptions(2));
  const LoadResult result =
      runner.Run(d.first_turns, std::vector<double>(3, 0.0), NextTurnOf(d));
  EXPECT_EQ(result.records.size(), 10u);  // 12 less turns 2 and 3 of conversation 1
  EXPECT_EQ(result.not_sent_after_failure, 2);
  EXPECT_EQ(result.not_started, 0);
  const std::map<int, SeenRequest> seen = SeenByIndex(server);
  EXPECT_FALSE(seen.contains(6));
  EXPECT_FALSE(seen.contains(7));
  const BenchSummary s = Summarize(result, 12);
  EXPECT_EQ(s.completed, 9);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.not_sent_after_failure, 2);
}

TEST(ConversationRunnerTest, TimeBoundCountsTheUnsentTurnsAsNotStarted) {
  // Each first turn would stream 1000 tokens 10 ms apart; the bound is 0.3 s.
  FakeGenerationServer server(FakeBehaviour{.token_delay = absl::Milliseconds(10)});
  Client client(server.address());
  const ConversationDataset d = MustMake(Conversations(3, 3, 8, 1000, 4));
  LoadOptions options = RunnerOptions(2);
  options.max_duration = absl::Milliseconds(300);
  LoadRunner runner(client.stub.get(), options);
  const LoadResult result =
      runner.Run(d.first_turns, std::vector<double>(3, 0.0), NextTurnOf(d));
  EXPECT_TRUE(result.time_bound_hit);
  ASSERT_EQ(result.records.size(), 2u);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.outcome, Outcome::kCancelledAtBound);
    EXPECT_EQ(r.turn, 0);
  }
  EXPECT_EQ(result.not_started, 9 - 2);
  EXPECT_EQ(result.not_sent_after_failure, 0);
  EXPECT_EQ(result.abandoned, 0);
}

}  // namespace
}  // namespace mlaserve::bench
