// DecodeRunner: the decode worker's request table and engine loop.
//
// A request's life:
//   Reserve     (RPC thread) checks the (valid) request against this worker (KV layout hash,
//               pool size), admits it in one locked section (not draining, id not live, a
//               page left per running request) taking the pages of the prompt and the first
//               new token, and, for remote prefill, opens a KvReceiver session that owns the
//               pages until the KV has landed. Local-prefill requests hold theirs directly.
//               Both start from the prompt's leading pages this worker's prefix cache holds
//               (a remote prefill when the router asks, ReserveSpec::reuse_cached_pages): a
//               local prefill computes only the rest, a remote one receives only the rest
//               (the session's cached_pages; its hold on them is released with the session's
//               pages on any failure).
//   OpenStream  (RPC thread) attaches the token sink.
//   the loop    admits a request once its KV is complete (or it prefills locally) and its
//               stream is open, then step() = schedule() -> run() -> postprocess() decodes one
//               token per running request per step, applying stop ids / EOS / max_new_tokens,
//               and streams the tokens (JSON mode: each row drawn under its constraint's
//               mask, DecodeSequence::json). A decoding request takes one more page when it
//               crosses into it; when none is free, the most recently reserved running request
//               is preempted: its pages go back, and it is re-admitted later by recomputing
//               all its tokens (prompt and generated) as a prefill, whose last logits give its
//               next token, so its output is the one it would have produced.
// Pages return to the pool when a request finishes, is aborted, fails, or its lease ends
// (no stream opened, or no transfer started, by the lease deadline).
//
// Data-parallel attention (Engine::data_ranks() > 1, docs/parallel.md): every rank has its own
// pool and batch (and prefix cache). Reserve puts a request on the rank with room that caches
// most of its prompt's start (unless that rank is overloaded against the least loaded one: its
// batch full, or 16 requests more and 1.5 times as many), then the most room (free pages less
// the page each of its running requests keeps to grow), then the fewest requests, and it stays
// there:
// its KV lands in that rank's pool (the KvSessionRef names the rank), it grows, is preempted by
// and recomputes on that rank, and its pages go back to that pool. Every step runs each rank's
// share of the batch; ranks without requests join the step inside the engine.
//
// Threads: RPC threads only record intents (reservation, stream, abort) under mu_; the loop
// thread alone moves requests between states, touches the scheduler and the engine, and frees
// the pages of admitted requests, so no page is freed under a running Forward. Sink calls are
// made from the loop thread without mu_ held.
#pragma once

#include <array>
#include <cstdint>
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
#include "decode_worker/decode_scheduler.h"
#include "decode_worker/decode_sequence.h"
#include "kvtransfer/receiver.h"
#include "kvtransfer/transport.h"
#include "model/engine.h"
#include "model/sampler.h"
#include "profiles/attention_path_policy.h"
#include "worker/json_mode_vocabulary.h"

