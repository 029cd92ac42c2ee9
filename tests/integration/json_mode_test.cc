// JSON mode (SamplingParams.response_format JSON_OBJECT) end to end: a router, a prefill and a
// decode worker process on the bundled demo model (CPU backend), text in and text out. The
// streamed text must be a JSON object's prefix, and a whole object when EOS ended it; remote
// and local prefill constrain alike; with response_format_after the text before the marker is
// the model's own and the object follows it; json_object with ignore_eos, a marker without
// json_object, and JSON mode on a model without tokenizer.json, are refused. The judge is
// nlohmann's parser, not the constraint. Structured outputs (JSON_SCHEMA) likewise: answers
// satisfy the schema (the reference validator of model/constraint judges), remote and local
// prefill agree, a schema we cannot enforce is refused naming the keyword, and mlaserve-run's
// --response-format json_schema. Schema choices: the text is a choice's prefix and a value of its
// schema.
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/schema_testing.h"
#include "model/constraint/schema_validator_testing.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/integration/cluster.h"
#include "worker/testing/json_mode_testing.h"

namespace mlaserve::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kDemo[] = "models/demo";
constexpr int32_t kDemoEos = 1;  // models/demo/config.json eos_token_id
constexpr absl::Duration kTimeout = absl::Seconds(60);

v1::GenerateRequest JsonRequest(const std::string& text, int max_new_tokens) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  r.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  return r;
}

// The request's text is a JSON object's prefix, and a whole object when EOS ended it.
void ExpectJsonText(const GenerateResult& r, const std::string& what) {
  ASSERT_TRUE(r.status.ok()) << what << ": " << r.status.error_message();
  ASSERT_TRUE(r.complete.has_value()) << what;
  EXPECT_TRUE(IsJsonObjectPrefix(r.text)) << what << ": [" << r.text << "]";
  if (r.complete->finish_reason() == v1::FINISH_REASON_STOP) {
    EXPECT_EQ(r.complete->matched_token_id(), kDemoEos) << what;
    EXPECT_TRUE(IsJsonObject(r.text)) << what << ": [" << r.text << "]";
  } else {
    EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_LENGTH) << what;
  }
}

class JsonModeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.model_dir = kDemo;
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static GenerateResult Run(const v1::GenerateRequest& r) {
    return RunGenerate(cluster_->generation(), r, kTimeout);
  }
  static Cluster* cluster_;
};
Cluster* JsonModeTest::cluster_ = nullptr;

TEST_F(JsonModeTest, GreedyAndSampledTextIsAJsonObjectOverRemoteAndLocalPrefill) {
  // Unconstrained, the model answers " 17 18 19 ..." (not JSON).
  v1::GenerateRequest greedy = JsonRequest("count from 17:", 40);
  greedy.mutable_sampling()->set_temperature(0);
  const GenerateResult remote = Run(greedy);
  ExpectJsonText(remote, "greedy, remote prefill");
  EXPECT_FALSE(remote.complete->local_prefill());
  // With logprobs the decode worker prefills the prompt itself and draws the first token under
  // its own constraint: the same tokens.
  v1::GenerateRequest with_logprobs = greedy;
  with_logprobs.mutable_sampling()->set_logprobs(0);
  const GenerateResult local = Run(with_logprobs);
  ExpectJsonText(local, "greedy, local prefill");
  EXPECT_TRUE(local.complete->local_prefill());
  EXPECT_EQ(local.ids, remote.ids);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    v1::GenerateRequest sampled = JsonRequest("copy: h e l l o ->", 40);
    sampled.mutable_sampling()->set_temperature(1.0f);
    sampled.mutable_sampling()->set_seed(seed);
    ExpectJsonText(Run(sampled), absl::StrCat("seed ", seed));
  }
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(15)).ok());
}

