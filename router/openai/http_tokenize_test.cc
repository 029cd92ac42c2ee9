// /tokenize and /detokenize end to end: HttpApi on a loopback port over the router's ByteCodec
// model (token id b is the byte b; Encode adds <bos>), with fake workers so that each count is
// checked against what a completion or chat request with the same fields sends them.
#include <httplib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/call_auth.h"
#include "router/admin_conversion.h"
#include "router/openai/http_api.h"
#include "router/testing/byte_codec.h"
#include "router/openai/testing/http_api_fixture.h"
#include "router/testing/byte_router.h"
#include "router/testing/fake_workers.h"
#include "router/testing/poll_until_routable.h"
#include "router/tokenizer_codec.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using testing::kMaxContext;
using testing::kWait;
using Json = nlohmann::json;
using router::testing::ByteCodec;
using router::testing::BytesToIds;

constexpr char kMessages[] =
    R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}])";
constexpr char kWeatherTool[] =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";

std::vector<int32_t> Ids(const Json& tokens) { return tokens.get<std::vector<int32_t>>(); }

class HttpTokenizeTest : public testing::HttpApiFixture {
 protected:
  // A 200's body (the test fails otherwise).
  Json Ok(const std::string& path, const std::string& body) {
    httplib::Result r = Post(path, body);
    if (!r) {
      ADD_FAILURE() << path << ": no answer";
      return Json();
    }
    EXPECT_EQ(r->status, 200) << path << " " << body << ": " << r->body;
    return Json::parse(r->body);
  }

  // The prompt token ids a chat request with `fields` sends the workers, and its
  // usage.prompt_tokens.
  std::pair<std::vector<int32_t>, int> ChatPrompt(const std::string& fields) {
    decode_.set_reply("ok");
    const Json j = Ok("/v1/chat/completions", R"({"model": "demo", "max_tokens": 2, )" + fields + "}");
    const std::vector<v1::ReserveRequest> reserves = decode_.reserves();
    if (reserves.empty()) {
      ADD_FAILURE() << "the chat request reached no worker";
      return {};
    }
    const auto& ids = reserves.back().prompt_token_ids();
    return {std::vector<int32_t>(ids.begin(), ids.end()), j["usage"]["prompt_tokens"].get<int>()};
  }

  // The OpenAI error of a non-200 answer, with its status.
  std::pair<int, Json> Error(const std::string& path, const std::string& body, const HttpApi* api = nullptr) {
    httplib::Result r = Post(path, body, api != nullptr ? api->port() : 0);
    if (!r) {
      ADD_FAILURE() << path << ": no answer";
      return {0, Json()};
    }
    const Json j = Json::parse(r->body);
    EXPECT_TRUE(j.contains("error")) << r->body;
    return {r->status, j["error"]};
  }
};

TEST_F(HttpTokenizeTest, PromptCountsWhatACompletionCounts) {
  decode_.set_reply("17 18");
  const Json completion = Ok("/v1/completions", R"({"model": "demo", "prompt": "count from 17:", "max_tokens": 2})");
  const Json t = Ok("/tokenize", R"({"model": "demo", "prompt": "count from 17:"})");
  EXPECT_EQ(t["count"], completion["usage"]["prompt_tokens"]);
  EXPECT_EQ(t["count"], 15);  // <bos> and 14 bytes
  EXPECT_EQ(t["max_model_len"], kMaxContext);
  EXPECT_TRUE(t["token_strs"].is_null());
  std::vector<int32_t> want = {ByteCodec::kBos};
  for (int32_t id : BytesToIds("count from 17:")) want.push_back(id);
  EXPECT_EQ(Ids(t["tokens"]), want);
  // The prompt the workers were given is the same.
  const std::vector<v1::ReserveRequest> reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  const auto& sent = reserves.back().prompt_token_ids();
  EXPECT_EQ(Ids(t["tokens"]), std::vector<int32_t>(sent.begin(), sent.end()));

  // Without special tokens: the text as written ("<bos>" written in it is still the token).
  const Json plain = Ok("/tokenize", R"({"prompt": "count from 17:", "add_special_tokens": false})");
  EXPECT_EQ(Ids(plain["tokens"]), BytesToIds("count from 17:"));
  EXPECT_EQ(plain["count"], 14);
  EXPECT_EQ(Ids(Ok("/tokenize", R"({"prompt": "<bos>a", "add_special_tokens": false})")["tokens"]),
            (std::vector<int32_t>{ByteCodec::kBos, 'a'}));
  // An empty text is no error here (there is nothing to generate from, but something to count).
  EXPECT_EQ(Ok("/tokenize", R"({"prompt": ""})")["count"], 1);
}

