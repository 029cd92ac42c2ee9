// TimedOpenAiCall against a scripted HTTP server: server-sent events become the same
// RequestRecord a gRPC stream with those tokens would give, and HTTP errors keep their
// gRPC meaning.
#include "bench/serving/timed_openai_call.h"

#include <httplib.h>

#include <optional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/http_accept_loop.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mlaserve::bench {
namespace {

class ScriptedServer {
 public:
  explicit ScriptedServer(httplib::Server::Handler handler) {
    server_.Post("/v1/completions", std::move(handler));
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = StartAcceptLoop(server_);  // so the destructor's stop() ends it
  }
  ~ScriptedServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string last_body() {
    absl::MutexLock lock(&mu_);
    return last_body_;
  }
  void set_last_body(std::string b) {
    absl::MutexLock lock(&mu_);
    last_body_ = std::move(b);
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::string last_body_;
};

std::string Chunk(const std::string& text, int completion, const char* finish = nullptr) {
  nlohmann::json c = {{"choices", {{{"index", 0}, {"text", text}, {"finish_reason", finish ? nlohmann::json(finish) : nlohmann::json()}}}},
                      {"usage", {{"prompt_tokens", 3}, {"completion_tokens", completion}, {"total_tokens", 3 + completion}}}};
  return "data: " + c.dump() + "\n\n";
}

RequestRecord RunOne(int port, const RequestSpec& spec) {
  RequestRecord got;
  absl::Notification done;
  {
    TimedOpenAiCall call({"127.0.0.1", port, "demo"}, spec, "bench-0", CallSettings{},
                         BenchClock::now(), [&](RequestRecord r) {
                           got = std::move(r);
                           done.Notify();
                         });
    call.Start();
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
  return got;
}

RequestSpec IdsSpec() {
  RequestSpec spec;
  spec.prompt_token_ids = {5, 6, 7};
  spec.input_len = 3;
  spec.output_len = 5;
  return spec;
}

TEST(TimedOpenAiCallTest, EventsBecomeTheRecordOfTheirTokens) {
  ScriptedServer server([&](const httplib::Request& req, httplib::Response& res) {
    res.set_content(Chunk("a", 2) + Chunk("", 2) + Chunk("bc", 4) + Chunk("d", 5, "length") +
                        "data: " + nlohmann::json({{"choices", nlohmann::json::array()},
                                                   {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 5}}}}).dump() +
                        "\n\ndata: [DONE]\n\n",
                    "text/event-stream");
  });
  const RequestRecord r = RunOne(server.port(), IdsSpec());
  EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.error_class << ": " << r.error;
  EXPECT_EQ(r.output_len, 5);
  EXPECT_EQ(r.input_len, 3);
  EXPECT_EQ(r.itl_s.size(), 4u);
  EXPECT_GE(r.ttft_s, 0);
}

// The final usage chunk (no choices) with `details` as usage.prompt_tokens_details.
std::string FinalUsage(int completion, const std::optional<nlohmann::json>& details) {
  nlohmann::json usage = {{"prompt_tokens", 3}, {"completion_tokens", completion},
                          {"total_tokens", 3 + completion}};
  if (details) usage["prompt_tokens_details"] = *details;
  const nlohmann::json event = {{"choices", nlohmann::json::array()}, {"usage", usage}};
  return "data: " + event.dump() + "\n\n";
}

TEST(TimedOpenAiCallTest, CachedTokensComeFromTheFinalUsageChunk) {
  struct Case {
    std::optional<nlohmann::json> details;  // nullopt: the usage has no details
    int cached;
  };
  const Case cases[] = {
      {nlohmann::json{{"cached_tokens", 2}}, 2},
      {std::nullopt, 0},                    // no details: 0
      {nlohmann::json(nullptr), 0},         // vLLM's null details: 0
      {nlohmann::json::object(), 0},        // details without the count
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.details ? k.details->dump() : "no details");
    ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
      res.set_content(Chunk("a", 1) + Chunk("b", 2, "length") + FinalUsage(2, k.details) +
                          "data: [DONE]\n\n",
                      "text/event-stream");
    });
    RequestSpec spec = IdsSpec();
    spec.output_len = 2;
    const RequestRecord r = RunOne(server.port(), spec);
    EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.error_class << ": " << r.error;
    EXPECT_EQ(r.cached_prompt_tokens, k.cached);
  }
}

