// RouterContext: what the router's services share: options, the model's identity and limits,
// the tokenizer, the worker registry and channels, the table of running requests, the
// prefix-affinity table, metrics.
// It owns no threads; WorkerPoller and the services use it. Lives as long as the server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/call_auth.h"
#include "common/cluster_security.h"
#include "common/metrics.h"
#include "common/transport_security.h"
#include "model/loader/config.h"
#include "router/admission_queue.h"
#include "router/decode_placement.h"
#include "router/prefix_affinity.h"
#include "router/request.h"
#include "router/request_table.h"
#include "router/text_codec.h"
#include "router/worker_channels.h"
#include "router/worker_registry.h"
#include "router/worker_types.h"

namespace mlaserve::router {

// The router's public listeners: the gRPC Generation service and any other front end (an HTTP
// listener reuses this struct and RouterContext::public_authorizer()).
struct PublicListenerOptions {
  // The certificate presented to clients (--public-tls-cert / --public-tls-key, by default the
  // cluster certificate); tls.insecure: plaintext. Client certificates are not asked for.
  common::TlsOptions tls;
  std::string api_key_file;  // --api-key-file; empty: no API key needed
  // Largest request message accepted (--max-request-bytes); larger ones are refused by the
  // transport with RESOURCE_EXHAUSTED before they are parsed.
  int max_request_bytes = 4 << 20;
  // Memory gRPC may use for the public listener's connections (--public-memory-quota-mb): an
  // oversized request is refused only once gRPC has buffered it, so this bounds what many at
  // once can cost. Past it gRPC reads from clients more slowly.
  int64_t memory_quota_bytes = int64_t{128} << 20;
};

// Flags of mlaserve-router, read in main() and validated once.
struct RouterOptions {
  std::string listen = "0.0.0.0:8000";
  // The Admin API's own listener: loopback unless an operator opens it (the chart does, behind
  // a NetworkPolicy). Workers register here.
  std::string admin_listen = "127.0.0.1:8001";
  PublicListenerOptions public_listener;
  common::ClusterSecurityOptions cluster;  // --insecure, --tls-*, --cluster-token-file
  std::string admin_token_file;            // --admin-token-file
  std::vector<std::string> admin_cert_names;  // --admin-cert-name: client certs that are admins
  // Requests waiting for KV room at most (--max-queued-requests); more fail RESOURCE_EXHAUSTED.
  int max_queued_requests = 1024;
  // Prompt text being tokenized at once, in bytes (--max-tokenizing-bytes). The tokenizer
  // takes a whole text at a time and needs many times its size while it runs, so this bounds
  // the router's memory under many long prompts; texts under 64 KiB are not counted.
  int64_t max_tokenizing_bytes = 32 << 20;
  std::string model_dir;
  std::vector<std::string> prefill_addresses;
  std::vector<std::string> decode_addresses;
  int metrics_port = -1;  // -1 = off, 0 = ephemeral
  absl::Duration heartbeat_interval = absl::Seconds(2);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration poll_interval = absl::Seconds(1);   // GetInfo of static / admin workers
  absl::Duration info_timeout = absl::Seconds(2);    // one GetInfo
  absl::Duration reserve_timeout = absl::Seconds(10);
  absl::Duration prefill_timeout = absl::Seconds(600);
  absl::Duration request_timeout = absl::Hours(1);  // a whole Generate, unless the client's is shorter
  absl::Duration abort_timeout = absl::Seconds(2);
  int max_reserve_attempts = 3;  // decode workers tried when one is full or unreachable
  // How long a request may wait for a decode worker with room for its prompt's KV pages
  // (admission_queue.h); zero fails it at once with RESOURCE_EXHAUSTED.
  absl::Duration queue_timeout = absl::Seconds(600);
  // Prefix affinity (--prefix-affinity): prefill workers are ranked by the prompt tokens they
  // are not expected to have in their prefix cache (router/prefix_affinity.h), the table
  // bounded by --prefix-affinity-entries. Off: by their load alone.
  bool prefix_affinity = true;
  PrefixAffinity::Options prefix_affinity_table;
  // With prefix affinity, how the decode workers are ranked by what their own prefix caches are
  // expected to hold (--decode-affinity, --decode-affinity-balance-abs / -rel).
  DecodeAffinityOptions decode_affinity;
  // A remotely prefilled prompt's decode worker keeps the leading pages its prefix cache holds
  // instead of receiving them (--remote-prefill-reuse; DecodePlacement::Options).
  bool remote_prefill_reuse = true;

