// PrefillRunner: the prefill worker's engine loop.
//
//   step() = schedule() -> run() -> postprocess()
//   schedule():    PrefillScheduler picks this step's prompt chunks (token budget, chunk size).
//   run():         one Engine::ForwardStreamingRanks over the chunks; its layer callback
//                  ships, for every chunk, the pages that layer just wrote (and a prompt's
//                  pages taken from the prefix cache with its first chunk), but none of the
//                  leading pages the decode worker holds (KvSessionRef::cached_pages), through the
//                  request's KvSender (host payload senders through the KvShipper: one
//                  asynchronous read of the layer's pages, sent by the shipping thread while
//                  later layers compute).
//   postprocess(): samples each completed prompt's first token, completes its transfer (the
//                  decode worker acknowledges asynchronously; the request is answered then),
//                  and fails requests whose transfer broke, without disturbing the batch.
//
// Data-parallel attention (docs/parallel.md): each rank prefills the prompts admitted to it
// (PrefillScheduler picks the rank) in its own pool, and a prompt's pages are shipped from
// that pool by that rank's shipper, or, over nccl, by the sender bound to that rank
// (KvSender::SetSourceRank, at the prompt's first step). The engine hands each rank's layers
// over on that rank's thread as the rank writes them (ForwardStreamingRanks), so each rank's
// pages leave while its later layers compute, as on one GPU.
//
// Threads: Submit / Abort / load() come from RPC threads; one loop thread runs the steps and
// alone touches the scheduler and the engine. During a step the engine's rank threads run
// ShipLayer for their own rank's chunks while the loop thread waits in the engine. Completion callbacks (`done`) run on the loop
// thread or a transport thread, exactly once per request, without the runner's lock held.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/callback_guard.h"
#include "common/metrics.h"
#include "kvtransfer/kv_shipper.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/transport.h"
#include "model/engine.h"
#include "model/sampler.h"
#include "profiles/attention_path_policy.h"
#include "prefill_worker/prefill_scheduler.h"
#include "worker/json_mode_vocabulary.h"

namespace mlaserve::prefill {

struct PrefillRunnerOptions {
  PrefillSchedulerOptions scheduler;
  absl::Duration kv_no_progress_timeout = absl::Seconds(30);
  std::string name = "prefill";  // sender name in the decode worker's logs
  // Picks each step's attention path from the GPU profile (not owned; must outlive the
  // runner). Null: the engine's own kAuto rule.
  profiles::AttentionPathPolicy* attention_policy = nullptr;
  // Direct (device-to-device, nccl) senders: ship layer l of a prompt's last chunk from
  // on_layer_done, while layer l + 1 computes (true), or every layer after the forward (false;
  // kept to measure what the streaming buys). Host-payload senders always stream per chunk.
  bool kv_layerwise = true;
  // Host-payload senders (tcp): staging slots of the KV shipping thread (layers in flight).
  int kv_ship_slots = 8;
  // JSON mode's vocabulary, the process's (not owned; outlives the runner). Null: requests in
  // JSON mode are refused (FAILED_PRECONDITION).
  const worker::JsonModeVocabulary* json_vocabulary = nullptr;
  // Keep the KV of prefilled prompts' whole pages in the free part of the pool, and reuse it
  // for prompts that start with the same tokens (docs/serving.md "Prefix cache").
  bool prefix_cache = true;
};

// What a prefill job's input may be: the model's vocabulary and context.
struct PrefillBounds {
  int vocab_size = 0;
  int max_context = 0;  // max_position_embeddings
  const worker::JsonModeVocabulary* json_vocabulary = nullptr;  // null: no JSON mode here
};

// A prefill request, valid by construction: ToPrefillJob (prefill_service.h), at the worker's
// RPC edge, is the one place that checks it against PrefillBounds (request id set, 1 <= prompt
// length <= max_context, ids in the vocabulary, sampling values, the cache salt's length, a KV
// session whose page count is the prompt's, JSON mode only where this worker has its
// vocabulary). PrefillRunner::Submit assumes all of that and checks only what depends on this
// worker's state.
struct PrefillJob {
  std::string request_id;
  std::vector<int32_t> tokens;
  // The prefix-cache partition (worker.proto PrefillRequest.cache_salt, at most
  // common::kMaxCacheSaltBytes; empty: the shared default).
  std::string cache_salt;
  model::SamplingOptions sampling;
  kvtransfer::KvSessionRef session;
  // Set iff sampling.constrained(): the first token is drawn under a fresh JsonConstraint
  // (held to sampling.json_schema when set; starting after sampling.json_after when set:
  // before it, any token but EOS).
  std::shared_ptr<const model::ConstraintVocabulary> json_vocabulary;
};

struct PrefillOutcome {
  int32_t first_token = 0;
  int prompt_tokens = 0;
  int cached_tokens = 0;  // of prompt_tokens, whose KV came from the prefix cache
  int64_t kv_bytes_sent = 0;
  // Payload bytes not sent because the decode worker held those pages (KvSessionRef::
  // cached_pages, every layer).
  int64_t kv_bytes_skipped = 0;
  bool kv_direct = false;  // sent GPU to GPU (nccl), not through host payloads (tcp)
  absl::Duration queue_time;
  absl::Duration prefill_time;
  absl::Duration transfer_wait;
};

using PrefillDoneFn = std::function<void(absl::StatusOr<PrefillOutcome>)>;

struct PrefillLoad {
  int pending_requests = 0;  // accepted, prompt not fully prefilled
  int running_requests = 0;  // prefilling now or waiting for the decode worker's ack
  // Prompt tokens still to compute: queued prompts whole, admitted ones less what they
  // computed and took from the prefix cache.
  int64_t pending_prefill_tokens = 0;
  // Data-parallel attention: prompts being prefilled on each rank (as of the last step); empty
  // with one pool.
  std::vector<int> rank_prefilling;
};

class PrefillRunner {
 public:
  PrefillRunner(model::Engine* engine, kvtransfer::KvTransport* transport,
                kvtransfer::KvLayout layout, PrefillRunnerOptions options,
                common::MetricsRegistry* metrics = nullptr);
  ~PrefillRunner();  // Stop()

