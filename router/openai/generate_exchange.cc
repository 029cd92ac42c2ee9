#include "router/openai/generate_exchange.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::router::openai {

uint64_t ExchangeWaker::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

void ExchangeWaker::Bump() {
  absl::MutexLock lock(&mu_);
  ++version_;
}

void ExchangeWaker::WaitPast(uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto moved = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ != seen; };
  mu_.AwaitWithTimeout(absl::Condition(&moved), timeout);
}

GenerateExchange::GenerateExchange(RouterContext* router, const v1::GenerateRequest& request,
                                   std::shared_ptr<ExchangeWaker> waker)
    : waker_(std::move(waker)) {
  call_ = GenerateCall::Start(router, this, absl::InfiniteFuture(), request);
}

GenerateExchange::~GenerateExchange() {
  if (end_taken_) return;
  Cancel();
  while (true) {
    std::optional<Event> e = Next(absl::InfiniteDuration());
    if (e.has_value() && !e->message.has_value()) return;
  }
}

// The waker is bumped inside the lock: once the lock is released the owner may take the end
// and destroy this exchange. (Order mu_ -> the waker's; the owner never holds the waker's
// while taking mu_.)
void GenerateExchange::Send(const v1::GenerateResponse& message) {
  absl::MutexLock lock(&mu_);
  messages_.push_back(message);
  sent_any_ = true;
  if (waker_) waker_->Bump();
}

void GenerateExchange::End(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  end_ = status;
  if (waker_) waker_->Bump();
}

std::optional<absl::Status> GenerateExchange::EarlyEnd() {
  {
    absl::MutexLock lock(&mu_);
    if (!end_.has_value() || sent_any_) return std::nullopt;
  }
  return Next(absl::InfiniteDuration())->end;  // only the end is queued: it returns at once
}

std::optional<GenerateExchange::Event> GenerateExchange::Next(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    Event event;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !messages_.empty() || end_.has_value();
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) return std::nullopt;
      if (!messages_.empty()) {
        event.message = std::move(messages_.front());
        messages_.pop_front();
      } else {
        event.end = *end_;
      }
    }
    // Outside the lock: the call may Send or End from inside these.
    if (!event.message.has_value()) {
      end_taken_ = true;
      call_->OnDone();  // the call never touches this exchange again
      if (aborted_.has_value() && event.end.ok()) event.end = *aborted_;
      return event;
    }
    call_->OnWriteDone(true);
    const v1::GenerateResponse& m = *event.message;
    if (!m.has_complete() || m.complete().finish_reason() != v1::FINISH_REASON_ABORT) {
      return event;
    }
    // OpenAI has no finish_reason for an abort (vLLM passes its own "abort" through, which
    // the openai package's types do not list): the choice ends with an error instead.
    aborted_ = absl::CancelledError(
        absl::StrCat("request ", m.request_id(), " was aborted by the server (Abort API)"));
  }
}

absl::Status GenerateExchange::Drain(absl::Duration liveness, absl::FunctionRef<bool()> client_gone,
                                     absl::FunctionRef<void(const v1::GenerateResponse&)> on_message) {
  // The client is asked every `liveness`, also while messages keep coming: a call streaming
  // tokens without pause would otherwise run to its end for a client that left at its start.
  absl::Time next_probe = absl::Now() + liveness;
  while (true) {
    std::optional<Event> e = Next(next_probe - absl::Now());
    if (absl::Now() >= next_probe) {
      if (client_gone()) Cancel();
      next_probe = absl::Now() + liveness;
    }
    if (!e.has_value()) continue;
    if (!e->message.has_value()) return e->end;
    on_message(*e->message);
  }
}

void GenerateExchange::Cancel() {
  if (cancelled_ || end_taken_) return;
  cancelled_ = true;
  call_->OnCancel();
}

}  // namespace mlaserve::router::openai
