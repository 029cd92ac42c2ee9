// The OpenAI HTTP API's logprobs and aborts through the router's Generate path, with fake
// workers (router/testing): the fake decode worker streams FakeLogprobs with each token of a
// request that asks, so the shapes are checked against known values; ByteCodec names the
// tokens (token id b is the byte b).
#include <httplib.h>

#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/openai/http_api.h"
#include "router/testing/byte_router.h"
#include "router/testing/fake_workers.h"
#include "router/testing/poll_until_routable.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using router::testing::FakeDecodeWorker;
using router::testing::FakePrefillWorker;
using router::testing::TestServer;

constexpr absl::Duration kWait = absl::Seconds(10);

class HttpApiSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    decode_server_ = TestServer::Start({&decode_});
    prefill_server_ = TestServer::Start({&prefill_});
    RouterOptions o;
    o.abort_timeout = absl::Seconds(2);
    router_ = router::testing::StartByteRouter(std::move(o), 512, prefill_server_.address,
                                               decode_server_.address);
    ASSERT_FALSE(HasFailure());
    absl::StatusOr<chat_template::ChatTemplate> t =
        chat_template::ChatTemplate::Parse("{% for m in messages %}{{ m.content }}{% endfor %}");
    ASSERT_TRUE(t.ok()) << t.status();
    HttpApiOptions options;
    options.host = "127.0.0.1";
    options.served_model_name = "demo";
    options.threads = 4;
    absl::StatusOr<std::unique_ptr<HttpApi>> api =
        HttpApi::Start(router_.get(), chat_template::CheckpointChatTemplate{"test", *std::move(t)}, options);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
  }
  void TearDown() override {
    api_.reset();
    EXPECT_TRUE(router_->WaitForCallsToEnd(kWait));
    prefill_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
    decode_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  httplib::Result Post(const std::string& path, const std::string& body) {
    httplib::Client client("127.0.0.1", api_->port());
    client.set_read_timeout(10);
    return client.Post(path.c_str(), body, "application/json");
  }
  static std::vector<Json> Events(const std::string& sse) {
    std::vector<Json> out;
    for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
      const size_t end = sse.find("\n\n", pos);
      const std::string payload = sse.substr(pos + 6, end - pos - 6);
      out.push_back(payload == "[DONE]" ? Json("[DONE]") : Json::parse(payload));
      pos = end;
    }
    return out;
  }

  FakeDecodeWorker decode_{64, 0};  // threshold 0: the router prefills remotely unless told
  FakePrefillWorker prefill_{&decode_};
  TestServer decode_server_, prefill_server_;
  std::unique_ptr<RouterContext> router_;
  std::unique_ptr<HttpApi> api_;
};

