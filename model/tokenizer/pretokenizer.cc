#include "model/tokenizer/pretokenizer.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/tokenizer_json.h"

namespace mlaserve::model {
namespace {

using tokenizer_json::BoolField;
using tokenizer_json::Json;
using tokenizer_json::StringField;

// The GPT-2 pattern the ByteLevel pre-tokenizer applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A literal String pattern as a regex: every ASCII punctuation character escaped.
std::string EscapeLiteral(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Regex>> CompileShared(std::string_view pattern) {
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(pattern));
  return std::shared_ptr<const Regex>(std::move(regex));
}

absl::StatusOr<SplitBehavior> ParseBehavior(const std::string& name, const std::string& path) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat(
      "tokenizer.json: ", path, ".behavior is \"", name,
      "\"; expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous"));
}

// A piece of a word: byte range and whether the pattern matched it.
struct Piece {
  size_t begin;
  size_t end;
  bool is_match;
};

// What `tokenizers` calls find_matches: matches and the gaps between them, covering `word`.
std::vector<Piece> Cover(const std::vector<Regex::Match>& matches, size_t size) {
  std::vector<Piece> pieces;
  if (size == 0) {
    pieces.push_back({0, 0, false});
    return pieces;
  }
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) pieces.push_back({prev, b, false});
    pieces.push_back({b, e, true});
    prev = e;
  }
  if (prev != size) pieces.push_back({prev, size, false});
  return pieces;
}

// Applies a split behavior; the result's is_match means "remove this piece".
std::vector<Piece> ApplyBehavior(std::vector<Piece> pieces, SplitBehavior behavior) {
  std::vector<Piece> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (Piece& p : pieces) p.is_match = false;
      return pieces;
    case SplitBehavior::kRemoved:
      return pieces;
    case SplitBehavior::kContiguous:
      for (const Piece& p : pieces) {
        if (p.is_match == previous_match && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back({p.begin, p.end, false});
        }
        previous_match = p.is_match;
      }
      return out;
    case SplitBehavior::kMergedWithPrevious:
      for (const Piece& p : pieces) {
        if (p.is_match && !previous_match && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back({p.begin, p.end, false});
        }
        previous_match = p.is_match;
      }
      return out;
    case SplitBehavior::kMergedWithNext:
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      return out;
  }
  return pieces;
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const Json& j, const std::string& path) {
  PreTokenizer pre;
  RETURN_IF_ERROR(AddSteps(j, path, &pre.steps_));
  return pre;
}

absl::Status PreTokenizer::AddSteps(const Json& j, const std::string& path,
                                    std::vector<Step>* steps) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, StringField(j, "type", path));
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: ", path, ".pretokenizers must be an array"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(AddSteps((*it)[i], absl::StrCat(path, ".pretokenizers[", i, "]"), steps));
    }
    return absl::OkStatus();
  }
  Step step;
  if (type == "Split") {
    step.kind = Step::kSplit;
    auto pattern = j.find("pattern");
    if (pattern == j.end() || !pattern->is_object() || pattern->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: ", path, ".pattern must be {\"Regex\": ...} or {\"String\": ...}"));
    }
    const std::string pattern_path = absl::StrCat(path, ".pattern");
    if (pattern->contains("Regex")) {
      ASSIGN_OR_RETURN(const std::string re, StringField(*pattern, "Regex", pattern_path));
      absl::StatusOr<std::shared_ptr<const Regex>> compiled = CompileShared(re);
      if (!compiled.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json: ", pattern_path, ": ", compiled.status().message()));
      }
      step.regex = *std::move(compiled);
    } else if (pattern->contains("String")) {
      ASSIGN_OR_RETURN(const std::string literal, StringField(*pattern, "String", pattern_path));
      if (!literal.empty()) {
        ASSIGN_OR_RETURN(step.regex, CompileShared(EscapeLiteral(literal)));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", pattern_path,
                                                     " has neither \"Regex\" nor \"String\": ",
                                                     pattern->dump()));
    }
    ASSIGN_OR_RETURN(const std::string behavior, StringField(j, "behavior", path));
    ASSIGN_OR_RETURN(step.behavior, ParseBehavior(behavior, path));
    ASSIGN_OR_RETURN(step.invert, BoolField(j, "invert", false, path));
  } else if (type == "ByteLevel") {
    step.kind = Step::kByteLevel;
    ASSIGN_OR_RETURN(step.add_prefix_space, BoolField(j, "add_prefix_space", true, path));
    ASSIGN_OR_RETURN(step.use_regex, BoolField(j, "use_regex", true, path));
    if (step.use_regex) {
      ASSIGN_OR_RETURN(step.regex, CompileShared(kGpt2Pattern));
    }
  } else if (type == "Digits") {
    // Numeric characters (Unicode N*), each alone or in runs.
    step.kind = Step::kSplit;
    ASSIGN_OR_RETURN(const bool individual, BoolField(j, "individual_digits", false, path));
    step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    ASSIGN_OR_RETURN(step.regex, CompileShared(R"(\p{N})"));
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.json: ", path, ".type is \"", type,
        "\"; supported pre-tokenizers are Sequence, Split, ByteLevel and Digits"));
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status PreTokenizer::ApplySplit(const Step& step, const std::string& word,
                                      std::vector<std::string>* out) {
  std::vector<Regex::Match> matches;
  if (step.regex != nullptr && !word.empty()) {
    ASSIGN_OR_RETURN(matches, step.regex->FindAll(word));
  }
  std::vector<Piece> pieces = Cover(matches, word.size());
  if (step.invert) {
    for (Piece& p : pieces) p.is_match = !p.is_match;
  }
  for (const Piece& p : ApplyBehavior(std::move(pieces), step.behavior)) {
    if (p.is_match || p.begin == p.end) continue;
    out->push_back(word.substr(p.begin, p.end - p.begin));
  }
  return absl::OkStatus();
}

absl::Status PreTokenizer::Split(std::string_view text, std::vector<std::string>* words) const {
  std::vector<std::string> current;
  if (!text.empty()) current.emplace_back(text);
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string& word : current) {
      if (step.kind == Step::kSplit) {
        RETURN_IF_ERROR(ApplySplit(step, word, &next));
        continue;
      }
      // ByteLevel: optional prefix space, optional GPT-2 split, then the byte mapping.
      if (step.add_prefix_space && (word.empty() || word[0] != ' ')) word.insert(word.begin(), ' ');
      const size_t first = next.size();
      if (step.use_regex) {
        Step isolated;
        isolated.regex = step.regex;
        RETURN_IF_ERROR(ApplySplit(isolated, word, &next));
      } else if (!word.empty()) {
        next.push_back(std::move(word));
      }
      for (size_t i = first; i < next.size(); ++i) next[i] = byte_level::Encode(next[i]);
    }
    std::swap(current, next);
  }
  for (std::string& w : current) words->push_back(std::move(w));
  return absl::OkStatus();
}

bool PreTokenizer::has_byte_level() const {
  return std::any_of(steps_.begin(), steps_.end(),
                     [](const Step& s) { return s.kind == Step::kByteLevel; });
}

}  // namespace mlaserve::model
