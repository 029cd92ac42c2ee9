#include "bench/serving/report.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/serving/stream_tally.h"

namespace mlaserve::bench {
namespace {

constexpr int kWidth = 56;

std::string Rule(const std::string& title) {
  if (title.empty()) return std::string(kWidth, '=') + "\n";
  const int pad = kWidth - static_cast<int>(title.size()) - 2;
  const int left = pad / 2;
  return absl::StrCat(std::string(left, '-'), " ", title, " ", std::string(pad - left, '-'),
                      "\n");
}

std::string Row(const std::string& label, const std::string& value) {
  return absl::StrFormat("%-42s%14s\n", label + ":", value);
}
std::string Row(const std::string& label, int64_t value) { return Row(label, absl::StrCat(value)); }
std::string Row(const std::string& label, double value) {
  return Row(label, absl::StrFormat("%.2f", value));
}

std::string LatencyBlock(const std::string& title, const std::string& abbrev,
                         const Distribution& d) {
  std::string s = Rule(title);
  s += Row("Mean " + abbrev + " (ms)", d.mean * 1e3);
  s += Row("Median " + abbrev + " (ms)", d.median * 1e3);
  s += Row("P90 " + abbrev + " (ms)", d.p90 * 1e3);
  s += Row("P99 " + abbrev + " (ms)", d.p99 * 1e3);
  return s;
}

std::string RateText(double rate) {
  return std::isinf(rate) ? std::string("inf") : absl::StrFormat("%.2f", rate);
}

// "temperature 0" (greedy, the default), then what else is sent: "temperature 1, top_p 0.9,
// frequency_penalty 0.5, logprobs 5 (25% of requests)".
std::string SamplingText(const BenchOptions& o) {
  std::string t = o.temperature ? absl::StrFormat("temperature %g", *o.temperature)
                                : std::string("temperature: server default");
  if (o.top_p) absl::StrAppend(&t, absl::StrFormat(", top_p %g", *o.top_p));
  std::string knobs;
  if (o.presence_penalty) absl::StrAppend(&knobs, absl::StrFormat(", presence_penalty %g", *o.presence_penalty));
  if (o.frequency_penalty) absl::StrAppend(&knobs, absl::StrFormat(", frequency_penalty %g", *o.frequency_penalty));
  if (o.logprobs) absl::StrAppend(&knobs, absl::StrFormat(", logprobs %d", *o.logprobs));
  if (!knobs.empty() && o.knobs_fraction < 1) {
    absl::StrAppend(&knobs, absl::StrFormat(" (%g%% of requests)", 100 * o.knobs_fraction));
  }
  return t + knobs;
}

void AddDistribution(nlohmann::json& j, const std::string& name, const Distribution& d) {
  j["mean_" + name + "_ms"] = d.mean * 1e3;
  j["median_" + name + "_ms"] = d.median * 1e3;
  j["p90_" + name + "_ms"] = d.p90 * 1e3;
  j["p99_" + name + "_ms"] = d.p99 * 1e3;
  j["max_" + name + "_ms"] = d.max * 1e3;
}

}  // namespace

std::string FormatSummaryTable(const BenchSummary& s, const RunInfo& info) {
  const BenchOptions& o = info.options;
  std::string t = Rule("") + absl::StrFormat("%s\n", "mlaserve-bench: serving benchmark result");
  t += Rule("");
  t += Row("Server", o.server);
  t += Row("Backend", o.backend == Backend::kOpenAi ? "openai (HTTP)" : "grpc");
  t += Row("Model", info.model_name);
  t += Row("Dataset", DatasetName(o.dataset));
  if (o.dataset == DatasetKind::kRandom && o.shared_prefix_groups > 0) {
    t += Row("Shared prefix (groups x tokens)",
             absl::StrCat(o.shared_prefix_groups, " x ", o.shared_prefix_len));
  }
  if (MultiTurn(o)) {
    t += Row("Conversations x turns", absl::StrCat(o.multi_turn_conversations, " x ",
                                                   o.multi_turn_turns));
    t += Row("New message per turn (tokens)", static_cast<int64_t>(o.multi_turn_message_len));
  }
  t += Row(MultiTurn(o) ? "Conversation rate (conv/s)" : "Request rate (req/s)",
           RateText(o.request_rate));
  t += Row("Max concurrency", o.max_concurrency > 0 ? absl::StrCat(o.max_concurrency)
                                                    : std::string("unlimited"));
  t += Row("Peak requests in flight", static_cast<int64_t>(s.peak_in_flight));
  t += Row("Sampling", SamplingText(o));
  t += Rule("Requests");
  t += Row("Requests in the dataset", static_cast<int64_t>(s.num_requests));
  t += Row("Successful requests", static_cast<int64_t>(s.completed));
  t += Row("Failed requests", static_cast<int64_t>(s.failed));
  if (s.time_bound_hit) {
    t += Row("Cancelled at the time bound", static_cast<int64_t>(s.cancelled_at_bound));
    t += Row("Not started (time bound)", static_cast<int64_t>(s.not_started));
  }
  if (s.abandoned > 0) t += Row("Abandoned (did not end)", static_cast<int64_t>(s.abandoned));
  if (s.not_sent_after_failure > 0) {
    t += Row("Not sent (earlier turn failed)", static_cast<int64_t>(s.not_sent_after_failure));
  }
  t += Row("Benchmark duration (s)", s.duration_s);
  t += Row("Total input tokens", s.total_input_tokens);
  t += Row("Total generated tokens", s.total_output_tokens);
  t += Row("Total cached prompt tokens", s.total_cached_prompt_tokens);
  t += Row("Prefix cache hit rate (%)", 100 * s.prefix_cache_hit_rate);
  t += Row("Request throughput (req/s)", s.request_throughput);
  t += Row("Input token throughput (tok/s)", s.input_throughput);
  t += Row("Output token throughput (tok/s)", s.output_throughput);
  t += Row("Total token throughput (tok/s)", s.input_throughput + s.output_throughput);
  t += LatencyBlock("Time to First Token", "TTFT", s.ttft);
  if (MultiTurn(o)) {
    t += Rule("Multi-turn");
    t += Row("Mean TTFT turn 1 (ms)", s.ttft_first_turn.mean * 1e3);
    t += Row("Median TTFT turn 1 (ms)", s.ttft_first_turn.median * 1e3);
    t += Row("Mean TTFT later turns (ms)", s.ttft_later_turns.mean * 1e3);
    t += Row("Median TTFT later turns (ms)", s.ttft_later_turns.median * 1e3);
    t += Row("Later turns' cached prompt tokens", s.later_turns_cached_prompt_tokens);
    t += Row("Later turns' prefix cache hit rate (%)", 100 * s.later_turns_hit_rate);
  }
  t += LatencyBlock("Time per Output Token (excl. 1st)", "TPOT", s.tpot);
  t += LatencyBlock("Inter-token Latency", "ITL", s.itl);
  t += LatencyBlock("End-to-end Latency", "E2E", s.e2e);
  if (!s.failures.empty()) {
    t += Rule("Failures by class");
    for (const auto& [name, f] : s.failures) {
      const std::string label =
          f.status_code != 0 ? absl::StrCat(name, " (code ", f.status_code, ")") : name;
      t += Row(label, static_cast<int64_t>(f.count));
      t += absl::StrCat("  first: ", f.first_error.substr(0, 200), "\n");
    }
  }
  t += Rule("");
  return t;
}

nlohmann::json SummaryToJson(const BenchSummary& s, const RunInfo& info) {
  const BenchOptions& o = info.options;
  nlohmann::json j;
  j["server"] = o.server;
  j["backend"] = o.backend == Backend::kOpenAi ? "openai" : "grpc";
  j["model"] = info.model_name;
  j["dataset"] = DatasetName(o.dataset);
  if (o.dataset == DatasetKind::kRandom) {
    j["random_input_len"] = o.random_input_len;
    j["random_output_len"] = o.random_output_len;
    j["random_range_ratio"] = o.random_range_ratio;
    j["shared_prefix_groups"] = o.shared_prefix_groups;
    j["shared_prefix_len"] = o.shared_prefix_len;
    j["multi_turn_turns"] = o.multi_turn_turns;
    j["multi_turn_conversations"] = o.multi_turn_conversations;
    j["multi_turn_message_len"] = o.multi_turn_message_len;
  } else {
    j["prompts_file"] = o.prompts_file;
  }
  j["num_prompts"] = o.num_prompts;
  // JSON has no infinity: an unlimited rate is written as null.
  j["request_rate"] = std::isinf(o.request_rate) ? nlohmann::json(nullptr)
                                                 : nlohmann::json(o.request_rate);
  j["max_concurrency"] = o.max_concurrency;
  // The sampling asked (null = not sent: the server's default).
  const auto or_null = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  j["sampling"] = {{"temperature", or_null(o.temperature)},
                   {"top_p", or_null(o.top_p)},
                   {"presence_penalty", or_null(o.presence_penalty)},
                   {"frequency_penalty", or_null(o.frequency_penalty)},
                   {"logprobs", or_null(o.logprobs)},
                   {"knobs_fraction", o.knobs_fraction}};
  j["seed"] = o.seed;
  j["max_duration_s"] = o.max_duration_s;
  j["warmup_requests"] = info.warmup_sent;
  j["warmup_failed"] = info.warmup_failed;

  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["cancelled_at_bound"] = s.cancelled_at_bound;
  j["not_started"] = s.not_started;
  j["abandoned"] = s.abandoned;
  j["time_bound_hit"] = s.time_bound_hit;
  j["peak_in_flight"] = s.peak_in_flight;
  j["duration_s"] = s.duration_s;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["total_cached_prompt_tokens"] = s.total_cached_prompt_tokens;
  j["prefix_cache_hit_rate"] = s.prefix_cache_hit_rate;  // a fraction in [0, 1]
  j["request_throughput"] = s.request_throughput;
  j["input_throughput"] = s.input_throughput;
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.input_throughput + s.output_throughput;
  AddDistribution(j, "ttft", s.ttft);
  AddDistribution(j, "tpot", s.tpot);
  AddDistribution(j, "itl", s.itl);
  AddDistribution(j, "e2e_latency", s.e2e);
  if (MultiTurn(o)) {
    j["not_sent_after_failure"] = s.not_sent_after_failure;
    AddDistribution(j, "ttft_turn1", s.ttft_first_turn);
    AddDistribution(j, "ttft_later_turns", s.ttft_later_turns);
    j["later_turns_input_tokens"] = s.later_turns_input_tokens;
    j["later_turns_cached_prompt_tokens"] = s.later_turns_cached_prompt_tokens;
    j["later_turns_prefix_cache_hit_rate"] = s.later_turns_hit_rate;  // a fraction
  }
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [name, f] : s.failures) {
    errors[name] = {{"count", f.count}, {"status_code", f.status_code},
                    {"first_error", f.first_error}};
  }
  j["errors"] = errors;
  return j;
}

