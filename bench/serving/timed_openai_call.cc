#include "bench/serving/timed_openai_call.h"

#include <httplib.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "bench/serving/stream_tally.h"
#include "nlohmann/json.hpp"

namespace mlaserve::bench {
namespace {

using Json = nlohmann::json;

double Seconds(BenchClock::duration d) { return std::chrono::duration<double>(d).count(); }

// The gRPC code an OpenAI error stands for (the router's error `code` is the absl code name).
int GrpcCode(int http_status, const Json& error) {
  static const std::pair<const char*, int> kNames[] = {
      {"cancelled", 1}, {"invalid_argument", 3}, {"deadline_exceeded", 4}, {"not_found", 5},
      {"already_exists", 6}, {"resource_exhausted", 8}, {"failed_precondition", 9},
      {"internal", 13}, {"unavailable", 14}, {"unauthenticated", 16}};
  if (error.is_object() && error.contains("code") && error["code"].is_string()) {
    for (const auto& [name, code] : kNames) {
      if (error["code"] == name) return code;
    }
  }
  switch (http_status) {
    case 400: return 3;
    case 401: return 16;
    case 404: return 5;
    case 499: return 1;
    case 503: return 14;
    case 504: return 4;
    default: return 13;
  }
}

v1::FinishReason FinishReason(const Json& value) {
  if (value == "length") return v1::FINISH_REASON_LENGTH;
  if (value == "abort") return v1::FINISH_REASON_ABORT;
  return v1::FINISH_REASON_STOP;
}

// usage.prompt_tokens_details.cached_tokens, as OpenAI, vLLM and SGLang report the prompt
// tokens served from a prefix cache; nullopt when the usage does not say (no details, or
// details null as vLLM sends them when it does not track cached tokens).
std::optional<int> CachedTokensOf(const Json& usage) {
  if (!usage.is_object()) return std::nullopt;
  const auto details = usage.find("prompt_tokens_details");
  if (details == usage.end() || !details->is_object()) return std::nullopt;
  const auto cached = details->find("cached_tokens");
  if (cached == details->end() || !cached->is_number_integer()) return std::nullopt;
  return cached->get<int>();
}

// Turns the SSE events of one response into Generate messages for the tally.
class EventReader {
 public:
  EventReader(StreamTally* tally, BenchClock::time_point start) : tally_(tally), start_(start) {}

  void Add(const char* data, size_t n) {
    buffer_.append(data, n);
    for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) OnData(event.substr(6));
    }
  }
  const std::string& unparsed() const { return buffer_; }

 private:
  void OnData(const std::string& payload) {
    const double t = Seconds(BenchClock::now() - start_);
    if (payload == "[DONE]") return;
    const Json j = Json::parse(payload, nullptr, false);
    if (j.is_discarded()) return;
    v1::GenerateResponse m;
    if (j.contains("error")) {
      m.mutable_error()->set_code(GrpcCode(200, j["error"]));
      m.mutable_error()->set_message(j["error"].value("message", ""));
      tally_->OnMessage(m, t);
      return;
    }
    const Json& usage = j.contains("usage") ? j["usage"] : Json();
    const bool has_usage = usage.is_object();
    // The final usage chunk should carry it; with continuous usage stats a server may already
    // say it on the token events, so the last value seen counts.
    if (std::optional<int> cached = CachedTokensOf(usage)) cached_ = *cached;
    if (!j["choices"].empty()) {
      const Json& choice = j["choices"][0];
      if (!choice["finish_reason"].is_null()) finish_ = FinishReason(choice["finish_reason"]);
      if (!has_usage) return;
      const int total = usage["completion_tokens"].get<int>();
      if (total > tokens_) {
        m.mutable_chunk()->mutable_token_ids()->Resize(total - tokens_, 0);
        m.mutable_chunk()->set_completion_tokens(total);
        m.mutable_chunk()->set_prompt_tokens(usage["prompt_tokens"].get<int>());
        tokens_ = total;
        tally_->OnMessage(m, t);
      }
    } else if (has_usage) {
      v1::GenerateComplete* c = m.mutable_complete();
      c->set_finish_reason(finish_);
      c->set_prompt_tokens(usage["prompt_tokens"].get<int>());
      c->set_completion_tokens(usage["completion_tokens"].get<int>());
      c->set_cached_prompt_tokens(cached_);
      tally_->OnMessage(m, t);
    }
  }

