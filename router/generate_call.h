// GenerateCall: one Generate, from the request to the last response, for every front end
// (gRPC GenerationService and the OpenAI HTTP API reach it through router/generate_client.h).
//
//   parse + validate -> pick decode worker D (and prefill worker P unless the prompt is short
//   enough for D to prefill locally) -> D.Reserve -> D.Stream (tokens) + P.Prefill (KV to D)
//   -> detokenize, apply stop strings, stream chunks -> `complete`.
//
// Everything is asynchronous (gRPC callback API): the call never blocks a thread. State is
// guarded by mu_; client operations (Send, End), worker calls and TryCancel are started
// outside mu_ so reactions that run inline cannot deadlock.
//
// Ending: exactly one of Complete (finish reason from D, a stop string, or Abort) and Fail
// (an error status) takes effect; it cancels the worker calls still open, sends Abort to the
// workers that hold state when the request did not run to its end, releases the router's
// load bookkeeping, and lets the outbox drain (pending chunk, then `complete` or `error`,
// then Finish).
//
// Lifetime: reference counted. The client holds one reference until OnDone; each worker
// call in flight holds one; RequestTable::Abort holds one while it runs. The last Unref
// deletes the call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mlaserve/v1/api.pb.h"
#include "mlaserve/v1/worker.grpc.pb.h"
#include "router/admission_queue.h"
#include "router/generate_client.h"
#include "router/output_assembler.h"
#include "router/request.h"
#include "router/request_table.h"
#include "router/router_context.h"

namespace mlaserve::router {

class GenerateCall final : public AbortableCall, public AdmissionQueue::Waiter {
 public:
  // Starts the call; it owns itself from here on and answers through `client` (which may
  // see Send/End before this returns). `request` is what the front end parsed, or why it
  // could not (the call then fails with that status, counted like any failed request).
  // `client_deadline`: the client's own deadline (InfiniteFuture when it has none).
  GenerateCall(RouterContext* router, GenerateClient* client, absl::Time client_deadline,
               const absl::StatusOr<v1::GenerateRequest>& request);
  ~GenerateCall() override;

  // From the client (generate_client.h).
  void OnWriteDone(bool ok);
  void OnCancel();
  void OnDone();

  void Abort() override;
  void Ref() override { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() override;

  // AdmissionQueue::Waiter: the call waits there when no decode worker has room now.
  Outcome RetryAdmission(absl::Time now) override;
  bool ExpireIfDue(absl::Time now) override;
  absl::Time queue_deadline() const override { return queue_deadline_; }

 private:
  class DecodeStreamReader;
  enum class Phase { kReserving, kRunning, kDone };

  absl::Status Prepare(const absl::StatusOr<v1::GenerateRequest>& request);
  // Sets no_room_now_ when the failure is a lack of room now (worth waiting for), not a
  // request no worker could ever hold.
  absl::Status PickDecodeCandidates();
  // Waits in the admission queue if the request may (queue_timeout), else fails it.
  void WaitForRoomOrFail(const absl::Status& why);
  void FailNow(const absl::Status& status);
  // `why`, naming how long the call waited for room.
  absl::Status WithWaitTime(const absl::Status& why) const;
  void StartReserve();
  void OnReserveDone(size_t attempt, const grpc::Status& status);
  void StartStreamAndPrefill(const v1::ReserveResponse& reserved);
  void OnDecodeMessage(const v1::DecodeStreamResponse& message);
  void OnDecodeStreamDone(const grpc::Status& status);
  void OnPrefillDone(const grpc::Status& status);

  // Ending. Return false when the call had already ended.
  bool CompleteLocked(v1::FinishReason reason, std::optional<int32_t> matched_token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Work that must run outside mu_ after the call ended.
  void AfterEnd(bool abort_workers);
  void SendWorkerAborts();
  // Aborts this request on one decode worker (one that failed to answer Reserve in time).
  void SendDecodeAbort(std::shared_ptr<v1::DecodeWorker::Stub> stub);
  void ReleasePrefillLoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::ClientContext* StreamContextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Pump();  // starts the next write or Finish when none is in flight
  absl::Time CallDeadline(absl::Duration step_timeout) const;
  absl::Status WorkerError(const std::string& what, const std::string& worker_id,
                           const std::string& address, const grpc::Status& status) const;

  RouterContext* const router_;
  GenerateClient* const client_;
  std::atomic<int> refs_{1};
  const absl::Time start_time_;
  absl::Time request_deadline_;

  // Set once in Prepare (before any concurrency), read-only afterwards.
  std::string request_id_;
  std::vector<int32_t> prompt_ids_;
  SamplingConfig sampling_;
  bool include_token_ids_ = true;
  bool include_text_ = true;
  bool registered_ = false;  // in the RequestTable
  // Admission: written before the first Reserve, by the constructor or by the admission
  // queue's Kick (one at a time: the call is in the queue at most once).
  bool no_room_now_ = false;
  std::atomic<bool> waiting_{false};  // in the admission queue (counted in requests_waiting)
  absl::Time queue_deadline_;
  absl::Status last_no_room_;

  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kReserving;
  std::optional<OutputAssembler> output_ ABSL_GUARDED_BY(mu_);

  // Routing.
  std::vector<std::string> decode_candidates_ ABSL_GUARDED_BY(mu_);
  size_t next_candidate_ ABSL_GUARDED_BY(mu_) = 0;
  std::string decode_id_ ABSL_GUARDED_BY(mu_);
  std::string decode_address_ ABSL_GUARDED_BY(mu_);
  int32_t decode_charged_pages_ ABSL_GUARDED_BY(mu_) = 0;  // in the registry's bookkeeping
  bool decode_charged_ ABSL_GUARDED_BY(mu_) = false;
  bool decode_contacted_ ABSL_GUARDED_BY(mu_) = false;  // D may hold state for us
  bool local_prefill_ ABSL_GUARDED_BY(mu_) = false;
  std::string prefill_id_ ABSL_GUARDED_BY(mu_);
  std::string prefill_address_ ABSL_GUARDED_BY(mu_);
  std::string prefill_kv_compat_hash_ ABSL_GUARDED_BY(mu_);
  bool prefill_charged_ ABSL_GUARDED_BY(mu_) = false;
  bool prefill_contacted_ ABSL_GUARDED_BY(mu_) = false;

  // Worker calls. Contexts stay alive until the call is deleted (TryCancel may run late).
  struct ReserveAttempt {
    grpc::ClientContext context;
    v1::ReserveRequest request;
    v1::ReserveResponse response;
  };
  std::vector<std::unique_ptr<ReserveAttempt>> reserve_attempts_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DecodeStreamReader> stream_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientContext> prefill_context_ ABSL_GUARDED_BY(mu_);
  v1::PrefillRequest prefill_request_ ABSL_GUARDED_BY(mu_);
  v1::PrefillResponse prefill_response_ ABSL_GUARDED_BY(mu_);

  // Timing.
  std::optional<absl::Time> first_token_time_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_time_ ABSL_GUARDED_BY(mu_);

  // Outbox: at most one write in flight; chunks coalesce while one is.
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::GenerateResponse> terminal_message_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::router
