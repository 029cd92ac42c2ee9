// JSON mode through DecodeRunner on the FakeEngine: every streamed token keeps the text a JSON
// object's prefix, EOS comes only once the object is complete, the prefill worker's first
// token is replayed into the constraint (and refused with INTERNAL when it breaks it), and a
// preempted request recomputes the same output. With json_after (a reasoning model's
// "</think>"), tokens before the marker are the engine's own and the text after it is the
// object. Text is judged by nlohmann's parser, not by the constraint under test
// (worker/testing/json_mode_testing.h).
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode_worker/decode_runner.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/testing/decode_runner_harness.h"
#include "decode_worker/testing/recording_sink.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/json_mode_vocabulary.h"
#include "worker/testing/fake_engine.h"
#include "worker/testing/json_mode_testing.h"

namespace mlaserve::decode {
namespace {

namespace v1 = ::mlaserve::v1;
using ::mlaserve::testing::FakeEngine;
using ::mlaserve::testing::IsJsonObject;
using ::mlaserve::testing::IsJsonObjectPrefix;
using ::mlaserve::testing::JsonTestTokens;
using ::mlaserve::testing::RecordingSink;
using ::mlaserve::testing::Spell;
using ::testing::HasSubstr;

constexpr int kVocab = 300;
constexpr int32_t kEos = 299;
constexpr int32_t kEndThink = 290;  // "</think>", an added token
constexpr int kPages = 32;
const std::vector<std::optional<std::string>> kTokens =
    mlaserve::testing::WithEndThink(JsonTestTokens(kVocab, kEos), kEndThink);

int32_t IdOf(char c) { return mlaserve::testing::JsonTestTokenId(kTokens, c); }

std::vector<int32_t> Prompt(int n, int salt) {
  return mlaserve::testing::JsonTestPrompt(n, kVocab, 7, salt * 13);
}

// What a JSON-mode output must be: a JSON object's prefix; ended by EOS only once the object
// is complete (and then EOS is the last token), or by the length limit.
void ExpectJsonOutput(const RecordingSink& sink, int max_new, const std::string& what) {
  ASSERT_TRUE(sink.finish().has_value()) << what << ": " << sink.error();
  const std::vector<int32_t> tokens = sink.tokens();
  ASSERT_FALSE(tokens.empty()) << what;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) ASSERT_NE(tokens[i], kEos) << what;
  const std::string text = Spell(kTokens, tokens);
  EXPECT_TRUE(IsJsonObjectPrefix(text)) << what << ": " << text;
  if (sink.finish()->reason == FinishReason::kStop) {
    EXPECT_EQ(sink.finish()->matched_token, kEos) << what;
    EXPECT_EQ(tokens.back(), kEos) << what;
    EXPECT_TRUE(IsJsonObject(text)) << what << ": " << text;
  } else {
    EXPECT_EQ(sink.finish()->reason, FinishReason::kLength) << what;
    EXPECT_EQ(static_cast<int>(tokens.size()), max_new) << what;
  }
}

// The same for the text after the first `marker`, which must be there; `before` is what the
// tokens up to the one that completes it must be (the engine's unconstrained choices).
void ExpectJsonAfter(const RecordingSink& sink, int max_new, const std::string& marker,
                     const std::vector<int32_t>& before, const std::string& what) {
  ASSERT_TRUE(sink.finish().has_value()) << what << ": " << sink.error();
  const std::vector<int32_t> tokens = sink.tokens();
  ASSERT_GT(tokens.size(), before.size()) << what;
  EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + before.size()), before) << what;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) ASSERT_NE(tokens[i], kEos) << what;
  const std::string text = Spell(kTokens, tokens);
  const size_t at = text.find(marker);
  ASSERT_EQ(at + marker.size(), Spell(kTokens, before).size()) << what << ": " << text;
  const std::string json = text.substr(at + marker.size());
  EXPECT_TRUE(IsJsonObjectPrefix(json)) << what << ": " << text;
  if (sink.finish()->reason == FinishReason::kStop) {
    EXPECT_EQ(tokens.back(), kEos) << what;
    EXPECT_TRUE(IsJsonObject(json)) << what << ": " << text;
  } else {
    EXPECT_EQ(sink.finish()->reason, FinishReason::kLength) << what;
    EXPECT_EQ(static_cast<int>(tokens.size()), max_new) << what;
  }
}

