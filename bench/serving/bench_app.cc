#include "bench/serving/bench_app.h"

#include <unistd.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/serving/conversation.h"
#include "bench/serving/dataset.h"
#include "nlohmann/json.hpp"
#include "bench/serving/load_runner.h"
#include "bench/serving/progress.h"
#include "bench/serving/report.h"
#include "bench/serving/server_target.h"
#include "bench/serving/stats.h"
#include "bench/serving/stream_tally.h"
#include "bench/serving/timed_openai_call.h"
#include "mlaserve/v1/api.grpc.pb.h"

namespace mlaserve::bench {
namespace {

// How long the call that asks a channel why it has no connection may take.
constexpr absl::Duration kWhyNoConnectionTimeout = absl::Seconds(2);

absl::StatusOr<v1::GetModelInfoResponse> FetchModelInfo(v1::Generation::StubInterface* stub,
                                                        const BenchOptions& o) {
  v1::GetModelInfoResponse info;
  grpc::Status status;
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(o.connect_timeout_s)));
    context.set_wait_for_ready(true);  // ride out a server that is still starting
    status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // Waiting for a connection hides why there is none (a refused port, a certificate that
    // does not verify): one call that does not wait returns the channel's last error.
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWhyNoConnectionTimeout));
    const grpc::Status why = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (why.ok()) return info;
    if (why.error_code() == grpc::StatusCode::UNAVAILABLE) status = why;
  }
  if (!status.ok()) {
    const common::TlsOptions tls = ClientTls(o);
    const std::string transport =
        tls.insecure ? "plaintext"
                     : absl::StrCat("TLS, --tls-ca ", tls.ca_file,
                                    tls.server_name.empty() ? "" : ", --tls-server-name ",
                                    tls.server_name);
    return absl::UnavailableError(absl::StrCat(
        "GetModelInfo on ", o.server, " (", transport, ") failed within ", o.connect_timeout_s,
        " s: ", StatusCodeName(status.error_code()), ": ", status.error_message()));
  }
  return info;
}

// The model card of an OpenAI HTTP API (GET /v1/models), as the GetModelInfo answer the
// dataset needs; the `mlaserve` extension of the card gives the vocabulary.
absl::StatusOr<v1::GetModelInfoResponse> FetchOpenAiModel(const OpenAiTarget& target,
                                                          const BenchOptions& o) {
  std::unique_ptr<httplib::Client> client = NewHttpClient(target);
  client->set_connection_timeout(std::chrono::seconds(static_cast<int64_t>(o.connect_timeout_s)));
  client->set_read_timeout(std::chrono::seconds(static_cast<int64_t>(o.connect_timeout_s)));
  httplib::Result r = client->Get("/v1/models");
  if (!r || r->status != 200) {
    return absl::UnavailableError(absl::StrCat(
        "GET /v1/models on ", target.url(), " failed: ",
        r ? absl::StrCat("HTTP ", r->status, " ", r->body)
          : DescribeHttpError(*client, r.error(), target)));
  }
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET /v1/models on ", target.url(), " lists no model"));
  }
  const nlohmann::json& card = j["data"][0];
  v1::GetModelInfoResponse info;
  info.set_model_name(card.value("id", ""));
  info.set_max_context_length(card.value("max_model_len", 0));
  if (card.contains("mlaserve")) {
    const nlohmann::json& ext = card["mlaserve"];
    info.set_vocab_size(ext.value("vocab_size", 0));
    for (int id : ext.value("eos_token_ids", std::vector<int>{})) info.add_eos_token_ids(id);
    if (ext.contains("bos_token_id") && ext["bos_token_id"].is_number()) {
      info.set_bos_token_id(ext["bos_token_id"].get<int>());
    }
  }
  return info;
}

absl::StatusOr<VocabInfo> RandomVocab(const v1::GetModelInfoResponse& model) {
  if (model.vocab_size() < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server reports vocab_size ", model.vocab_size(), "; random prompts need >= 1"));
  }
  VocabInfo vocab;
  vocab.vocab_size = model.vocab_size();
  vocab.max_context_length = model.max_context_length();
  for (int32_t id : model.eos_token_ids()) vocab.excluded_ids.insert(id);
  if (model.has_bos_token_id()) vocab.excluded_ids.insert(model.bos_token_id());
  return vocab;
}

RandomDatasetOptions RandomOptions(const BenchOptions& o) {
  RandomDatasetOptions random;
  random.num_prompts = o.num_prompts;
  random.input_len = o.random_input_len;
  random.output_len = o.random_output_len;
  random.range_ratio = o.random_range_ratio;
  random.seed = o.seed;
  random.shared_prefix_groups = o.shared_prefix_groups;
  random.shared_prefix_len = o.shared_prefix_len;
  return random;
}

