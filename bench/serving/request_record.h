// What mlaserve-bench sends (RequestSpec) and what it measured for one request (RequestRecord).
//
// Times are seconds as doubles, measured on the client's steady clock: TTFT and E2E from the
// moment the Generate call was started (after any wait for a concurrency slot, as in the
// usual serving benchmarks), ITL entries between streamed tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mlaserve::bench {

// One prompt of the dataset. Exactly one of prompt_token_ids / prompt_text is used: the
// random dataset sends token ids (no tokenizer needed), the prompts file sends text.
struct RequestSpec {
  int index = 0;
  std::vector<int32_t> prompt_token_ids;
  std::string prompt_text;
  bool use_text = false;
  // Prompt tokens when the client knows them (token-id prompts); 0 for text prompts, whose
  // length only the server's `complete` message tells.
  int input_len = 0;
  int output_len = 1;  // sent as max_new_tokens
  // Whether this request carries the run's penalties / logprobs (CallSettings); SendsKnobs.
  bool sends_knobs = true;
  // Multi-turn conversations (conversation.h): the conversation and its 0-based turn (-1 and 0
  // outside one), and how many turns follow this one. A request with follow_ups > 0 is sent
  // only as its conversation's turn; the next is built from its answer, so the call keeps the
  // streamed token ids (keep_output_ids) for LoadRunner to hand on.
  int conversation = -1;
  int turn = 0;
  int follow_ups = 0;
  bool keep_output_ids = false;
};

enum class Outcome {
  kSuccess,
  kFailed,            // non-OK status, an `error` message, or a failed client-side check
  kCancelledAtBound,  // still running when --max-duration-s ran out; cancelled by the client
};

struct RequestRecord {
  int index = 0;
  std::string request_id;
  int input_len = 0;             // from `complete` when it arrived, else the spec's
  // Of input_len, the tokens the server took from its prefix cache (`complete`'s
  // cached_prompt_tokens; OpenAI's usage.prompt_tokens_details.cached_tokens); 0 when the
  // server reports none.
  int cached_prompt_tokens = 0;
  int requested_output_len = 0;
  int output_len = 0;            // token ids received in chunks
  int conversation = -1;         // the spec's (multi-turn), -1 outside a conversation
  int turn = 0;                  // 0-based
  // The streamed token ids, only when the spec asked for them (keep_output_ids); LoadRunner
  // clears them once the conversation's next turn is built.
  std::vector<int32_t> output_token_ids;
  double start_offset_s = 0;     // call start, relative to the start of the run
  double ttft_s = -1;            // -1: no token arrived
  std::vector<double> itl_s;     // one entry per token after the first (output_len - 1)
  double e2e_s = 0;              // call start -> final status
  int status_code = 0;           // grpc::StatusCode the call ended with
  Outcome outcome = Outcome::kSuccess;
  // Failure class for the summary: the gRPC code's name ("UNAVAILABLE") for server errors,
  // or a client-side check ("TOKEN_COUNT_MISMATCH", "MISSING_COMPLETE", "ABORTED").
  std::string error_class;
  std::string error;             // human-readable; empty on success
};

}  // namespace mlaserve::bench
