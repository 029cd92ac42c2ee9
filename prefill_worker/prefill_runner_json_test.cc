// JSON mode on the prefill worker: the first token is drawn under a fresh JsonConstraint (what
// can open a JSON object, or with json_after anything but EOS), next to unconstrained requests
// in the same forward; the RPC edge refuses JSON mode without a vocabulary or with ignore_eos.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "kvtransfer/testing/probes.h"
#include "prefill_worker/prefill_runner.h"
#include "prefill_worker/prefill_service.h"
#include "prefill_worker/testing/prefill_jobs.h"
#include "prefill_worker/testing/prefill_runner_harness.h"
#include "worker/json_mode_vocabulary.h"
#include "worker/testing/fake_engine.h"
#include "worker/testing/json_mode_testing.h"

namespace mlaserve::prefill {
namespace {

namespace v1 = ::mlaserve::v1;
using ::mlaserve::testing::FakeEngine;
using ::mlaserve::testing::JsonTestTokens;
using ::testing::HasSubstr;
using Received = kvtransfer::testing::DoneProbe;
using testing::Job;
using testing::Outcome;

constexpr int kVocab = 300;
constexpr int32_t kEos = 299;
constexpr int32_t kEndThink = 290;  // "</think>", an added token
const std::vector<std::optional<std::string>> kTokens =
    mlaserve::testing::WithEndThink(JsonTestTokens(kVocab, kEos), kEndThink);

// What may open a JSON object: '{' or whitespace.
bool CanOpen(int32_t id) {
  return kTokens[id].has_value() && std::string(" \t\n\r{").find(*kTokens[id]) != std::string::npos;
}

int32_t IdOf(char c) { return mlaserve::testing::JsonTestTokenId(kTokens, c); }

std::vector<int32_t> Prompt(int n, int salt) {
  return mlaserve::testing::JsonTestPrompt(n, kVocab, 11, salt * 3);
}

class PrefillRunnerJsonTest : public testing::PrefillRunnerHarness {
 protected:
  void SetUp() override {
    Build({.num_pages = 64, .vocab_size = kVocab}, {.num_pages = 64, .vocab_size = kVocab});
    vocabulary_ = *model::ConstraintVocabulary::FromTokens(kTokens, {kEos}, {kEndThink});
  }

  // Submits `jobs` (their sessions reserved on the decode side), runs them, and returns each
  // one's first token; the decode side's pages go back.
  std::vector<int32_t> FirstTokens(std::vector<PrefillJob> jobs) {
    std::vector<Received> rx(jobs.size());
    std::vector<Outcome> out(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      const int pages = kernels::PagesFor(static_cast<int>(jobs[i].tokens.size()));
      EXPECT_TRUE(receiver_
                      ->CreateSession(jobs[i].request_id, *decode_->kv_pool().Allocate(pages),
                                      pages, absl::Now() + absl::Seconds(30), rx[i].fn())
                      .ok());
      jobs[i].session = {jobs[i].request_id, kDecodeEndpoint, "fake", pages,
                         layout_.CompatHash()};
      EXPECT_TRUE(runner_->Submit(std::move(jobs[i]), out[i].fn()).ok());
    }
    RunUntilIdle();
    std::vector<int32_t> first;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_TRUE(out[i].Wait());
      EXPECT_TRUE(out[i].result && out[i].result->ok())
          << (out[i].result ? out[i].result->status().ToString() : "no answer");
      first.push_back(out[i].result && out[i].result->ok() ? (*out[i].result)->first_token : -1);
      if (rx[i].result && rx[i].result->ok()) decode_->kv_pool().Free((*rx[i].result)->pages);
    }
    return first;
  }

  PrefillJob JsonJob(const std::string& id, std::vector<int32_t> prompt) {
    PrefillJob j = Job(id, std::move(prompt), {});
    j.sampling.json_object = true;
    j.json_vocabulary = vocabulary_;
    return j;
  }

  std::shared_ptr<const model::ConstraintVocabulary> vocabulary_;
};

TEST_F(PrefillRunnerJsonTest, GreedyFirstTokenIsTheBestOneThatOpensAnObject) {
  std::vector<PrefillJob> jobs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) {
    prompts.push_back(Prompt(10 + 3 * i, i));
    jobs.push_back(JsonJob(absl::StrCat("j", i), prompts.back()));
  }
  // A text request in the same forwards keeps the engine's favourite.
  const auto text_prompt = Prompt(40, 77);
  jobs.push_back(Job("text", text_prompt, {}));
  const std::vector<int32_t> first = FirstTokens(std::move(jobs));
  ASSERT_EQ(first.size(), 25u);
  int refused = 0;
  for (int i = 0; i < 24; ++i) {
    const int32_t favourite = FakeEngine::NextToken(prompts[i], kVocab);
    // The favourite when it can open an object; else the flat logits' lowest allowed id, '{'.
    EXPECT_EQ(first[i], CanOpen(favourite) ? favourite : IdOf('{')) << i;
    refused += !CanOpen(favourite);
  }
  EXPECT_GT(refused, 20) << "the engine's favourite should rarely open an object";
  EXPECT_EQ(first[24], FakeEngine::NextToken(text_prompt, kVocab));
}

