#include "router/client_outbox.h"

#include <utility>

namespace mlaserve::router {

void ClientOutbox::Open(Format format, OutputAssembler output) {
  absl::MutexLock lock(&mu_);
  format_ = std::move(format);
  output_.emplace(std::move(output));
}

ClientOutbox::Added ClientOutbox::AddTokens(std::span<const int32_t> ids,
                                            std::span<const v1::TokenLogprobs* const> logprobs) {
  absl::MutexLock lock(&mu_);
  Added added;
  for (size_t i = 0; i < ids.size(); ++i) {
    // A token is not taken when the one before it completes a stop string only now (its text
    // was held as a possible stop token's).
    const int32_t before = output_->completion_tokens();
    const bool stopped = output_->AddToken(ids[i], i < logprobs.size() ? logprobs[i] : nullptr);
    added.tokens += output_->completion_tokens() - before;
    if (stopped) {
      added.stopped = true;
      break;
    }
  }
  return added;
}

void ClientOutbox::AddPromptLogprobs(
    const google::protobuf::RepeatedPtrField<v1::PromptTokenLogprobs>& entries) {
  absl::MutexLock lock(&mu_);
  output_->AddPromptLogprobs(entries);
}

void ClientOutbox::Complete(v1::FinishReason reason, std::optional<int32_t> matched_token,
                            v1::GenerateComplete complete) {
  absl::MutexLock lock(&mu_);
  if (final_status_.has_value()) return;  // the call ends once
  // End of generation: release text held for a possible stop string or a partial character,
  // and that of the last token unless it is the stop token that ended generation. A stop
  // string completed by that text still counts.
  if (!output_->stopped() && output_->Finish(matched_token)) reason = v1::FINISH_REASON_STOP;
  complete.set_finish_reason(reason);
  if (output_->stopped()) {
    complete.set_matched_stop(*output_->matched_stop());
  } else if (matched_token.has_value()) {
    complete.set_matched_token_id(*matched_token);
  }
  complete.set_prompt_tokens(format_.prompt_tokens);
  complete.set_completion_tokens(output_->completion_tokens());
  v1::GenerateResponse response;
  response.set_request_id(format_.request_id);
  *response.mutable_complete() = std::move(complete);
  terminal_message_ = std::move(response);
  final_status_ = absl::OkStatus();
}

void ClientOutbox::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (final_status_.has_value()) return;  // the call ends once
  // Once the client has seen output, an `error` message tells readers of messages too.
  if (sent_any_ || (output_.has_value() && output_->has_pending())) {
    v1::GenerateResponse response;
    response.set_request_id(format_.request_id);
    response.mutable_error()->set_code(static_cast<int32_t>(status.code()));
    response.mutable_error()->set_message(std::string(status.message()));
    terminal_message_ = std::move(response);
  }
  final_status_ = status;
}

void ClientOutbox::ClientGone() {
  absl::MutexLock lock(&mu_);
  client_gone_ = true;
}

void ClientOutbox::WriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  if (!ok) client_gone_ = true;
}

void ClientOutbox::Pump() {
  enum class Action { kNone, kSend, kEnd } action = Action::kNone;
  absl::Status status;
  v1::GenerateResponse message;
  {
    absl::MutexLock lock(&mu_);
    if (end_called_ || write_in_flight_) return;
    if (client_gone_) {
      // Nothing more reaches the client; End once the call has ended.
      if (!final_status_.has_value()) return;
      end_called_ = true;
      action = Action::kEnd;
      status = *final_status_;
    } else if (output_.has_value() && output_->has_pending()) {
      PendingChunk chunk = output_->TakeChunk();
      message.set_request_id(format_.request_id);
      v1::GenerateChunk* c = message.mutable_chunk();
      if (format_.include_token_ids) {
        c->mutable_token_ids()->Assign(chunk.token_ids.begin(), chunk.token_ids.end());
      }
      if (format_.include_text) c->set_text(std::move(chunk.text));
      for (v1::TokenLogprobs& lp : chunk.logprobs) *c->add_logprobs() = std::move(lp);
      for (v1::PromptTokenLogprobs& lp : chunk.prompt_logprobs) {
        *c->add_prompt_logprobs() = std::move(lp);
      }
      c->set_prompt_tokens(format_.prompt_tokens);
      c->set_completion_tokens(chunk.completion_tokens);
      write_in_flight_ = true;
      sent_any_ = true;
      action = Action::kSend;
    } else if (terminal_message_.has_value()) {
      message = *std::move(terminal_message_);
      terminal_message_.reset();
      write_in_flight_ = true;
      sent_any_ = true;
      action = Action::kSend;
    } else if (final_status_.has_value()) {
      end_called_ = true;
      status = *final_status_;
      action = Action::kEnd;
    }
  }
  // Outside the lock: the client may call back (OnWriteDone, OnDone) from inside these.
  if (action == Action::kSend) {
    client_->Send(message);
  } else if (action == Action::kEnd) {
    client_->End(status);
  }
}

}  // namespace mlaserve::router