namespace mlaserve::decode {

struct DecodeRunnerOptions {
  DecodeSchedulerOptions scheduler;
  absl::Duration default_lease = absl::Seconds(30);
  // Reserve refuses a longer lease: pages held unused must come back within this.
  absl::Duration max_lease = absl::Seconds(120);
  std::string kv_endpoint;  // where prefill workers push KV (this worker's address)
  std::string kv_transport = "tcp";
  // A step that carries prefill chunks asks this policy its attention path (the GPU profile's
  // table, part by part: decode rows in latent form, prompts in MHA form only where their own
  // cell says MHA; docs/profiles.md, "The split rule"). nullptr, and every decode-only step:
  // kAuto. Dense models only (decode_main passes none for DSA models).
  profiles::AttentionPathPolicy* attention_policy = nullptr;
  // JSON mode's vocabulary, the process's (not owned; outlives the runner). Null: requests in
  // JSON mode are refused (FAILED_PRECONDITION).
  const worker::JsonModeVocabulary* json_vocabulary = nullptr;
  // The pools keep the KV of ended and preempted requests' whole pages (prompt and generated
  // tokens) while free; a local prefill, and a preempted request's recompute, start from the
  // longest cached run of their tokens' leading pages (docs/serving.md "Prefix cache").
  bool prefix_cache = true;
};

// What a Reserve's input may be: the model's vocabulary and context, the longest lease, and
// whether JSON mode can be served.
struct ReserveBounds {
  int vocab_size = 0;
  int max_context = 0;  // max_position_embeddings
  absl::Duration max_lease;
  const worker::JsonModeVocabulary* json_vocabulary = nullptr;  // null: no JSON mode here
};

// A reservation request, valid by construction: ToReserveSpec (decode_service.h), at the
// worker's RPC edge, is the one place that checks it against ReserveBounds (request id set,
// prompt ids in the vocabulary, 1 <= max_new_tokens, prompt + max_new_tokens within the context,
// sampling values, stop ids in the vocabulary, 0 <= lease <= max_lease, a prefill hash unless
// local_prefill, JSON mode only where this worker has its vocabulary). DecodeRunner::Reserve
// assumes all of that and checks only what depends on this worker's state.
struct ReserveSpec {
  std::string request_id;
  std::vector<int32_t> prompt;
  model::SamplingOptions sampling;
  int max_new_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool local_prefill = false;
  // Remote prefill: keep the prompt's leading whole pages this worker's prefix cache holds
  // (under cache_salt, as a local prefill takes them) instead of receiving them; the session
  // reference says how many (KvSessionRef::cached_pages). Ignored with the cache off.
  bool reuse_cached_pages = false;
  std::string prefill_compat_hash;  // required unless local_prefill
  absl::Duration lease;             // zero: the default
  std::string cache_salt;           // the prefix-cache partition (at most 256 bytes)
  // Set iff sampling.constrained() (json_object or json_schema): every token (the prefill
  // worker's first one included) is held to a JsonConstraint over it (to the compiled
  // sampling.json_schema when set), starting after sampling.json_after when that is set.
  std::shared_ptr<const model::ConstraintVocabulary> json_vocabulary;
};

struct Reservation {
  std::string session_id;
  int rank = 0;  // the data-parallel rank the request lives on (0 with one pool)
  int reserved_pages = 0;
  kvtransfer::KvSessionRef session;
  absl::Time lease_deadline;
};

struct DecodeRankLoad {
  int running = 0;
  int pending = 0;
  int kv_pages_free = 0;
  int kv_pages_total = 0;
};

struct DecodeLoad {
  int running = 0;  // admitted into the batch
  int pending = 0;  // reserved, not yet admitted
  int kv_pages_free = 0;   // every rank's together
  int kv_pages_total = 0;
  // Data-parallel attention: each rank's share (empty with one pool). A request's pages are
  // all on one rank, so the most free pages of one rank bound what a new request can get.
  std::vector<DecodeRankLoad> ranks;
};

class DecodeRunner {
 public:
  // `receiver` must write into engine->kv_pool() (with data ranks, the session's rank pool
  // is passed to it per session).
  DecodeRunner(model::Engine* engine, kvtransfer::KvReceiver* receiver,
               DecodeRunnerOptions options, common::MetricsRegistry* metrics = nullptr);
  ~DecodeRunner();  // Stop()

  // Where prefill workers push KV (this worker's advertised address); Reserve answers
  // UNAVAILABLE until it is set (when options.kv_endpoint was empty).
  void set_kv_endpoint(std::string endpoint);
  void Start();
  // Refuses new reservations and waits up to `timeout` for requests with an open stream (or
  // running) to finish.
  void Drain(absl::Duration timeout);
  // Fails what is left (UNAVAILABLE), frees every page, joins the loop.
  void Stop();

  // `spec` is valid (see ReserveSpec). FAILED_PRECONDITION (KV hash differs, both named),
  // RESOURCE_EXHAUSTED (not enough free pages now, or ever), ALREADY_EXISTS (request id live),
  // UNAVAILABLE (starting or shutting down).
  absl::StatusOr<Reservation> Reserve(ReserveSpec spec);
  // NOT_FOUND for an unknown (or expired) session; ALREADY_EXISTS for a second stream.
  absl::Status OpenStream(const std::string& session_id, std::shared_ptr<TokenSink> sink);
  // The stream's client went away: the request is dropped (no more sink calls).
  void CancelStream(const std::string& session_id);
  // NOT_FOUND naming the id when unknown; the request ends with reason ABORT.
  absl::Status Abort(const std::string& request_id);

  DecodeLoad load() const;
  // What ToReserveSpec checks a request against.
  ReserveBounds bounds() const;
  const std::string& kv_compat_hash() const { return compat_hash_; }

  // One loop iteration; false when nothing ran. For tests driving the loop without Start().
  bool Step();

