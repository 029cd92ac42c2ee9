// mlaserve-bench: serving load generator for an mlaserve router (or anything that serves
// mlaserve.v1.Generation). See docs/BENCHMARKS.md, "Serving benchmark (mlaserve-bench)".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "bench/serving/bench_app.h"
#include "bench/serving/bench_options.h"
#include "common/transport_security.h"

namespace mlaserve::bench {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"mlaserve-bench: serving benchmark against an mlaserve router (gRPC, or its "
               "OpenAI HTTP API)"};
  BenchOptions o;
  std::string dataset = "random";
  std::string rate = "inf";
  std::string progress = "auto";
  float temperature = 0.0f;

  std::string backend = "grpc";
  app.add_option("--server", o.server,
                 "router address HOST:PORT (the HTTP API's with --backend openai)")
      ->capture_default_str();
  app.add_option("--backend", backend,
                 "grpc (mlaserve.v1.Generation) or openai (POST /v1/completions, streamed)")
      ->capture_default_str()
      ->check(CLI::IsMember({"grpc", "openai"}));
  // mlaservectl's transport flags; with any of them the bench speaks TLS (https with
  // --backend openai), without them plaintext.
  common::AddTlsFlags(app, &o.tls);
  app.add_option("--api-key-file", o.api_key_file,
                 "file whose first key is sent as \"authorization: Bearer KEY\" (the router's "
                 "--api-key-file)");
  app.add_option("--dataset", dataset, "random (token ids) or prompts-file (JSONL)")
      ->capture_default_str()
      ->check(CLI::IsMember({"random", "prompts-file"}));
  app.add_option("--prompts-file", o.prompts_file,
                 "JSONL, one {\"text\": ..., \"output_len\": N} per line (cycled to "
                 "--num-prompts)");
  CLI::Option* num_prompts_flag =
      app.add_option("--num-prompts", o.num_prompts,
                     "requests in the timed run (multi-turn: conversations x turns)")
          ->capture_default_str();
  app.add_option("--random-input-len", o.random_input_len, "prompt tokens (upper bound)")
      ->capture_default_str();
  app.add_option("--random-output-len", o.random_output_len, "output tokens (upper bound)")
      ->capture_default_str();
  app.add_option("--random-range-ratio", o.random_range_ratio,
                 "lengths drawn uniformly from [len*ratio, len]")
      ->capture_default_str();
  app.add_option("--shared-prefix-groups", o.shared_prefix_groups,
                 "random dataset: request i starts with the prefix of group i % G (0 = off)")
      ->capture_default_str();
  app.add_option("--shared-prefix-len", o.shared_prefix_len,
                 "random dataset: tokens of each group's prefix, before the request's own "
                 "--random-input-len (0 = off)")
      ->capture_default_str();
  app.add_option("--multi-turn-turns", o.multi_turn_turns,
                 "random dataset, gRPC: turns per conversation; turn t+1's prompt is turn t's "
                 "prompt + its answer's token ids + a new message (0 or 1 = off)")
      ->capture_default_str();
  app.add_option("--multi-turn-conversations", o.multi_turn_conversations,
                 "conversations of a multi-turn run, in flight at most --max-concurrency at once "
                 "(the run sends conversations x turns requests)");
  app.add_option("--multi-turn-message-len", o.multi_turn_message_len,
                 "random tokens of the new message each later turn appends");
  app.add_option("--request-rate", rate, "requests/s, Poisson arrivals; inf = all at once")
      ->capture_default_str();
  app.add_option("--max-concurrency", o.max_concurrency,
                 "most requests in flight at once (0 = unlimited)")
      ->capture_default_str();
  app.add_option("--warmup-requests", o.warmup_requests, "untimed requests sent first")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the dataset and the arrival times")
      ->capture_default_str();
  app.add_option("--max-duration-s", o.max_duration_s,
                 "bound on the timed run; requests still running are cancelled (0 = none)")
      ->capture_default_str();
  app.add_option("--request-timeout-s", o.request_timeout_s, "deadline of each request")
      ->capture_default_str();
  app.add_option("--connect-timeout-s", o.connect_timeout_s,
                 "how long to wait for the server's GetModelInfo")
      ->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str();
  float top_p = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int logprobs = 0;
  CLI::Option* top_p_flag = app.add_option("--top-p", top_p, "nucleus sampling (not sent unless given)");
  CLI::Option* presence_flag = app.add_option(
      "--presence-penalty", presence_penalty,
      "OpenAI's presence penalty, sent by the --knobs-fraction share of requests");
  CLI::Option* frequency_flag = app.add_option(
      "--frequency-penalty", frequency_penalty,
      "OpenAI's frequency penalty, sent by the --knobs-fraction share of requests");
  CLI::Option* logprobs_flag = app.add_option(
      "--logprobs", logprobs,
      "log probabilities of each token and this many alternatives, asked by the --knobs-fraction "
      "share of requests");
  app.add_option("--knobs-fraction", o.knobs_fraction,
                 "share of the requests (chosen by --seed) that send the penalties and --logprobs")
      ->capture_default_str();
  app.add_option("--ignore-eos", o.ignore_eos,
                 "keep generating past EOS so outputs reach their length")
      ->capture_default_str();
  app.add_option("--include-text", o.include_text,
                 "ask the server for detokenized text as well as token ids")
      ->capture_default_str();
  app.add_option("--output-jsonl", o.output_jsonl, "write one JSON record per request here");
  app.add_option("--output-json", o.output_json, "write the summary as JSON here");
  app.add_option("--progress", progress, "progress bar on stderr: auto (terminal only), on, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  CLI11_PARSE(app, argc, argv);

  o.backend = backend == "openai" ? Backend::kOpenAi : Backend::kGrpc;
  o.dataset = dataset == "random" ? DatasetKind::kRandom : DatasetKind::kPromptsFile;
  o.progress = progress == "on"    ? ProgressMode::kOn
               : progress == "off" ? ProgressMode::kOff
                                   : ProgressMode::kAuto;
  o.temperature = temperature;
  if (top_p_flag->count() > 0) o.top_p = top_p;
  if (presence_flag->count() > 0) o.presence_penalty = presence_penalty;
  if (frequency_flag->count() > 0) o.frequency_penalty = frequency_penalty;
  if (logprobs_flag->count() > 0) o.logprobs = logprobs;
  // A multi-turn run's requests are conversations x turns: --num-prompts, when not given,
  // says so (Validate refuses a given one that differs, and a product past INT_MAX).
  if (num_prompts_flag->count() == 0 && o.multi_turn_turns >= 2 && o.multi_turn_conversations >= 1 &&
      int64_t{o.multi_turn_conversations} * o.multi_turn_turns <= INT32_MAX) {
    o.num_prompts = o.multi_turn_conversations * o.multi_turn_turns;
  }
  if (!absl::SimpleAtod(rate, &o.request_rate)) {
    std::fprintf(stderr, "mlaserve-bench: --request-rate %s is not a number or inf\n",
                 rate.c_str());
    return kExitCannotRun;
  }
  return RunBenchmark(o, stdout, stderr);
}

}  // namespace
}  // namespace mlaserve::bench

int main(int argc, char** argv) {
  const int code = mlaserve::bench::Main(argc, argv);
  // A channel that never connected (a TLS handshake refused, say) may still be winding down on
  // gRPC's threads. Returning would run the atexit handlers and static destructors (OpenSSL's
  // cleanup among them) under those threads: once in a CTest run of 2026-11-30 the bench printed
  // its UNAVAILABLE error and then died of SIGSEGV instead of exiting 2. Every output file is
  // closed by now (report.cc), so flush stdio and exit without them.
  std::fflush(nullptr);
  std::_Exit(code);
}