class DecodeRunnerJsonTest : public testing::DecodeRunnerHarness {
 protected:
  void SetUp() override {
    vocabulary_ = std::make_unique<worker::JsonModeVocabulary>(
        [] { return model::ConstraintVocabulary::FromTokens(kTokens, {kEos}, {kEndThink}); });
    DecodeRunnerOptions o;
    o.scheduler = {.max_running = 8, .max_batch_tokens = 256, .chunk_size = 64};
    o.json_vocabulary = vocabulary_.get();
    Build({.num_pages = kPages, .vocab_size = kVocab, .eos_token_ids = {kEos}}, o, kPages);
  }

  ReserveSpec JsonSpec(const std::string& id, std::vector<int32_t> prompt, int max_new,
                       bool local) {
    ReserveSpec s = Spec(id, std::move(prompt), max_new, local);
    s.sampling.json_object = true;
    s.json_vocabulary = *vocabulary_->Get();
    return s;
  }

  std::shared_ptr<RecordingSink> Open(const absl::StatusOr<Reservation>& r) {
    EXPECT_TRUE(r.ok()) << r.status();
    auto sink = std::make_shared<RecordingSink>();
    if (r.ok()) EXPECT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
    return sink;
  }

  std::unique_ptr<worker::JsonModeVocabulary> vocabulary_;
};

TEST_F(DecodeRunnerJsonTest, GreedyLocalPrefillWritesOneObjectThenEos) {
  constexpr int kMaxNew = 64;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(Prompt(20 + 9 * i, i));
    sinks.push_back(Open(runner_->Reserve(JsonSpec(absl::StrCat("j", i), prompts.back(),
                                                   kMaxNew, true))));
  }
  // A text request in the same steps is not constrained.
  const auto text_prompt = Prompt(30, 99);
  auto text = Open(runner_->Reserve(Spec("text", text_prompt, 12, true)));
  RunUntilIdle();
  int complete = 0;
  for (int i = 0; i < 6; ++i) {
    ExpectJsonOutput(*sinks[i], kMaxNew, absl::StrCat("request ", i));
    complete += sinks[i]->finish() && sinks[i]->finish()->reason == FinishReason::kStop;
    // The mask changed the output: unconstrained greedy decoding gives other tokens.
    EXPECT_NE(sinks[i]->tokens(), FakeEngine::ExpectedTokens(prompts[i],
                                                             sinks[i]->tokens().size(), kVocab));
  }
  EXPECT_GE(complete, 4) << "the objects should mostly close well within " << kMaxNew;
  EXPECT_EQ(text->tokens(), FakeEngine::ExpectedTokens(text_prompt, 12, kVocab));
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST_F(DecodeRunnerJsonTest, SampledOutputsKeepToTheGrammarForEverySeed) {
  // Flat logits but one token: top_k 3 draws among the three first allowed ids (or the
  // engine's favourite when allowed), a random walk through the grammar.
  constexpr int kMaxNew = 48;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int seed = 0; seed < 24; ++seed) {  // a page each; 8 run at a time
    ReserveSpec s = JsonSpec(absl::StrCat("s", seed), Prompt(16, seed), kMaxNew, true);
    s.sampling.temperature = 1.0f;
    s.sampling.top_k = 3;
    s.sampling.seed = seed;
    sinks.push_back(Open(runner_->Reserve(std::move(s))));
  }
  RunUntilIdle();
  int complete = 0;
  std::set<std::string> texts;
  for (size_t i = 0; i < sinks.size(); ++i) {
    ExpectJsonOutput(*sinks[i], kMaxNew, absl::StrCat("seed ", i));
    complete += sinks[i]->finish() && sinks[i]->finish()->reason == FinishReason::kStop;
    texts.insert(Spell(kTokens, sinks[i]->tokens()));
  }
  EXPECT_GE(complete, 12);
  EXPECT_GE(texts.size(), 12u) << "the seeds should give different objects";
}