 private:
  struct Request;
  void Loop();
  // Applies recorded intents: aborts, failures, lease expiry, admission (loop thread).
  void Intake();
  // Gives every decoding sequence the page its next position needs, preempting the most
  // recently reserved running request while the pool has none (loop thread).
  void Grow();
  // JSON mode: moves each running request's constraint past the tokens it has not seen yet;
  // a token it refuses (the workers disagree) ends that request with INTERNAL (loop thread).
  void AdvanceConstraints();
  // Takes `r` out of the batch and frees its pages; Intake re-admits it (recomputing its
  // tokens) once pages are free.
  void Preempt(const std::shared_ptr<Request>& r);
  // Gives a sequence's pages back to its pool, publishing the whole pages of its computed
  // tokens to the prefix cache first (a no-op with the cache off).
  void ReleasePages(DecodeSequence& seq);
  // A sequence about to (re)compute `seq.tokens` from the start: takes the cached pages of its
  // longest run of leading pages (at most (tokens - 1) / 64: the last token is computed) and
  // allocates the rest of `pages_needed`; num_computed and cached start after the cached ones.
  absl::Status TakePages(DecodeSequence& seq, model::KvPool& pool, int pages_needed);
  // `ran`: how the step's forward went; `result` (step_.result) is read only when it is OK.
  void Postprocess(const std::vector<DecodeChunk>& chunks, const absl::Status& ran,
                   const model::ForwardResult& result);
  // `pool`: where the session's pages are.
  void OnKvDone(const std::string& session_id, model::KvPool* pool,
                absl::StatusOr<kvtransfer::KvReceivedKv> kv);
  model::KvPool& PoolOf(const DecodeSequence& seq) { return engine_->rank_pool(seq.rank); }
  // The rank a new request of `pages_needed` pages goes to, or RESOURCE_EXHAUSTED naming every
  // rank's room: of the ranks with room, the one caching most of `cached_from`'s prompt start
  // (a rank overloaded against the least loaded one ranks as caching nothing: RankOverloaded in
  // decode_runner_intents.cc), then the most room, then the fewest requests.
  // `cached_from`: a sequence that takes its prompt's cached pages (TakePages: a local prefill,
  // or a remote one that reuses them), whose held ones count as room.
  absl::StatusOr<int> PickRank(int prompt_len, int pages_needed,
                               const DecodeSequence* cached_from = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateRankGauges();
  // Sends a local prefill's scored prompt rows (sampling.prompt_logprobs) to `r`'s sink and
  // counts them in its sequence's prompt_scored.
  void EmitPromptLogprobs(const std::shared_ptr<Request>& r,
                          std::span<const model::PromptTokenLogprobs> entries);
  // Emits the sampled `token` of `r` (with its logprobs when the request asked for them) and
  // finishes it if a stop rule applies.
  void Emit(const std::shared_ptr<Request>& r, int32_t token,
            const model::TokenLogprobs* logprobs = nullptr);
  // Removes a request from the table, returns its pages (loop thread), tells its sink.
  void End(const std::shared_ptr<Request>& r, const absl::StatusOr<DecodeFinish>& outcome);
  std::shared_ptr<Request> FindBySession(const std::string& session_id) const;

  model::Engine* const engine_;
  kvtransfer::KvReceiver* const receiver_;
  const DecodeRunnerOptions options_;
  const std::string compat_hash_;
  DecodeScheduler scheduler_;  // loop thread only
  // The decode step's inputs and result, kept across steps (loop thread only) so that a step
  // allocates nothing on the host once earlier steps sized them: the engine writes each step
  // into the same ForwardResult (Engine::ForwardInto; the CUDA engine keeps its logits rows
  // and ids there). Every step overwrites all three whole; `batch` and `samples` point into
  // the running sequences and are cleared when the step ends, so nothing here outlives the
  // sequences it names. `result` holds the last step's rows until the next step (unread after
  // a failed step).
  struct StepBuffers {
    std::vector<model::SampleRow> samples;
    std::vector<model::SequenceChunk> batch;
    std::vector<profiles::SequenceShape> shapes;  // for the attention policy
    model::ForwardResult result;
  };
  StepBuffers step_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  std::map<std::string, std::shared_ptr<Request>> by_session_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> session_of_ ABSL_GUARDED_BY(mu_);  // request id -> session
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 0;
  std::string kv_endpoint_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread loop_;
  // KV transfer outcomes arrive on receiver threads, possibly after Stop(): through here.
  const std::shared_ptr<common::CallbackGuard> guard_ = common::CallbackGuard::Create();

  common::MetricsRegistry own_metrics_;
  common::Counter* finished_[4];  // by FinishReason, and [3] = error
  common::Counter* tokens_out_;
  common::Counter* kv_bytes_in_;
  common::Counter* kv_failures_;
  common::Counter* lease_expired_;
  common::Counter* preemptions_;
  // Prompt pages remotely prefilled requests kept from the prefix cache instead of receiving.
  common::Counter* pages_reused_;
  common::Histogram* ttft_seconds_;
  common::Histogram* itl_seconds_;
  common::Histogram* e2e_seconds_;
  common::Histogram* queue_seconds_;
  common::Histogram* step_seconds_[2];  // decode-only steps, steps with prefill chunks
  common::Counter* prefill_tokens_;
  // Steps with prefill chunks by the path the policy chose (with options.attention_policy).
  std::array<common::Counter*, profiles::kNumPrefillPaths> attention_paths_{};
  std::vector<common::Gauge*> rank_running_;  // data-parallel attention: per rank
};

}  // namespace mlaserve::decode
