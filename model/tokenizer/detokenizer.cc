#include "model/tokenizer/detokenizer.h"

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace mlaserve::model {

absl::StatusOr<std::string> IncrementalDetokenizer::Add(int32_t id) {
  std::optional<std::string_view> bytes = tokenizer_.TokenBytes(id, skip_special_tokens_);
  if (!bytes) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " has no token; vocab size is ",
                                                   tokenizer_.vocab_size()));
  }
  pending_.append(*bytes);
  // Emit every complete character and every definitely invalid run (as U+FFFD); keep only
  // a trailing prefix that more bytes could still complete. This splits the byte stream at
  // the same places whole-text lossy decoding does, so the pieces add up to Decode.
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::Step step = utf8::ScanAt(pending_, pos);
    if (step.kind == utf8::Step::kIncomplete) break;
    if (step.kind == utf8::Step::kValid) {
      out.append(pending_, pos, step.length);
    } else {
      out.append(utf8::kReplacementUtf8);
    }
    pos += step.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out = utf8::Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace mlaserve::model
