// OutputAssembler: turns the token ids a decode worker streams into what the client sees:
// incremental text (whole UTF-8 characters), stop strings applied with hold-back, and the
// pending chunk (ids + text since the last chunk taken). Coalescing happens here: while a
// write to a slow client is in flight, tokens keep accumulating into the next chunk.
//
// The token that ends generation (EOS, or one of the request's stop_token_ids) follows vLLM's
// rule: its id is output and counted, its text is not, unless include_stop_str_in_output,
// whatever skip_special_tokens says. The worker decides that a token ended generation
// (DecodeFinished.matched_token_id, after the token), so the text of a token that may be the
// stop token is held until Finish says whether it was; a token that follows it proves it was
// not, and its text goes out first.
// One per request; not thread-safe (the Generate call's lock guards it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlaserve/v1/api.pb.h"
#include "router/request.h"
#include "router/stop_strings.h"
#include "router/text_codec.h"

namespace mlaserve::router {

struct PendingChunk {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<v1::TokenLogprobs> logprobs;  // one per token id when the request asked
  // Prompt logprobs (SamplingParams.prompt_logprobs), at most kMaxPromptLogprobsPerChunk; a
  // chunk that carries some carries no tokens unless it carries the prompt's last ones.
  std::vector<v1::PromptTokenLogprobs> prompt_logprobs;
  int32_t completion_tokens = 0;  // generated tokens up to and including this chunk's
};

// The most prompt-logprob entries one chunk carries (api.proto GenerateChunk.prompt_logprobs):
// ~280 bytes each with 20 alternatives, so a chunk stays far below gRPC's 4 MB message bound.
inline constexpr size_t kMaxPromptLogprobsPerChunk = 2048;

// The tokens whose text is left out when they end generation: the request's stop_token_ids
// and, unless ignore_eos, the model's EOS ids; none with include_stop_str_in_output.
std::vector<int32_t> StopTokensWithoutText(const SamplingConfig& sampling,
                                           const std::vector<int32_t>& eos_token_ids);

class OutputAssembler {
 public:
  // `stop_tokens`: StopTokensWithoutText's (empty: every token's text is output).
  OutputAssembler(std::unique_ptr<StreamingDetokenizer> detokenizer,
                  StopStringMatcher stop_matcher, std::vector<int32_t> stop_tokens = {});

  // Adds one generated token (and its logprobs, when the request asked for them). Returns true
  // when a stop string matched: generation is over, and later tokens must not be added (they
  // are ignored).
  bool AddToken(int32_t id, const v1::TokenLogprobs* logprobs = nullptr);
  // Adds prompt tokens' logprobs, which the worker sends before the first generated token.
  void AddPromptLogprobs(const google::protobuf::RepeatedPtrField<v1::PromptTokenLogprobs>& entries);

  // End of generation (the worker finished; `matched_token`: the stop token that ended it,
  // DecodeFinished.matched_token_id): flushes held bytes and held stop-string text, and the
  // held text of a possible stop token unless it was `matched_token`. Returns true when the
  // flushed text completed a stop string.
  bool Finish(std::optional<int32_t> matched_token = std::nullopt);

  bool has_pending() const { return dirty_; }
  // What is pending, except that prompt logprobs past kMaxPromptLogprobsPerChunk stay for the
  // next chunk, with the tokens and text (which follow the prompt's entries).
  PendingChunk TakeChunk();

  int32_t completion_tokens() const { return completion_tokens_; }
  const std::optional<std::string>& matched_stop() const { return matched_stop_; }
  bool stopped() const { return matched_stop_.has_value(); }

 private:
  void AppendText(const std::string& piece);
  // Outputs the text of the held possible stop token, if any (it did not end generation).
  void ReleaseHeldStopToken();

  std::unique_ptr<StreamingDetokenizer> detokenizer_;
  StopStringMatcher stop_matcher_;
  std::vector<int32_t> stop_tokens_;
  // The last token added, when it is one of stop_tokens_: its id is pending, its text is not.
  std::optional<int32_t> held_stop_token_;
  PendingChunk pending_;
  bool dirty_ = false;
  int32_t completion_tokens_ = 0;
  std::optional<std::string> matched_stop_;
  bool finished_ = false;
};

}  // namespace mlaserve::router
