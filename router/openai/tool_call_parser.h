// ToolCallParser: separates a DeepSeek or Kimi model's answer text (the part after "</think>")
// into `content` and tool calls, as OpenAI-style streaming deltas. The router feeds it the
// generated text piece by piece; any split works, even inside a marker or a UTF-8 character.
//
// Formats (markers are the models' special tokens; DeepSeek's full-width bars and "▁" included):
//   deepseek_v3  (V3, R1, V2.5): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//                ```json\nARGS\n```<｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>
//   deepseek_v31 (V3.1, V3.2-Exp): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS
//                <｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>
//   deepseek_v32 (V3.2's DSML): \n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//                <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>\n ...
//                </｜DSML｜invoke>\n ... </｜DSML｜function_calls>
//                The arguments are built as DeepSeek's decoder builds them:
//                {"KEY": VALUE, ...}, a string="true" VALUE JSON-escaped as Python's
//                json.dumps(ensure_ascii=False) does, any other VALUE copied raw.
//   kimi_k2      (Kimi-K2, Moonlight): <|tool_calls_section_begin|><|tool_call_begin|>
//                functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|> ...
//                <|tool_calls_section_end|>
//                The call header "functions.NAME:IDX" is the call's id as well (kimi_call_ids.h):
//                a delta's `id` is the one the model wrote, or a made one of that shape where it
//                is malformed or repeats an id of the conversation.
//
// Streaming contract: every delta is final (nothing is retracted), so the concatenation of
// all deltas equals what one Add of the whole text gives. Text that may be the start of a
// marker, or an incomplete UTF-8 character, is held back until the next piece decides it.
// A call's name (and kimi_k2's id) comes once, on its first delta, when complete; its
// arguments then stream as written (kimi_k2's without the whitespace around them, as
// Moonshot's guide and vLLM read them: trailing whitespace is held back).
//
// Leniency (malformed output never throws and loses no text):
//  - A stretch between calls (or between DSML parameters) that is only whitespace is
//    dropped; any other is content, as is. Text after a block is content; a later block
//    adds calls.
//  - deepseek_v32 also takes "<｜DSML｜function_calls>" without the blank line before it.
//  - deepseek_v3 takes ARGS ending at <｜tool▁call▁end｜> without the "\n```" fence, and
//    v3, v31 and kimi_k2 take the block's end in place of a call's end.
//  - kimi_k2 takes the singular <|tool_call_section_begin|> / <|tool_call_section_end|> for the
//    block's markers (as vLLM does), whitespace around the call header, a header without
//    "functions." or ":IDX" (the name is then what is left), and a <|tool_call_begin|> in the
//    arguments as the end of that call and the start of the next.
//  - A call opening that does not parse (a DSML invoke without name="...", an empty name, a
//    block marker inside a v3/v31/kimi_k2 call header) is content. A DSML parameter tag that
//    does not parse (no name="..." string="true|false") is content, as is the text after it
//    up to the next tag. Inside a parameter value only </｜DSML｜parameter> ends it: any other
//    tag-like text is part of the value.
//  - At Finish: a block that produced no call name yet (the output ended right after
//    <｜tool▁calls▁begin｜>, or inside the first call's header) is content, raw; a later
//    unfinished call header likewise. A call whose name was emitted keeps it and the
//    arguments streamed so far (the output was cut, e.g. by max_tokens); a held-back tail
//    that may be its end marker is dropped, so the arguments are a prefix of the full ones.
//    That holds for a DSML invoke cut between parameters too: its closing brace is not
//    invented, since more parameters may have been coming.
//    A block closed without any call is content, raw.
//
// One per response; not thread-safe. Finish once, after the last Add.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "router/openai/kimi_call_ids.h"

namespace mlaserve::router::openai {

enum class ToolCallFormat { kDeepseekV3, kDeepseekV31, kDeepseekV32, kKimiK2 };
inline constexpr ToolCallFormat kToolCallFormats[] = {ToolCallFormat::kDeepseekV3, ToolCallFormat::kDeepseekV31,
                                                      ToolCallFormat::kDeepseekV32, ToolCallFormat::kKimiK2};

// "deepseek_v3" | "deepseek_v31" | "deepseek_v32" | "kimi_k2".
std::string_view ToolCallFormatName(ToolCallFormat format);
std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name);

struct ToolCallDelta {
  int index = 0;                    // the call's position in this output, from 0
  std::optional<std::string> name;  // set on the call's first delta only
  std::string arguments;            // the next fragment of its arguments (JSON text); may be empty
  std::optional<std::string> id;    // with the name, where the format has call ids (kimi_k2)
};

struct ToolCall {
  std::string name;
  std::string arguments;
  std::string id;  // kimi_k2: the call's id; empty in formats without ids
};

class ToolCallParser {
 public:
  // `history_call_ids`: the ids of the calls in the request's history (assistant messages'
  // tool_calls, in order); kimi_k2 numbers and keeps its ids apart from them.
  explicit ToolCallParser(ToolCallFormat format, std::vector<std::string> history_call_ids = {});

