// The decode worker's view of one request while it holds KV: its tokens, pages, limits, and
// the stop rules applied after every sampled token. Shared by the scheduler and the runner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/constraint/json_constraint.h"
#include "kernels/common/page.h"
#include "model/kv_pool.h"
#include "model/sampler.h"

namespace mlaserve::decode {

enum class FinishReason { kStop, kLength, kAbort };

struct DecodeFinish {
  FinishReason reason = FinishReason::kStop;
  std::optional<int32_t> matched_token;  // the EOS / stop token that ended generation
  int prompt_tokens = 0;
  int completion_tokens = 0;
  bool local_prefill = false;
};

// Where a request's output goes (the gRPC stream in production). Called from the decode loop
// thread; OnFinished / OnError is the last call.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // `logprobs`: empty, or one per token (requests whose sampling asks for logprobs).
  virtual void OnTokens(std::span<const int32_t> tokens,
                        std::span<const model::TokenLogprobs> logprobs) = 0;
  // A locally prefilled request with sampling.prompt_logprobs: the next prompt tokens' entries
  // (from prompt token 1 on, in order, each once), as its prefill chunks compute them; all of
  // them before its first OnTokens.
  virtual void OnPromptLogprobs(std::span<const model::PromptTokenLogprobs> entries) {}
  // A locally prefilled request took `tokens` prompt tokens from the prefix cache: once,
  // before its first OnTokens (not called when it took none).
  virtual void OnPromptCached(int tokens) {}
  virtual void OnFinished(const DecodeFinish& finish) = 0;
  virtual void OnError(const absl::Status& status) = 0;
};

struct StopRules {
  int max_new_tokens = 1;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::vector<int32_t> eos_token_ids;  // the model's
};

// The finish reason after `token` was appended as the `generated`-th output token, if any.
// Stop tokens and EOS win over the length limit when both apply (the token is kept).
std::optional<DecodeFinish> CheckStop(const StopRules& rules, int32_t token, int generated);

struct DecodeSequence {
  std::string id;                // the session id
  std::vector<int32_t> tokens;   // prompt, then generated tokens
  int prompt_len = 0;
  // Positions computed in prefill chunks before decoding one token a step: the prompt, or,
  // after a preemption, every token so far (recomputed, the last chunk's logits giving the
  // next token).
  int prefill_len = 0;
  int num_computed = 0;          // positions whose KV is in the pool
  // Cover the positions computed so far and the one being written this step; a decoding
  // sequence gets one more page when it crosses into it (DecodeRunner::Grow).
  std::vector<int32_t> pages;
  // The data-parallel attention rank this request lives on, for its whole life: `pages` are
  // from that rank's pool and its chunks run there. 0 unless the engine has data ranks.
  int rank = 0;
  bool local_prefill = false;
  // Prefix cache (docs/serving.md): the partition (api.proto cache_salt), and the prompt
  // tokens a local prefill took from the cache (whole pages, first).
  std::string cache_salt;
  int cached = 0;
  model::SamplingOptions sampling;
  // Prompt logprobs (sampling.prompt_logprobs): the prompt rows scored and sent so far; row p
  // scores prompt token p + 1, so rows [0, prompt_len - 1) are wanted. A preempted request's
  // recompute scores only the rows past this.
  int prompt_scored = 0;
  StopRules stop;
  // JSON mode / structured outputs (sampling.constrained(); after sampling.json_after when
  // set): the constraint over
  // the generated tokens and how many of them it has consumed. The loop thread advances it
  // over the rest before each sampled row (the first token may come from the prefill worker;
  // a recompute after preemption adds nothing new), so that the row's mask is the one for
  // the next token.
  std::optional<model::JsonConstraint> json;
  int json_consumed = 0;

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  bool prefilling() const { return num_computed < prefill_len; }
  // Prompt rows still to score (sampling.prompt_logprobs): [prompt_scored, prompt_len - 1).
  bool scoring_prompt() const {
    return sampling.wants_prompt_logprobs() && prompt_scored < prompt_len - 1;
  }
  // The most leading pages (re)computing `tokens` may take from the prefix cache: cached pages
  // have no logits, so none past the prompt rows scored so far while some are still to score
  // (vLLM skips the cache for such requests too).
  int MaxCachedPages() const {
    const int most = model::KvPool::MaxReusedPages(static_cast<int>(tokens.size()));
    return scoring_prompt() ? std::min(most, prompt_scored / kernels::kPageSize) : most;
  }
};

}  // namespace mlaserve::decode
