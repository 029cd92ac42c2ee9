// RecordingSink: a TokenSink that records what a request streamed, for tests.
#pragma once

#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "decode_worker/decode_sequence.h"

namespace mlaserve::testing {

class RecordingSink final : public decode::TokenSink {
 public:
  void OnTokens(std::span<const int32_t> tokens,
                std::span<const model::TokenLogprobs> logprobs) override {
    absl::MutexLock lock(&mu_);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
  }
  void OnPromptLogprobs(std::span<const model::PromptTokenLogprobs> entries) override {
    absl::MutexLock lock(&mu_);
    prompt_logprobs_.insert(prompt_logprobs_.end(), entries.begin(), entries.end());
    prompt_logprobs_calls_.push_back(static_cast<int>(entries.size()));
    prompt_logprobs_after_tokens_ = prompt_logprobs_after_tokens_ || !tokens_.empty();
  }
  void OnPromptCached(int tokens) override {
    absl::MutexLock lock(&mu_);
    cached_ = tokens;
    cached_before_tokens_ = tokens_.empty();
  }
  void OnFinished(const decode::DecodeFinish& finish) override {
    absl::MutexLock lock(&mu_);
    finish_ = finish;
    ended_ = true;
  }
  void OnError(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    error_ = status;
    ended_ = true;
  }
  // Waits (bounded) for the last call.
  bool WaitEnded(absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&ended_), timeout);
  }
  std::vector<int32_t> tokens() const {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  std::vector<model::TokenLogprobs> logprobs() const {
    absl::MutexLock lock(&mu_);
    return logprobs_;
  }
  std::optional<decode::DecodeFinish> finish() const {
    absl::MutexLock lock(&mu_);
    return finish_;
  }
  absl::Status error() const {
    absl::MutexLock lock(&mu_);
    return error_;
  }
  bool ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  // Every OnPromptLogprobs entry in order, the entries each call carried, and whether one
  // came after a token.
  std::vector<model::PromptTokenLogprobs> prompt_logprobs() const {
    absl::MutexLock lock(&mu_);
    return prompt_logprobs_;
  }
  std::vector<int> prompt_logprobs_calls() const {
    absl::MutexLock lock(&mu_);
    return prompt_logprobs_calls_;
  }
  bool prompt_logprobs_after_tokens() const {
    absl::MutexLock lock(&mu_);
    return prompt_logprobs_after_tokens_;
  }
  // OnPromptCached's tokens (0 if not called), and whether it came before any token.
  int cached() const {
    absl::MutexLock lock(&mu_);
    return cached_;
  }
  bool cached_before_tokens() const {
    absl::MutexLock lock(&mu_);
    return cached_before_tokens_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<model::TokenLogprobs> logprobs_ ABSL_GUARDED_BY(mu_);
  std::vector<model::PromptTokenLogprobs> prompt_logprobs_ ABSL_GUARDED_BY(mu_);
  std::vector<int> prompt_logprobs_calls_ ABSL_GUARDED_BY(mu_);
  bool prompt_logprobs_after_tokens_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<decode::DecodeFinish> finish_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  int cached_ ABSL_GUARDED_BY(mu_) = 0;
  bool cached_before_tokens_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mlaserve::testing