TEST_F(JsonModeTest, AClosedObjectEndsTheRequestWithEos) {
  // Whitespace banned, '{' and '}' favoured: "{}", then EOS, the only token a complete object
  // allows; over both prefill paths.
  auto tokenizer = model::Tokenizer::FromFile(std::string(kDemo) + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  v1::GenerateRequest steered = JsonRequest("count from 17:", 16);
  steered.mutable_sampling()->set_temperature(0);
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    auto bytes = (*tokenizer)->TokenBytes(id, /*skip_special_tokens=*/false);
    if (!bytes.has_value() || bytes->empty()) continue;
    auto& bias = *steered.mutable_sampling()->mutable_logit_bias();
    if (bytes->find_first_not_of(" \t\n\r") == std::string_view::npos) bias[id] = -100.0f;
    if (*bytes == "{" || *bytes == "}") bias[id] = 100.0f;
  }
  for (bool local : {false, true}) {
    v1::GenerateRequest r = steered;
    if (local) r.mutable_sampling()->set_logprobs(0);
    const GenerateResult got = Run(r);
    ExpectJsonText(got, local ? "local" : "remote");
    EXPECT_EQ(got.text, "{}");
    ASSERT_TRUE(got.complete.has_value());
    EXPECT_EQ(got.complete->finish_reason(), v1::FINISH_REASON_STOP);
    EXPECT_EQ(got.complete->local_prefill(), local);
    EXPECT_EQ(got.ids.size(), 3u);
    EXPECT_EQ(got.ids.back(), kDemoEos);
  }
}

// A reasoning model's "</think>" stands in for the demo model's own first three tokens: they
// are drawn as without JSON mode, and the object follows them.
TEST_F(JsonModeTest, JsonStartsAfterTheMarkerOverRemoteAndLocalPrefill) {
  v1::GenerateRequest plain = JsonRequest("count from 17:", 40);
  plain.mutable_sampling()->set_temperature(0);
  plain.mutable_sampling()->clear_response_format();
  const GenerateResult unconstrained = Run(plain);
  ASSERT_TRUE(unconstrained.status.ok()) << unconstrained.status.error_message();
  ASSERT_GE(unconstrained.ids.size(), 3u);
  auto tokenizer = model::Tokenizer::FromFile(std::string(kDemo) + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> before(unconstrained.ids.begin(), unconstrained.ids.begin() + 3);
  const std::string marker = (*tokenizer)->Decode(before, false).value();
  ASSERT_FALSE(IsJsonObjectPrefix(marker)) << marker;  // the constraint must have waited
  v1::GenerateRequest after = JsonRequest("count from 17:", 40);
  after.mutable_sampling()->set_temperature(0);
  after.mutable_sampling()->set_response_format_after(marker);
  for (bool local : {false, true}) {
    v1::GenerateRequest r = after;
    if (local) r.mutable_sampling()->set_logprobs(0);
    const GenerateResult got = Run(r);
    const std::string what = local ? "local" : "remote";
    ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.error_message();
    ASSERT_GT(got.ids.size(), 3u) << what;
    EXPECT_EQ(std::vector<int32_t>(got.ids.begin(), got.ids.begin() + 3), before) << what;
    ASSERT_TRUE(got.text.starts_with(marker)) << what << ": [" << got.text << "]";
    GenerateResult json = got;
    json.text = got.text.substr(marker.size());
    ExpectJsonText(json, what);
    EXPECT_EQ(got.complete->local_prefill(), local);
  }
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(15)).ok());
}

TEST_F(JsonModeTest, AMarkerWithoutJsonObjectIsRefused) {
  v1::GenerateRequest r = JsonRequest("count from 17:", 8);
  r.mutable_sampling()->clear_response_format();
  r.mutable_sampling()->set_response_format_after("</think>");
  const GenerateResult got = Run(r);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(got.status.error_message(),
              HasSubstr("response_format_after \"</think>\" is set without response_format "
                        "json_object"));
}

