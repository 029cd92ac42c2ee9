// GenerateExchange: one Generate call (router/generate_call.h) driven from a thread that may
// block, such as an HTTP handler. It is the call's GenerateClient: the call's messages queue
// here until the thread takes them with Next(); the thread reports a client that went away
// with Cancel(). Taking a message is what completes the call's write, so while the thread is
// busy sending one to a slow client, the call coalesces new tokens into the next chunk, as
// it does for a slow gRPC client.
//
// Thread-safety: Send/End come from the call (gRPC threads, or inline in Start); Next,
// Cancel and the destructor from the one owning thread.
#pragma once

#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/generate_call.h"
#include "router/generate_client.h"
#include "router/router_context.h"

namespace mlaserve::router::openai {

// Wakes one thread that waits on several exchanges (the choices of an n > 1 request): every
// message or end of any of them bumps the version.
class ExchangeWaker {
 public:
  uint64_t version() const;
  void Bump();
  // Waits until the version is past `seen` or `timeout` passed.
  void WaitPast(uint64_t seen, absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

class GenerateExchange final : public GenerateClient {
 public:
  // Starts the call. Requests the router refuses at once (validation, no worker) have
  // ended when this returns: EarlyEnd() tells, before anything was sent to the client.
  // `waker`, when given, is bumped by every message and the end.
  GenerateExchange(RouterContext* router, const v1::GenerateRequest& request,
                   std::shared_ptr<ExchangeWaker> waker = nullptr);
  // Cancels the call if it has not ended, and waits for its end (which is prompt: no worker
  // is waited for) so the call never outlives its client.
  ~GenerateExchange() override;

  // The next message, or the call's final status once every message was taken; nullopt
  // when nothing came within `timeout`. A `complete` whose reason is ABORT is not passed on:
  // the final status is then CANCELLED, naming the request.
  struct Event {
    std::optional<v1::GenerateResponse> message;
    absl::Status end;  // meaningful when !message
  };
  std::optional<Event> Next(absl::Duration timeout);
  // For a handler that answers with one body: takes every message (to `on_message`) until the
  // call's end, which it returns. Every `liveness`, whether or not messages came meanwhile, it
  // cancels the call if `client_gone()` says so (the client disconnected, or the router is
  // stopping).
  absl::Status Drain(absl::Duration liveness, absl::FunctionRef<bool()> client_gone,
                     absl::FunctionRef<void(const v1::GenerateResponse&)> on_message);

  // The call's end where it ended before its first message (refused at once: validation, no
  // worker; an error the HTTP status can carry), taken as Next would take it; else nullopt.
  std::optional<absl::Status> EarlyEnd();
  void Cancel();

  // GenerateClient.
  void Send(const v1::GenerateResponse& message) override;
  void End(const absl::Status& status) override;

 private:
  const std::shared_ptr<ExchangeWaker> waker_;
  GenerateCall* call_ = nullptr;
  mutable absl::Mutex mu_;
  std::deque<v1::GenerateResponse> messages_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  bool end_taken_ = false;  // owner thread only
  // A `complete` with FINISH_REASON_ABORT was taken: the end the owner sees (owner thread only).
  std::optional<absl::Status> aborted_;
  bool cancelled_ = false;  // owner thread only
};

}  // namespace mlaserve::router::openai
