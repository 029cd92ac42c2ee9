// JSON mode in worker tests: a made-up byte-level vocabulary for the fake engines, and checks
// of generated text that do not use the constraint under test (nlohmann's parser judges).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/constraint/json_constraint.h"
#include "nlohmann/json.hpp"

namespace mlaserve::testing {

// Token strings for `vocab_size` ids (> 256): ids 0..255 are the 256 single bytes, ordered so
// that among equally likely allowed tokens the lowest id moves an object towards its end ('"'
// first, then '}', ':', ',' ...; whitespace last): a fake engine whose logits are flat except
// one token then finishes objects greedily. `eos` and every id past 255 are no text.
inline std::vector<std::optional<std::string>> JsonTestTokens(int vocab_size, int32_t eos) {
  const std::string first = "\"}:,]{[1a0";
  const std::string last = " \t\n\r";
  std::vector<std::optional<std::string>> tokens(vocab_size);
  int id = 0;
  for (char c : first) tokens[id++] = std::string(1, c);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (first.find(c) == std::string::npos && last.find(c) == std::string::npos) {
      tokens[id++] = std::string(1, c);
    }
  }
  for (char c : last) tokens[id++] = std::string(1, c);
  tokens[eos] = std::nullopt;
  return tokens;
}

// `tokens` with id `id` (past 255, not EOS) spelling "</think>", as the added token that ends
// DeepSeek-V3.1's reasoning (pass {id} to ConstraintVocabulary::FromTokens as added_ids).
inline std::vector<std::optional<std::string>> WithEndThink(
    std::vector<std::optional<std::string>> tokens, int32_t id) {
  tokens[id] = "</think>";
  return tokens;
}

// The id of the single-byte token `c` in `tokens` (JsonTestTokens), -1 if none.
inline int32_t JsonTestTokenId(const std::vector<std::optional<std::string>>& tokens, char c) {
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id] == std::string(1, c)) return static_cast<int32_t>(id);
  }
  return -1;
}

// A made-up prompt of `n` ids below `vocab_size`; `stride` and `salt` vary it.
inline std::vector<int32_t> JsonTestPrompt(int n, int vocab_size, int stride, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * stride + salt) % vocab_size;
  return p;
}

inline std::shared_ptr<const model::ConstraintVocabulary> JsonTestVocabulary(int vocab_size,
                                                                             int32_t eos) {
  return *model::ConstraintVocabulary::FromTokens(JsonTestTokens(vocab_size, eos), {eos});
}

// The text of `ids` under `tokens` (ids without text add nothing).
inline std::string Spell(const std::vector<std::optional<std::string>>& tokens,
                         std::span<const int32_t> ids) {
  std::string text;
  for (int32_t id : ids) {
    if (id >= 0 && id < static_cast<int>(tokens.size()) && tokens[id].has_value()) {
      text += *tokens[id];
    }
  }
  return text;
}

// One JSON object (RFC 8259), whitespace around it allowed.
inline bool IsJsonObject(std::string_view text) {
  if (!nlohmann::json::accept(text)) return false;
  return nlohmann::json::parse(text).is_object();
}

// Whether some continuation of `text` is one JSON object: nlohmann's parser fails only by
// running out of input (its error position is one past the end), and the first byte that is
// not whitespace opens an object.
inline bool IsJsonObjectPrefix(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\n\r");
  if (first == std::string_view::npos) return true;
  if (text[first] != '{') return false;
  struct Sax : nlohmann::json_sax<nlohmann::json> {
    size_t error_at = 0;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception&) override {
      error_at = position;
      return false;
    }
  } sax;
  if (nlohmann::json::sax_parse(text, &sax)) return true;  // complete already
  return sax.error_at == text.size() + 1;
}

}  // namespace mlaserve::testing
