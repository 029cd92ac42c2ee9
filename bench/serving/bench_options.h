// BenchOptions: everything one mlaserve-bench run is told, filled from flags in main() and
// validated once here.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/transport_security.h"

namespace mlaserve::bench {

enum class DatasetKind { kRandom, kPromptsFile };
enum class ProgressMode { kAuto, kOn, kOff };
// How requests travel: the gRPC Generate API, or the OpenAI HTTP API (/v1/completions, SSE).
enum class Backend { kGrpc, kOpenAi };

struct BenchOptions {
  std::string server = "localhost:8000";  // gRPC address, or the HTTP API's HOST:PORT
  Backend backend = Backend::kGrpc;
  // --insecure, --tls-ca, --tls-cert/--tls-key (mutual TLS), --tls-server-name: mlaservectl's
  // flags (docs/security.md), for both backends (https with openai). ClientTls() resolves them.
  common::TlsOptions tls;
  std::string api_key_file;  // the router's --api-key-file: its first key is sent

  DatasetKind dataset = DatasetKind::kRandom;
  std::string prompts_file;  // JSONL for kPromptsFile
  int num_prompts = 1000;
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 1.0;
  // The random dataset's shared-prefix workload (RandomDatasetOptions): request i starts
  // with the prefix of group i % shared_prefix_groups, shared_prefix_len random ids, then its
  // own random_input_len. Both 0 = off; either one alone is refused.
  int shared_prefix_groups = 0;
  int shared_prefix_len = 0;
  // The random dataset's multi-turn workload (conversation.h, gRPC only): multi_turn_
  // conversations conversations of multi_turn_turns turns each; turn t+1's prompt is turn t's
  // prompt + the ids turn t streamed + multi_turn_message_len new random ids. 0 / 1 turns =
  // off. On, the run's requests are conversations x turns and num_prompts must equal that
  // (main() sets it when --num-prompts is not given); the shared prefix groups, if any, are
  // the conversations' (conversation c starts with group c % G's prefix).
  int multi_turn_turns = 0;
  int multi_turn_conversations = 0;
  int multi_turn_message_len = 0;

  double request_rate = std::numeric_limits<double>::infinity();  // requests/s, Poisson
  int max_concurrency = 0;                                         // 0 = unlimited
  int warmup_requests = 1;
  uint64_t seed = 1;
  double max_duration_s = 0;  // 0 = no bound

  double request_timeout_s = 600;  // deadline of each Generate
  double connect_timeout_s = 10;   // deadline of GetModelInfo (and the connection)
  std::optional<float> temperature = 0.0f;  // greedy by default; unset = server default
  std::optional<float> top_p;               // unset: not sent (the server's default)
  // The knobs that ask more of the sampler than temperature / top-p (a presence / frequency
  // penalty, logprobs), unset = not sent. They go to the share `knobs_fraction` of the
  // requests, chosen by --seed (SendsKnobs), so a run can mix such clients with plain ones.
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<int> logprobs;
  double knobs_fraction = 1.0;
  bool ignore_eos = true;
  bool include_text = true;

  std::string output_jsonl;  // per-request records
  std::string output_json;   // summary
  ProgressMode progress = ProgressMode::kAuto;
};

// INVALID_ARGUMENT naming the flag and value that is out of range, or the flag and path of a
// TLS file that cannot be read.
absl::Status Validate(const BenchOptions& options);

// The transport `options` ask for: their TLS flags, or plaintext when no TLS flag is given
// (mlaserve-bench predates them; its plaintext command lines in docs/BENCHMARKS.md and
// tools/device/ stay valid, and --insecure may be said explicitly).
common::TlsOptions ClientTls(const BenchOptions& options);

const char* DatasetName(DatasetKind kind);

// Whether the run is the multi-turn workload (multi_turn_turns >= 2).
inline bool MultiTurn(const BenchOptions& o) { return o.multi_turn_turns >= 2; }

}  // namespace mlaserve::bench
