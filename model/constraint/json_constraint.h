// JSON mode (OpenAI's response_format {"type": "json_object"}): the generated text is made to
// be one JSON object (RFC 8259; whitespace allowed before it and between its tokens), then
// EOS. Each step the sampler sees only the tokens that keep the text a prefix of such an
// object (SampleRow::allowed), and EOS only once the object is complete.
//
// ConstraintVocabulary holds, per token id, the bytes the token adds to the text (what the
// detokenizer writes), and a byte trie over them; a mask is found by walking the trie with the
// JSON recognizer, pruning at the first byte it refuses. Masks depend only on the
// recognizer's state, so they are cached in the vocabulary (bounded) and shared by every
// request of the process. Added tokens (special or not: <think>, tool-call markers, BOS) are
// never allowed in the JSON; the ids in `eos_ids` only when the object is complete.
//
// Reasoning models (as vLLM does with a reasoning parser): a constraint built with a
// `start_after` text, e.g. "</think>", holds to JSON only the bytes after that text's first
// occurrence in the output (every token's bytes, added tokens' included). Before it every
// token with bytes may be drawn, added ones too (DeepSeek's </think> is one), except EOS and a
// token that completes the marker and goes on with bytes no JSON object starts with: the bytes
// after the marker in that token are the JSON's first. The marker is matched across tokens
// (Knuth-Morris-Pratt), so the masks before it depend only on how many of its bytes end the
// output; they are cached per (marker, that count) beside the JSON ones.
//
// Structured outputs (response_format json_schema): the same machinery over a compiled schema
// (json_schema.h) instead of the JSON-object recognizer: the text is one JSON value the schema
// admits (not necessarily an object), then EOS. Its masks are cached beside JSON mode's, keyed
// by the schema's serial and the schema recognizer's state bytes; its free masks before a
// marker by (marker, progress, schema).
//
// Schema choices (api.proto response_format_choices; a forced tool call whose name picks the
// schema of its arguments): the text is one choice's prefix, then a value that choice's schema
// admits. While the prefix is being written every token that keeps the text a prefix of some
// choice's prefix may be drawn, where an added token's text in a prefix (a tool-call separator)
// is written by that token only, as the tokenizer would encode it (schema_choices.h); a token
// that completes a prefix may go on with the first bytes of that choice's value. Those masks
// depend on the text written so far, and are cached per (choice set, text). A choice without a
// schema holds only its prefix: after it every token with text, and EOS, may be drawn (a DSML
// tool call's name, whose parameters are not JSON).
//
// JsonConstraint is one request's: its phase, marker progress and recognizer state, advanced
// token by token.
// Not thread-safe per instance; the vocabulary (and its cache) is.
//
// The language, byte by byte: RFC 8259's grammar, with valid UTF-8 in strings (as a strict
// validator: no overlongs, surrogates or code points past U+10FFFF; a character may span
// tokens), \uXXXX taking any 4 hex digits (unpaired surrogate escapes included, as the grammar
// does), no raw control bytes, at most 128 nested objects/arrays, and whitespace runs between
// tokens of at most 32 bytes (unbounded ones are how a model loops). Once the object closes no
// more text is allowed, not even whitespace: only EOS. The recognizer's state is a 24-byte
// value (a bit stack of object/array kinds, depth, a lexical state, small counters); the mask
// cache is keyed by it and holds the 1024 most recently used masks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/request_limits.h"

namespace mlaserve::model {

class Tokenizer;
class JsonSchema;

// One way a constrained text may begin: `prefix`, byte for byte, then a JSON value `schema`
// admits; a null schema holds only the prefix (any text after it, EOS any time).
struct SchemaChoice {
  std::string prefix;
  std::shared_ptr<const JsonSchema> schema;
};

// The choices of a request (common::SamplingValues::json_choices, validated), their schemas
// compiled through JsonSchema::Get (the process's cache). INVALID_ARGUMENT naming the choice's
// index and prefix with the compiler's message. An empty schema text is a null schema.
absl::StatusOr<std::vector<SchemaChoice>> CompileSchemaChoices(
    const std::vector<common::SchemaChoice>& choices);

class ConstraintVocabulary {
 public:
  // From a checkpoint's tokenizer: ids [0, vocab_size) (the model's logit rows; ids the
  // tokenizer lacks are never allowed). INVALID_ARGUMENT when the vocabulary cannot spell
  // every JSON text (it lacks a token for one of the bytes JSON needs, e.g. '{').
  static absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> FromTokenizer(
      const Tokenizer& tokenizer, int vocab_size, std::vector<int32_t> eos_ids);
  // Tests: token i's bytes, or nullopt for an id that is never text; `added_ids` (added
  // tokens: </think>, tool-call markers) are text only before a constraint's start marker.
  static absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> FromTokens(
      std::vector<std::optional<std::string>> tokens, std::vector<int32_t> eos_ids,
      const std::vector<int32_t>& added_ids = {});

  ~ConstraintVocabulary();
  int vocab_size() const;
  // Mask words: vocab_size bits, bit t of word t / 64 set when token t is allowed.
  int mask_words() const { return (vocab_size() + 63) / 64; }

 private:
  friend class JsonConstraint;
  struct Impl;
  explicit ConstraintVocabulary(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class JsonConstraint {
 public:
  // `start_after` empty: JSON from the first token; else after that text's first occurrence
  // (any length here; the API's edges bound it, common::kMaxJsonAfterBytes).
  // `schema` null: JSON mode (one object); else the value `schema` admits.
  explicit JsonConstraint(std::shared_ptr<const ConstraintVocabulary> vocab,
                          std::string start_after = {},
                          std::shared_ptr<const JsonSchema> schema = nullptr);
  // The text is one of `choices` (not empty; prefixes non-empty, none a prefix of another, as
  // common::ValidateResponseFormat checks): its prefix, then a value its schema admits.
  JsonConstraint(std::shared_ptr<const ConstraintVocabulary> vocab,
                 std::vector<SchemaChoice> choices);
  ~JsonConstraint();
  JsonConstraint(JsonConstraint&&) noexcept;
  JsonConstraint& operator=(JsonConstraint&&) noexcept;

  // The tokens allowed next (mask_words() words; never all zero: a byte-level vocabulary can
  // always continue, a complete value allows EOS, every state a schema's recognizer keeps can
  // be completed, and before the marker a single byte never completes it with a refused byte
  // after it). Valid until the next Advance.
  std::span<const uint64_t> AllowedTokens();
  // Moves past `token`, which AllowedTokens() allowed: INVALID_ARGUMENT naming it otherwise
  // (the state is then unchanged).
  absl::Status Advance(int32_t token);
  // The start marker has appeared (always, without one), or a choice's prefix has been
  // written: the JSON text has begun.
  bool JsonStarted() const;
  // With choices: the index (in the order given) of the one whose prefix was written; nullopt
  // before that, or without choices.
  std::optional<size_t> Chosen() const;
  // The value is complete: EOS is allowed (JSON mode: only EOS; a schema's number or literal
  // may also go on, "1" becoming "12").
  bool Complete() const;

 private:
  absl::Status AdvanceBeforeMarker(int32_t token);
  absl::Status AdvanceChoosing(int32_t token);

  struct State;
  std::shared_ptr<const ConstraintVocabulary> vocab_;
  std::unique_ptr<State> state_;
};

}  // namespace mlaserve::model
