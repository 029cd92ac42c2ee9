#include "router/openai/generate_exchange.h"

namespace mlaserve::router::openai {

GenerateExchange::GenerateExchange(RouterContext* router, const v1::GenerateRequest& request) {
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

void GenerateExchange::Send(const v1::GenerateResponse& message) {
  absl::MutexLock lock(&mu_);
  messages_.push_back(message);
  sent_any_ = true;
}

void GenerateExchange::End(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  end_ = status;
}

bool GenerateExchange::ended_early() const {
  absl::MutexLock lock(&mu_);
  return end_.has_value() && !sent_any_;
}

std::optional<GenerateExchange::Event> GenerateExchange::Next(absl::Duration timeout) {
  Event event;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !messages_.empty() || end_.has_value();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return std::nullopt;
    if (!messages_.empty()) {
      event.message = std::move(messages_.front());
      messages_.pop_front();
    } else {
      event.end = *end_;
    }
  }
  // Outside the lock: the call may Send or End from inside these.
  if (event.message.has_value()) {
    call_->OnWriteDone(true);
  } else {
    end_taken_ = true;
    call_->OnDone();  // the call never touches this exchange again
  }
  return event;
}

void GenerateExchange::Cancel() {
  if (cancelled_ || end_taken_) return;
  cancelled_ = true;
  call_->OnCancel();
}

}  // namespace mlaserve::router::openai
