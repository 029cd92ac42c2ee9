// Checkpoints that ship Moonshot's tiktoken tokenizer instead of tokenizer.json, served end to
// end: kimi_k2_tiktoken (model_type kimi_k2) and moonlight_tiktoken (deepseek_v3), tiny random
// DeepSeek-V3 checkpoints made by tools/make_tiktoken_model_fixtures.py with HF's
// DeepseekV3ForCausalLM as the reference and Python tiktoken's ids for a text prompt.
//   * the tokenizer gives Python tiktoken's ids for the text;
//   * mlaserve-run on those ids: HF's last-position logits and HF's 16 greedy tokens;
//   * mlaserve-run on the *text* (--prompt, tokenized through tiktoken.model): the same greedy
//     tokens, printed as the tokenizer decodes them;
//   * a router + prefill + decode cluster answers the *text* prompt (tokenized by the router
//     through the tiktoken vocabulary) with HF's greedy tokens and their text;
//   * the fixture's Kimi-style chat template makes --tool-call-parser auto pick Kimi's
//     <|tool_calls_section_begin|> syntax (kimi_k2), and a router with the HTTP API serves a
//     forced tool call the model writes (its arguments held to the tool's schema) with a Kimi
//     call id counting the history's calls, named and "required" (one of the tools' ids, then
//     that tool's arguments).
#include <unistd.h>

#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_testing.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "router/chat_template/checkpoint_template.h"
#include "router/openai/tool_prompt.h"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

using Json = nlohmann::json;
constexpr absl::Duration kTimeout = absl::Seconds(120);

std::string FixtureDir(const std::string& name) { return "tests/fixtures/models/" + name; }

