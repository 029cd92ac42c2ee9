#include "bench/serving/stream_tally.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace mlaserve::bench {

std::string StatusCodeName(int code) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) return kNames[code];
  return absl::StrCat("CODE_", code);
}

StreamTally::StreamTally(const RequestSpec& spec, std::string request_id,
                         double start_offset_s)
    : expected_prompt_tokens_(spec.use_text ? 0 : spec.input_len) {
  record_.index = spec.index;
  record_.request_id = std::move(request_id);
  record_.input_len = spec.input_len;
  record_.requested_output_len = spec.output_len;
  record_.conversation = spec.conversation;
  record_.turn = spec.turn;
  keep_output_ids_ = spec.keep_output_ids;
  if (keep_output_ids_) record_.output_token_ids.reserve(spec.output_len);
  record_.start_offset_s = start_offset_s;
  record_.itl_s.reserve(spec.output_len > 1 ? spec.output_len - 1 : 0);
}

void StreamTally::OnMessage(const v1::GenerateResponse& message, double t_s) {
  if (message.has_chunk()) {
    const int k = message.chunk().token_ids_size();
    if (k == 0) return;  // text held back or released without new tokens
    if (record_.output_len == 0) {
      record_.ttft_s = t_s;
      record_.itl_s.insert(record_.itl_s.end(), k - 1, 0.0);
    } else {
      const double per_token = (t_s - last_token_s_) / k;
      record_.itl_s.insert(record_.itl_s.end(), k, per_token);
    }
    record_.output_len += k;
    last_token_s_ = t_s;
    if (keep_output_ids_) {
      record_.output_token_ids.insert(record_.output_token_ids.end(),
                                      message.chunk().token_ids().begin(),
                                      message.chunk().token_ids().end());
    }
  } else if (message.has_complete()) {
    complete_ = message.complete();
  } else if (message.has_error()) {
    error_ = message.error();
  }
}

RequestRecord StreamTally::Finish(int status_code, const std::string& status_message,
                                  double e2e_s, bool cancelled_at_bound) {
  RequestRecord record = std::move(record_);
  record.e2e_s = e2e_s;
  record.status_code = status_code;
  if (complete_) {
    record.input_len = complete_->prompt_tokens();
    record.cached_prompt_tokens = complete_->cached_prompt_tokens();
  }
  const auto fail = [&record](std::string error_class, std::string error) {
    record.outcome = Outcome::kFailed;
    record.error_class = std::move(error_class);
    record.error = std::move(error);
  };

  if (cancelled_at_bound && !(status_code == 0 && complete_)) {
    record.outcome = Outcome::kCancelledAtBound;
    record.error_class = "CANCELLED_AT_BOUND";
    record.error = "still running when the run's time bound (--max-duration-s) ran out";
  } else if (status_code != 0) {
    fail(StatusCodeName(status_code), status_message);
  } else if (error_) {
    fail(StatusCodeName(error_->code()),
         absl::StrCat("stream carried an error message (status OK): ", error_->message()));
  } else if (!complete_) {
    fail("MISSING_COMPLETE", "stream ended with status OK but without a complete message");
  } else if (complete_->completion_tokens() != record.output_len) {
    fail("TOKEN_COUNT_MISMATCH",
         absl::StrCat("streamed ", record.output_len, " token ids but complete says "
                      "completion_tokens=", complete_->completion_tokens()));
  } else if (expected_prompt_tokens_ > 0 &&
             complete_->prompt_tokens() != expected_prompt_tokens_) {
    fail("TOKEN_COUNT_MISMATCH",
         absl::StrCat("sent ", expected_prompt_tokens_, " prompt token ids but complete says "
                      "prompt_tokens=", complete_->prompt_tokens()));
  } else if (complete_->cached_prompt_tokens() < 0 ||
             complete_->cached_prompt_tokens() > complete_->prompt_tokens()) {
    fail("TOKEN_COUNT_MISMATCH",
         absl::StrCat("complete says cached_prompt_tokens=", complete_->cached_prompt_tokens(),
                      " of prompt_tokens=", complete_->prompt_tokens()));
  } else if (complete_->finish_reason() == v1::FINISH_REASON_ABORT) {
    fail("ABORTED", "the server finished the request with reason ABORT");
  }
  return record;
}

}  // namespace mlaserve::bench
