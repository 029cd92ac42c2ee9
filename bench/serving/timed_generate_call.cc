#include "bench/serving/timed_generate_call.h"

#include <utility>

#include "absl/time/clock.h"

namespace mlaserve::bench {
namespace {

double Seconds(BenchClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

TimedGenerateCall::TimedGenerateCall(v1::Generation::StubInterface* stub, const RequestSpec& spec,
                                     std::string request_id, const CallSettings& settings,
                                     BenchClock::time_point run_start, DoneCallback on_done)
    : stub_(stub),
      run_start_(run_start), on_done_(std::move(on_done)), spec_(&spec),
      request_id_(std::move(request_id)) {
  request_.set_request_id(request_id_);
  if (spec.use_text) {
    request_.set_text(spec.prompt_text);
  } else {
    request_.mutable_token_ids()->mutable_ids()->Assign(spec.prompt_token_ids.begin(),
                                                        spec.prompt_token_ids.end());
  }
  v1::SamplingParams* sampling = request_.mutable_sampling();
  sampling->set_max_new_tokens(spec.output_len);
  sampling->set_ignore_eos(settings.ignore_eos);
  if (settings.temperature) sampling->set_temperature(*settings.temperature);
  if (settings.top_p) sampling->set_top_p(*settings.top_p);
  if (spec.sends_knobs) {
    if (settings.presence_penalty) sampling->set_presence_penalty(*settings.presence_penalty);
    if (settings.frequency_penalty) sampling->set_frequency_penalty(*settings.frequency_penalty);
    if (settings.logprobs) sampling->set_logprobs(*settings.logprobs);
  }
  request_.mutable_output()->set_include_token_ids(true);
  request_.mutable_output()->set_include_text(settings.include_text);
  timeout_ = settings.timeout;
}

void TimedGenerateCall::Start() {
  context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  call_start_ = BenchClock::now();
  tally_.emplace(*spec_, request_id_, Seconds(call_start_ - run_start_));
  spec_ = nullptr;
  stub_->async()->Generate(&context_, &request_, this);
  StartRead(&response_);
  StartCall();
}

void TimedGenerateCall::CancelAtBound() {
  cancelled_at_bound_.store(true, std::memory_order_release);
  context_.TryCancel();
}

double TimedGenerateCall::SecondsSinceStart() const {
  return Seconds(BenchClock::now() - call_start_);
}

void TimedGenerateCall::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows with the status
  tally_->OnMessage(response_, SecondsSinceStart());
  StartRead(&response_);
}

void TimedGenerateCall::OnDone(const grpc::Status& status) {
  const double e2e = SecondsSinceStart();
  RequestRecord record =
      tally_->Finish(static_cast<int>(status.error_code()), status.error_message(), e2e,
                     cancelled_at_bound_.load(std::memory_order_acquire));
  on_done_(std::move(record));
}

}  // namespace mlaserve::bench
