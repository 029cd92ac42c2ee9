#include "model/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/tokenizer/tokenizer_json.h"
#include "model/tokenizer/utf8.h"

namespace mlaserve::model {
namespace {

using tokenizer_json::BoolField;
using tokenizer_json::Json;
using tokenizer_json::StringField;

// Start of the run of whitespace that ends `text` (text.size() if none).
size_t WhitespaceRunStart(std::string_view text) {
  size_t start = text.size();
  while (start > 0) {
    size_t p = start - 1;
    while (p > 0 && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) --p;
    size_t q = p;
    if (!utf8::IsWhitespace(utf8::DecodeAt(text, &q))) break;
    start = p;
  }
  return start;
}

// Length of the run of whitespace that starts `text`.
size_t WhitespaceRunLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t q = pos;
    if (!utf8::IsWhitespace(utf8::DecodeAt(text, &q))) break;
    pos = q;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view s, int32_t token) {
  if (s.empty()) return;
  int32_t node = 0;
  for (char c : s) {
    const auto b = static_cast<uint8_t>(c);
    auto it = nodes[node].children.find(b);
    if (it == nodes[node].children.end()) {
      nodes.emplace_back();
      it = nodes[node].children.emplace(b, static_cast<int32_t>(nodes.size() - 1)).first;
    }
    node = it->second;
  }
  // With duplicate contents the first token wins, like the first pattern in Aho-Corasick.
  if (nodes[node].token < 0) nodes[node].token = token;
  first_byte[static_cast<uint8_t>(s[0])] = true;
}

std::optional<std::pair<int32_t, size_t>> AddedVocabulary::Trie::LongestAt(std::string_view text,
                                                                        size_t pos) const {
  std::optional<std::pair<int32_t, size_t>> best;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = nodes[node].children.find(static_cast<uint8_t>(text[i]));
    if (it == nodes[node].children.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) best = std::make_pair(nodes[node].token, i + 1 - pos);
  }
  return best;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json& added_tokens) {
  AddedVocabulary vocab;
  if (added_tokens.is_null()) return vocab;
  if (!added_tokens.is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: added_tokens must be an array");
  }
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const Json& t = added_tokens[i];
    const std::string path = absl::StrCat("added_tokens[", i, "]");
    AddedToken token;
    auto id = t.is_object() ? t.find("id") : t.end();
    if (!t.is_object() || id == t.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: ", path, " needs a non-negative integer \"id\": ", t.dump()));
    }
    token.id = static_cast<int32_t>(id->get<int64_t>());
    ASSIGN_OR_RETURN(token.content, StringField(t, "content", path));
    if (token.content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: ", path, ".content is empty"));
    }
    if (auto bad = utf8::FirstInvalidByte(token.content)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", path,
                                                     ".content is not valid UTF-8 at byte ",
                                                     *bad));
    }
    ASSIGN_OR_RETURN(token.special, BoolField(t, "special", false, path));
    ASSIGN_OR_RETURN(token.single_word, BoolField(t, "single_word", false, path));
    ASSIGN_OR_RETURN(token.lstrip, BoolField(t, "lstrip", false, path));
    ASSIGN_OR_RETURN(token.rstrip, BoolField(t, "rstrip", false, path));
    ASSIGN_OR_RETURN(token.normalized, BoolField(t, "normalized", !token.special, path));
    vocab.tokens_.push_back(std::move(token));
  }
  // `tokenizers` registers special tokens before the others; that order decides duplicates.
  for (bool special : {true, false}) {
    for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
      const AddedToken& t = vocab.tokens_[i];
      if (t.special != special) continue;
      (t.normalized ? vocab.normalized_trie_ : vocab.raw_trie_)
          .Insert(t.content, static_cast<int32_t>(i));
    }
  }
  // `tokenizers` tests single_word with Rust regex's \w (UTS #18 word characters), which
  // differs from Oniguruma's \w (Regex's): it takes ZWJ / ZWNJ and not ¹ ² ³ ¼ ½ ¾.
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> word_char,
                   Regex::Compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])"));
  vocab.word_char_ = std::move(word_char);
  return vocab;
}

absl::StatusOr<bool> AddedVocabulary::TouchesWord(std::string_view text, size_t begin,
                                                  size_t end) const {
  if (begin > 0) {
    size_t p = begin - 1;
    while (p > 0 && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) --p;
    ASSIGN_OR_RETURN(std::optional<size_t> m, word_char_->MatchLengthAt(text, p));
    if (m) return true;
  }
  if (end < text.size()) {
    ASSIGN_OR_RETURN(std::optional<size_t> m, word_char_->MatchLengthAt(text, end));
    if (m) return true;
  }
  return false;
}

absl::Status AddedVocabulary::Split(std::string_view text, bool normalized_pass,
                                    std::vector<TextSegment>* out) const {
  if (text.empty()) {
    out->push_back({text, std::nullopt});
    return absl::OkStatus();
  }
  const Trie& trie = normalized_pass ? normalized_trie_ : raw_trie_;
  size_t emitted = 0;  // text before this offset is in `out`
  size_t search = 0;   // where the next match may start (the end of the previous one)
  while (search < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[search])]) {
      ++search;
      continue;
    }
    const std::optional<std::pair<int32_t, size_t>> found = trie.LongestAt(text, search);
    if (!found) {
      ++search;
      continue;
    }
    const AddedToken& token = tokens_[found->first];
    size_t start = search;
    size_t stop = search + found->second;
    // The scan resumes after the match even when the match is rejected below.
    search = stop;
    if (token.single_word) {
      ASSIGN_OR_RETURN(const bool touches, TouchesWord(text, start, stop));
      if (touches) continue;
    }
    if (token.lstrip) start = std::max(WhitespaceRunStart(text.substr(0, start)), emitted);
    if (token.rstrip) stop += WhitespaceRunLength(text.substr(stop));
    // A match inside whitespace an rstrip already took is dropped (a degenerate case where
    // `tokenizers` would emit overlapping pieces).
    if (start < emitted) continue;
    if (emitted < start) out->push_back({text.substr(emitted, start - emitted), std::nullopt});
    out->push_back({text.substr(start, stop - start), token.id});
    emitted = stop;
    search = std::max(search, stop);
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), std::nullopt});
  return absl::OkStatus();
}

}  // namespace mlaserve::model