  StreamTally* tally_;
  BenchClock::time_point start_;
  std::string buffer_;
  int tokens_ = 0;
  int cached_ = 0;  // usage.prompt_tokens_details.cached_tokens, 0 until a usage says it
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
};

}  // namespace

std::string TimedOpenAiCall::RequestBody(const std::string& model, const RequestSpec& spec,
                                         const CallSettings& settings) {
  Json body = {{"model", model},
               {"max_tokens", spec.output_len},
               {"stream", true},
               {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}},
               {"ignore_eos", settings.ignore_eos}};
  if (spec.use_text) {
    body["prompt"] = spec.prompt_text;
  } else {
    body["prompt"] = spec.prompt_token_ids;
  }
  if (settings.temperature) body["temperature"] = *settings.temperature;
  if (settings.top_p) body["top_p"] = *settings.top_p;
  if (spec.sends_knobs) {
    if (settings.presence_penalty) body["presence_penalty"] = *settings.presence_penalty;
    if (settings.frequency_penalty) body["frequency_penalty"] = *settings.frequency_penalty;
    if (settings.logprobs) body["logprobs"] = *settings.logprobs;  // completions: an integer
  }
  return body.dump();
}

TimedOpenAiCall::TimedOpenAiCall(const OpenAiTarget& target, const RequestSpec& spec,
                                 std::string request_id, const CallSettings& settings,
                                 BenchClock::time_point run_start, DoneCallback on_done)
    : spec_(spec),
      request_id_(std::move(request_id)),
      body_(RequestBody(target.model, spec, settings)),
      target_(target),
      run_start_(run_start),
      on_done_(std::move(on_done)),
      client_(NewHttpClient(target)) {
  const auto timeout = absl::ToChronoSeconds(settings.timeout);
  client_->set_read_timeout(timeout);
  client_->set_connection_timeout(std::chrono::seconds(10));
  client_->set_keep_alive(false);
}

TimedOpenAiCall::~TimedOpenAiCall() {
  if (thread_.joinable()) thread_.join();
}

void TimedOpenAiCall::Start() { thread_ = std::thread([this] { Run(); }); }

void TimedOpenAiCall::CancelAtBound() {
  cancelled_at_bound_.store(true, std::memory_order_release);
  client_->stop();  // unblocks a read in progress
}

void TimedOpenAiCall::Run() {
  const BenchClock::time_point call_start = BenchClock::now();
  StreamTally tally(spec_, request_id_, Seconds(call_start - run_start_));
  EventReader reader(&tally, call_start);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  req.body = body_;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    reader.Add(data, n);
    return !cancelled_at_bound_.load(std::memory_order_acquire);
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = cancelled_at_bound_.load() ? false : client_->send(req, res, error);
  const double e2e = Seconds(BenchClock::now() - call_start);
  const bool cancelled = cancelled_at_bound_.load(std::memory_order_acquire);
  int code = 0;
  std::string message;
  if (!sent) {
    code = cancelled ? 1 : 14;
    message = cancelled ? "cancelled at the time bound"
                        : absl::StrCat("HTTP request to ", target_.url(), " failed: ",
                                       DescribeHttpError(*client_, error, target_));
  } else if (res.status != 200) {
    const Json j = Json::parse(reader.unparsed(), nullptr, false);
    const Json err = !j.is_discarded() && j.contains("error") ? j["error"] : Json();
    code = GrpcCode(res.status, err);
    message = absl::StrCat("HTTP ", res.status, ": ", err.is_object() ? err.value("message", "") : reader.unparsed());
  }
  on_done_(tally.Finish(code, message, e2e, cancelled));
}

}  // namespace mlaserve::bench
