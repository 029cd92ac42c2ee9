// Kimi-K2's tool-call ids. Moonshot's models (Kimi-K2, Moonlight) write a call as
//   <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>
// with IDX counting the conversation's calls from 0, and Kimi's chat template writes a history
// call's `id` in that place and a tool result's `tool_call_id` after "## Return of": the id is
// how the model pairs results with calls. So the id a client gets (and sends back) is the one
// the model wrote, as Moonshot's tool-call guide and vLLM / SGLang's kimi_k2 parsers return it;
// a made one keeps that shape (vLLM's, for forced calls), since ids of another shape put the
// model off its training.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace mlaserve::router::openai {

// The function name in a call header as the model writes it ("functions.NAME:IDX"); tolerates
// whitespace around it, a missing "functions." and a missing ":IDX" (digits after the last ':').
// nullopt when no name is left.
std::optional<std::string> KimiCallName(std::string_view header);

// "functions.NAME:IDX".
std::string KimiCallId(std::string_view name, size_t index);

// Hands out one response's call ids, each unique in the conversation: the id the model wrote
// when it is exactly "functions.NAME:IDX" (whitespace around it aside) and not taken (by the
// request's history or an earlier call of this response); else "functions.NAME:K" with the
// least free K >= the number of calls before this one in the conversation.
class KimiCallIds {
 public:
  // The ids of the calls in the request's history (assistant messages' tool_calls, in order;
  // "" for a call without one, which still counts).
  explicit KimiCallIds(std::vector<std::string> history);

  // `header`: the call header the model wrote ("" for none); `name`: KimiCallName(header), or
  // the forced function's name.
  std::string Take(std::string_view name, std::string_view header);

 private:
  absl::flat_hash_set<std::string> taken_;  // the history's ids and this response's
  size_t calls_;                            // calls in the conversation so far
};

}  // namespace mlaserve::router::openai
