// GenerateCall: one Generate, from the request to the last response, for every front end
// (gRPC GenerationService and the OpenAI HTTP API reach it through router/generate_client.h).
//
// A state machine over three phases:
//
//   kReserving  parse + validate (Prepare); then DecodePlacement picks a decode worker D (and a
//               prefill worker P unless D prefills the prompt itself) and the call sends
//               D.Reserve, trying the next worker when one is full or unreachable, or waits in
//               the AdmissionQueue while none has room.
//   kRunning    D.Stream (tokens) and P.Prefill (KV to D) are open; tokens go to the
//               ClientOutbox (detokenized, stop strings applied, coalesced into chunks).
//   kDone       ended by exactly one of Complete (finish reason from D, a stop string, or
//               Abort) and Fail (an error status): open worker calls are cancelled, workers
//               that hold state get an Abort when the request did not run to its end, the
//               router's load bookkeeping is released, and the outbox drains (pending chunk,
//               then `complete` or `error`, then the status).
//
// The parts: DecodePlacement (router/decode_placement.h) chooses workers and judges a failed
// Reserve; ClientOutbox (router/client_outbox.h) owns what goes to the client. The call makes
// the RPCs and moves between phases.
//
// Everything is asynchronous (gRPC callback API): the call never blocks a thread. State is
// guarded by mu_; client operations (the outbox's Pump), worker calls and TryCancel are started
// outside mu_ so reactions that run inline cannot deadlock.
//
// Lifetime (common/self_owned.h): the call holds itself until its client's OnDone (the client
// keeps the plain pointer Start returned until then); each worker call in flight holds a
// reference (its callback, or the stream reader until its OnDone); the admission queue holds
// one while the call waits there; RequestTable holds a weak one, and its Abort a strong one
// while it runs. Whoever lets go last destroys the call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/self_owned.h"
#include "mlaserve/v1/api.pb.h"
#include "mlaserve/v1/worker.grpc.pb.h"
#include "router/admission_queue.h"
#include "router/client_outbox.h"
#include "router/decode_placement.h"
#include "router/generate_client.h"
#include "router/request.h"
#include "router/request_table.h"
#include "router/router_context.h"

