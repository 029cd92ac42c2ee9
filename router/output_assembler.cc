#include "router/output_assembler.h"

#include <algorithm>
#include <iterator>

namespace mlaserve::router {

std::vector<int32_t> StopTokensWithoutText(const SamplingConfig& sampling,
                                           const std::vector<int32_t>& eos_token_ids) {
  if (sampling.include_stop_str_in_output) return {};
  std::vector<int32_t> ids = sampling.stop_token_ids;
  // The decode worker's rule for the tokens that end generation (decode_scheduler.cc CheckStop).
  if (!sampling.ignore_eos) ids.insert(ids.end(), eos_token_ids.begin(), eos_token_ids.end());
  return ids;
}

OutputAssembler::OutputAssembler(std::unique_ptr<StreamingDetokenizer> detokenizer,
                                 StopStringMatcher stop_matcher, std::vector<int32_t> stop_tokens)
    : detokenizer_(std::move(detokenizer)),
      stop_matcher_(std::move(stop_matcher)),
      stop_tokens_(std::move(stop_tokens)) {}

void OutputAssembler::AppendText(const std::string& piece) {
  if (piece.empty() || stopped()) return;
  StopStringMatcher::Result r = stop_matcher_.Append(piece);
  if (!r.emit.empty()) {
    pending_.text += r.emit;
    dirty_ = true;
  }
  if (r.matched) matched_stop_ = std::move(r.matched);
}

void OutputAssembler::ReleaseHeldStopToken() {
  if (!held_stop_token_.has_value()) return;
  const int32_t id = *held_stop_token_;
  held_stop_token_.reset();
  AppendText(detokenizer_->Push(id));
}

bool OutputAssembler::AddToken(int32_t id, const v1::TokenLogprobs* logprobs) {
  if (stopped() || finished_) return stopped();
  // Generation went on after a possible stop token (a worker that stops on other ids): it was
  // text. Should that text complete a stop string, this token comes after the end.
  ReleaseHeldStopToken();
  if (stopped()) return true;
  ++completion_tokens_;
  pending_.token_ids.push_back(id);
  if (logprobs != nullptr) pending_.logprobs.push_back(*logprobs);
  dirty_ = true;
  if (std::find(stop_tokens_.begin(), stop_tokens_.end(), id) != stop_tokens_.end()) {
    held_stop_token_ = id;
  } else {
    AppendText(detokenizer_->Push(id));
  }
  return stopped();
}

void OutputAssembler::AddPromptLogprobs(
    const google::protobuf::RepeatedPtrField<v1::PromptTokenLogprobs>& entries) {
  if (entries.empty() || stopped() || finished_) return;
  pending_.prompt_logprobs.insert(pending_.prompt_logprobs.end(), entries.begin(), entries.end());
  dirty_ = true;
}

bool OutputAssembler::Finish(std::optional<int32_t> matched_token) {
  if (finished_ || stopped()) return stopped();
  finished_ = true;
  if (held_stop_token_.has_value() && held_stop_token_ == matched_token) {
    held_stop_token_.reset();  // it ended generation: its text is left out
  }
  ReleaseHeldStopToken();
  AppendText(detokenizer_->Finish());
  if (!stopped()) {
    std::string held = stop_matcher_.Flush();
    if (!held.empty()) {
      pending_.text += held;
      dirty_ = true;
    }
  }
  return stopped();
}

PendingChunk OutputAssembler::TakeChunk() {
  if (pending_.prompt_logprobs.size() > kMaxPromptLogprobsPerChunk) {
    PendingChunk out;
    const auto cut = pending_.prompt_logprobs.begin() + kMaxPromptLogprobsPerChunk;
    out.prompt_logprobs.assign(std::make_move_iterator(pending_.prompt_logprobs.begin()),
                               std::make_move_iterator(cut));
    pending_.prompt_logprobs.erase(pending_.prompt_logprobs.begin(), cut);
    out.completion_tokens =
        completion_tokens_ - static_cast<int32_t>(pending_.token_ids.size());
    return out;  // still dirty: the rest follows
  }
  PendingChunk out = std::move(pending_);
  out.completion_tokens = completion_tokens_;
  pending_ = PendingChunk{};
  dirty_ = false;
  return out;
}

}  // namespace mlaserve::router
