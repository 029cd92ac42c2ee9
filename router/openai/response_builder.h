// ResponseBuilder: the OpenAI response for one request, from the Generate messages of its
// call (api.proto: chunks, then `complete` or `error`). Streaming requests get server-sent
// events (`data: {json}\n\n` ... `data: [DONE]\n\n`) as messages arrive; non-streaming ones
// one JSON body at the end. Pure (no I/O), so the formats are tested alone.
//
// Shapes follow OpenAI's API: text_completion / chat.completion(.chunk) objects, `usage`
// (prompt/completion/total tokens, from `complete`, i.e. what the gRPC API reports),
// finish_reason "stop" / "length" (a request aborted through the admin or Abort API ends
// with an error instead: GenerateExchange turns its `complete` into CANCELLED), per-token
// `logprobs` when the request asked (logprobs_format.h), and with
// stream_options.include_usage a last chunk with empty choices and the usage. Chat responses
// of reasoning models carry `reasoning_content` (reasoning_splitter.h). With tools, the
// answer's tool calls (tool_call_parser.h) come as `tool_calls` ({id, type "function",
// function {name, arguments}}; streamed as OpenAI does: the first delta of a call carries its
// index, id, type and name, later ones fragments of its arguments) and finish_reason
// "tool_calls".
//
// A request with several choices (n > 1, or several completions prompts: prompt p's choice j
// is index p * n + j) has one builder per choice, each fed by its own Generate call: chunks
// carry their choice's index, and the caller ends the stream with EndOfChoices() (the summed
// usage, then [DONE]) and merges the bodies with MergeChoices().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlaserve/v1/api.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"
#include "router/openai/logprobs_format.h"
#include "router/openai/reasoning_splitter.h"
#include "router/openai/tool_call_parser.h"

namespace mlaserve::router::openai {

class ResponseBuilder {
 public:
  // `id`: the response id ("cmpl-..." / "chatcmpl-..."); `created`: unix seconds.
  // `reasoning`: the chat prompt opened a <think> (or output that starts with one is split).
  // `choice_count`: the request's choices in all; `counts_prompt`: this choice's prompt
  // tokens count in the summed usage (the first choice of each prompt).
  ResponseBuilder(const ApiRequest& request, std::string id, int64_t created,
                  bool prompt_opens_reasoning, int choice_index = 0, int choice_count = 1,
                  bool counts_prompt = true);

  // Completions with echo: the text the choice starts with (its prompt), before the
  // generated text; streamed in the first chunk.
  void set_echo(std::string prompt_text) { echo_ = std::move(prompt_text); }
  // The request asked for logprobs: chunks carry them (with their token ids), and `codec`
  // (which must outlive this) names the tokens.
  void set_logprobs(const TextCodec* codec) {
    logprobs_ = std::make_unique<LogprobsFormat>(endpoint_, codec);
  }
  // Completions with echo and logprobs (after set_logprobs and set_echo): the choice's
  // logprobs start with the prompt's tokens, `top_n` alternatives each (the first token's
  // null). Streamed, the echoed prompt then comes with the first generated tokens (once the
  // prompt's logprobs, which precede them, have arrived) rather than alone at the start, as
  // vLLM streams it.
  void set_echo_logprobs(int top_n) {
    echo_logprobs_ = true;
    echo_top_n_ = top_n;
  }
  // vLLM's prompt_logprobs: the non-streamed body carries the prompt's list (completions: the
  // choice's `prompt_logprobs`; chat: the response's), `top_n` alternatives each; `codec`
  // (which must outlive this) names the tokens.
  void set_prompt_logprobs(const TextCodec* codec, int top_n) {
    prompt_codec_ = codec;
    prompt_top_n_ = top_n;
  }
  // Completions with echo and max_tokens 0: the choice is the prompt alone; the one token the
  // call generates is dropped (no text, no logprobs, completion_tokens 0, finish_reason
  // "length").
  void set_prompt_only() { prompt_only_ = true; }
  // Chat with tools: the answer is parsed for calls in `format`. `opening`: the call opening
  // the router wrote at the prompt's end (tool_choice "required" or a named function;
  // ToolCallParser::CallOpening), which the output continues. `parallel` false keeps only
  // the first call (OpenAI's parallel_tool_calls). `history_call_ids`: the ids of the calls in
  // the request's history (HistoryCallIds), which kimi_k2's call ids count from.
  void set_tool_calls(ToolCallFormat format, const std::string& opening, bool parallel,
                      std::vector<std::string> history_call_ids = {});