namespace mlaserve::router {

class GenerateCall final : public AbortableCall,
                           public AdmissionQueue::Waiter,
                           public common::SelfOwned<GenerateCall> {
  struct Key {};  // only Start makes calls

 public:
  // Starts a call; it owns itself from here on and answers through `client` (which may see
  // Send/End before this returns). The pointer stays valid until the client's OnDone.
  // `request` is what the front end parsed, or why it could not (the call then fails with that
  // status, counted like any failed request). `client_deadline`: the client's own deadline
  // (InfiniteFuture when it has none).
  static GenerateCall* Start(RouterContext* router, GenerateClient* client,
                             absl::Time client_deadline,
                             const absl::StatusOr<v1::GenerateRequest>& request);
  GenerateCall(Key, RouterContext* router, GenerateClient* client, absl::Time client_deadline);
  ~GenerateCall() override;

  // From the client (generate_client.h). OnDone is the client's last call.
  void OnWriteDone(bool ok);
  void OnCancel();
  void OnDone();

  void Abort() override;

  // AdmissionQueue::Waiter: the call waits there when no decode worker has room now.
  Outcome RetryAdmission(absl::Time now) override;
  bool ExpireIfDue(absl::Time now) override;
  absl::Time queue_deadline() const override { return queue_deadline_; }

 private:
  class DecodeStreamReader;
  enum class Phase { kReserving, kRunning, kDone };

  void Begin(const absl::StatusOr<v1::GenerateRequest>& request);
  absl::Status Prepare(const absl::StatusOr<v1::GenerateRequest>& request);
  // Ranks the decode workers; `no_room_now` tells whether a failure is worth waiting for.
  absl::Status Place(bool* no_room_now);
  // Waits in the admission queue if the request may (queue_timeout), else fails it.
  void WaitForRoomOrFail(const absl::Status& why, bool no_room_now);
  void FailNow(const absl::Status& status);
  // `why`, naming how long the call waited for room.
  absl::Status WithWaitTime(const absl::Status& why) const;
  void StartReserve();
  void OnReserveDone(size_t attempt, const grpc::Status& status);
  void StartStreamAndPrefill(const v1::ReserveResponse& reserved);
  void OnDecodeMessage(const v1::DecodeStreamResponse& message);
  void OnDecodeStreamDone(const grpc::Status& status);
  void OnPrefillDone(const grpc::Status& status);
  // The wait for D's stream after a failed KV transfer ran out (OnPrefillDone).
  void OnStreamGraceEnded();

  // Ending (generate_call_end.cc). Return false when the call had already ended.
  bool CompleteLocked(v1::FinishReason reason, std::optional<int32_t> matched_token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Work that must run outside mu_ after the call ended.
  void AfterEnd(bool abort_workers);
  void SendWorkerAborts();
  // Aborts this request on one decode worker (one that failed to answer Reserve in time).
  void SendDecodeAbort(const std::string& address);

  absl::Time CallDeadline(absl::Duration step_timeout) const;
  grpc::ClientContext* StreamContextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RouterContext* const router_;
  const absl::Time start_time_;
  absl::Time request_deadline_;
  ClientOutbox outbox_;  // thread-safe on its own

  // Set once in Prepare (before any concurrency), read-only afterwards.
  std::string request_id_;
  std::vector<int32_t> prompt_ids_;
  std::string cache_salt_;  // the prefix caches' partition (api.proto cache_salt)
  SamplingConfig sampling_;
  bool registered_ = false;  // in the RequestTable
  // Admission: in the admission queue (counted in requests_waiting). The queue's Kick retries
  // one call at a time, so last_no_room_ has one writer at a time.
  std::atomic<bool> waiting_{false};
  absl::Time queue_deadline_;
  absl::Status last_no_room_;

  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kReserving;
  std::optional<DecodePlacement> placement_ ABSL_GUARDED_BY(mu_);  // from Prepare on

  // Worker calls. Contexts stay alive until the call is deleted (TryCancel may run late).
  struct ReserveAttempt {
    grpc::ClientContext context;
    v1::ReserveRequest request;
    v1::ReserveResponse response;
  };
  std::vector<std::unique_ptr<ReserveAttempt>> reserve_attempts_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DecodeStreamReader> stream_ ABSL_GUARDED_BY(mu_);
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;  // the stream's OnDone ran
  // The prefill worker's KV transfer to D failed while D's stream was open: the client's
  // error, held until the stream ends or stream_grace_ (abort_timeout) fires.
  std::optional<absl::Status> kv_transfer_failure_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Alarm> stream_grace_ ABSL_GUARDED_BY(mu_);
  struct PrefillCall {
    grpc::ClientContext context;
    v1::PrefillRequest request;
    v1::PrefillResponse response;
  };
  std::unique_ptr<PrefillCall> prefill_ ABSL_GUARDED_BY(mu_);
  bool prefill_answered_ ABSL_GUARDED_BY(mu_) = false;  // OnPrefillDone ran
  // A local prefill's prompt tokens from the decode worker's prefix cache (its first tokens).
  int32_t local_cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  // Prompt logprobs: the prompt's first token's entry (token id alone) went to the outbox,
  // ahead of the worker's entries for the tokens after it.
  bool prompt_head_sent_ ABSL_GUARDED_BY(mu_) = false;
  // The tokens streamed so far (the decode worker's prefix cache keeps them with the prompt).
  std::vector<int32_t> generated_ids_ ABSL_GUARDED_BY(mu_);
  // D's stream can end before the prefill worker's answer (which tells the prompt tokens it
  // took from its prefix cache) arrives: the completion waits here for that answer (or its
  // failure; the prefill call has a deadline), so usage counts the cached tokens.
  struct HeldCompletion {
    v1::FinishReason reason;
    std::optional<int32_t> matched_token;
    v1::GenerateComplete complete;
  };
  std::optional<HeldCompletion> held_completion_ ABSL_GUARDED_BY(mu_);

  // Timing.
  std::optional<absl::Time> first_token_time_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_time_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::router