TEST_F(HttpTokenizeTest, MessagesRenderAsChatRendersThem) {
  const std::string messages = std::string(R"("messages": )") + kMessages;
  const auto [chat_ids, chat_usage] = ChatPrompt(messages);
  const Json t = Ok("/tokenize", "{" + messages + "}");
  EXPECT_EQ(Ids(t["tokens"]), chat_ids);
  EXPECT_EQ(t["count"], chat_usage);
  // "<bos>" as one token (the template writes it; no second one is added), then the bytes.
  std::vector<int32_t> want = {ByteCodec::kBos};
  for (int32_t id : BytesToIds("<system>Be brief.<user>Hello<assistant>")) want.push_back(id);
  EXPECT_EQ(Ids(t["tokens"]), want);

  // The template's other inputs, the same on both endpoints.
  for (const std::string& fields : {messages + R"(, "add_generation_prompt": false)",
                                    messages + R"(, "chat_template_kwargs": {"think": true})"}) {
    const auto [ids, usage] = ChatPrompt(fields);
    const Json same = Ok("/tokenize", "{" + fields + "}");
    EXPECT_EQ(Ids(same["tokens"]), ids) << fields;
    EXPECT_EQ(same["count"], usage) << fields;
  }
  EXPECT_EQ(Ok("/tokenize", "{" + messages + R"(, "add_generation_prompt": false})")["count"],
            chat_usage - static_cast<int>(std::string("<assistant>").size()));

  // add_special_tokens: the rendered text through the codec's Encode, which adds its BOS on
  // top of the template's, as vLLM does (ByteCodec's Encode reads a "<bos>" in the text as
  // bytes).
  const Json extra = Ok("/tokenize", "{" + messages + R"(, "add_special_tokens": true})");
  EXPECT_EQ(Ids(extra["tokens"]), *ByteCodec().Encode("<bos><system>Be brief.<user>Hello<assistant>"));
  EXPECT_EQ(extra["tokens"][0], ByteCodec::kBos);
}

// With tools the prompt carries the tool section chat writes into it (deepseek_v31's, as this
// template does not render `tools`): the same code renders both.
TEST_F(HttpTokenizeTest, ToolsAreRenderedAsChatRendersThem) {
  api_.reset();
  HttpApiOptions options;
  options.tool_call_parser = "deepseek_v31";
  api_ = StartApi(options);
  ASSERT_NE(api_, nullptr);
  const std::string fields = std::string(R"("messages": )") + kMessages + R"(, "tools": [)" + kWeatherTool + "]";
  const auto [chat_ids, chat_usage] = ChatPrompt(fields);
  const Json t = Ok("/tokenize", "{" + fields + "}");
  EXPECT_EQ(Ids(t["tokens"]), chat_ids);
  EXPECT_EQ(t["count"], chat_usage);
  const Json without = Ok("/tokenize", std::string(R"({"messages": )") + kMessages + "}");
  EXPECT_GT(t["count"].get<int>(), without["count"].get<int>() + 20) << "the tool section is counted";
}