  void Start();
  // Refuses new requests (UNAVAILABLE) and waits up to `timeout` for the admitted ones to be
  // answered. Call Stop() afterwards.
  void Drain(absl::Duration timeout);
  // Fails every request not yet answered with UNAVAILABLE and joins the loop.
  void Stop();

  // `job` is valid (see PrefillJob). RESOURCE_EXHAUSTED when the prompt needs more pages than
  // the pool has; ALREADY_EXISTS for a live id (checked once, as the id is taken, before the KV
  // session opens); UNAVAILABLE when shutting down. Then opens the KV session
  // (FAILED_PRECONDITION on an incompatible hash, which gives the id back) and queues the job.
  // On OK, `done` runs later exactly once; on error it never runs.
  absl::Status Submit(PrefillJob job, PrefillDoneFn done);
  // NOT_FOUND naming the id if unknown; otherwise the request ends with CANCELLED.
  absl::Status Abort(const std::string& request_id);

  PrefillLoad load() const;
  // What ToPrefillJob checks a request against.
  PrefillBounds bounds() const;

  // One step of the loop; false when there was nothing to run. For tests that drive the loop
  // themselves (without Start()).
  bool Step();
  // Waits until the KV pages and completions queued by past steps were handed to their
  // senders (for tests that drive Step(): answers then follow from the transport).
  absl::Status FlushKv(absl::Duration timeout);

 private:
  struct Request;
  void Loop();
  // Moves new requests into the scheduler and handles aborts (loop thread).
  void Intake();
  // Publishes the scheduler's pending tokens and prompts per rank for load() (loop thread).
  void NoteSchedulerLoad();
  // Ships layer `layer` of the pages of every chunk of data-parallel rank `rank` (0 with one
  // pool), from the engine's layer callback on that rank's thread.
  void ShipLayer(const std::vector<PrefillChunk>& chunks, int rank, int layer);
  void Postprocess(const std::vector<PrefillChunk>& chunks,
                   const absl::StatusOr<model::ForwardResult>& result);
  // The decode worker's answer to a completed transfer (transport thread).
  void OnTransferDone(const std::string& id, int32_t first_token, absl::Status verdict);
  absl::StatusOr<int32_t> SampleFirstToken(const Request& r, std::span<float> logits);
  // Ends a request: removes it, aborts its sender on failure, answers it.
  void Finish(const std::string& id, absl::StatusOr<PrefillOutcome> outcome);
  std::shared_ptr<Request> Find(const std::string& id) const;

  kvtransfer::KvShipper& ShipperOf(const PrefillSequence& seq) { return *shippers_[seq.rank]; }

  model::Engine* const engine_;
  kvtransfer::KvTransport* const transport_;
  const kvtransfer::KvLayout layout_;
  const PrefillRunnerOptions options_;
  PrefillScheduler scheduler_;  // loop thread only
  model::Sampler sampler_;
  // One per data-parallel rank (one with a single pool), reading that rank's pool; fed by the
  // loop thread, or during a step by that rank's thread (never both at once).
  std::vector<std::unique_ptr<kvtransfer::KvShipper>> shippers_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  std::map<std::string, std::shared_ptr<Request>> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Request>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> aborts_ ABSL_GUARDED_BY(mu_);
  // Prompt tokens not yet computed (PrefillLoad::pending_prefill_tokens): those of requests the
  // scheduler has not taken yet, and the scheduler's own count (prompts' tokens not computed
  // nor taken from the prefix cache), which the loop sets after each intake and step.
  int64_t unscheduled_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t scheduled_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> rank_prefilling_ ABSL_GUARDED_BY(mu_);  // set by the loop after each step
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::thread loop_;
  // Transfer completions arrive on transport threads, possibly after Stop(): through here.
  const std::shared_ptr<common::CallbackGuard> guard_ = common::CallbackGuard::Create();

  // Metrics (null-safe: a private registry when none is given).
  common::MetricsRegistry own_metrics_;
  common::Counter* requests_ok_;
  common::Counter* requests_failed_;
  common::Counter* kv_bytes_tcp_;
  common::Counter* kv_bytes_nccl_;
  common::Counter* kv_bytes_skipped_;
  common::Counter* kv_failures_;
  common::Counter* prompt_tokens_;
  common::Counter* cached_tokens_;
  common::Histogram* queue_seconds_;
  common::Histogram* prefill_seconds_;
  common::Histogram* transfer_wait_seconds_;
  common::Histogram* batch_tokens_;
  std::array<common::Counter*, profiles::kNumPrefillPaths> attention_paths_{};
};

}  // namespace mlaserve::prefill