Json Expected(const std::string& name) {
  std::ifstream in(FixtureDir(name) + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

std::vector<int32_t> Ids(const Json& j) { return j.get<std::vector<int32_t>>(); }

class TiktokenFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TiktokenFixture, TokenizerGivesPythonTiktokenIds) {
  const Json text_prompt = Expected(GetParam())["text_prompt"];
  auto tok = model::Tokenizer::FromModelDir(FixtureDir(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), Expected(GetParam())["vocab_size"].get<int>());
  EXPECT_EQ((*tok)->Encode(text_prompt["text"].get<std::string>(), true).value(),
            Ids(text_prompt["input_ids"]));
  EXPECT_EQ((*tok)->Decode(Ids(text_prompt["greedy_tokens"]), false).value(),
            text_prompt["greedy_text"].get<std::string>());
}

TEST_P(TiktokenFixture, RunMatchesHfLogitsAndGreedyTokens) {
  const Json expected = Expected(GetParam());
  const Json& prompt = expected["prompts"].back();  // the text prompt's ids
  ASSERT_EQ(prompt["input_ids"], expected["text_prompt"]["input_ids"]);
  // Unique to this process: another run on this machine must not write it under this one.
  const std::string dump = absl::StrCat(::testing::TempDir(), "/tiktoken_run_", GetParam(), "_",
                                        ::getpid(), ".json");
  const std::string cmd = absl::StrCat(
      RunBinary(), " --model ", FixtureDir(GetParam()), " --backend cpu --prompt-ids ",
      absl::StrJoin(Ids(prompt["input_ids"]), ","), " --max-new-tokens 16 --ignore-eos",
      " --print-ids --dump-logits ", dump, " > /dev/null 2>&1");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dump);
  const Json got = Json::parse(in);
  std::remove(dump.c_str());
  EXPECT_EQ(Ids(got["generated_ids"]), Ids(prompt["greedy"]["tokens"]));
  const std::vector<double> want = prompt["logits"].back().get<std::vector<double>>();
  const std::vector<double> have = got["last_prompt_logits"].get<std::vector<double>>();
  ASSERT_EQ(have.size(), want.size());
  double max_abs = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(have[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_LE(max_abs, 1e-4 * std::max(1.0, scale)) << "max |logit - HF| " << max_abs;
}

// --prompt is tokenized through tiktoken.model (Tokenizer::FromModelDir): the text prompt's ids,
// hence HF's greedy tokens, and stdout is their text.
TEST_P(TiktokenFixture, RunAnswersATextPrompt) {
  const Json text_prompt = Expected(GetParam())["text_prompt"];
  const std::string text = text_prompt["text"].get<std::string>();
  ASSERT_EQ(text.find('\''), std::string::npos) << "the test quotes the prompt with '";
  const std::string dump = absl::StrCat(::testing::TempDir(), "/tiktoken_run_text_", GetParam(),
                                        "_", ::getpid(), ".json");
  const std::string cmd =
      absl::StrCat(RunBinary(), " --model ", FixtureDir(GetParam()), " --backend cpu --prompt '",
                   text, "' --max-new-tokens 16 --ignore-eos --dump-logits ", dump, " 2>/dev/null");
  const CommandRun run = RunCommand(cmd);
  ASSERT_EQ(run.exit_code, 0) << cmd;
  const std::string& out = run.out;
  std::ifstream in(dump);
  const Json got = Json::parse(in);
  std::remove(dump.c_str());
  EXPECT_EQ(Ids(got["generated_ids"]), Ids(text_prompt["greedy_tokens"]));
  auto tok = model::Tokenizer::FromModelDir(FixtureDir(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(out, (*tok)->Decode(Ids(text_prompt["greedy_tokens"]), true).value() + "\n");
}

// The router tokenizes the text with tiktoken.model, the workers run the model, the router
// detokenizes: HF's greedy tokens, and their text as the tokenizer decodes them.
TEST_P(TiktokenFixture, ClusterAnswersATextPrompt) {
  const Json text_prompt = Expected(GetParam())["text_prompt"];
  ClusterOptions o;
  o.model_dir = FixtureDir(GetParam());
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::GenerateRequest r;
  r.set_text(text_prompt["text"].get<std::string>());
  r.mutable_sampling()->set_max_new_tokens(16);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_ignore_eos(true);
  const GenerateResult got = RunGenerate((*cluster)->generation(), r, kTimeout);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  ASSERT_TRUE(got.complete.has_value());
  EXPECT_EQ(got.complete->prompt_tokens(), static_cast<int>(text_prompt["input_ids"].size()));
  EXPECT_EQ(got.ids, Ids(text_prompt["greedy_tokens"]));
  auto tok = model::Tokenizer::FromModelDir(FixtureDir(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(got.text, (*tok)->Decode(got.ids, /*skip_special_tokens=*/true).value());
  EXPECT_FALSE(got.text.empty());
  EXPECT_TRUE((*cluster)->WaitAllPagesFree(absl::Seconds(15)).ok());
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TiktokenFixture,
                         ::testing::Values("kimi_k2_tiktoken", "moonlight_tiktoken"));

// Kimi's tool-call syntax (<|tool_calls_section_begin|> ...) is read off the template.
TEST(TiktokenChatTemplate, KimiStyleTemplateRendersKimisToolSyntax) {
  auto chat = router::chat_template::LoadChatTemplate(FixtureDir("kimi_k2_tiktoken"), "kimi_k2", "");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(router::openai::DetectToolCallFormat(*chat), router::openai::ToolCallFormat::kKimiK2);
  nlohmann::ordered_json vars = {
      {"messages", nlohmann::ordered_json::array(
                       {{{"role", "user"}, {"content", "What is the weather in Paris?"}},
                        {{"role", "assistant"}, {"content", ""},
                         {"tool_calls", {{{"id", "functions.weather:0"}, {"type", "function"},
                                          {"function", {{"name", "weather"},
                                                        {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
                        {{"role", "tool"}, {"tool_call_id", "functions.weather:0"}, {"content", "sunny"}}})},
      {"add_generation_prompt", true}};
  absl::StatusOr<std::string> text = chat->Render(vars);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|>"
            "<|im_user|>user<|im_middle|>What is the weather in Paris?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><|tool_calls_section_begin|><|tool_call_begin|>"
            "functions.weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
            "<|tool_calls_section_end|><|im_end|>"
            "<|im_system|>tool<|im_middle|>## Result of functions.weather:0\nsunny<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
}

// The HTTP API on the Kimi fixture: a named tool_choice writes Kimi's call opening (the id
// counting the one call of the history) and holds the arguments to the tool's schema, so the
// random model's greedy continuation, decoded through tiktoken, is a call the router parses.
// tool_choice "required" over two tools: the random model writes the header itself, held to
// one of the tools' ids, and the arguments the parsed call carries are that tool's schema's.
TEST(TiktokenChatTemplate, ClusterServesForcedKimiToolCalls) {
  ClusterOptions o;
  o.model_dir = FixtureDir("kimi_k2_tiktoken");
  o.extra_router_flags = {"--http-port", "0"};
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto http = (*cluster)->router().WaitForLine("http listening on ", kTimeout);
  ASSERT_TRUE(http.ok()) << http.status() << "\n" << (*cluster)->router().LogTail();
  EXPECT_THAT((*cluster)->router().LogTail(), ::testing::HasSubstr("tool calls: kimi_k2 syntax"));
  const Json request = Json::parse(R"({
    "model": "kimi_k2_tiktoken", "temperature": 0,
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "functions.weather:0", "type": "function",
        "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "functions.weather:0", "content": "sunny"},
      {"role": "user", "content": "And Oslo?"}],
    "tools": [{"type": "function", "function": {"name": "weather", "strict": true, "parameters": {
      "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
      "additionalProperties": false}}}],
    "tool_choice": {"type": "function", "function": {"name": "weather"}}})");
  httplib::Client client("127.0.0.1", std::stoi(http->substr(http->rfind(':') + 1)));
  client.set_read_timeout(60);
  httplib::Result r = client.Post("/v1/chat/completions", request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json body = Json::parse(r->body);
  const Json& message = body["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << body;
  EXPECT_EQ(message["tool_calls"][0]["id"], "functions.weather:1");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "weather");
  ASSERT_EQ(body["choices"][0]["finish_reason"], "tool_calls") << body;
  const Json arguments = Json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>());
  ASSERT_TRUE(arguments.is_object()) << arguments;
  EXPECT_EQ(arguments.size(), 1u) << arguments;
  EXPECT_THAT(arguments.value("city", ""), ::testing::AnyOf("Paris", "Oslo"));
  EXPECT_TRUE(message["content"].is_null()) << body;

  // "required": greedy, then sampled; each call is one of the two tools, with that tool's
  // arguments (the enums do not overlap, so the other tool's would show).
  Json required = request;
  required["tool_choice"] = "required";
  required["tools"].push_back(Json::parse(R"({"type": "function", "function": {"name": "clock",
      "strict": true, "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
      "required": ["zone"], "additionalProperties": false}}})"));
  // Whitespace banned: the random model would otherwise spend the 32 tokens the fixture's
  // context leaves on it (the JSON may hold runs of it between its tokens).
  auto tokenizer = model::Tokenizer::FromModelDir(FixtureDir("kimi_k2_tiktoken"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    auto bytes = (*tokenizer)->TokenBytes(id, /*skip_special_tokens=*/false);
    if (bytes.has_value() && !bytes->empty() &&
        bytes->find_first_not_of(" \t\n\r") == std::string_view::npos) {
      required["logit_bias"][std::to_string(id)] = -100;
    }
  }
  int finished = 0;
  for (int seed = -1; seed < 4; ++seed) {
    SCOPED_TRACE(seed < 0 ? "greedy" : absl::StrCat("seed ", seed));
    if (seed >= 0) {
      required["temperature"] = 1.0;
      required["seed"] = seed;
    }
    r = client.Post("/v1/chat/completions", required.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json answer = Json::parse(r->body);
    const Json& call_message = answer["choices"][0]["message"];
    ASSERT_TRUE(call_message.contains("tool_calls")) << answer;
    ASSERT_EQ(call_message["tool_calls"].size(), 1u) << answer;
    const std::string name = call_message["tool_calls"][0]["function"]["name"];
    EXPECT_EQ(call_message["tool_calls"][0]["id"], absl::StrCat("functions.", name, ":1"));
    const Json* tool = nullptr;
    for (const Json& t : required["tools"]) {
      if (t["function"]["name"] == name) tool = &t;
    }
    ASSERT_NE(tool, nullptr) << answer;
    // That tool's schema reads the arguments (the enums do not overlap, so the other tool's
    // would not be read), whole when the call ended; the fixture's 512-token context may cut a
    // sampled one short.
    const auto schema = model::JsonSchema::Compile((*tool)["function"]["parameters"].dump(), true).value();
    const std::string arguments = call_message["tool_calls"][0]["function"]["arguments"];
    EXPECT_EQ(model::testing::Read(*schema, arguments).taken, arguments.size()) << answer;
    if (answer["choices"][0]["finish_reason"] == "tool_calls") {
      ++finished;
      EXPECT_TRUE(model::testing::Accepts(*schema, arguments)) << answer;
    } else {
      EXPECT_EQ(answer["choices"][0]["finish_reason"], "length") << answer;
      EXPECT_GT(seed, -1) << "the greedy call ends within the context";
    }
  }
  EXPECT_GE(finished, 2) << "few calls finished: the test proves little";
  EXPECT_TRUE((*cluster)->WaitAllPagesFree(absl::Seconds(15)).ok());
}

}  // namespace
}  // namespace mlaserve::testing