nlohmann::json RecordToJson(const RequestRecord& r) {
  nlohmann::json j;
  j["id"] = r.request_id;
  j["index"] = r.index;
  if (r.conversation >= 0) {
    j["conversation"] = r.conversation;
    j["turn"] = r.turn + 1;  // 1-based, as the table's "turn 1"
  }
  j["input_len"] = r.input_len;
  j["cached_prompt_tokens"] = r.cached_prompt_tokens;
  j["output_len"] = r.output_len;
  j["requested_output_len"] = r.requested_output_len;
  j["start_s"] = r.start_offset_s;
  j["ttft_s"] = r.ttft_s >= 0 ? nlohmann::json(r.ttft_s) : nlohmann::json(nullptr);
  j["itl_s"] = r.itl_s;
  j["e2e_s"] = r.e2e_s;
  j["status_code"] = r.status_code;
  j["status"] = StatusCodeName(r.status_code);
  j["outcome"] = r.outcome == Outcome::kSuccess ? "success"
                 : r.outcome == Outcome::kFailed ? "failed"
                                                 : "cancelled_at_bound";
  j["error_class"] = r.error_class;
  j["error"] = r.error;
  return j;
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value) {
  std::ofstream out(path);
  out << value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WriteJsonlFile(const std::string& path, const std::vector<RequestRecord>& records) {
  std::ofstream out(path);
  for (const RequestRecord& r : records) {
    // Server messages may hold any bytes: invalid UTF-8 is replaced rather than thrown on.
    out << RecordToJson(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace mlaserve::bench