TEST_F(DecodeRunnerJsonTest, RemotePrefillsFirstTokenIsReplayedIntoTheConstraint) {
  const auto prompt = Prompt(70, 3);
  auto r = runner_->Reserve(JsonSpec("remote", prompt, 40, false));
  auto sink = Open(r);
  PrefillAndShip(*r, prompt, kVocab, IdOf('{'));
  RunUntilIdle();
  ExpectJsonOutput(*sink, 40, "remote");
  ASSERT_FALSE(sink->tokens().empty());
  EXPECT_EQ(sink->tokens()[0], IdOf('{'));
  // The second token continues the open object: a key or its end, not a second '{'.
  ASSERT_GE(sink->tokens().size(), 2u);
  EXPECT_NE(sink->tokens()[1], IdOf('{'));
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST_F(DecodeRunnerJsonTest, AFirstTokenTheConstraintRefusesEndsTheRequestWithInternal) {
  const auto prompt = Prompt(40, 4);
  auto r = runner_->Reserve(JsonSpec("bad", prompt, 40, false));
  auto sink = Open(r);
  auto ok = runner_->Reserve(JsonSpec("good", Prompt(40, 5), 40, true));  // unaffected
  auto good = Open(ok);
  PrefillAndShip(*r, prompt, kVocab, IdOf('}'));  // a prefill worker that ignored the mask
  RunUntilIdle();
  ASSERT_TRUE(sink->ended());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kInternal) << sink->error();
  EXPECT_THAT(std::string(sink->error().message()), HasSubstr("JSON mode"));
  EXPECT_TRUE(sink->tokens().empty()) << "the refused token was streamed";
  ExpectJsonOutput(*good, 40, "good");
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST_F(DecodeRunnerJsonTest, APreemptedRequestRecomputesTheSameObject) {
  // Alone on the big pool: the reference outputs.
  std::vector<std::vector<int32_t>> prompts, alone;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(Prompt(126, 20 + i));
    auto sink = Open(runner_->Reserve(JsonSpec(absl::StrCat("ref", i), prompts[i], 40, true)));
    RunUntilIdle();
    ExpectJsonOutput(*sink, 40, absl::StrCat("alone ", i));
    alone.push_back(sink->tokens());
    ASSERT_GT(alone.back().size(), 4u) << "too short to be preempted";
  }
  // Three prompts of 126 tokens on 7 pages: each crosses into its third page after its
  // second token, and the latest reserved gives its pages back and recomputes later.
  auto engine = FakeEngine::Create({.num_pages = 7, .vocab_size = kVocab, .eos_token_ids = {kEos}});
  auto layout = *kvtransfer::MakeKvLayout(engine->config(), engine->kv_pool().options());
  kvtransfer::KvReceiver receiver(&engine->kv_pool(), layout,
                                  kvtransfer::KvReceiverOptions{absl::Seconds(30)});
  DecodeRunnerOptions o;
  o.scheduler = {.max_running = 4, .max_batch_tokens = 256, .chunk_size = 128};
  o.kv_endpoint = "decode-small";
  o.kv_transport = "fake";
  o.json_vocabulary = vocabulary_.get();
  common::MetricsRegistry metrics;
  DecodeRunner runner(engine.get(), &receiver, o, &metrics);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    auto r = runner.Reserve(JsonSpec(absl::StrCat("p", i), prompts[i], 40, true));
    ASSERT_TRUE(r.ok()) << r.status();
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(runner.OpenStream(r->session_id, sinks.back()).ok());
  }
  for (int i = 0; i < 5000 && runner.Step(); ++i) {
  }
  EXPECT_THAT(metrics.RenderText(),
              ::testing::Not(HasSubstr("mlaserve_decode_preemptions_total 0\n")));
  for (int i = 0; i < 3; ++i) {
    ExpectJsonOutput(*sinks[i], 40, absl::StrCat("preempted run ", i));
    EXPECT_EQ(sinks[i]->tokens(), alone[i]) << i;
  }
  EXPECT_EQ(engine->kv_pool().free_pages(), 7);
}