TEST_F(HttpTokenizeTest, TokenStringsAndDetokenizeRoundTrips) {
  const Json t = Ok("/tokenize", R"({"prompt": "hé", "return_token_strs": true})");
  EXPECT_EQ(Ids(t["tokens"]), (std::vector<int32_t>{ByteCodec::kBos, 'h', 0xC3, 0xA9}));
  // As the logprobs name tokens: each token's bytes; half a character is U+FFFD.
  EXPECT_EQ(t["token_strs"], Json({"<bos>", "h", "\xEF\xBF\xBD", "\xEF\xBF\xBD"}));

  // Back to text: special tokens included, as transformers' decode.
  EXPECT_EQ(Ok("/detokenize", R"({"model": "demo", "tokens": )" + t["tokens"].dump() + "}"),
            Json({{"prompt", "<bos>hé"}}));
  const std::string text = "Grüße, 世界! ✓";
  const Json plain = Ok("/tokenize", R"({"prompt": ")" + text + R"(", "add_special_tokens": false})");
  EXPECT_EQ(Ok("/detokenize", R"({"tokens": )" + plain["tokens"].dump() + "}")["prompt"], text);
  const Json chat = Ok("/tokenize", std::string(R"({"messages": )") + kMessages + "}");
  EXPECT_EQ(Ok("/detokenize", R"({"tokens": )" + chat["tokens"].dump() + "}")["prompt"],
            "<bos><system>Be brief.<user>Hello<assistant>");
  EXPECT_EQ(Ok("/detokenize", R"({"tokens": []})")["prompt"], "");
  // A character cut short ends as U+FFFD, as the output's text does.
  EXPECT_EQ(Ok("/detokenize", R"({"tokens": [104, 195]})")["prompt"], "h\xEF\xBF\xBD");
}

TEST_F(HttpTokenizeTest, ErrorsAreOpenAiShaped) {
  auto [status, e] = Error("/detokenize", R"({"model": "demo", "tokens": [104, 300]})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "tokens");
  EXPECT_EQ(e["message"], "'tokens' holds 300 at position 1, outside the vocabulary [0, 300)");
  std::tie(status, e) = Error("/detokenize", R"({"tokens": [-5]})");
  EXPECT_EQ(status, 400);
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("holds -5"));
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/tokenize", R"({"model": "gpt-4", "prompt": "x"})"},
           {"/detokenize", R"({"model": "gpt-4", "tokens": [1]})"}}) {
    std::tie(status, e) = Error(path, body);
    EXPECT_EQ(status, 404) << path;
    EXPECT_EQ(e["code"], "model_not_found") << path;
    EXPECT_EQ(e["param"], "model") << path;
    std::tie(status, e) = Error(path, "{oops");
    EXPECT_EQ(status, 400) << path;
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("not valid JSON")) << path;
    std::tie(status, e) = Error(path, R"({"model": "demo"})");
    EXPECT_EQ(status, 400) << path;
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("required")) << path;
  }
  std::tie(status, e) = Error("/tokenize", R"({"prompt": ["a", "b"]})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["param"], "prompt");
  EXPECT_EQ(e["message"], "'prompt' must be a string, got an array");
  std::tie(status, e) = Error("/tokenize", R"({"prompt": "x", "max_tokens": 3})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["message"], "unrecognized request argument supplied: max_tokens");
  std::tie(status, e) = Error("/tokenize", R"({"messages": [{"role": "user"}], "add_generation_prompt": "no"})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["param"], "add_generation_prompt");
  // Tools this server cannot show the model are refused as chat refuses them.
  std::tie(status, e) = Error("/tokenize", std::string(R"({"messages": )") + kMessages + R"(, "tools": [)" +
                                               kWeatherTool + "]}");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["param"], "tools");
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("--tool-call-parser"));
  httplib::Client client("127.0.0.1", api_->port());
  EXPECT_EQ(client.Get("/tokenize")->status, 404);
  EXPECT_TRUE(decode_.reserves().empty()) << "tokenizing reached a worker";
}

// Without a chat template: messages get chat's error, a text prompt is still tokenized.
TEST_F(HttpTokenizeTest, MessagesNeedTheChatTemplateAsChatDoes) {
  api_.reset();
  api_ = StartApi({}, absl::NotFoundError("no chat_template in tokenizer_config.json"));
  ASSERT_NE(api_, nullptr);
  const std::string messages = std::string(R"("messages": )") + kMessages;
  const auto [chat_status, chat_error] =
      Error("/v1/chat/completions", R"({"model": "demo", )" + messages + "}");
  const auto [status, e] = Error("/tokenize", "{" + messages + "}");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(status, chat_status);
  EXPECT_EQ(e, chat_error);
  EXPECT_EQ(e["code"], "chat_template_unavailable");
  EXPECT_EQ(Ok("/tokenize", R"({"prompt": "x"})")["count"], 2);
}