// The timed run's prompts, and the warmup's.
struct Datasets {
  // What the timed run sends first: every request, or each conversation's first turn.
  std::vector<RequestSpec> timed;
  std::vector<RequestSpec> warmup;
  std::optional<ConversationDataset> conversations;  // multi-turn runs
};

absl::StatusOr<Datasets> BuildDatasets(const BenchOptions& o,
                                       const v1::GetModelInfoResponse& model) {
  Datasets d;
  if (o.dataset == DatasetKind::kPromptsFile) {
    auto specs = LoadPromptsFile(o.prompts_file, o.num_prompts);
    if (!specs.ok()) return specs.status();
    d.timed = CycleToCount(*specs, o.num_prompts);
    // Text prompts cannot be made up without a tokenizer: the file's first prompts warm up
    // (a server's prefix cache then holds them when the timed run sends them again).
    d.warmup = CycleToCount(d.timed, o.warmup_requests);
  } else {
    absl::StatusOr<VocabInfo> vocab = RandomVocab(model);
    if (!vocab.ok()) return vocab.status();
    if (MultiTurn(o)) {
      ConversationOptions conversations{.first_turns = RandomOptions(o),
                                        .turns = o.multi_turn_turns,
                                        .message_len = o.multi_turn_message_len};
      conversations.first_turns.num_prompts = o.multi_turn_conversations;
      absl::StatusOr<ConversationDataset> made = MakeConversations(conversations, *vocab);
      if (!made.ok()) return made.status();
      d.conversations = *std::move(made);
      d.timed = d.conversations->first_turns;
    } else {
      absl::StatusOr<std::vector<RequestSpec>> timed =
          MakeRandomDataset(RandomOptions(o), *vocab);
      if (!timed.ok()) return timed.status();
      d.timed = *std::move(timed);
    }
    // Prompts of their own seed, as long as the timed ones but sharing nothing with them, so
    // the warmup leaves no timed prompt and no group's prefix in a server's prefix cache.
    RandomDatasetOptions warm = RandomOptions(o);
    warm.num_prompts = o.warmup_requests;
    warm.seed = WarmupSeed(o.seed);
    warm.input_len = o.shared_prefix_len + o.random_input_len;
    warm.shared_prefix_groups = 0;
    warm.shared_prefix_len = 0;
    absl::StatusOr<std::vector<RequestSpec>> warmup = MakeRandomDataset(warm, *vocab);
    if (!warmup.ok()) return warmup.status();
    d.warmup = *std::move(warmup);
  }
  for (std::vector<RequestSpec>* specs : {&d.timed, &d.warmup}) {
    for (RequestSpec& spec : *specs) {
      spec.sends_knobs = SendsKnobs(o.seed, spec.index, o.knobs_fraction);
    }
  }
  return d;
}

// Distinguishes this run's request ids from those of any other run on the same server (a
// run cut short may leave requests running there; ids must be unique among running ones).
std::string RunNonce() {
  std::random_device device;
  return absl::StrFormat("%08x", device());
}

LoadResult RunWithProgress(LoadRunner& runner, const std::vector<RequestSpec>& specs,
                           const std::vector<double>& arrivals, bool show,
                           const std::string& label, std::FILE* err,
                           NextTurnFn next_turn = nullptr) {
  std::optional<ProgressDisplay> display;
  if (show) display.emplace(label, [&runner] { return runner.Progress(); }, err);
  LoadResult result = runner.Run(specs, arrivals, std::move(next_turn));
  if (display) display->Stop();
  return result;
}

}  // namespace