TEST_F(JsonModeTest, JsonObjectWithIgnoreEosIsRefusedNamingBoth) {
  v1::GenerateRequest r = JsonRequest("count from 17:", 8);
  r.mutable_sampling()->set_ignore_eos(true);
  const GenerateResult got = Run(r);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(got.status.error_message(), HasSubstr("json_object"));
  EXPECT_THAT(got.status.error_message(), HasSubstr("ignore_eos"));
}

// An object with an array of bounded integers, an enum and an optional nested object.
constexpr char kSchema[] = R"({"type": "object", "properties": {
    "count": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
              "minItems": 1, "maxItems": 4},
    "mood": {"enum": ["calm", "busy"]},
    "extra": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
  "required": ["count", "mood"]})";

v1::GenerateRequest SchemaRequest(const std::string& text, int max_new_tokens) {
  v1::GenerateRequest r = JsonRequest(text, max_new_tokens);
  r.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  r.mutable_sampling()->set_response_format_schema(kSchema);
  r.mutable_sampling()->set_response_format_schema_strict(true);
  return r;
}

// A finished answer satisfies the schema; a cut one is a prefix its recognizer takes.
void ExpectSchemaText(const GenerateResult& r, const std::string& what) {
  ASSERT_TRUE(r.status.ok()) << what << ": " << r.status.error_message();
  ASSERT_TRUE(r.complete.has_value()) << what;
  static const auto schema = model::JsonSchema::Compile(kSchema, true).value();
  EXPECT_EQ(model::testing::Read(*schema, r.text).taken, r.text.size()) << what << ": " << r.text;
  if (r.complete->finish_reason() != v1::FINISH_REASON_STOP) {
    EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_LENGTH) << what;
    return;
  }
  EXPECT_EQ(r.complete->matched_token_id(), kDemoEos) << what;
  const model::testing::ReferenceValidator validator(nlohmann::json::parse(kSchema));
  nlohmann::json value;
  ASSERT_NO_THROW(value = nlohmann::json::parse(r.text)) << what << ": [" << r.text << "]";
  EXPECT_TRUE(validator.Valid(value)) << what << ": [" << r.text << "]";
}

TEST_F(JsonModeTest, SchemaAnswersSatisfyTheSchemaOverRemoteAndLocalPrefill) {
  v1::GenerateRequest greedy = SchemaRequest("count from 17:", 80);
  greedy.mutable_sampling()->set_temperature(0);
  const GenerateResult remote = Run(greedy);
  ExpectSchemaText(remote, "greedy, remote prefill");
  EXPECT_FALSE(remote.complete->local_prefill());
  v1::GenerateRequest with_logprobs = greedy;
  with_logprobs.mutable_sampling()->set_logprobs(0);
  const GenerateResult local = Run(with_logprobs);
  ExpectSchemaText(local, "greedy, local prefill");
  EXPECT_TRUE(local.complete->local_prefill());
  EXPECT_EQ(local.ids, remote.ids);
  // Sampled, whitespace banned (the demo model otherwise spends its tokens on it): the schema
  // bounds the answer (two-digit integers, four at most, an enum, one optional boolean), so most
  // finish.
  auto tokenizer = model::Tokenizer::FromFile(std::string(kDemo) + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  int stopped = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    v1::GenerateRequest sampled = SchemaRequest("count from 17:", 120);
    sampled.mutable_sampling()->set_temperature(1.0f);
    sampled.mutable_sampling()->set_seed(seed);
    for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
      auto bytes = (*tokenizer)->TokenBytes(id, /*skip_special_tokens=*/false);
      if (bytes.has_value() && !bytes->empty() &&
          bytes->find_first_not_of(" \t\n\r") == std::string_view::npos) {
        (*sampled.mutable_sampling()->mutable_logit_bias())[id] = -100.0f;
      }
    }
    const GenerateResult got = Run(sampled);
    ExpectSchemaText(got, absl::StrCat("seed ", seed));
    stopped += got.complete && got.complete->finish_reason() == v1::FINISH_REASON_STOP;
  }
  EXPECT_GE(stopped, 3) << "few sampled answers finished: the test proves little";
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(15)).ok());
}