  // Built in main() from the flags above (defaults: open and plaintext, for in-process tests).
  common::CallAuthorizer public_authorizer;  // kClient: the API keys
  std::shared_ptr<const common::ClusterDialer> worker_dialer = common::ClusterDialer::Insecure();
};

// The model as the router needs it.
struct RouterModel {
  ModelIdentity identity;
  ModelLimits limits;
  bool has_sparse_indexer = false;
};
RouterModel RouterModelFromConfig(const model::ModelConfig& config, const std::string& name);

// Metric names follow vLLM / SGLang (mlaserve_ prefix, seconds, _total counters).
struct RouterMetrics {
  explicit RouterMetrics(common::MetricsRegistry& registry);
  common::Counter* requests_total;
  common::Counter* requests_failed_total;
  common::Counter* requests_aborted_total;
  common::Counter* prompt_tokens_total;
  common::Counter* generation_tokens_total;
  common::Counter* local_prefill_total;
  // Prompt tokens the router expected the prefill worker it chose to have cached.
  common::Counter* prefix_affinity_tokens_total;
  // Prompt tokens the workers reported taking from their prefix caches: the prefill worker's,
  // or the decode worker's for a prompt it prefilled itself.
  common::Counter* cached_prompt_tokens_total;
  // Prompt tokens the router expected the decode worker it chose to have cached, for the
  // requests that worker prefills itself.
  common::Counter* decode_affinity_tokens_total;
  // Requests DecodeAffinityOptions' balance rule sent past the decode worker expected to hold
  // most of their prompt (overloaded) to a less loaded one.
  common::Counter* decode_affinity_rebalanced_total;
  // Prompt tokens decode workers kept from their prefix caches for remotely prefilled prompts
  // (their KV not shipped): ReserveResponse.session.cached_pages.
  common::Counter* decode_reused_tokens_total;
  common::Gauge* requests_running;
  common::Gauge* requests_waiting;
  common::Histogram* time_to_first_token_seconds;
  common::Histogram* inter_token_latency_seconds;
  common::Histogram* e2e_request_latency_seconds;
};

class RouterContext {
 public:
  RouterContext(RouterOptions options, RouterModel model, std::unique_ptr<TextCodec> codec);

  const RouterOptions& options() const { return options_; }
  // Who may call the public API (API keys); for every public listener.
  const common::CallAuthorizer& public_authorizer() const { return options_.public_authorizer; }
  const RouterModel& model() const { return model_; }
  const TextCodec& codec() const { return *codec_; }
  WorkerRegistry& registry() { return registry_; }
  WorkerChannels& channels() { return channels_; }
  RequestTable& requests() { return requests_; }
  AdmissionQueue& admission() { return admission_; }
  // What prefill workers are expected to have cached; null when prefix affinity is off.
  PrefixAffinity* prefix_affinity() { return prefix_affinity_.get(); }
  common::MetricsRegistry& metrics_registry() { return metrics_registry_; }
  RouterMetrics& metrics() { return metrics_; }

  // Filled in once the server is bound.
  void set_listen_address(std::string address) { listen_address_ = std::move(address); }
  const std::string& listen_address() const { return listen_address_; }
  absl::Time start_time() const { return start_time_; }
  // A fresh request id: "req-<n>-<random hex>".
  std::string NewRequestId();
  std::atomic<int64_t>& total_requests() { return total_requests_; }

  // Claims `bytes` of the tokenizing budget for one prompt text; RESOURCE_EXHAUSTED when the
  // router is already tokenizing that much. The claim ends with the returned object.
  class TokenizingClaim {
   public:
    TokenizingClaim() = default;
    TokenizingClaim(TokenizingClaim&& o) noexcept : ctx_(o.ctx_), bytes_(o.bytes_) { o.ctx_ = nullptr; }
    TokenizingClaim& operator=(TokenizingClaim&&) = delete;
    ~TokenizingClaim();

   private:
    friend class RouterContext;
    TokenizingClaim(RouterContext* ctx, int64_t bytes) : ctx_(ctx), bytes_(bytes) {}
    RouterContext* ctx_ = nullptr;
    int64_t bytes_ = 0;
  };
  absl::StatusOr<TokenizingClaim> ClaimTokenizing(size_t bytes);

  // Generate calls alive (including ones whose worker calls are still winding down). A call
  // touches this context until it is deleted, so owners wait for zero before destroying it.
  void CallStarted();
  void CallEnded();
  // True when every call ended within `timeout`.
  bool WaitForCallsToEnd(absl::Duration timeout);

 private:
  const RouterOptions options_;
  const RouterModel model_;
  std::unique_ptr<TextCodec> codec_;
  WorkerRegistry registry_;
  WorkerChannels channels_;
  RequestTable requests_;
  AdmissionQueue admission_;
  const std::unique_ptr<PrefixAffinity> prefix_affinity_;  // null: off
  common::MetricsRegistry metrics_registry_;
  RouterMetrics metrics_;
  std::string listen_address_;
  const absl::Time start_time_;
  std::atomic<int64_t> next_request_{1};
  std::atomic<int64_t> total_requests_{0};
  std::atomic<int64_t> tokenizing_bytes_{0};
  const uint64_t id_salt_;
  absl::Mutex calls_mu_;
  int live_calls_ ABSL_GUARDED_BY(calls_mu_) = 0;
};

}  // namespace mlaserve::router