TEST(TimedOpenAiCallTest, CachedTokensSaidOnlyOnTokenEventsStillCount) {
  // With continuous usage stats a server may say it on every event and leave it out of the
  // final usage; the last value seen is kept.
  nlohmann::json event = {{"choices", {{{"index", 0}, {"text", "a"}, {"finish_reason", "length"}}}},
                          {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 1},
                                     {"prompt_tokens_details", {{"cached_tokens", 3}}}}}};
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    res.set_content("data: " + event.dump() + "\n\n" +
                        FinalUsage(1, std::nullopt) +
                        "data: [DONE]\n\n",
                    "text/event-stream");
  });
  RequestSpec spec = IdsSpec();
  spec.output_len = 1;
  const RequestRecord r = RunOne(server.port(), spec);
  EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.error_class << ": " << r.error;
  EXPECT_EQ(r.cached_prompt_tokens, 3);
}

TEST(TimedOpenAiCallTest, RequestBodyAsksForPerChunkUsage) {
  const nlohmann::json body = nlohmann::json::parse(TimedOpenAiCall::RequestBody("demo", IdsSpec(), CallSettings{}));
  EXPECT_EQ(body["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(body["max_tokens"], 5);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["continuous_usage_stats"], true);
  EXPECT_EQ(body["ignore_eos"], true);
}

TEST(TimedOpenAiCallTest, RequestBodyCarriesTheKnobsOnlyWhereTheSpecSendsThem) {
  CallSettings settings;
  settings.temperature = 1.0f;
  settings.top_p = 0.9f;
  settings.presence_penalty = 0.25f;
  settings.frequency_penalty = 0.5f;
  settings.logprobs = 2;
  RequestSpec spec = IdsSpec();
  nlohmann::json body = nlohmann::json::parse(TimedOpenAiCall::RequestBody("demo", spec, settings));
  EXPECT_EQ(body["top_p"], 0.9f);
  EXPECT_EQ(body["presence_penalty"], 0.25f);
  EXPECT_EQ(body["frequency_penalty"], 0.5f);
  EXPECT_EQ(body["logprobs"], 2);  // completions: the number of alternatives
  spec.sends_knobs = false;
  body = nlohmann::json::parse(TimedOpenAiCall::RequestBody("demo", spec, settings));
  EXPECT_EQ(body["top_p"], 0.9f);
  EXPECT_FALSE(body.contains("presence_penalty"));
  EXPECT_FALSE(body.contains("frequency_penalty"));
  EXPECT_FALSE(body.contains("logprobs"));
}

TEST(TimedOpenAiCallTest, HttpErrorsKeepTheirGrpcMeaning) {
  ScriptedServer server([](const httplib::Request&, httplib::Response& res) {
    res.status = 400;
    res.set_content(R"({"error": {"message": "temperature -1 is out of range", "type": "invalid_request_error", "param": null, "code": "invalid_argument"}})",
                    "application/json");
  });
  const RequestRecord r = RunOne(server.port(), IdsSpec());
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.error_class, "INVALID_ARGUMENT");
  EXPECT_NE(r.error.find("temperature -1 is out of range"), std::string::npos) << r.error;
}

TEST(TimedOpenAiCallTest, ErrorEventMidStreamFails) {
  ScriptedServer server([](const httplib::Request&, httplib::Response& res) {
    res.set_content(Chunk("a", 1) +
                        R"(data: {"error": {"message": "decode worker died", "type": "server_error", "param": null, "code": "unavailable"}})"
                        "\n\ndata: [DONE]\n\n",
                    "text/event-stream");
  });
  const RequestRecord r = RunOne(server.port(), IdsSpec());
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.error_class, "UNAVAILABLE");
}

}  // namespace
}  // namespace mlaserve::bench
