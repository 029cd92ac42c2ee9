// The OpenAI HTTP API of a real router process in front of real prefill and decode workers
// (the bundled demo model), next to its gRPC API: the same tokens and usage numbers through
// both, streamed and not, chat through the checkpoint's template, and a client that
// disconnects (mid-stream, or before an unstreamed answer) is aborted and frees its pages.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kModel[] = "models/demo";
constexpr absl::Duration kTimeout = absl::Seconds(60);

class OpenAiHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.model_dir = kModel;
    o.extra_router_flags = {"--http-port", "0", "--metrics-port", "0"};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
    auto http = cluster_->router().WaitForLine("http listening on ", kTimeout);
    ASSERT_TRUE(http.ok()) << http.status() << "\n" << cluster_->router().LogTail();
    http_port_ = std::stoi(http->substr(http->rfind(':') + 1));
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static Json Post(const std::string& path, const Json& body) {
    httplib::Client client("127.0.0.1", http_port_);
    client.set_read_timeout(60);
    httplib::Result r = client.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << "POST " << path << " failed";
    if (!r) return Json();
    EXPECT_EQ(r->status, 200) << r->body;
    return r->status == 200 && !body.value("stream", false) ? Json::parse(r->body) : Json(r->body);
  }

  // A server-sent-events answer's events, up to [DONE].
  static std::vector<Json> SseEvents(const std::string& sse) {
    std::vector<Json> events;
    for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
      const size_t end = sse.find("\n\n", pos);
      const std::string payload = sse.substr(pos + 6, end - pos - 6);
      pos = end;
      if (payload == "[DONE]") break;
      events.push_back(Json::parse(payload));
    }
    return events;
  }

  // The text a server-sent-events answer streams: its events' choices[0].text (completions)
  // or choices[0].delta.content (chat, `field` "content"), concatenated.
  static std::string StreamedText(const std::string& sse, const std::string& field) {
    std::string text;
    for (const Json& event : SseEvents(sse)) {
      if (event["choices"].empty()) continue;
      const Json& choice = event["choices"][0];
      const Json& value = field == "text" ? choice["text"] : choice["delta"]["content"];
      if (value.is_string()) text += value.get<std::string>();
    }
    return text;
  }

  static GenerateResult Grpc(const std::string& text, int max_tokens) {
    v1::GenerateRequest req;
    req.set_text(text);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(max_tokens);
    return RunGenerate(cluster_->generation(), req, kTimeout);
  }

  // A raw connection that has sent `body` to /v1/completions (the caller reads and closes it):
  // a client that can hang up at a moment the test chooses.
  static int PostRaw(const Json& body) {
    const std::string text = body.dump();
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                "application/json\r\nContent-Length: " + std::to_string(text.size()) +
                                "\r\n\r\n" + text;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(http_port_));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
    return fd;
  }

  static double MetricValue(const std::string& name) {
    std::smatch m;
    const std::string log = cluster_->router().LogTail(100000);
    if (!std::regex_search(log, m, std::regex("metrics on http://[^:]+:([0-9]+)/metrics"))) return -1;
    httplib::Client client("127.0.0.1", std::stoi(m[1]));
    httplib::Result r = client.Get("/metrics");
    if (!r) return -1;
    std::smatch v;
    if (!std::regex_search(r->body, v, std::regex("\n" + name + " ([0-9.e+]+)"))) return -1;
    return std::stod(v[1]);
  }

  static Cluster* cluster_;
  static int http_port_;
};

Cluster* OpenAiHttpTest::cluster_ = nullptr;
int OpenAiHttpTest::http_port_ = 0;