  // What one Generate message adds to the answer, split as the response is: the text (chat:
  // the content after reasoning and tool calls are taken out), the reasoning, the tool calls'
  // deltas in chat's streamed shape ([{"index", "id"?, "type"?, "function": {"name"?,
  // "arguments"}}], null when none), and the logprobs of its tokens in the endpoint's shape
  // (null when none). OnMessage renders it as chunks; the Responses API renders it as its own
  // events (responses_builder.h).
  struct Piece {
    enum class Kind { kNone, kChunk, kComplete };
    Kind kind = Kind::kNone;  // kComplete: the call's `complete` (complete() is now true)
    std::string text;
    std::string reasoning;
    nlohmann::ordered_json tool_calls = nullptr;
    nlohmann::ordered_json logprobs = nullptr;
  };
  Piece Absorb(const v1::GenerateResponse& message);

  // The forced call's opening (set_tool_calls' `opening`) as tool-call deltas in Piece's
  // shape, once (then null): StartEvents streams them; the Responses API opens its call item
  // with them.
  nlohmann::ordered_json TakeOpeningToolCalls() { return std::exchange(opening_deltas_, nullptr); }

  // Streaming: the events that start the stream (the chat role delta; the echoed prompt).
  std::string StartEvents();
  // Streaming: the events one Generate message adds (possibly none). Non-streaming
  // requests call it too, to accumulate.
  std::string OnMessage(const v1::GenerateResponse& message);
  // Streaming: an error after the stream started, then [DONE].
  static std::string ErrorEvents(const ApiError& error);

  bool complete() const { return finish_reason_.has_value(); }
  int32_t completion_tokens() const { return completion_tokens_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }
  int32_t cached_tokens() const { return cached_tokens_; }
  // "stop", "length" or "tool_calls", once complete().
  const std::optional<std::string>& finish_reason() const { return finish_reason_; }
  // The answer so far: its text (chat: the content) and reasoning.
  const std::string& text() const { return text_; }
  const std::string& reasoning() const { return reasoning_; }
  bool in_reasoning_mode() const { return splitter_.in_reasoning_mode(); }
  // Chat with tools: the calls returned (parallel_tool_calls false: the first), each with its
  // id as the response gives it.
  struct Call {
    std::string id;
    std::string name;
    std::string arguments;
  };
  std::vector<Call> tool_calls() const;
  // Every token's logprobs so far in the endpoint's shape; null without set_logprobs.
  nlohmann::ordered_json all_logprobs() const {
    return logprobs_ != nullptr ? logprobs_->All() : nlohmann::ordered_json(nullptr);
  }
  // Non-streaming: the response body, once complete().
  nlohmann::ordered_json Body() const;

  // Several choices, streaming: after every choice completed, the usage chunk (with
  // include_usage; each prompt's tokens once, completion tokens summed, as OpenAI counts them)
  // and [DONE].
  static std::string EndOfChoices(const std::vector<const ResponseBuilder*>& choices);
  // Several choices: one body with every choice's, usage summed as above.
  static nlohmann::ordered_json MergeChoices(const std::vector<const ResponseBuilder*>& choices);

