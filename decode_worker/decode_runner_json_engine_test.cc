// JSON mode through DecodeRunner over the real engine (CPU backend) and the bundled demo model
// with its tokenizer: whatever the model would rather say, the detokenized text is a JSON
// object's prefix, and EOS comes only after a complete object. Text is judged by nlohmann's
// parser, not by the constraint (worker/testing/json_mode_testing.h).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode_worker/decode_runner.h"
#include "decode_worker/testing/recording_sink.h"
#include "gtest/gtest.h"
#include "model/constraint/schema_testing.h"
#include "model/constraint/schema_validator_testing.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/receiver.h"
#include "model/engine.h"
#include "model/tokenizer/tokenizer.h"
#include "worker/json_mode_vocabulary.h"
#include "worker/testing/json_mode_testing.h"

namespace mlaserve::decode {
namespace {

using ::mlaserve::testing::IsJsonObject;
using ::mlaserve::testing::IsJsonObjectPrefix;
using ::mlaserve::testing::RecordingSink;

constexpr char kDemo[] = "models/demo";

class DecodeRunnerJsonEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model::EngineOptions o;
    o.model_dir = kDemo;
    o.num_kv_pages = 64;
    o.max_batch_tokens = 256;
    o.max_batch_seqs = 8;
    auto engine = model::Engine::Create(o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    auto tokenizer = model::Tokenizer::FromFile(std::string(kDemo) + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    const model::ModelConfig& c = engine_->config();
    eos_ = c.eos_token_ids;
    ASSERT_FALSE(eos_.empty());
    vocabulary_ = worker::JsonModeVocabulary::FromModelDirectory(kDemo, c.vocab_size, eos_);
    layout_ = *kvtransfer::MakeKvLayout(c, engine_->kv_pool().options());
    receiver_ = std::make_unique<kvtransfer::KvReceiver>(&engine_->kv_pool(), layout_);
    DecodeRunnerOptions ro;
    ro.scheduler = {.max_running = 8, .max_batch_tokens = 256, .chunk_size = 64};
    ro.kv_endpoint = "unused: every request here prefills locally";
    ro.json_vocabulary = vocabulary_.get();
    runner_ = std::make_unique<DecodeRunner>(engine_.get(), receiver_.get(), ro);
  }

  std::shared_ptr<RecordingSink> Start(const std::string& id, const std::string& prompt,
                                       int max_new, const model::SamplingOptions& sampling,
                                       const std::string& schema = {}) {
    ReserveSpec s;
    s.request_id = id;
    s.prompt = *tokenizer_->Encode(prompt, /*add_special_tokens=*/true);
    s.sampling = sampling;
    s.sampling.json_object = schema.empty();
    s.sampling.json_schema = schema;
    s.max_new_tokens = max_new;
    s.local_prefill = true;
    s.json_vocabulary = *vocabulary_->Get();
    auto r = runner_->Reserve(std::move(s));
    EXPECT_TRUE(r.ok()) << r.status();
    auto sink = std::make_shared<RecordingSink>();
    if (r.ok()) EXPECT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
    return sink;
  }

  void RunUntilIdle() {
    for (int i = 0; i < 2000 && runner_->Step(); ++i) {
    }
  }

  bool IsEos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

  // The request's text; checks it is a JSON object's prefix, complete when EOS ended it.
  std::string ExpectJsonOutput(const RecordingSink& sink, const std::string& what) {
    EXPECT_TRUE(sink.finish().has_value()) << what << ": " << sink.error();
    if (!sink.finish()) return "";
    std::vector<int32_t> tokens = sink.tokens();
    for (size_t i = 0; i + 1 < tokens.size(); ++i) EXPECT_FALSE(IsEos(tokens[i])) << what;
    const bool stopped = sink.finish()->reason == FinishReason::kStop;
    if (stopped) {
      EXPECT_TRUE(IsEos(tokens.back())) << what;
      tokens.pop_back();
    }
    auto text = tokenizer_->Decode(tokens, /*skip_special_tokens=*/true);
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return "";
    EXPECT_TRUE(IsJsonObjectPrefix(*text)) << what << ": [" << *text << "]";
    if (stopped) EXPECT_TRUE(IsJsonObject(*text)) << what << ": [" << *text << "]";
    return *text;
  }

  std::unique_ptr<model::Engine> engine_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::vector<int32_t> eos_;
  std::unique_ptr<worker::JsonModeVocabulary> vocabulary_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  std::unique_ptr<DecodeRunner> runner_;
};

TEST_F(DecodeRunnerJsonEngineTest, GreedyAndSampledOutputsAreJsonObjectPrefixes) {
  // Unconstrained, the model answers " h e l l o" (not JSON); here it must write JSON.
  model::SamplingOptions greedy;
  greedy.temperature = 0.0f;
  std::vector<std::pair<std::string, std::shared_ptr<RecordingSink>>> sinks;
  sinks.emplace_back("greedy copy", Start("g0", "copy: h e l l o ->", 40, greedy));
  sinks.emplace_back("greedy count", Start("g1", "count from 17:", 40, greedy));
  for (int seed = 0; seed < 6; ++seed) {
    model::SamplingOptions sampled;
    sampled.temperature = 1.0f;
    sampled.seed = seed;
    sinks.emplace_back(absl::StrCat("seed ", seed),
                       Start(absl::StrCat("s", seed), "count from 17:", 40, sampled));
  }
  RunUntilIdle();
  bool any_bracket = false;
  for (const auto& [what, sink] : sinks) {
    const std::string text = ExpectJsonOutput(*sink, what);
    any_bracket = any_bracket || text.find('{') != std::string::npos;
  }
  EXPECT_TRUE(any_bracket) << "no output opened an object: the test proves little";
  EXPECT_EQ(engine_->kv_pool().free_pages(), engine_->kv_pool().total_pages());
}

TEST_F(DecodeRunnerJsonEngineTest, AnObjectThatClosesEndsWithEos) {
  // Whitespace banned and '{' / '}' favoured: the shortest object, "{}", then EOS (the only
  // token a complete object allows, whatever the model prefers).
  model::SamplingOptions steered;
  steered.temperature = 0.0f;
  for (int32_t id = 0; id < engine_->config().vocab_size; ++id) {
    auto bytes = tokenizer_->TokenBytes(id, /*skip_special_tokens=*/false);
    if (!bytes.has_value() || bytes->empty()) continue;
    if (bytes->find_first_not_of(" \t\n\r") == std::string_view::npos) {
      steered.logit_bias.emplace_back(id, -100.0f);
    } else if (*bytes == "{" || *bytes == "}") {
      steered.logit_bias.emplace_back(id, 100.0f);
    }
  }
  auto sink = Start("steered", "count from 17:", 16, steered);
  RunUntilIdle();
  EXPECT_EQ(ExpectJsonOutput(*sink, "steered"), "{}");
  ASSERT_TRUE(sink->finish());
  EXPECT_EQ(sink->finish()->reason, FinishReason::kStop);
  ASSERT_TRUE(sink->finish()->matched_token.has_value());
  EXPECT_TRUE(IsEos(*sink->finish()->matched_token));
  EXPECT_EQ(sink->finish()->completion_tokens, 3);
}

// Structured outputs on the demo model: an array of small integers, greedy and sampled; a
// finished answer satisfies the schema, a cut one is a prefix its recognizer takes.
TEST_F(DecodeRunnerJsonEngineTest, SchemaOutputsSatisfyTheSchema) {
  const std::string schema = R"({"type": "array", "items": {"type": "integer", "minimum": 0,
      "maximum": 99}, "minItems": 1, "maxItems": 4})";
  const auto compiled = model::JsonSchema::Compile(schema, false).value();
  const model::testing::ReferenceValidator validator(nlohmann::json::parse(schema));
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  model::SamplingOptions greedy;
  greedy.temperature = 0.0f;
  sinks.push_back(Start("g", "count from 17:", 48, greedy, schema));
  for (int seed = 0; seed < 5; ++seed) {
    model::SamplingOptions sampled;
    sampled.temperature = 1.0f;
    sampled.seed = seed;
    sinks.push_back(Start(absl::StrCat("s", seed), "count from 17:", 48, sampled, schema));
  }
  RunUntilIdle();
  int stopped = 0;
  for (const auto& sink : sinks) {
    ASSERT_TRUE(sink->finish().has_value()) << sink->error();
    std::vector<int32_t> tokens = sink->tokens();
    const bool stop = sink->finish()->reason == FinishReason::kStop;
    if (stop) tokens.pop_back();
    const std::string text = *tokenizer_->Decode(tokens, /*skip_special_tokens=*/true);
    EXPECT_EQ(model::testing::Read(*compiled, text).taken, text.size()) << text;
    if (!stop) continue;
    ++stopped;
    EXPECT_TRUE(validator.Valid(nlohmann::json::parse(text))) << text;
  }
  EXPECT_GE(stopped, 3);
  EXPECT_EQ(engine_->kv_pool().free_pages(), engine_->kv_pool().total_pages());
}

}  // namespace
}  // namespace mlaserve::decode