TEST_F(PrefillRunnerJsonTest, SampledFirstTokensOpenAnObjectForEverySeed) {
  std::vector<PrefillJob> jobs;
  for (int seed = 0; seed < 40; ++seed) {
    PrefillJob j = JsonJob(absl::StrCat("s", seed), Prompt(12, seed));
    j.sampling.temperature = 1.0f;
    j.sampling.seed = seed;
    j.sampling.logit_bias = {{IdOf('['), 100.0f}, {IdOf('"'), 100.0f}};  // cannot revive them
    jobs.push_back(std::move(j));
  }
  std::set<int32_t> drawn;
  for (int32_t t : FirstTokens(std::move(jobs))) {
    EXPECT_TRUE(CanOpen(t)) << t;
    drawn.insert(t);
  }
  EXPECT_GE(drawn.size(), 3u);  // a draw among '{' and the whitespace tokens
}

// With json_after the first token is free text (the engine's favourite, or the added </think>
// the logit bias asks for), never EOS; without, the same bias cannot draw </think>.
TEST_F(PrefillRunnerJsonTest, BeforeTheMarkerTheFirstTokenIsAnyTextButEos) {
  std::vector<PrefillJob> jobs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) {
    prompts.push_back(Prompt(10 + 3 * i, i));
    jobs.push_back(JsonJob(absl::StrCat("t", i), prompts.back()));
    jobs.back().sampling.json_after = "</think>";
  }
  for (const bool after : {true, false}) {
    PrefillJob j = JsonJob(after ? "bias-after" : "bias", Prompt(30, 5));
    if (after) j.sampling.json_after = "</think>";
    j.sampling.logit_bias = {{kEndThink, 100.0f}};
    jobs.push_back(std::move(j));
  }
  PrefillJob eos = JsonJob("eos", Prompt(30, 6));
  eos.sampling.json_after = "</think>";
  eos.sampling.logit_bias = {{kEos, 100.0f}};
  jobs.push_back(std::move(eos));
  const std::vector<int32_t> first = FirstTokens(std::move(jobs));
  ASSERT_EQ(first.size(), 27u);
  int favourites = 0;
  for (int i = 0; i < 24; ++i) {
    const int32_t favourite = FakeEngine::NextToken(prompts[i], kVocab);
    // The favourite when it has text (a byte or </think>); else the flat logits' lowest id, 0.
    const bool text = kTokens[favourite].has_value();
    EXPECT_EQ(first[i], text ? favourite : 0) << i;
    favourites += text && !CanOpen(favourite);
  }
  EXPECT_GT(favourites, 12) << "most favourites could not open an object, yet are drawn";
  EXPECT_EQ(first[24], kEndThink);
  EXPECT_TRUE(CanOpen(first[25])) << first[25];
  EXPECT_NE(first[26], kEos);
  const int32_t eos_favourite = FakeEngine::NextToken(Prompt(30, 6), kVocab);
  EXPECT_EQ(first[26], kTokens[eos_favourite].has_value() ? eos_favourite : 0);
}