// A router without a tokenizer (TokenIdsOnlyCodec) answers both with the error a text
// completion gets.
TEST_F(HttpTokenizeTest, ARouterWithoutATokenizerSaysSoAsForText) {
  RouterModel m;
  m.identity = ModelFromProto(router::testing::FakeModelIdentity());
  m.limits.vocab_size = ByteCodec::kVocabSize;
  m.limits.max_context = kMaxContext;
  m.limits.eos_token_ids = {ByteCodec::kEos};
  RouterContext ids_only(RouterOptions{}, m, TokenIdsOnlyCodec("models/x has no tokenizer"));
  ASSERT_TRUE(ids_only.registry().AddByAddress(WorkerRole::kPrefill, prefill_server_.address, WorkerSource::kStatic).ok());
  ASSERT_TRUE(ids_only.registry().AddByAddress(WorkerRole::kDecode, decode_server_.address, WorkerSource::kStatic).ok());
  ASSERT_TRUE(router::testing::PollUntilRoutable(&ids_only, /*want_prefill=*/true));
  std::unique_ptr<HttpApi> api = StartApi({}, TestTemplate(), &ids_only);
  ASSERT_NE(api, nullptr);
  const auto [completion_status, completion_error] =
      Error("/v1/completions", R"({"model": "demo", "prompt": "x"})", api.get());
  EXPECT_EQ(completion_status, 400);
  EXPECT_THAT(completion_error["message"].get<std::string>(), HasSubstr("models/x has no tokenizer"));
  for (const std::string& body : {R"({"prompt": "x"})", R"({"messages": [{"role": "user", "content": "x"}]})"}) {
    const auto [status, e] = Error("/tokenize", body, api.get());
    EXPECT_EQ(status, completion_status) << body;
    EXPECT_EQ(e, completion_error) << body;
  }
  const auto [status, e] = Error("/detokenize", R"({"tokens": [1, 2]})", api.get());
  EXPECT_EQ(status, completion_status);
  EXPECT_EQ(e, completion_error);
  api.reset();
  EXPECT_TRUE(ids_only.WaitForCallsToEnd(kWait));
}

// API keys and the body bound hold for these routes as for the others.
TEST_F(HttpTokenizeTest, ApiKeysAndTheBodyBoundApply) {
  api_.reset();
  ASSERT_TRUE(router_->WaitForCallsToEnd(kWait));
  common::CallAuthOptions keys;
  keys.api_keys = common::TokenSet::Of({"api-key-0123456789abcdef"});
  router_ = MakeRouter(common::CallAuthorizer(std::move(keys)));
  HttpApiOptions options;
  options.max_body_bytes = 1024;
  api_ = StartApi(options);
  ASSERT_NE(api_, nullptr);
  httplib::Client client("127.0.0.1", api_->port());
  client.set_read_timeout(10);
  const httplib::Headers key = {{"Authorization", "Bearer api-key-0123456789abcdef"}};
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/tokenize", R"({"prompt": "x"})"}, {"/detokenize", R"({"tokens": [120]})"}}) {
    httplib::Result r = client.Post(path, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(Json::parse(r->body)["error"]["code"], "invalid_api_key") << path;
    r = client.Post(path, {{"Authorization", "Bearer wrong-key-0123456789"}}, body, "application/json");
    EXPECT_EQ(r->status, 401) << path;
    r = client.Post(path, key, body, "application/json");
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
    const std::string big = R"({"prompt": ")" + std::string(2000, 'a') + R"("})";
    r = client.Post(path, key, big, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413) << path;
    EXPECT_EQ(Json::parse(r->body)["error"]["type"], "invalid_request_error") << path;
  }
}

}  // namespace
}  // namespace mlaserve::router::openai
