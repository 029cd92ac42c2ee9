// StreamTally: turns the messages of one Generate stream, each stamped with its arrival time,
// into a RequestRecord. Pure (no gRPC calls, no clock), so the rules below are tested alone.
//
// Rules:
//  - TTFT: time of the first chunk that carries token ids.
//  - ITL: for a chunk of k tokens arriving g seconds after the previous token-carrying chunk,
//    k entries of g/k (the gap per token). Tokens that share the first chunk with the first
//    token get 0 each: they reached the client together with it. So a request with n output
//    tokens has n - 1 ITL entries.
//  - Outcome, first match wins: cancelled by the client at the time bound (and not completed)
//    -> kCancelledAtBound; non-OK status -> failed with its code; an `error` message -> failed
//    with the code it names; no `complete` -> MISSING_COMPLETE; completion_tokens differs from
//    the token ids streamed, prompt_tokens from the prompt we sent as ids, or
//    cached_prompt_tokens lies outside [0, prompt_tokens] -> TOKEN_COUNT_MISMATCH; finish
//    reason ABORT -> ABORTED; otherwise success.
//  - cached_prompt_tokens: `complete`'s (0 without one: a server that reports none).
//  - output_token_ids: the chunks' token ids in order, kept only for a spec with
//    keep_output_ids (a conversation's turn whose answer the next turn's prompt repeats).
#pragma once

#include <optional>
#include <string>

#include "bench/serving/request_record.h"
#include "mlaserve/v1/api.pb.h"

namespace mlaserve::bench {

// "UNAVAILABLE" for 14, ...; "CODE_<n>" for a number outside google.rpc.Code.
std::string StatusCodeName(int code);

class StreamTally {
 public:
  StreamTally(const RequestSpec& spec, std::string request_id, double start_offset_s);

  // `t_s`: seconds since the call started.
  void OnMessage(const v1::GenerateResponse& message, double t_s);

  // The call ended with (code, message) after `e2e_s` seconds. `cancelled_at_bound`: the
  // client cancelled it because the run's time bound ran out.
  RequestRecord Finish(int status_code, const std::string& status_message, double e2e_s,
                       bool cancelled_at_bound);

 private:
  RequestRecord record_;
  int expected_prompt_tokens_;  // 0 when the prompt was text
  bool keep_output_ids_ = false;
  double last_token_s_ = 0;
  std::optional<v1::GenerateComplete> complete_;
  std::optional<v1::GenerateError> error_;
};

}  // namespace mlaserve::bench
