// Multi-turn conversations of random token ids: the workload a prefix cache that keeps
// answers is for (the decode worker's, docs/serving.md "Prefix cache").
//
// A conversation of K turns starts with a random prompt (the random dataset's, shared prefix
// included); turn t+1's prompt is turn t's prompt, then the token ids turn t's answer
// actually streamed, then a new random "user message". So turn t+1 can only be built, and
// sent, once turn t has ended: LoadRunner sends a conversation's turns in order and
// different conversations side by side (each keeps its concurrency slot between turns).
//
// Everything random is drawn up front from --seed (first prompts as MakeRandomDataset draws
// them, messages and later turns' output lengths from streams of their own), so only the
// server's answers vary the prompts of later turns.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serving/dataset.h"
#include "bench/serving/request_record.h"

namespace mlaserve::bench {

struct ConversationOptions {
  // The first turns: num_prompts is the number of conversations; shared_prefix_* as usual
  // (conversation c starts with group c % groups' prefix).
  RandomDatasetOptions first_turns;
  int turns = 2;        // >= 2
  int message_len = 1;  // tokens of each later turn's new message, >= 1
};

struct ConversationDataset {
  int turns = 0;
  // Turn 0 of each conversation: index c * turns, conversation c, follow_ups turns - 1,
  // keep_output_ids set.
  std::vector<RequestSpec> first_turns;
  // messages[c][t - 1]: the ids appended after turn t - 1's answer to make turn t's prompt.
  std::vector<std::vector<std::vector<int32_t>>> messages;
  // output_lens[c][t]: max_new_tokens of turn t (turn 0's is first_turns[c].output_len).
  std::vector<std::vector<int>> output_lens;

  int total_requests() const { return static_cast<int>(first_turns.size()) * turns; }
};

// The longest a conversation can get, in tokens: its last prompt (prefix + input +
// (turns - 1) x (output + message)) plus its last answer, with every length at its upper
// bound. In 64 bits: the product of large flags must be refused, not wrap.
int64_t LongestConversationTokens(const ConversationOptions& options);

// INVALID_ARGUMENT naming the value for turns < 2, message_len < 1, anything
// MakeRandomDataset refuses, or a conversation that can outgrow the model's context
// (LongestConversationTokens > max_context_length): refused up front rather than cut short,
// so every conversation of a run has the same number of turns.
absl::StatusOr<ConversationDataset> MakeConversations(const ConversationOptions& options,
                                                      const VocabInfo& vocab);

// The turn after `sent` (which must have follow_ups > 0) in its conversation: sent's prompt,
// `answer_ids` (what the server streamed for it), then the next message. The spec's index is
// conversation * turns + turn; sends_knobs is left for the caller to set.
RequestSpec NextTurn(const ConversationDataset& dataset, const RequestSpec& sent,
                     const std::vector<int32_t>& answer_ids);

}  // namespace mlaserve::bench