// Reasoning, then JSON: the marker is the text of two of the engine's own tokens (so greedy
// decoding writes it), or the added "</think>" token the prefill worker drew.
TEST_F(DecodeRunnerJsonTest, JsonStartsAfterTheMarker) {
  constexpr int kMaxNew = 64;
  struct Case {
    std::vector<int32_t> prompt, before;
    std::string marker;
    std::shared_ptr<RecordingSink> sink;
  };
  std::vector<Case> cases;
  for (int salt = 0; cases.size() < 4 && salt < 400; ++salt) {
    // Prompts whose first unconstrained tokens are single bytes: the marker is tokens 2 and 3.
    std::vector<int32_t> prompt = Prompt(24 + salt % 17, 50 + salt);
    const std::vector<int32_t> own = FakeEngine::ExpectedTokens(prompt, 4, kVocab);
    if (*std::max_element(own.begin(), own.end()) > 255) continue;
    const std::string text = Spell(kTokens, own);
    const std::string marker = text.substr(2, 2);
    const size_t end = text.find(marker) + marker.size();  // its first occurrence
    cases.push_back({prompt, std::vector<int32_t>(own.begin(), own.begin() + end), marker});
  }
  ASSERT_EQ(cases.size(), 4u);
  for (size_t i = 0; i < cases.size(); ++i) {
    ReserveSpec s = JsonSpec(absl::StrCat("m", i), cases[i].prompt, kMaxNew, true);
    s.sampling.json_after = cases[i].marker;
    cases[i].sink = Open(runner_->Reserve(std::move(s)));
  }
  // Remote prefill: the first token is the added </think>, so JSON starts with the second.
  const auto remote_prompt = Prompt(40, 7);
  ReserveSpec s = JsonSpec("remote", remote_prompt, kMaxNew, false);
  s.sampling.json_after = "</think>";
  auto remote_r = runner_->Reserve(std::move(s));
  auto remote = Open(remote_r);
  PrefillAndShip(*remote_r, remote_prompt, kVocab, kEndThink);
  // EOS before the marker is refused, as any token the constraint refuses.
  const auto eos_prompt = Prompt(40, 8);
  s = JsonSpec("eos", eos_prompt, kMaxNew, false);
  s.sampling.json_after = "</think>";
  auto eos_r = runner_->Reserve(std::move(s));
  auto eos = Open(eos_r);
  PrefillAndShip(*eos_r, eos_prompt, kVocab, kEos);
  RunUntilIdle();
  int complete = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    ExpectJsonAfter(*cases[i].sink, kMaxNew, cases[i].marker, cases[i].before,
                    absl::StrCat("marker \"", cases[i].marker, "\""));
    complete += cases[i].sink->finish()->reason == FinishReason::kStop;
  }
  EXPECT_GE(complete, 3);
  ExpectJsonAfter(*remote, kMaxNew, "</think>", {kEndThink}, "remote");
  ASSERT_TRUE(eos->ended());
  EXPECT_EQ(eos->error().code(), absl::StatusCode::kInternal) << eos->error();
  EXPECT_THAT(std::string(eos->error().message()), HasSubstr("before \"</think>\""));
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

// The decode worker's edge: JSON mode needs this worker's vocabulary and no ignore_eos.
TEST(DecodeJsonConversionTest, ReserveRequestInJsonMode) {
  worker::JsonModeVocabulary vocabulary(
      [] { return model::ConstraintVocabulary::FromTokens(kTokens, {kEos}); });
  ReserveBounds bounds{.vocab_size = kVocab, .max_context = 4096,
                       .max_lease = absl::Seconds(1), .json_vocabulary = &vocabulary};
  v1::ReserveRequest req;
  req.set_request_id("j");
  req.add_prompt_token_ids(1);
  req.set_local_prefill(true);
  req.mutable_sampling()->set_max_new_tokens(4);
  auto spec = ToReserveSpec(req, bounds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->json_vocabulary, nullptr);  // text
  req.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  spec = ToReserveSpec(req, bounds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->sampling.json_object);
  EXPECT_EQ(spec->json_vocabulary, *vocabulary.Get());
  req.mutable_sampling()->set_response_format_after("</think>");
  spec = ToReserveSpec(req, bounds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sampling.json_after, "</think>");
  req.mutable_sampling()->clear_response_format_after();
  req.mutable_sampling()->set_ignore_eos(true);
  absl::Status s = ToReserveSpec(req, bounds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("json_object"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("ignore_eos"));
  req.mutable_sampling()->set_ignore_eos(false);
  // A model directory without tokenizer.json.
  auto none = worker::JsonModeVocabulary::FromModelDirectory("tests/fixtures/models/deepseek_v3",
                                                              kVocab, {kEos});
  bounds.json_vocabulary = none.get();
  s = ToReserveSpec(req, bounds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "response_format json_object / json_schema needs tokenizer.json or "
                         "tiktoken.model in the model directory tests/fixtures/models/deepseek_v3");
}

}  // namespace
}  // namespace mlaserve::decode