TEST_F(HttpApiSamplingTest, CompletionLogprobsStreamedAndNot) {
  decode_.set_reply("ab");
  const std::string body = R"({"model": "demo", "prompt": "x", "max_tokens": 2, "logprobs": 2, )"
                           R"("presence_penalty": 0.5, "frequency_penalty": 0.25, "logit_bias": {"97": 3})";
  httplib::Result r = Post("/v1/completions", body + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json lp = Json::parse(r->body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({"a", "b"}));
  EXPECT_EQ(lp["token_logprobs"], Json::array({-0.5, -0.5}));
  // The sampled token and the 2 most likely ("a" is both), keyed by token string.
  EXPECT_EQ(lp["top_logprobs"][0], (Json{{"a", -0.5}, {"b", -1.5}}));
  EXPECT_EQ(lp["top_logprobs"][1], (Json{{"b", -0.5}, {"c", -1.5}}));
  EXPECT_EQ(lp["text_offset"], Json::array({0, 1}));
  // The knobs reached the decode worker, which prefilled the prompt itself (logprobs).
  ASSERT_EQ(decode_.reserves().size(), 1u);
  const v1::ReserveRequest reserve = decode_.reserves()[0];
  EXPECT_TRUE(reserve.local_prefill());
  EXPECT_EQ(reserve.sampling().logprobs(), 2);
  EXPECT_FLOAT_EQ(reserve.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(reserve.sampling().frequency_penalty(), 0.25f);
  ASSERT_EQ(reserve.sampling().logit_bias().count(97), 1u) << reserve.sampling().DebugString();
  EXPECT_FLOAT_EQ(reserve.sampling().logit_bias().at(97), 3.0f);

  r = Post("/v1/completions", body + R"(, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json tokens = Json::array(), offsets = Json::array();
  for (const Json& e : Events(r->body)) {
    if (e == "[DONE]" || e["choices"][0]["logprobs"].is_null()) continue;
    for (const Json& t : e["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
    for (const Json& t : e["choices"][0]["logprobs"]["text_offset"]) offsets.push_back(t);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
}

TEST_F(HttpApiSamplingTest, ChatLogprobsStreamedAndNot) {
  decode_.set_reply("h\xC3\xA9");  // "hé": the second character is two tokens
  const std::string body = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )"
                           R"("max_tokens": 3, "logprobs": true, "top_logprobs": 1)";
  httplib::Result r = Post("/v1/chat/completions", body + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "h\xC3\xA9");
  const Json content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0], (Json{{"token", "h"}, {"logprob", -0.5}, {"bytes", {104}},
                              {"top_logprobs", {{{"token", "h"}, {"logprob", -0.5}, {"bytes", {104}}}}}}));
  // Half a character: the string is U+FFFD, the bytes say what it is.
  EXPECT_EQ(content[1]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(content[1]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(content[2]["bytes"], Json::array({0xA9}));

  r = Post("/v1/chat/completions", body + R"(, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json streamed = Json::array();
  for (const Json& e : Events(r->body)) {
    if (e == "[DONE]" || e["choices"][0]["logprobs"].is_null()) continue;
    for (const Json& c : e["choices"][0]["logprobs"]["content"]) streamed.push_back(c);
  }
  EXPECT_EQ(streamed, content);
  // Without logprobs: null, and the prompt is prefilled where the router likes.
  r = Post("/v1/chat/completions",
           R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1})");
  ASSERT_TRUE(r);
  EXPECT_TRUE(Json::parse(r->body)["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(decode_.reserves().back().local_prefill());
}

// Echo with logprobs: the prompt's tokens lead the choice's logprobs (the first one null),
// from the decode worker's prompt logprobs (FakePromptLogprobs: "x" at -0.25, "y" at -0.5),
// then the generated ones; the choice carries vLLM's prompt_logprobs too. Streamed, the echo
// comes with the first token, and the pieces add up to the body's.
TEST_F(HttpApiSamplingTest, EchoWithLogprobsCoversThePrompt) {
  decode_.set_reply("ab");
  const std::string body =
      R"({"model": "demo", "prompt": "xy", "max_tokens": 2, "logprobs": 1, "echo": true)";
  httplib::Result r = Post("/v1/completions", body + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json choice = Json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["text"], "xyab");
  const Json lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({"<bos>", "x", "y", "a", "b"}));
  EXPECT_EQ(lp["token_logprobs"], Json::array({nullptr, -0.25, -0.5, -0.5, -0.5}));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], (Json{{"x", -0.25}}));  // x is also the top 1
  EXPECT_EQ(lp["top_logprobs"][2], (Json{{"y", -0.5}}));
  EXPECT_EQ(lp["top_logprobs"][3], (Json{{"a", -0.5}}));
  EXPECT_EQ(lp["text_offset"], Json::array({0, 5, 6, 7, 8}));
  ASSERT_EQ(choice["prompt_logprobs"].size(), 3u);
  EXPECT_TRUE(choice["prompt_logprobs"][0].is_null());
  EXPECT_EQ(choice["prompt_logprobs"][2],
            (Json{{"121", {{"logprob", -0.5}, {"rank", 2}, {"decoded_token", "y"}}}}));
  EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 2);
  ASSERT_EQ(decode_.reserves().size(), 1u);
  EXPECT_TRUE(decode_.reserves()[0].local_prefill());
  EXPECT_EQ(decode_.reserves()[0].sampling().prompt_logprobs(), 1);

  r = Post("/v1/completions", body + R"(, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string text;
  Json tokens = Json::array(), values = Json::array(), offsets = Json::array();
  std::vector<std::string> texts;
  for (const Json& e : Events(r->body)) {
    if (e == "[DONE]") continue;
    texts.push_back(e["choices"][0]["text"]);
    text += texts.back();
    if (e["choices"][0]["logprobs"].is_null()) continue;
    for (const Json& t : e["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
    for (const Json& t : e["choices"][0]["logprobs"]["token_logprobs"]) values.push_back(t);
    for (const Json& t : e["choices"][0]["logprobs"]["text_offset"]) offsets.push_back(t);
  }
  EXPECT_EQ(text, "xyab");
  ASSERT_FALSE(texts.empty());
  EXPECT_EQ(texts[0], "xya");  // the echo waits for the prompt's logprobs, then the first token
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(values, lp["token_logprobs"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
}

// Echo with max_tokens 0 (OpenAI's and vLLM's prompt scoring): the prompt alone, its logprobs,
// no completion tokens, finish_reason length; the worker was asked for one token. Without
// logprobs it is the echoed text alone, prefilled wherever the router likes.
TEST_F(HttpApiSamplingTest, EchoWithMaxTokensZeroIsThePromptAlone) {
  decode_.set_reply("ab");
  const std::string body =
      R"({"model": "demo", "prompt": "xy", "max_tokens": 0, "logprobs": 2, "echo": true)";
  httplib::Result r = Post("/v1/completions", body + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "xy");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], Json::array({"<bos>", "x", "y"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1], (Json{{"x", -0.25}, {"y", -1.25}}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  EXPECT_EQ(decode_.reserves().back().sampling().max_new_tokens(), 1);

  r = Post("/v1/completions", body + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string text;
  Json tokens = Json::array();
  std::optional<Json> usage;
  std::string finish;
  for (const Json& e : Events(r->body)) {
    if (e == "[DONE]") continue;
    if (!e["usage"].is_null()) usage = e["usage"];
    if (e["choices"].empty()) continue;
    text += e["choices"][0]["text"].get<std::string>();
    if (e["choices"][0]["finish_reason"].is_string()) finish = e["choices"][0]["finish_reason"];
    if (e["choices"][0]["logprobs"].is_null()) continue;
    for (const Json& t : e["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
  }
  EXPECT_EQ(text, "xy");
  EXPECT_EQ(tokens, Json::array({"<bos>", "x", "y"}));
  EXPECT_EQ(finish, "length");
  ASSERT_TRUE(usage.has_value());
  EXPECT_EQ((*usage)["completion_tokens"], 0);

  r = Post("/v1/completions", R"({"model": "demo", "prompt": "xy", "max_tokens": 0, "echo": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "xy");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  EXPECT_FALSE(decode_.reserves().back().local_prefill());
  // Without echo, max_tokens 0 is still refused.
  r = Post("/v1/completions", R"({"model": "demo", "prompt": "xy", "max_tokens": 0})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "max_tokens");
}

// vLLM's prompt_logprobs: completions' on the choice, chat's on the response, each a list with
// null for the first prompt token and {id: {logprob, rank, decoded_token}} after it (the
// prompt token first, then the top n); not with stream (0 is accepted there and returns none).
TEST_F(HttpApiSamplingTest, PromptLogprobsOnCompletionsAndChat) {
  decode_.set_reply("ab");
  httplib::Result r = Post(
      "/v1/completions", R"({"model": "demo", "prompt": "xy", "max_tokens": 1, "prompt_logprobs": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "a");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  const Json want = Json::array(
      {nullptr,
       {{"120", {{"logprob", -0.25}, {"rank", 1}, {"decoded_token", "x"}}},
        {"121", {{"logprob", -1.25}, {"rank", 2}, {"decoded_token", "y"}}}},
       {{"121", {{"logprob", -0.5}, {"rank", 2}, {"decoded_token", "y"}}},
        {"122", {{"logprob", -1.25}, {"rank", 2}, {"decoded_token", "z"}}}}});
  EXPECT_EQ(j["choices"][0]["prompt_logprobs"], want);
  EXPECT_EQ(j["usage"]["completion_tokens"], 1);
  EXPECT_TRUE(decode_.reserves().back().local_prefill());

  // Chat: the rendered prompt "hi" (no BOS: the template's text is tokenized as written).
  r = Post("/v1/chat/completions",
           R"({"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, )"
           R"("prompt_logprobs": 0, "n": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = Json::parse(r->body);
  EXPECT_EQ(j["prompt_logprobs"],
            Json::array({nullptr, {{"105", {{"logprob", -0.25}, {"rank", 1}, {"decoded_token", "i"}}}}}));
  EXPECT_EQ(j["choices"].size(), 2u);
  EXPECT_FALSE(j["choices"][0].contains("prompt_logprobs"));
  EXPECT_EQ(decode_.reserves().back().sampling().prompt_logprobs(), 0);

  r = Post("/v1/chat/completions",
           R"({"model": "demo", "messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 2, "stream": true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "prompt_logprobs");
  const size_t reserves = decode_.reserves().size();
  r = Post("/v1/completions",
           R"({"model": "demo", "prompt": "xy", "max_tokens": 1, "prompt_logprobs": 0, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_EQ(decode_.reserves().size(), reserves + 1);
  EXPECT_FALSE(decode_.reserves().back().sampling().has_prompt_logprobs());
}

TEST_F(HttpApiSamplingTest, BadKnobsAre400sNamingTheParameter) {
  httplib::Result r = Post("/v1/completions",
                           R"({"model": "demo", "prompt": "x", "logit_bias": {"300": 1}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  Json e = Json::parse(r->body)["error"];
  EXPECT_EQ(e["param"], "logit_bias");
  EXPECT_EQ(e["message"], "logit_bias token id 300 is outside the vocabulary [0, 300)");
  r = Post("/v1/completions", R"({"model": "demo", "prompt": "x", "presence_penalty": 3})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  e = Json::parse(r->body)["error"];
  EXPECT_EQ(e["param"], "presence_penalty");
  EXPECT_EQ(e["message"], "presence_penalty 3 is out of range; it must be in [-2, 2] (0 = off)");
  EXPECT_TRUE(decode_.reserves().empty());
}

// An abort through the router's Abort (gRPC / admin) ends the choice with an error, never
// with finish_reason "abort" (not one of OpenAI's values).
TEST_F(HttpApiSamplingTest, AServerSideAbortIsAnError) {
  decode_.set_reply("abcdefghijklmnopqrstuvwxyz");
  decode_.set_hold_after(2);
  std::thread aborter([&] {
    ASSERT_TRUE(decode_.WaitForTokensSent(2, kWait));
    ASSERT_EQ(decode_.reserves().size(), 1u);
    EXPECT_TRUE(router_->requests().Abort(decode_.reserves()[0].request_id()).ok());
  });
  httplib::Result r = Post("/v1/completions",
                           R"({"model": "demo", "prompt": "x", "max_tokens": 20, "stream": true})");
  aborter.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::vector<Json> events = Events(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  const Json& error = events[events.size() - 2]["error"];
  EXPECT_EQ(error["code"], "cancelled") << r->body;
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("was aborted by the server"));
  EXPECT_THAT(r->body, ::testing::Not(HasSubstr("\"abort\"")));
  decode_.Release();
}

}  // namespace
}  // namespace mlaserve::router::openai
