// mlaservectl generate: one streaming Generate, text to stdout as it arrives.
#include <cstdio>

#include "absl/strings/str_format.h"
#include "mlaserve/v1/api.grpc.pb.h"
#include "router/ctl/ctl_commands.h"
#include "router/ctl/ctl_format.h"

namespace mlaserve::router::ctl {
namespace {

const char* FinishLabel(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_ABORT: return "abort";
    default: return "unspecified";
  }
}

}  // namespace

int Generate(const CtlContext& ctx, const GenerateArgs& args) {
  v1::GenerateRequest req;
  req.set_request_id(args.request_id);
  req.set_cache_salt(args.cache_salt);
  if (args.prompt_ids.empty()) {
    req.set_text(args.prompt);
  } else {
    req.mutable_token_ids()->mutable_ids()->Assign(args.prompt_ids.begin(), args.prompt_ids.end());
  }
  v1::SamplingParams* s = req.mutable_sampling();
  if (args.max_new_tokens) s->set_max_new_tokens(*args.max_new_tokens);
  if (args.temperature) s->set_temperature(*args.temperature);
  if (args.top_p) s->set_top_p(*args.top_p);
  if (args.top_k) s->set_top_k(*args.top_k);
  if (args.min_p) s->set_min_p(*args.min_p);
  if (args.repetition_penalty) s->set_repetition_penalty(*args.repetition_penalty);
  if (args.seed) s->set_seed(*args.seed);
  for (const std::string& stop : args.stop) s->add_stop(stop);
  s->set_ignore_eos(args.ignore_eos);
  if (args.json_object) s->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  if (!args.json_schema.empty()) {
    s->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
    s->set_response_format_schema(args.json_schema);
    s->set_response_format_schema_strict(args.json_schema_strict);
  }
  s->set_response_format_after(args.json_after);
  if (!args.json_choices.empty()) s->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  for (const common::SchemaChoice& c : args.json_choices) {
    v1::SchemaChoice* choice = s->add_response_format_choices();
    choice->set_prefix(c.prefix);
    choice->set_schema(c.schema);
    choice->set_strict(args.json_schema_strict);
  }

  auto stub = v1::Generation::NewStub(ctx.channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + ctx.timeout));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Generate(&context, req);
  v1::GenerateResponse message;
  bool ends_with_newline = true;
  std::optional<v1::GenerateComplete> complete;
  while (reader->Read(&message)) {
    if (ctx.json) {
      std::printf("%s\n", ToJson(message, /*pretty=*/false).c_str());
    } else if (message.has_chunk() && !message.chunk().text().empty()) {
      const std::string& text = message.chunk().text();
      std::fwrite(text.data(), 1, text.size(), stdout);
      ends_with_newline = text.back() == '\n';
    }
    if (message.has_complete()) complete = message.complete();
    std::fflush(stdout);
  }
  grpc::Status status = reader->Finish();
  if (!ctx.json && !ends_with_newline) std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!status.ok()) {
    const int code = ExitCodeFor(status);
    std::fprintf(stderr, "mlaservectl: %s: %s\n",
                 code == kExitUnavailable ? "server unavailable" : "server error",
                 DescribeStatus(status).c_str());
    return code;
  }
  if (complete && !ctx.json) {
    std::string matched;
    if (complete->has_matched_stop()) {
      matched = absl::StrFormat(" on \"%s\"", complete->matched_stop());
    } else if (complete->has_matched_token_id()) {
      matched = absl::StrFormat(" on token %d", complete->matched_token_id());
    }
    const std::string cached =
        complete->cached_prompt_tokens() > 0
            ? absl::StrFormat(" (%d cached)", complete->cached_prompt_tokens())
            : "";
    std::fprintf(stderr,
                 "[%s%s; %d prompt%s + %d completion tokens; ttft %.3f s; total %.3f s; %s%s]\n",
                 FinishLabel(complete->finish_reason()), matched.c_str(),
                 complete->prompt_tokens(), cached.c_str(), complete->completion_tokens(),
                 complete->time_to_first_token_s(), complete->e2e_latency_s(),
                 complete->local_prefill() ? "local prefill on "
                                           : (complete->prefill_worker_id() + " -> ").c_str(),
                 complete->decode_worker_id().c_str());
  }
  return kExitOk;
}

}  // namespace mlaserve::router::ctl
