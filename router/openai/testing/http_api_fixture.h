// The OpenAI HTTP API in one process for tests: HttpApi on a loopback port in front of a router
// over the ByteCodec model (router/testing/byte_router.h: token id b is the byte b) and fake
// prefill / decode workers, with a small chat template, a client to post to it and one that
// leaves mid-answer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

  // The checkpoint template "test" parsed from `source` (kTemplate by default), "<bos>" its
  // bos_token.
  static absl::StatusOr<chat_template::CheckpointChatTemplate> TestTemplate(
      std::string_view source = kTemplate) {
    absl::StatusOr<chat_template::ChatTemplate> t = chat_template::ChatTemplate::Parse(source);
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

  // POSTs `body` to `path` on a raw socket, reads the answer until `until` appears in it (or
  // the server closes; at once for an empty `until`), and closes the connection: a client that
  // leaves mid-answer. Returns what it read.
  absl::StatusOr<std::string> PostAndHangUp(const std::string& path, const std::string& body,
                                            const std::string& until) {
    const std::string request = absl::StrCat("POST ", path,
                                             " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                             "Content-Length: ",
                                             body.size(), "\r\n\r\n", body);
    return SendRaw(request, until, /*whole=*/true);
  }

  // Sends `request` as it is on a raw socket (all of it when `whole`, else what the server
  // reads), then reads as PostAndHangUp does.
  absl::StatusOr<std::string> SendRaw(const std::string& request, const std::string& until, bool whole,
                                      int port = 0) {
    if (port == 0) port = api_->port();
    const std::string path = request.substr(0, std::min<size_t>(request.find('\r'), 64));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("no connection to 127.0.0.1:", port));
    }
    size_t sent = 0;
    for (ssize_t n; sent < request.size() &&
                    (n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL)) > 0;) {
      sent += static_cast<size_t>(n);
    }
    if (whole && sent != request.size()) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("the ", request.size(), "-byte request ", path,
                                                 " was not written whole"));
    }
    // Each read waits at most kWait: an answer that never brings `until` (a held stream) fails
    // the test then, instead of blocking it until ctest's timeout.
    const timeval wait{.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(kWait)), .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    std::string got;
    char buf[4096];
    while (got.find(until) == std::string::npos) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        close(fd);
        return absl::DeadlineExceededError(absl::StrCat("no '", until, "' from ", path, " within ",
                                                        absl::FormatDuration(kWait), "; read: ", got));
      }
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return got;
  }

  router::testing::FakeDecodeWorker decode_{64, 0};
  router::testing::FakePrefillWorker prefill_{&decode_};
  router::testing::TestServer decode_server_, prefill_server_;
  std::unique_ptr<RouterContext> router_;
  std::unique_ptr<HttpApi> api_;
};

}  // namespace mlaserve::router::openai::testing