  struct Delta {
    std::string content;
    std::vector<ToolCallDelta> calls;  // at most one entry per call index, in index order
  };
  Delta Add(std::string_view text);  // the next piece of generated text
  Delta Finish();                    // the output ended: releases what was held back

  // Every call so far (name + all its arguments).
  const std::vector<ToolCall>& calls() const { return calls_; }

  // The text that opens a call, up to where the model writes the name (name == nullopt) or
  // the arguments (name given). The router appends it to the prompt for tool_choice
  // "required" / a named function, then feeds it to Add() first so the parser stands where
  // the model continues: that Add's delta carries the forced name and no content. Should the
  // model never complete a name after an unnamed opening, Finish returns the opening with
  // the rest as content (the raw text of an unfinished block). kimi_k2's named opening holds
  // the call's id, made as a parser built with the same `history_call_ids` makes it.
  static std::string CallOpening(ToolCallFormat format, const std::optional<std::string>& name,
                                 std::vector<std::string> history_call_ids = {});
  // The text between a call's name and its JSON arguments (deepseek_v3: the ```json fence;
  // deepseek_v31: <｜tool▁sep｜>; kimi_k2: <|tool_call_argument_begin|>); nullopt for
  // deepseek_v32, whose arguments are DSML parameters, not JSON.
  static std::optional<std::string_view> ArgumentsStart(ToolCallFormat format);
  // Block openings with which a reasoning model may end its thinking without "</think>"
  // (kimi_k2: Kimi-K2-Thinking's section begin, both spellings); none for the other formats.
  static std::vector<std::string> ReasoningEndingOpenings(ToolCallFormat format);
  // tool_choice "required": what the model writes after the unnamed CallOpening for a call of
  // `name`, up to its arguments: the name and ArgumentsStart (kimi_k2: the call's id
  // "functions.NAME:K", made as a named opening makes it, then <|tool_call_argument_begin|>;
  // deepseek_v32: the name and the invoke tag's end, `">`, before DSML's parameters).
  static std::string RequiredCallPrefix(ToolCallFormat format, const std::string& name,
                                        std::vector<std::string> history_call_ids = {});

 private:
  enum class State {
    kText,         // content, looking for a block opening
    kBlock,        // inside a block, between calls
    kCallType,     // v3: the call's type, up to <｜tool▁sep｜>
    kCallName,     // the name (v32: the invoke tag's attributes, up to `">`; kimi_k2: the id)
    kArgs,         // v3/v31/kimi_k2: the raw JSON arguments
    kInvoke,       // v32: inside an invoke, between parameters
    kParamHeader,  // v32: a parameter tag's attributes, up to `">`
    kParamValue,   // v32: a parameter's value
  };
  enum class Action : unsigned char;  // what a marker does (tool_call_syntax.h)
  struct Marker;                      // a marker's text and Action
  struct Found;                       // where FindMarker stopped
  static std::span<const Marker> Markers(ToolCallFormat format, State state);
  static Found FindMarker(std::string_view text, std::span<const Marker> markers);

  // Consumes buffer_ as far as it is decided (all of it when `final`).
  void Run(bool final);
  void OnText(std::string_view text);  // the current state's text before any marker
  // False when the marker ends a header that did not parse: the marker is left to the
  // state this falls back to.
  bool OnMarker(const Marker& marker);
  void OnEnd();  // the output ended in the current state
  // kimi_k2's arguments without the whitespace around them (as Moonshot's guide and vLLM read
  // them): leading whitespace is dropped, trailing whitespace held until text follows it.
  void OnKimiArguments(std::string_view text);

  void Record(std::string_view raw);  // keeps raw text that may yet turn out to be content
  void Stray(std::string_view text);  // text between calls: content unless only whitespace
  void EndSegment();
  void UnitFailed();                  // the current call header did not parse
  void OpenBlock(std::string_view marker);
  void CloseBlock(std::string_view marker);
  void StartCall(std::string name, std::optional<std::string> id);
  void EmitArguments(std::string_view fragment);
  void EmitContent(std::string_view text);

  ToolCallFormat format_;
  State state_ = State::kText;
  std::string buffer_;  // unconsumed input: at most a held-back tail between Adds
  Delta delta_;         // what the current Add/Finish returns
  std::vector<ToolCall> calls_;

  // Until a block produced its first call name, everything in it is kept raw (block_raw_),
  // with its stray text (stray_), so that it can still become content.
  bool block_named_ = false;
  std::string block_raw_;
  std::string stray_;
  // The current call header's raw text, which becomes stray text if the header fails.
  std::string unit_raw_;
  std::string header_;  // the name / attribute text being read
  // The current between-calls segment: whitespace held until the segment shows other text.
  std::string segment_ws_;
  bool segment_is_stray_ = false;
  // v32: parameters seen in the current invoke and whether the current value is a string.
  int params_ = 0;
  bool string_value_ = false;
  // kimi_k2: the call ids, whether the current call's arguments have begun (non-whitespace),
  // and the whitespace held at their end.
  KimiCallIds kimi_ids_;
  bool args_begun_ = false;
  std::string args_space_;
};

}  // namespace mlaserve::router::openai