// The prefill worker's edge: JSON mode needs this worker's vocabulary and no ignore_eos.
TEST(PrefillJsonConversionTest, PrefillRequestInJsonMode) {
  worker::JsonModeVocabulary vocabulary(
      [] { return model::ConstraintVocabulary::FromTokens(kTokens, {kEos}); });
  PrefillBounds bounds{.vocab_size = kVocab, .max_context = 4096, .json_vocabulary = &vocabulary};
  v1::PrefillRequest req;
  req.set_request_id("r");
  req.add_token_ids(3);
  req.mutable_kv_session()->set_session_id("s");
  req.mutable_kv_session()->set_endpoint("127.0.0.1:1");
  req.mutable_kv_session()->set_num_pages(1);
  auto job = ToPrefillJob(req, bounds);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->json_vocabulary, nullptr);
  req.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  job = ToPrefillJob(req, bounds);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->sampling.json_object);
  EXPECT_EQ(job->json_vocabulary, *vocabulary.Get());
  req.mutable_sampling()->set_response_format_after("</think>");
  job = ToPrefillJob(req, bounds);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->sampling.json_after, "</think>");
  req.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_TEXT);
  EXPECT_THAT(std::string(ToPrefillJob(req, bounds).status().message()),
              HasSubstr("without response_format json_object"));
  req.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  req.mutable_sampling()->clear_response_format_after();
  req.mutable_sampling()->set_ignore_eos(true);
  absl::Status s = ToPrefillJob(req, bounds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("json_object"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("ignore_eos"));
  req.mutable_sampling()->set_ignore_eos(false);
  bounds.json_vocabulary = nullptr;
  EXPECT_EQ(ToPrefillJob(req, bounds).status().code(), absl::StatusCode::kFailedPrecondition);
  auto none = worker::JsonModeVocabulary::FromModelDirectory("tests/fixtures/models/deepseek_v2",
                                                              kVocab, {kEos});
  bounds.json_vocabulary = none.get();
  s = ToPrefillJob(req, bounds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "response_format json_object / json_schema needs tokenizer.json or "
                         "tiktoken.model in the model directory tests/fixtures/models/deepseek_v2");
}

// Structured outputs: the first token can only start the schema's value (here an array: '[' or
// whitespace), for the flat logits' lowest allowed id and for every sampled one.
TEST_F(PrefillRunnerJsonTest, SchemaFirstTokenStartsTheSchemasValue) {
  std::vector<PrefillJob> jobs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 30; ++i) {
    prompts.push_back(Prompt(10 + 3 * i, i + 40));
    PrefillJob j = JsonJob(absl::StrCat("a", i), prompts.back());
    j.sampling.json_object = false;
    j.sampling.json_schema = R"({"type": "array", "items": {"type": "integer"}})";
    if (i >= 10) {
      j.sampling.temperature = 1.0f;
      j.sampling.seed = i;
      j.sampling.logit_bias = {{IdOf('{'), 100.0f}};  // cannot revive it
    }
    jobs.push_back(std::move(j));
  }
  const std::vector<int32_t> first = FirstTokens(std::move(jobs));
  auto opens_array = [](int32_t id) {
    return kTokens[id].has_value() && std::string(" \t\n\r[").find(*kTokens[id]) != std::string::npos;
  };
  for (int i = 0; i < 30; ++i) {
    EXPECT_TRUE(opens_array(first[i])) << i << ": " << first[i];
    if (i < 10) {
      const int32_t favourite = FakeEngine::NextToken(prompts[i], kVocab);
      EXPECT_EQ(first[i], opens_array(favourite) ? favourite : IdOf('[')) << i;
    }
  }
}

// The edge compiles the schema: what we do not enforce is refused naming the keyword.
TEST(PrefillJsonConversionTest, PrefillRequestWithASchema) {
  worker::JsonModeVocabulary vocabulary(
      [] { return model::ConstraintVocabulary::FromTokens(kTokens, {kEos}); });
  PrefillBounds bounds{.vocab_size = kVocab, .max_context = 4096, .json_vocabulary = &vocabulary};
  v1::PrefillRequest req;
  req.set_request_id("r");
  req.add_token_ids(3);
  req.mutable_kv_session()->set_session_id("s");
  req.mutable_kv_session()->set_endpoint("127.0.0.1:1");
  req.mutable_kv_session()->set_num_pages(1);
  req.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(ToPrefillJob(req, bounds).status().message(),
            "response_format JSON_SCHEMA needs response_format_schema (the JSON Schema) or "
            "response_format_choices");
  req.mutable_sampling()->set_response_format_schema(R"({"type": "string"})");
  req.mutable_sampling()->set_response_format_schema_strict(true);
  auto job = ToPrefillJob(req, bounds);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->sampling.json_schema, R"({"type": "string"})");
  EXPECT_TRUE(job->sampling.json_schema_strict);
  EXPECT_FALSE(job->sampling.json_object);
  EXPECT_EQ(job->json_vocabulary, *vocabulary.Get());
  req.mutable_sampling()->set_response_format_schema(R"({"type": "string", "not": {}})");
  absl::Status s = ToPrefillJob(req, bounds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "json_schema: keyword \"not\" is not supported (at #/not)");
  req.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  EXPECT_EQ(ToPrefillJob(req, bounds).status().message(),
            "response_format_schema / response_format_choices is set without response_format "
            "JSON_SCHEMA");
}

}  // namespace
}  // namespace mlaserve::prefill
