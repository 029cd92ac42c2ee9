#include "router/output_assembler.h"

#include <iterator>

namespace mlaserve::router {

OutputAssembler::OutputAssembler(std::unique_ptr<StreamingDetokenizer> detokenizer,
                                 StopStringMatcher stop_matcher)
    : detokenizer_(std::move(detokenizer)), stop_matcher_(std::move(stop_matcher)) {}

void OutputAssembler::AppendText(const std::string& piece) {
  if (piece.empty() || stopped()) return;
  StopStringMatcher::Result r = stop_matcher_.Append(piece);
  if (!r.emit.empty()) {
    pending_.text += r.emit;
    dirty_ = true;
  }
  if (r.matched) matched_stop_ = std::move(r.matched);
}

bool OutputAssembler::AddToken(int32_t id, const v1::TokenLogprobs* logprobs) {
  if (stopped() || finished_) return stopped();
  ++completion_tokens_;
  pending_.token_ids.push_back(id);
  if (logprobs != nullptr) pending_.logprobs.push_back(*logprobs);
  dirty_ = true;
  AppendText(detokenizer_->Push(id));
  return stopped();
}

void OutputAssembler::AddPromptLogprobs(
    const google::protobuf::RepeatedPtrField<v1::PromptTokenLogprobs>& entries) {
  if (entries.empty() || stopped() || finished_) return;
  pending_.prompt_logprobs.insert(pending_.prompt_logprobs.end(), entries.begin(), entries.end());
  dirty_ = true;
}

bool OutputAssembler::Finish() {
  if (finished_ || stopped()) return stopped();
  finished_ = true;
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
