// PreTokenizer: splits text into the words that BPE sees, as tokenizer.json's "pre_tokenizer"
// describes and Hugging Face `tokenizers` implements it.
//
// Supported: null, Sequence, Split (Regex or String pattern; behaviors Removed, Isolated,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space,
// use_regex with the GPT-2 regex) and Digits (individual_digits). DeepSeek-V2/V3/V3.2 use
// only these. Any other type is UNIMPLEMENTED, naming it.
//
// Steps run in order over the current list of words, each word split independently; empty
// words are dropped. ByteLevel maps each word's bytes to the byte-level alphabet, so steps
// after it see that alphabet, exactly as in `tokenizers`.
//
// Thread-safety: immutable after FromJson; Split may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/regex.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // Parses tokenizer.json's "pre_tokenizer" value; `path` names it in error messages.
  static absl::StatusOr<PreTokenizer> FromJson(const nlohmann::json& j,
                                               const std::string& path = "pre_tokenizer");

  // Appends the words of `text` (valid UTF-8) to `words`.
  absl::Status Split(std::string_view text, std::vector<std::string>* words) const;

  // True when a ByteLevel step is present (the model then works on byte-level strings).
  bool has_byte_level() const;

 private:
  struct Step {
    enum Kind { kSplit, kByteLevel } kind = kSplit;
    // kSplit: a regex (a String pattern is compiled as an escaped regex); an empty String
    // pattern leaves `regex` null and matches nothing.
    std::shared_ptr<const Regex> regex;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    // kByteLevel
    bool add_prefix_space = false;
    bool use_regex = true;
  };

  static absl::Status AddSteps(const nlohmann::json& j, const std::string& path,
                               std::vector<Step>* steps);
  static absl::Status ApplySplit(const Step& step, const std::string& word,
                                 std::vector<std::string>* out);

  std::vector<Step> steps_;
};

}  // namespace mlaserve::model