 private:
  static nlohmann::ordered_json SummedUsage(const std::vector<const ResponseBuilder*>& choices);
  nlohmann::ordered_json Envelope(const char* object) const;
  nlohmann::ordered_json Usage() const;
  // One streamed chunk's `choices[0]` (text or delta) and optional finish reason.
  // With several calls' deltas, one chunk per call after the first (OpenAI streams one call
  // per chunk; clients that read tool_calls[0] only would miss a name).
  std::string ChunkEvent(const std::string& text, const std::string& reasoning,
                         const std::optional<std::string>& finish_reason, bool with_usage_now,
                         nlohmann::ordered_json logprobs = nullptr,
                         nlohmann::ordered_json tool_calls = nullptr);
  std::string OneChunkEvent(const std::string& text, const std::string& reasoning,
                            const std::optional<std::string>& finish_reason, bool with_usage_now,
                            nlohmann::ordered_json logprobs, nlohmann::ordered_json tool_calls);
  // The content a tool-parsing delta adds, after the cuts above.
  std::string ToolAnswerContent(std::string content, bool call_started, bool finish);
  // Splits `text` (generated, or the end of output when `finish`) into content, reasoning and
  // tool-call deltas (a JSON array in OpenAI's streamed shape, or null).
  void AddText(const std::string& text, bool finish, std::string* text_delta,
               std::string* reasoning_delta, nlohmann::ordered_json* tool_deltas);
  nlohmann::ordered_json ToolDeltas(const std::vector<ToolCallDelta>& deltas);
  // Once the prompt's logprobs are all in (the first generated tokens arrived, or the end):
  // with echo logprobs, the prompt's piece of the logprobs (kept for the body) and, streamed,
  // the echoed text that goes with it.
  void FinishPrompt(std::string* echo_text, nlohmann::ordered_json* echo_logprobs);
  bool Keeps(int call_index) const { return parallel_tool_calls_ || call_index == 0; }

  const Endpoint endpoint_;
  const bool stream_;
  const int choice_index_;
  const bool single_choice_;  // the request's only choice: this builder ends the stream
  const bool counts_prompt_;
  const bool include_usage_;
  const bool continuous_usage_;
  const std::string model_;
  const std::string id_;
  const int64_t created_;
  ReasoningSplitter splitter_;
  std::string echo_;       // completions: the echoed prompt
  std::string text_;       // content (all of it, for the non-streaming body)
  std::string reasoning_;  // reasoning_content
  int32_t prompt_tokens_ = 0;
  int32_t cached_tokens_ = 0;  // of prompt_tokens_, from the prefix cache (known at the end)
  int32_t completion_tokens_ = 0;
  std::optional<std::string> finish_reason_;
  std::unique_ptr<LogprobsFormat> logprobs_;  // when the request asked for them
  // Prompt logprobs (api.proto GenerateChunk.prompt_logprobs), as they arrive.
  std::vector<v1::PromptTokenLogprobs> prompt_entries_;
  bool prompt_finished_ = false;  // FinishPrompt ran
  bool echo_logprobs_ = false;
  int echo_top_n_ = 0;
  const TextCodec* prompt_codec_ = nullptr;  // set: the body carries vLLM's prompt_logprobs
  int prompt_top_n_ = 0;
  bool prompt_only_ = false;
  std::unique_ptr<ToolCallParser> tool_calls_;  // chat with tools
  bool parallel_tool_calls_ = true;
  // Call i's id, when its name arrives: the parser's (kimi_k2), else a made "call_..." one.
  std::vector<std::string> call_ids_;
  nlohmann::ordered_json opening_deltas_;      // the forced call's name, for the first chunk
  // The forced opening, while it may still come back as content (a model that never named a
  // call): it is the router's text, not the model's, so it is cut from the content.
  std::string unsaid_opening_;
  // Content whitespace not yet sent: dropped when a call follows it (DeepSeek's V3 template
  // renders no calls for an assistant message whose content is not null), else sent.
  std::string held_whitespace_;
};

}  // namespace mlaserve::router::openai
