// The OpenAI HTTP API in one process for tests: HttpApi on a loopback port in front of a router
// over the ByteCodec model (router/testing/byte_router.h: token id b is the byte b) and fake
// prefill / decode workers, with a small chat template, and a client to post to it.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/call_auth.h"
#include "gtest/gtest.h"
#include "router/chat_template/checkpoint_template.h"
#include "router/openai/http_api.h"
#include "router/router_context.h"
#include "router/testing/byte_router.h"
#include "router/testing/fake_workers.h"

namespace mlaserve::router::openai::testing {

inline constexpr absl::Duration kWait = absl::Seconds(10);
// Room for the tool sections the tool-call tests add to their prompts (byte tokens).
inline constexpr int kMaxContext = 2048;
// "<bos>", then "<role>content" per message, then "<assistant>" (and "<think>\n" with the
// `think` kwarg) when a generation prompt is asked.
inline constexpr char kTemplate[] =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% if think is defined %}<think>\n{% endif %}{% endif %}";

class HttpApiFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    decode_server_ = router::testing::TestServer::Start({&decode_});
    prefill_server_ = router::testing::TestServer::Start({&prefill_});
    router_ = MakeRouter(common::CallAuthorizer());
    api_ = StartApi();
  }

  void TearDown() override {
    api_.reset();
    EXPECT_TRUE(router_->WaitForCallsToEnd(kWait));
    prefill_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
    decode_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  // A router in front of the fake workers; `public_authorizer` holds its API keys.
  std::unique_ptr<RouterContext> MakeRouter(common::CallAuthorizer public_authorizer) {
    RouterOptions o;
    o.abort_timeout = absl::Seconds(2);
    o.public_authorizer = std::move(public_authorizer);
    return router::testing::StartByteRouter(std::move(o), kMaxContext, prefill_server_.address,
                                            decode_server_.address);
  }

  static absl::StatusOr<chat_template::CheckpointChatTemplate> TestTemplate() {
    absl::StatusOr<chat_template::ChatTemplate> t = chat_template::ChatTemplate::Parse(kTemplate);
    if (!t.ok()) return t.status();
    chat_template::CheckpointChatTemplate ct{"test", *std::move(t)};
    ct.special_tokens = {{"bos_token", "<bos>"}};
    return ct;
  }

  // The API serving model "demo" over `router` (this fixture's by default) with `ct` (the test
  // template by default; an error: a checkpoint without one).
  std::unique_ptr<HttpApi> StartApi(
      HttpApiOptions options = {},
      absl::StatusOr<chat_template::CheckpointChatTemplate> ct = TestTemplate(),
      RouterContext* router = nullptr) {
    options.host = "127.0.0.1";
    options.served_model_name = "demo";
    options.threads = 8;
    absl::StatusOr<std::unique_ptr<HttpApi>> api =
        HttpApi::Start(router != nullptr ? router : router_.get(), std::move(ct), options);
    EXPECT_TRUE(api.ok()) << api.status();
    return api.ok() ? *std::move(api) : nullptr;
  }

  // POST `body` to `path` of this fixture's API (or the one on `port`).
  httplib::Result Post(const std::string& path, const std::string& body, int port = 0) {
    httplib::Client client("127.0.0.1", port != 0 ? port : api_->port());
    client.set_read_timeout(10);
    return client.Post(path.c_str(), body, "application/json");
  }

  // The chat answer for `fields` (the members after "model" and "max_tokens"), checked to be a
  // 200, and the prompt ids the decode worker was given for it.
  std::pair<nlohmann::json, std::vector<int32_t>> ChatWithPromptIds(const std::string& fields,
                                                                    int max_tokens) {
    httplib::Result r = Post("/v1/chat/completions",
                             R"({"model": "demo", "max_tokens": )" + std::to_string(max_tokens) +
                                 ", " + fields + "}");
    if (!r) {
      ADD_FAILURE() << "no answer";
      return {};
    }
    EXPECT_EQ(r->status, 200) << r->body;
    const std::vector<v1::ReserveRequest> reserves = decode_.reserves();
    if (reserves.empty()) {
      ADD_FAILURE() << "the chat request reached no worker";
      return {};
    }
    const auto& ids = reserves.back().prompt_token_ids();
    return {nlohmann::json::parse(r->body), std::vector<int32_t>(ids.begin(), ids.end())};
  }

  // /tokenize's ids for the body {fields}, checked to be a 200.
  std::vector<int32_t> Tokenize(const std::string& fields) {
    httplib::Result r = Post("/tokenize", "{" + fields + "}");
    if (!r) {
      ADD_FAILURE() << "no answer";
      return {};
    }
    EXPECT_EQ(r->status, 200) << r->body;
    return nlohmann::json::parse(r->body)["tokens"].get<std::vector<int32_t>>();
  }

  router::testing::FakeDecodeWorker decode_{64, 0};
  router::testing::FakePrefillWorker prefill_{&decode_};
  router::testing::TestServer decode_server_, prefill_server_;
  std::unique_ptr<RouterContext> router_;
  std::unique_ptr<HttpApi> api_;
};

}  // namespace mlaserve::router::openai::testing