TEST_F(OpenAiHttpTest, CompletionEqualsGrpc) {
  const GenerateResult grpc = Grpc("count from 17:", 12);
  ASSERT_TRUE(grpc.status.ok()) << grpc.status.error_message();
  const Json j = Post("/v1/completions", {{"model", "demo"}, {"prompt", "count from 17:"},
                                          {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(j["choices"][0]["text"], grpc.text);
  EXPECT_THAT(grpc.text, HasSubstr("17 18 19"));
  EXPECT_EQ(j["usage"]["prompt_tokens"], grpc.complete->prompt_tokens());
  EXPECT_EQ(j["usage"]["completion_tokens"], grpc.complete->completion_tokens());
}

TEST_F(OpenAiHttpTest, StreamedCompletionEqualsUnstreamed) {
  const Json plain = Post("/v1/completions", {{"model", "demo"}, {"prompt", "reverse: a b c d e ->"},
                                              {"max_tokens", 10}, {"temperature", 0}});
  const std::string sse = Post("/v1/completions",
                               {{"model", "demo"}, {"prompt", "reverse: a b c d e ->"}, {"max_tokens", 10},
                                {"temperature", 0}, {"stream", true},
                                {"stream_options", {{"include_usage", true}}}});
  std::string text;
  Json usage;
  for (const Json& event : SseEvents(sse)) {
    if (!event["choices"].empty()) text += event["choices"][0]["text"].get<std::string>();
    if (!event["usage"].is_null()) usage = event["usage"];
  }
  EXPECT_EQ(text, plain["choices"][0]["text"]);
  EXPECT_EQ(usage, plain["usage"]);
  EXPECT_THAT(sse, HasSubstr("data: [DONE]\n\n"));
}

// vLLM's rule for the token that ends generation (EOS, or one of stop_token_ids): it stays in
// the token ids, but its text is not in the output unless include_stop_str_in_output, whatever
// skip_special_tokens says. The same over gRPC and HTTP, streamed and not, completions and chat.
// "copy: h e l l o ->" greedily gives " h e l l o" then EOS (models/demo/demo_prompts.json).
TEST_F(OpenAiHttpTest, TheStopTokensTextIsLeftOutUnlessIncludeStopStrInOutput) {
  static constexpr char kPrompt[] = "copy: h e l l o ->";
  static constexpr char kAnswer[] = " h e l l o";
  static constexpr char kEosText[] = "<｜end▁of▁sentence｜>";
  static constexpr int32_t kEos = 1;  // models/demo/config.json eos_token_id
  auto grpc = [](std::optional<bool> skip_special, bool include_stop, std::vector<int32_t> stop_ids,
                 int max_tokens = 16) {
    v1::GenerateRequest req;
    req.set_text(kPrompt);
    v1::SamplingParams& s = *req.mutable_sampling();
    s.set_temperature(0);
    s.set_max_new_tokens(max_tokens);
    if (skip_special.has_value()) s.set_skip_special_tokens(*skip_special);
    s.set_include_stop_str_in_output(include_stop);
    for (int32_t id : stop_ids) s.add_stop_token_ids(id);
    GenerateResult r = RunGenerate(cluster_->generation(), req, kTimeout);
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    return r;
  };

  // EOS: its id ends the ids; its text only with include_stop_str_in_output (and, being a
  // special token, only with skip_special_tokens false).
  for (std::optional<bool> skip : {std::optional<bool>(), std::optional<bool>(true),
                                   std::optional<bool>(false)}) {
    SCOPED_TRACE(!skip.has_value() ? "skip_special_tokens unset"
                 : *skip           ? "skip_special_tokens true"
                                   : "skip_special_tokens false");
    GenerateResult r = grpc(skip, false, {});
    ASSERT_TRUE(r.complete.has_value());
    EXPECT_EQ(r.text, kAnswer);
    ASSERT_FALSE(r.ids.empty());
    EXPECT_EQ(r.ids.back(), kEos);
    EXPECT_EQ(r.complete->matched_token_id(), kEos);
    EXPECT_EQ(r.complete->completion_tokens(), static_cast<int32_t>(r.ids.size()));
    r = grpc(skip, true, {});
    EXPECT_EQ(r.text, absl::StrCat(kAnswer, skip.value_or(true) ? "" : kEosText));
    ASSERT_FALSE(r.ids.empty());
    EXPECT_EQ(r.ids.back(), kEos);
  }

  // A stop token that is ordinary text (" l", the answer's third token): generation ends on its
  // first appearance, the id kept, its text only with include_stop_str_in_output.
  const GenerateResult whole = grpc(false, false, {});
  ASSERT_GE(whole.ids.size(), 3u);
  const int32_t stop_id = whole.ids[2];
  const std::string before = grpc(false, false, {}, 2).text;  // " h e"
  const std::string through = grpc(false, false, {}, 3).text;  // " h e l"
  ASSERT_NE(before, through);
  for (bool skip : {true, false}) {
    GenerateResult r = grpc(skip, false, {stop_id});
    EXPECT_EQ(r.text, before) << "skip_special_tokens " << skip;
    EXPECT_EQ(r.ids, std::vector<int32_t>(whole.ids.begin(), whole.ids.begin() + 3));
    ASSERT_TRUE(r.complete.has_value());
    EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_STOP);
    EXPECT_EQ(r.complete->matched_token_id(), stop_id);
    EXPECT_EQ(grpc(skip, true, {stop_id}).text, through) << "skip_special_tokens " << skip;
  }

  // HTTP: completions unstreamed and streamed, chat, with skip_special_tokens false.
  const Json completion = {{"model", "demo"}, {"prompt", kPrompt}, {"max_tokens", 16},
                           {"temperature", 0}, {"skip_special_tokens", false}};
  EXPECT_EQ(Post("/v1/completions", completion)["choices"][0]["text"], kAnswer);
  Json with_stop = completion;
  with_stop["include_stop_str_in_output"] = true;
  const std::string answer_and_eos = absl::StrCat(kAnswer, kEosText);
  EXPECT_EQ(Post("/v1/completions", with_stop)["choices"][0]["text"], answer_and_eos);
  Json streamed = completion;
  streamed["stream"] = true;
  EXPECT_EQ(StreamedText(Post("/v1/completions", streamed), "text"), kAnswer);
  with_stop["stream"] = true;
  EXPECT_EQ(StreamedText(Post("/v1/completions", with_stop), "text"), answer_and_eos);
  Json stop_token = completion;
  stop_token["stop_token_ids"] = {stop_id};
  EXPECT_EQ(Post("/v1/completions", stop_token)["choices"][0]["text"], before);
  const Json chat = {{"model", "demo"}, {"max_tokens", 16}, {"temperature", 0},
                     {"skip_special_tokens", false},
                     {"messages", {{{"role", "user"}, {"content", kPrompt}}}}};
  EXPECT_EQ(Post("/v1/chat/completions", chat)["choices"][0]["message"]["content"], kAnswer);
  Json chat_streamed = chat;
  chat_streamed["stream"] = true;
  EXPECT_EQ(StreamedText(Post("/v1/chat/completions", chat_streamed), "content"), kAnswer);
}

// The stop token whose text is left out still has its logprob entry (its id's, the last), counts
// in usage, and ends the answer as a stop on the last step max_tokens allows (vLLM's check_stop
// looks at stop tokens before the length); every choice of n alike.
TEST_F(OpenAiHttpTest, TheStopTokenKeepsItsLogprobAndCountAndIsAStopAtTheLengthLimit) {
  static constexpr char kPrompt[] = "copy: h e l l o ->";
  static constexpr char kAnswer[] = " h e l l o";
  static constexpr char kEosText[] = "<｜end▁of▁sentence｜>";
  static constexpr int32_t kEos = 1;  // models/demo/config.json eos_token_id
  const GenerateResult whole = Grpc(kPrompt, 16);
  ASSERT_TRUE(whole.status.ok());
  ASSERT_FALSE(whole.ids.empty());
  ASSERT_EQ(whole.ids.back(), kEos);
  const int tokens = static_cast<int>(whole.ids.size());

  GenerateResult at_limit = Grpc(kPrompt, tokens);
  ASSERT_TRUE(at_limit.complete.has_value());
  EXPECT_EQ(at_limit.complete->finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(at_limit.complete->matched_token_id(), kEos);
  EXPECT_EQ(at_limit.text, kAnswer);
  GenerateResult cut = Grpc(kPrompt, tokens - 1);
  ASSERT_TRUE(cut.complete.has_value());
  EXPECT_EQ(cut.complete->finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(cut.ids, std::vector<int32_t>(whole.ids.begin(), whole.ids.end() - 1));
  EXPECT_EQ(cut.text, kAnswer);

  const Json completion = {{"model", "demo"}, {"prompt", kPrompt}, {"max_tokens", tokens},
                           {"temperature", 0}, {"skip_special_tokens", false},
                           {"logprobs", 1}, {"n", 2}};
  const Json body = Post("/v1/completions", completion);
  ASSERT_EQ(body["choices"].size(), 2u);
  for (const Json& choice : body["choices"]) {
    EXPECT_EQ(choice["text"], kAnswer);
    EXPECT_EQ(choice["finish_reason"], "stop");
    ASSERT_EQ(choice["logprobs"]["tokens"].size(), static_cast<size_t>(tokens));
    EXPECT_EQ(choice["logprobs"]["token_logprobs"].size(), static_cast<size_t>(tokens));
    EXPECT_EQ(choice["logprobs"]["tokens"].back(), kEosText);
    EXPECT_TRUE(choice["logprobs"]["token_logprobs"].back().is_number());
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], 2 * tokens);

  Json streamed = completion;
  streamed["stream"] = true;
  streamed["n"] = 1;
  std::vector<std::string> streamed_tokens;
  std::string streamed_text;
  for (const Json& event : SseEvents(Post("/v1/completions", streamed))) {
    const Json& choice = event["choices"][0];
    streamed_text += choice["text"].get<std::string>();
    if (choice["logprobs"].is_null()) continue;
    for (const Json& t : choice["logprobs"]["tokens"]) streamed_tokens.push_back(t);
  }
  EXPECT_EQ(streamed_text, kAnswer);
  ASSERT_EQ(streamed_tokens.size(), static_cast<size_t>(tokens));
  EXPECT_EQ(streamed_tokens.back(), kEosText);

  const Json chat = {{"model", "demo"}, {"max_tokens", tokens}, {"temperature", 0},
                     {"skip_special_tokens", false}, {"logprobs", true}, {"top_logprobs", 1},
                     {"messages", {{{"role", "user"}, {"content", kPrompt}}}}};
  const Json answer = Post("/v1/chat/completions", chat);
  const Json& message_choice = answer["choices"][0];
  EXPECT_EQ(message_choice["message"]["content"], kAnswer);
  EXPECT_EQ(message_choice["finish_reason"], "stop");
  ASSERT_EQ(message_choice["logprobs"]["content"].size(), static_cast<size_t>(tokens));
  EXPECT_EQ(message_choice["logprobs"]["content"].back()["token"], kEosText);
  EXPECT_EQ(answer["usage"]["completion_tokens"], tokens);
  Json chat_streamed = chat;
  chat_streamed["stream"] = true;
  size_t streamed_entries = 0;
  std::string last_token;
  for (const Json& event : SseEvents(Post("/v1/chat/completions", chat_streamed))) {
    if (event["choices"].empty() || event["choices"][0]["logprobs"].is_null()) continue;
    for (const Json& entry : event["choices"][0]["logprobs"]["content"]) {
      ++streamed_entries;
      last_token = entry["token"];
    }
  }
  EXPECT_EQ(streamed_entries, static_cast<size_t>(tokens));
  EXPECT_EQ(last_token, kEosText);
}

TEST_F(OpenAiHttpTest, ChatThroughTheTemplateEqualsTheBarePrompt) {
  // models/demo/chat_template.jinja renders BOS + the last user message.
  const GenerateResult grpc = Grpc("copy: h e l l o ->", 10);
  ASSERT_TRUE(grpc.status.ok());
  const Json j = Post("/v1/chat/completions",
                      {{"model", "demo"}, {"max_tokens", 10}, {"temperature", 0},
                       {"messages", {{{"role", "user"}, {"content", "copy: h e l l o ->"}}}}});
  EXPECT_EQ(j["choices"][0]["message"]["content"], grpc.text);
  EXPECT_EQ(j["usage"]["prompt_tokens"], grpc.complete->prompt_tokens());
  EXPECT_EQ(j["usage"]["completion_tokens"], grpc.complete->completion_tokens());
}

TEST_F(OpenAiHttpTest, DisconnectMidStreamAbortsAndFreesPages) {
  const double aborted_before = MetricValue("mlaserve_router_requests_aborted_total");
  ASSERT_GE(aborted_before, 0) << "no /metrics";
  const int fd = PostRaw({{"model", "demo"}, {"prompt", "count from 1:"}, {"max_tokens", 1000},
                          {"ignore_eos", true}, {"stream", true}});
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);  // mid-stream: tokens have started to arrive
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(30)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (MetricValue("mlaserve_router_requests_aborted_total") < aborted_before + 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // polling a metric against a deadline
  }
  EXPECT_EQ(MetricValue("mlaserve_router_requests_aborted_total"), aborted_before + 1);
}

// Unstreamed, the router learns of the hang-up only by probing the connection: it must do so
// while tokens keep arriving, not only in a pause (there is none here), or the calls run to
// their end for nobody.
TEST_F(OpenAiHttpTest, DisconnectBeforeAnUnstreamedAnswerAbortsAndFreesPages) {
  const double aborted_before = MetricValue("mlaserve_router_requests_aborted_total");
  ASSERT_GE(aborted_before, 0) << "no /metrics";
  const int fd = PostRaw({{"model", "demo"}, {"prompt", "count from 1:"}, {"max_tokens", 1000}, {"n", 4},
                          {"ignore_eos", true}});
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (MetricValue("mlaserve_router_requests_running") < 4 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a metric against a deadline
  }
  close(fd);  // the four calls are generating: 4 x 1000 tokens take seconds on the CPU backend
  deadline = absl::Now() + absl::Seconds(30);
  while (MetricValue("mlaserve_router_requests_aborted_total") < aborted_before + 4 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // polling a metric against a deadline
  }
  EXPECT_EQ(MetricValue("mlaserve_router_requests_aborted_total"), aborted_before + 4)
      << "the calls ran to their end for a client that had gone";
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(30)).ok());
}

TEST_F(OpenAiHttpTest, BadRequestsAreOpenAiShaped) {
  httplib::Client client("127.0.0.1", http_port_);
  httplib::Result r = client.Post("/v1/completions", "{bad json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "invalid_request_error");
  r = client.Post("/v1/completions", R"({"model": "nope", "prompt": "x"})", "application/json");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "model_not_found");
  r = client.Post("/v1/completions", R"({"model": "demo", "prompt": "x", "top_p": 2})", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(Json::parse(r->body)["error"]["message"].get<std::string>(), HasSubstr("top_p 2 is out of range"));
  r = client.Post("/v1/completions", R"({"model": "demo", "prompt": "x", "max_tokens": 5000})", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("exceeds the model's context of 1024"));
}

}  // namespace
}  // namespace mlaserve::testing
