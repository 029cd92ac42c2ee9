#include "bench/serving/bench_options.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mlaserve::bench {
namespace {

absl::Status Invalid(const std::string& flag, double value, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", value, ": ", rule));
}

absl::Status ValidateMultiTurn(const BenchOptions& o) {
  if (o.multi_turn_turns < 0) {
    return Invalid("multi-turn-turns", o.multi_turn_turns, "must be >= 0 (0 or 1 = off)");
  }
  if (!MultiTurn(o)) {
    if (o.multi_turn_conversations != 0) {
      return Invalid("multi-turn-conversations", o.multi_turn_conversations,
                     absl::StrCat("needs --multi-turn-turns >= 2 (it is ", o.multi_turn_turns,
                                  ")"));
    }
    if (o.multi_turn_message_len != 0) {
      return Invalid("multi-turn-message-len", o.multi_turn_message_len,
                     absl::StrCat("needs --multi-turn-turns >= 2 (it is ", o.multi_turn_turns,
                                  ")"));
    }
    return absl::OkStatus();
  }
  if (o.multi_turn_conversations < 1) {
    return Invalid("multi-turn-conversations", o.multi_turn_conversations,
                   absl::StrCat("must be >= 1 with --multi-turn-turns ", o.multi_turn_turns));
  }
  if (o.multi_turn_message_len < 1) {
    return Invalid("multi-turn-message-len", o.multi_turn_message_len,
                   absl::StrCat("must be >= 1 with --multi-turn-turns ", o.multi_turn_turns));
  }
  if (o.backend == Backend::kOpenAi) {
    // The next turn repeats the answer's token ids; OpenAI's stream carries text only, and
    // text re-tokenized is not the same ids (and the bench has no tokenizer).
    return Invalid("multi-turn-turns", o.multi_turn_turns,
                   "needs --backend grpc: the next turn's prompt repeats the answer's token "
                   "ids, which the OpenAI API's stream does not carry");
  }
  const int64_t requests = int64_t{o.multi_turn_conversations} * o.multi_turn_turns;
  if (requests > std::numeric_limits<int>::max()) {
    // Not Invalid(): a double would print the count as 1.04858e+06.
    return absl::InvalidArgumentError(absl::StrCat(
        "--multi-turn-conversations ", o.multi_turn_conversations, " x --multi-turn-turns ",
        o.multi_turn_turns, " = ", requests, " requests, more than a run can count"));
  }
  if (o.num_prompts != requests) {
    return Invalid("num-prompts", o.num_prompts,
                   absl::StrCat("with --multi-turn-conversations ", o.multi_turn_conversations,
                                " x --multi-turn-turns ", o.multi_turn_turns, " the run sends ",
                                requests, " requests; leave --num-prompts out or give ",
                                requests));
  }
  return absl::OkStatus();
}

}  // namespace

common::TlsOptions ClientTls(const BenchOptions& o) {
  common::TlsOptions tls = o.tls;
  const bool any_tls_flag = !tls.ca_file.empty() || !tls.cert_file.empty() ||
                            !tls.key_file.empty() || !tls.server_name.empty();
  if (!any_tls_flag) tls.insecure = true;
  return tls;
}

const char* DatasetName(DatasetKind kind) {
  return kind == DatasetKind::kRandom ? "random" : "prompts-file";
}

