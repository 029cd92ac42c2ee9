#include "bench/serving/conversation.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace mlaserve::bench {
namespace {

// Streams of their own, so the first turns stay exactly MakeRandomDataset's for the seed.
constexpr uint64_t kMessageStream = 0x6d657373616765ULL;
constexpr uint64_t kTurnLengthStream = 0x7475726e6c656eULL;

}  // namespace

int64_t LongestConversationTokens(const ConversationOptions& o) {
  const RandomDatasetOptions& f = o.first_turns;
  return int64_t{f.shared_prefix_len} + f.input_len +
         int64_t{o.turns - 1} * (int64_t{f.output_len} + o.message_len) + f.output_len;
}

absl::StatusOr<ConversationDataset> MakeConversations(const ConversationOptions& o,
                                                      const VocabInfo& vocab) {
  if (o.turns < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("multi-turn-turns ", o.turns, " must be >= 2 for conversations"));
  }
  if (o.message_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("multi-turn-message-len ", o.message_len, " must be >= 1"));
  }
  // The first turns alone are checked (and drawn) by MakeRandomDataset; the whole
  // conversation is checked here, before anything is sent.
  absl::StatusOr<std::vector<RequestSpec>> first = MakeRandomDataset(o.first_turns, vocab);
  if (!first.ok()) return first.status();
  const RandomDatasetOptions& f = o.first_turns;
  const int64_t longest = LongestConversationTokens(o);
  if (vocab.max_context_length > 0 && longest > vocab.max_context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "multi-turn-turns ", o.turns, ": the last turn's prompt can reach ",
        longest - f.output_len, " tokens (",
        f.shared_prefix_len > 0 ? absl::StrCat("shared-prefix-len ", f.shared_prefix_len, " + ")
                                : std::string(),
        "random-input-len ", f.input_len, " + ", o.turns - 1, " x (random-output-len ",
        f.output_len, " + multi-turn-message-len ", o.message_len, ")), + random-output-len ",
        f.output_len, " = ", longest, " tokens; this model's context is ",
        vocab.max_context_length));
  }

  ConversationDataset d;
  d.turns = o.turns;
  d.first_turns = *std::move(first);
  const int conversations = static_cast<int>(d.first_turns.size());
  d.messages.resize(conversations);
  d.output_lens.resize(conversations);
  std::mt19937_64 message_ids(f.seed ^ kMessageStream);
  std::mt19937_64 lengths(f.seed ^ kTurnLengthStream);
  const int out_lo = LowerLength(f.output_len, f.range_ratio);
  for (int c = 0; c < conversations; ++c) {
    RequestSpec& spec = d.first_turns[c];
    spec.index = c * o.turns;
    spec.conversation = c;
    spec.turn = 0;
    spec.follow_ups = o.turns - 1;
    spec.keep_output_ids = true;
    d.output_lens[c].push_back(spec.output_len);
    d.messages[c].resize(o.turns - 1);
    for (int t = 1; t < o.turns; ++t) {
      AppendRandomIds(message_ids, o.message_len, vocab, d.messages[c][t - 1]);
      d.output_lens[c].push_back(static_cast<int>(UniformInt(lengths, out_lo, f.output_len)));
    }
  }
  return d;
}

RequestSpec NextTurn(const ConversationDataset& d, const RequestSpec& sent,
                     const std::vector<int32_t>& answer_ids) {
  RequestSpec next;
  next.conversation = sent.conversation;
  next.turn = sent.turn + 1;
  next.index = next.conversation * d.turns + next.turn;
  next.follow_ups = sent.follow_ups - 1;
  next.keep_output_ids = next.follow_ups > 0;
  next.output_len = d.output_lens[next.conversation][next.turn];
  const std::vector<int32_t>& message = d.messages[next.conversation][next.turn - 1];
  next.prompt_token_ids.reserve(sent.prompt_token_ids.size() + answer_ids.size() +
                                message.size());
  next.prompt_token_ids.assign(sent.prompt_token_ids.begin(), sent.prompt_token_ids.end());
  next.prompt_token_ids.insert(next.prompt_token_ids.end(), answer_ids.begin(), answer_ids.end());
  next.prompt_token_ids.insert(next.prompt_token_ids.end(), message.begin(), message.end());
  next.input_len = static_cast<int>(next.prompt_token_ids.size());
  return next;
}

}  // namespace mlaserve::bench
