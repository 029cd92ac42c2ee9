// Structured outputs through DecodeRunner on the FakeEngine: greedy and sampled outputs under a
// JSON Schema end with EOS only once the value is complete and then satisfy the schema (judged
// by the reference validator of model/constraint, not by the recognizer under test); a length
// cut leaves a prefix the schema's recognizer takes; the prefill worker's first token is
// replayed into the schema's constraint (INTERNAL when it breaks it); the RPC edge compiles the
// schema and refuses what we do not enforce.
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
#include "model/constraint/schema_testing.h"
#include "model/constraint/schema_validator_testing.h"
#include "worker/json_mode_vocabulary.h"
#include "worker/testing/fake_engine.h"
#include "worker/testing/json_mode_testing.h"

namespace mlaserve::decode {
namespace {

namespace v1 = ::mlaserve::v1;
using ::mlaserve::testing::JsonTestTokens;
using ::mlaserve::testing::RecordingSink;
using ::mlaserve::testing::Spell;
using ::testing::HasSubstr;

constexpr int kVocab = 300;
constexpr int32_t kEos = 299;
constexpr int kPages = 32;
const std::vector<std::optional<std::string>> kTokens = JsonTestTokens(kVocab, kEos);

constexpr char kSchema[] = R"({"type": "object", "properties": {
    "ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    "note": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]}},
  "required": ["ok", "n", "tags"]})";

int32_t IdOf(char c) { return mlaserve::testing::JsonTestTokenId(kTokens, c); }

std::vector<int32_t> Prompt(int n, int salt) {
  return mlaserve::testing::JsonTestPrompt(n, kVocab, 5, salt * 17);
}

void ExpectSchemaOutput(const RecordingSink& sink, int max_new, const std::string& what) {
  ASSERT_TRUE(sink.finish().has_value()) << what << ": " << sink.error();
  std::vector<int32_t> tokens = sink.tokens();
  ASSERT_FALSE(tokens.empty()) << what;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) ASSERT_NE(tokens[i], kEos) << what;
  static const auto schema = model::JsonSchema::Compile(kSchema, true).value();
  if (sink.finish()->reason == FinishReason::kStop) {
    ASSERT_EQ(tokens.back(), kEos) << what;
    tokens.pop_back();
    const std::string text = Spell(kTokens, tokens);
    const model::testing::ReferenceValidator validator(nlohmann::json::parse(kSchema));
    nlohmann::json value;
    ASSERT_NO_THROW(value = nlohmann::json::parse(text)) << what << ": " << text;
    EXPECT_TRUE(validator.Valid(value)) << what << ": " << text;
    // strict: no property beyond the listed ones.
    for (const auto& [key, v] : value.items()) {
      EXPECT_TRUE(key == "ok" || key == "n" || key == "tags" || key == "note") << text;
    }
  } else {
    EXPECT_EQ(sink.finish()->reason, FinishReason::kLength) << what;
    EXPECT_EQ(static_cast<int>(tokens.size()), max_new) << what;
    const std::string text = Spell(kTokens, tokens);
    EXPECT_EQ(model::testing::Read(*schema, text).taken, text.size()) << what << ": " << text;
  }
}

class DecodeRunnerSchemaTest : public testing::DecodeRunnerHarness {
 protected:
  void SetUp() override {
    vocabulary_ = std::make_unique<worker::JsonModeVocabulary>(
        [] { return model::ConstraintVocabulary::FromTokens(kTokens, {kEos}); });
    DecodeRunnerOptions o;
    o.scheduler = {.max_running = 8, .max_batch_tokens = 256, .chunk_size = 64};
    o.json_vocabulary = vocabulary_.get();
    Build({.num_pages = kPages, .vocab_size = kVocab, .eos_token_ids = {kEos}}, o, kPages);
  }