int RunBenchmark(const BenchOptions& o, std::FILE* out, std::FILE* err) {
  const auto fail = [err](const absl::Status& status) {
    std::fprintf(err, "mlaserve-bench: %s\n", status.ToString().c_str());
    return kExitCannotRun;
  };
  if (absl::Status valid = Validate(o); !valid.ok()) return fail(valid);

  absl::StatusOr<std::string> api_key = ReadApiKey(o);
  if (!api_key.ok()) return fail(api_key.status());
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Generation::Stub> stub;
  OpenAiTarget target;
  absl::StatusOr<v1::GetModelInfoResponse> model;
  if (o.backend == Backend::kOpenAi) {
    absl::StatusOr<OpenAiTarget> t = MakeOpenAiTarget(o, *api_key);
    if (!t.ok()) return fail(t.status());
    target = *std::move(t);
    model = FetchOpenAiModel(target, o);
    if (model.ok()) target.model = model->model_name();
  } else {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> dialed = DialGenerationServer(o, *api_key);
    if (!dialed.ok()) return fail(dialed.status());
    channel = *std::move(dialed);
    stub = v1::Generation::NewStub(channel);
    model = FetchModelInfo(stub.get(), o);
  }
  if (!model.ok()) return fail(model.status());
  // How each request travels.
  const auto make_runner = [&](const LoadOptions& options) {
    if (o.backend == Backend::kGrpc) return std::make_unique<LoadRunner>(stub.get(), options);
    return std::make_unique<LoadRunner>(
        [target](const RequestSpec& spec, std::string id, const CallSettings& settings,
                 BenchClock::time_point run_start, BenchCall::DoneCallback on_done) {
          return std::make_unique<TimedOpenAiCall>(target, spec, std::move(id), settings, run_start,
                                                   std::move(on_done));
        },
        options);
  };
  absl::StatusOr<Datasets> datasets = BuildDatasets(o, *model);
  if (!datasets.ok()) return fail(datasets.status());
  const std::vector<RequestSpec>& specs = datasets->timed;  // first turns when multi-turn
  // A conversation's next turn: built from its answer, with the knobs of its own index.
  NextTurnFn next_turn;
  if (datasets->conversations) {
    next_turn = [&o, &datasets](const RequestSpec& sent, const RequestRecord& record) {
      RequestSpec next = NextTurn(*datasets->conversations, sent, record.output_token_ids);
      next.sends_knobs = SendsKnobs(o.seed, next.index, o.knobs_fraction);
      return next;
    };
  }
  const std::vector<double> arrivals =
      PoissonArrivalOffsets(static_cast<int>(specs.size()), o.request_rate, o.seed);

  const bool show_progress =
      o.progress == ProgressMode::kOn ||
      (o.progress == ProgressMode::kAuto && isatty(fileno(err)) == 1);
  const std::string nonce = RunNonce();
  LoadOptions load;
  load.max_concurrency = o.max_concurrency;
  load.call.timeout = absl::Seconds(o.request_timeout_s);
  load.call.temperature = o.temperature;
  load.call.top_p = o.top_p;
  load.call.presence_penalty = o.presence_penalty;
  load.call.frequency_penalty = o.frequency_penalty;
  load.call.logprobs = o.logprobs;
  load.call.ignore_eos = o.ignore_eos;
  load.call.include_text = o.include_text;

  // The warmup and the timed run each get --max-duration-s as their bound, so no phase can
  // stall the tool (a warmup stuck behind a wedged server is cut like the run would be).
  if (o.max_duration_s > 0) load.max_duration = absl::Seconds(o.max_duration_s);

  RunInfo info;
  info.options = o;
  info.model_name = model->model_name();
  if (o.warmup_requests > 0) {
    const std::vector<RequestSpec>& warmup = datasets->warmup;
    LoadOptions warm = load;
    warm.request_id_prefix = absl::StrCat("bench-", nonce, "-warmup");
    std::unique_ptr<LoadRunner> runner = make_runner(warm);
    LoadResult result = RunWithProgress(*runner, warmup, std::vector<double>(warmup.size(), 0.0),
                                        show_progress, "warmup", err);
    info.warmup_sent = static_cast<int>(warmup.size());
    for (const RequestRecord& r : result.records) {
      if (r.outcome == Outcome::kSuccess) continue;
      if (info.warmup_failed++ == 0) {
        std::fprintf(err, "mlaserve-bench: warmup request %s failed: %s: %s\n",
                     r.request_id.c_str(), r.error_class.c_str(), r.error.c_str());
      }
    }
    info.warmup_failed += result.abandoned + result.not_started;
  }

  load.request_id_prefix = absl::StrCat("bench-", nonce);
  std::unique_ptr<LoadRunner> runner = make_runner(load);
  const LoadResult result =
      RunWithProgress(*runner, specs, arrivals, show_progress, "benchmark", err, next_turn);
  const BenchSummary summary = Summarize(result, o.num_prompts);

  const std::string table = FormatSummaryTable(summary, info);
  std::fputs(table.c_str(), out);
  std::fflush(out);
  if (!o.output_json.empty()) {
    if (absl::Status s = WriteJsonFile(o.output_json, SummaryToJson(summary, info)); !s.ok()) {
      return fail(s);
    }
  }
  if (!o.output_jsonl.empty()) {
    if (absl::Status s = WriteJsonlFile(o.output_jsonl, result.records); !s.ok()) {
      return fail(s);
    }
  }
  return summary.failed > 0 || summary.abandoned > 0 ? kExitRequestsFailed : kExitOk;
}

}  // namespace mlaserve::bench