TEST_F(JsonModeTest, AnUnsupportedSchemaIsRefusedNamingTheKeyword) {
  v1::GenerateRequest r = SchemaRequest("count from 17:", 8);
  r.mutable_sampling()->set_response_format_schema(
      R"({"type": "object", "properties": {"a": {"type": "string", "contentEncoding": "base64"}}})");
  GenerateResult got = Run(r);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(got.status.error_message(), "json_schema: keyword \"contentEncoding\" is not "
                                        "supported (at #/properties/a/contentEncoding)");
  r.mutable_sampling()->clear_response_format_schema();
  got = Run(r);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(got.status.error_message(), HasSubstr("json_schema needs the schema"));
}

// Schema choices (response_format_choices, what a forced "required" tool call sends): the
// text is one choice's prefix, then a value of that choice's schema.
constexpr char kCountSchema[] =
    R"({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 4})";
constexpr char kMoodSchema[] = R"({"enum": ["calm", "busy"]})";

v1::GenerateRequest ChoicesRequest(const std::string& text, int max_new_tokens) {
  v1::GenerateRequest r = JsonRequest(text, max_new_tokens);
  r.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  for (const auto& [prefix, schema] :
       {std::pair{"count:", kCountSchema}, std::pair{"mood:", kMoodSchema}}) {
    v1::SchemaChoice* c = r.mutable_sampling()->add_response_format_choices();
    c->set_prefix(prefix);
    c->set_schema(schema);
  }
  return r;
}

// The text starts with a prefix and the rest is read by that prefix's schema, whole when EOS
// ended it. The prefix written, or "" on failure.
std::string ExpectChoiceText(const GenerateResult& r, const std::string& what) {
  EXPECT_TRUE(r.status.ok()) << what << ": " << r.status.error_message();
  if (!r.status.ok() || !r.complete.has_value()) return "";
  for (const auto& [prefix, schema_text] :
       {std::pair{"count:", kCountSchema}, std::pair{"mood:", kMoodSchema}}) {
    if (!r.text.starts_with(prefix)) continue;
    const auto schema = model::JsonSchema::Compile(schema_text, false).value();
    const std::string value = r.text.substr(std::string(prefix).size());
    EXPECT_EQ(model::testing::Read(*schema, value).taken, value.size()) << what << ": [" << r.text << "]";
    if (r.complete->finish_reason() == v1::FINISH_REASON_STOP) {
      EXPECT_TRUE(model::testing::Accepts(*schema, value)) << what << ": [" << r.text << "]";
    }
    return prefix;
  }
  // A cut answer may still be inside a prefix.
  EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_LENGTH) << what << ": [" << r.text << "]";
  EXPECT_TRUE(std::string("count:").starts_with(r.text) || std::string("mood:").starts_with(r.text))
      << what << ": [" << r.text << "]";
  return "";
}

TEST_F(JsonModeTest, SchemaChoicesHoldTheValueToThePrefixesSchema) {
  v1::GenerateRequest greedy = ChoicesRequest("count from 17:", 40);
  greedy.mutable_sampling()->set_temperature(0);
  const GenerateResult remote = Run(greedy);
  ExpectChoiceText(remote, "greedy, remote prefill");
  v1::GenerateRequest with_logprobs = greedy;
  with_logprobs.mutable_sampling()->set_logprobs(0);
  const GenerateResult local = Run(with_logprobs);
  ExpectChoiceText(local, "greedy, local prefill");
  ASSERT_TRUE(local.complete.has_value());
  EXPECT_TRUE(local.complete->local_prefill());
  EXPECT_EQ(local.ids, remote.ids);
  std::set<std::string> prefixes;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    v1::GenerateRequest sampled = ChoicesRequest("count from 17:", 40);
    sampled.mutable_sampling()->set_temperature(1.0f);
    sampled.mutable_sampling()->set_seed(seed);
    prefixes.insert(ExpectChoiceText(Run(sampled), absl::StrCat("seed ", seed)));
  }
  EXPECT_TRUE(prefixes.contains("count:") || prefixes.contains("mood:"));
  // A prefix that begins another is refused, naming both.
  v1::GenerateRequest ambiguous = ChoicesRequest("x", 8);
  ambiguous.mutable_sampling()->mutable_response_format_choices(1)->set_prefix("count:x");
  const GenerateResult refused = Run(ambiguous);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("prefix \"count:\" begins another one"));
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(15)).ok());
}