absl::Status Validate(const BenchOptions& o) {
  if (o.server.empty()) return absl::InvalidArgumentError("--server is empty");
  if (o.num_prompts < 1) return Invalid("num-prompts", o.num_prompts, "must be >= 1");
  if (o.dataset == DatasetKind::kRandom) {
    if (o.random_input_len < 1) {
      return Invalid("random-input-len", o.random_input_len, "must be >= 1");
    }
    if (o.random_output_len < 1) {
      return Invalid("random-output-len", o.random_output_len, "must be >= 1");
    }
    if (!(o.random_range_ratio >= 0 && o.random_range_ratio <= 1)) {
      return Invalid("random-range-ratio", o.random_range_ratio, "must be in [0, 1]");
    }
    if (o.shared_prefix_len < 0) {
      return Invalid("shared-prefix-len", o.shared_prefix_len, "must be >= 0 (0 = off)");
    }
    if (o.shared_prefix_groups < 0) {
      return Invalid("shared-prefix-groups", o.shared_prefix_groups, "must be >= 0 (0 = off)");
    }
    if (o.shared_prefix_len > 0 && o.shared_prefix_groups < 1) {
      return Invalid("shared-prefix-groups", o.shared_prefix_groups,
                     absl::StrCat("must be >= 1 with --shared-prefix-len ", o.shared_prefix_len));
    }
    if (o.shared_prefix_groups > 0 && o.shared_prefix_len < 1) {
      return Invalid("shared-prefix-len", o.shared_prefix_len,
                     absl::StrCat("must be >= 1 with --shared-prefix-groups ",
                                  o.shared_prefix_groups));
    }
    if (absl::Status turns = ValidateMultiTurn(o); !turns.ok()) return turns;
    if (MultiTurn(o) && o.shared_prefix_groups > o.multi_turn_conversations) {
      return Invalid("shared-prefix-groups", o.shared_prefix_groups,
                     absl::StrCat("more groups than --multi-turn-conversations ",
                                  o.multi_turn_conversations, " leaves some without one"));
    }
    if (o.shared_prefix_groups > o.num_prompts) {
      return Invalid("shared-prefix-groups", o.shared_prefix_groups,
                     absl::StrCat("more groups than --num-prompts ", o.num_prompts,
                                  " leaves some without a request"));
    }
  } else if (o.multi_turn_turns != 0 || o.multi_turn_conversations != 0 ||
             o.multi_turn_message_len != 0) {
    // A conversation's next prompt repeats the answer's token ids; text prompts have none.
    return absl::InvalidArgumentError(absl::StrCat(
        "--multi-turn-turns ", o.multi_turn_turns,
        ": only --dataset random has a multi-turn workload"));
  } else if (o.prompts_file.empty()) {
    return absl::InvalidArgumentError("--dataset prompts-file needs --prompts-file FILE");
  } else if (o.shared_prefix_groups != 0 || o.shared_prefix_len != 0) {
    // Text prompts have no token ids to share; a prompts file states its own prefixes.
    return absl::InvalidArgumentError(absl::StrCat(
        "--shared-prefix-groups ", o.shared_prefix_groups, " / --shared-prefix-len ",
        o.shared_prefix_len, ": only --dataset random has a shared-prefix workload"));
  }
  if (!(o.request_rate > 0)) {
    return Invalid("request-rate", o.request_rate, "must be > 0 (inf = all at once)");
  }
  if (o.max_concurrency < 0) {
    return Invalid("max-concurrency", o.max_concurrency, "must be >= 0 (0 = unlimited)");
  }
  if (o.warmup_requests < 0) return Invalid("warmup-requests", o.warmup_requests, "must be >= 0");
  if (!(o.max_duration_s >= 0) || std::isinf(o.max_duration_s)) {
    return Invalid("max-duration-s", o.max_duration_s, "must be finite and >= 0 (0 = no bound)");
  }
  if (!(o.request_timeout_s > 0) || std::isinf(o.request_timeout_s)) {
    return Invalid("request-timeout-s", o.request_timeout_s, "must be finite and > 0");
  }
  if (!(o.connect_timeout_s > 0) || std::isinf(o.connect_timeout_s)) {
    return Invalid("connect-timeout-s", o.connect_timeout_s, "must be finite and > 0");
  }
  if (o.temperature && !(*o.temperature >= 0)) {
    return Invalid("temperature", *o.temperature, "must be >= 0 (0 = greedy)");
  }
  if (o.top_p && !(*o.top_p > 0 && *o.top_p <= 1)) return Invalid("top-p", *o.top_p, "must be in (0, 1]");
  if (o.presence_penalty && !(*o.presence_penalty >= -2 && *o.presence_penalty <= 2)) {
    return Invalid("presence-penalty", *o.presence_penalty, "must be in [-2, 2]");
  }
  if (o.frequency_penalty && !(*o.frequency_penalty >= -2 && *o.frequency_penalty <= 2)) {
    return Invalid("frequency-penalty", *o.frequency_penalty, "must be in [-2, 2]");
  }
  if (o.logprobs && !(*o.logprobs >= 0 && *o.logprobs <= 20)) {
    return Invalid("logprobs", *o.logprobs, "must be in [0, 20]");
  }
  if (!(o.knobs_fraction >= 0 && o.knobs_fraction <= 1)) {
    return Invalid("knobs-fraction", o.knobs_fraction, "must be in [0, 1]");
  }
  return common::ValidateTlsOptions(ClientTls(o), common::TlsPeer::kClient);
}

}  // namespace mlaserve::bench