  ReserveSpec SchemaSpec(const std::string& id, std::vector<int32_t> prompt, int max_new,
                         bool local) {
    ReserveSpec s = Spec(id, std::move(prompt), max_new, local);
    s.sampling.json_schema = kSchema;
    s.sampling.json_schema_strict = true;
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

TEST_F(DecodeRunnerSchemaTest, GreedyAndSampledOutputsSatisfyTheSchema) {
  constexpr int kMaxNew = 96;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 24; ++i) {  // 8 run at a time
    ReserveSpec s = SchemaSpec(absl::StrCat("s", i), Prompt(16 + i, i), kMaxNew, true);
    if (i >= 4) {
      s.sampling.temperature = 1.0f;
      s.sampling.top_k = 4;
      s.sampling.seed = i;
    }
    sinks.push_back(Open(runner_->Reserve(std::move(s))));
  }
  RunUntilIdle();
  int complete = 0;
  std::set<std::string> texts;
  for (size_t i = 0; i < sinks.size(); ++i) {
    ExpectSchemaOutput(*sinks[i], kMaxNew, absl::StrCat("request ", i));
    complete += sinks[i]->finish() && sinks[i]->finish()->reason == FinishReason::kStop;
    texts.insert(Spell(kTokens, sinks[i]->tokens()));
  }
  EXPECT_GE(complete, 16);
  EXPECT_GE(texts.size(), 12u);
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST_F(DecodeRunnerSchemaTest, RemoteFirstTokenIsReplayedIntoTheSchema) {
  const auto prompt = Prompt(70, 3);
  auto r = runner_->Reserve(SchemaSpec("remote", prompt, 80, false));
  auto sink = Open(r);
  PrefillAndShip(*r, prompt, kVocab, IdOf('{'));
  auto bad_r = runner_->Reserve(SchemaSpec("bad", Prompt(40, 4), 40, false));
  auto bad = Open(bad_r);
  PrefillAndShip(*bad_r, Prompt(40, 4), kVocab, IdOf('['));  // the schema's value is an object
  RunUntilIdle();
  ExpectSchemaOutput(*sink, 80, "remote");
  EXPECT_EQ(sink->tokens()[0], IdOf('{'));
  ASSERT_TRUE(bad->ended());
  EXPECT_EQ(bad->error().code(), absl::StatusCode::kInternal) << bad->error();
  EXPECT_THAT(std::string(bad->error().message()), HasSubstr("schema admits"));
  EXPECT_EQ(decode_->kv_pool().free_pages(), kPages);
}

TEST(DecodeSchemaConversionTest, ReserveRequestWithASchema) {
  worker::JsonModeVocabulary vocabulary(
      [] { return model::ConstraintVocabulary::FromTokens(kTokens, {kEos}); });
  ReserveBounds bounds{.vocab_size = kVocab, .max_context = 4096,
                       .max_lease = absl::Seconds(1), .json_vocabulary = &vocabulary};
  v1::ReserveRequest req;
  req.set_request_id("j");
  req.add_prompt_token_ids(1);
  req.set_local_prefill(true);
  req.mutable_sampling()->set_max_new_tokens(4);
  req.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  req.mutable_sampling()->set_response_format_schema(kSchema);
  auto spec = ToReserveSpec(req, bounds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sampling.json_schema, kSchema);
  EXPECT_EQ(spec->json_vocabulary, *vocabulary.Get());
  req.mutable_sampling()->set_response_format_schema(R"({"type": "array", "minItems": 3,
                                                          "maxItems": 1})");
  absl::Status s = ToReserveSpec(req, bounds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "json_schema: minItems 3 > maxItems 1: no array fits (at #)");
  req.mutable_sampling()->set_response_format_schema(R"({"type": "string"})");
  req.mutable_sampling()->set_ignore_eos(true);
  EXPECT_THAT(std::string(ToReserveSpec(req, bounds).status().message()),
              HasSubstr("json_schema cannot be combined with ignore_eos"));
}

}  // namespace
}  // namespace mlaserve::decode