TEST(JsonModeRunTest, MlaserveRunWritesASchemaPrefix) {
  const std::string cmd = absl::StrCat(
      RunBinary(), " --model ", kDemo,
      " --backend cpu --prompt 'count from 17:' --max-new-tokens 32 --temperature 1 --seed 3 "
      "--response-format json_schema --response-schema '",
      R"({"type": "array", "items": {"type": "integer"}})", "' 2>/dev/null");
  const CommandRun run = RunCommand(cmd);
  ASSERT_EQ(run.exit_code, 0) << cmd;
  std::string out = run.out;
  ASSERT_FALSE(out.empty());
  out.pop_back();  // the newline mlaserve-run ends with
  const auto schema =
      model::JsonSchema::Compile(R"({"type": "array", "items": {"type": "integer"}})", false).value();
  EXPECT_EQ(model::testing::Read(*schema, out).taken, out.size()) << "[" << out << "]";
  const std::string bad = absl::StrCat(RunBinary(), " --model ", kDemo,
                                       " --backend cpu --prompt x --response-format json_schema "
                                       "--response-schema '{\"not\": {}}' 2>&1");
  const CommandRun refused = RunCommand(bad);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.out, HasSubstr("keyword \"not\" is not supported (at #/not)"));
}

TEST(JsonModeRunTest, MlaserveRunWritesAJsonObjectPrefix) {
  for (const std::string flags : {"--temperature 0", "--temperature 1 --seed 4"}) {
    const std::string cmd = absl::StrCat(RunBinary(), " --model ", kDemo,
                                         " --backend cpu --prompt 'count from 17:' "
                                         "--max-new-tokens 32 --response-format json_object ",
                                         flags, " 2>/dev/null");
    const CommandRun run = RunCommand(cmd);
    ASSERT_EQ(run.exit_code, 0) << cmd;
    std::string out = run.out;
    ASSERT_FALSE(out.empty());
    ASSERT_EQ(out.back(), '\n');  // mlaserve-run ends its output with a newline
    out.pop_back();
    EXPECT_TRUE(IsJsonObjectPrefix(out)) << flags << ": [" << out << "]";
  }
}

// A model directory without tokenizer.json (a test fixture checkpoint): JSON mode cannot be
// served; the request fails with FAILED_PRECONDITION saying why, plain requests still run.
TEST(JsonModeNoTokenizerTest, IsRefusedWithFailedPrecondition) {
  const std::string dir = "tests/fixtures/models/deepseek_v3";
  ClusterOptions o;
  o.model_dir = dir;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::GenerateRequest r;
  for (int32_t id : {5, 17, 42, 9}) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_max_new_tokens(4);
  r.mutable_sampling()->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  const GenerateResult refused = RunGenerate((*cluster)->generation(), r, kTimeout);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(),
              HasSubstr("response_format json_object / json_schema needs tokenizer.json or "
                        "tiktoken.model in the model directory " + dir));
  r.mutable_sampling()->clear_response_format();
  const GenerateResult plain = RunGenerate((*cluster)->generation(), r, kTimeout);
  EXPECT_TRUE(plain.status.ok()) << plain.status.error_message();
  EXPECT_EQ(plain.ids.size(), 4u);
  EXPECT_TRUE((*cluster)->WaitAllPagesFree(absl::Seconds(15)).ok());
}

}  // namespace
}  // namespace mlaserve::testing
