#include "router/validation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/request_limits.h"
#include "common/status.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"

namespace mlaserve::router {
namespace {

absl::Status Invalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// Length of the UTF-8 sequence starting at s[i], or 0 when it is malformed.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[n]) return 0;                 // overlong
  if (cp > 0x10FFFF) return 0;                         // beyond Unicode
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;          // UTF-16 surrogate
  return n;
}

}  // namespace

absl::Status ValidateUtf8(std::string_view text, std::string_view what) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      return Invalid(absl::StrFormat("%s is not valid UTF-8: malformed sequence at byte %d "
                                     "(0x%02x)",
                                     what, i, static_cast<unsigned char>(text[i])));
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::Status ValidatePrompt(std::span<const int32_t> prompt_ids, const ModelLimits& limits) {
  if (prompt_ids.empty()) return Invalid("prompt is empty; give text or at least one token id");
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    const int32_t id = prompt_ids[i];
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("prompt token id ", id, " at position ", i,
                                  " is outside the vocabulary [0, ", limits.vocab_size, ")"));
    }
  }
  const int64_t n = static_cast<int64_t>(prompt_ids.size());
  if (n >= limits.max_context) {
    return Invalid(absl::StrCat("prompt has ", n, " tokens; this model accepts ",
                                limits.max_context,
                                " tokens in total, so a prompt may have at most ",
                                limits.max_context - 1, " to leave room for one new token"));
  }
  return absl::OkStatus();
}

absl::Status ValidateAndResolveSampling(SamplingConfig& s, int32_t prompt_tokens,
                                        const ModelLimits& limits) {
  RETURN_IF_ERROR(common::ValidateSamplingValues(s, limits.vocab_size));
  RETURN_IF_ERROR(common::ValidateResponseFormat(s, s.ignore_eos));
  if (!s.json_schema.empty()) {
    // Compiled here once per router process (cached): a schema we cannot enforce is the
    // client's 400, naming the keyword and its pointer, before any worker is involved.
    RETURN_IF_ERROR(model::JsonSchema::Get(s.json_schema, s.json_schema_strict).status());
  }
  RETURN_IF_ERROR(model::CompileSchemaChoices(s.json_choices).status());
  RETURN_IF_ERROR(common::NormalizeLogitBias(s));
  RETURN_IF_ERROR(common::ValidateStopCounts(s.stop.size(), s.stop_token_ids.size()));
  for (int32_t id : s.stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("stop_token_ids entry ", id, " is outside the vocabulary [0, ",
                                  limits.vocab_size, ")"));
    }
  }
  for (size_t i = 0; i < s.stop.size(); ++i) {
    if (s.stop[i].empty()) return Invalid(absl::StrCat("stop string ", i, " is empty"));
    RETURN_IF_ERROR(common::ValidateStopString(i, s.stop[i]));
    if (absl::Status st = ValidateUtf8(s.stop[i], absl::StrCat("stop string ", i)); !st.ok()) {
      return st;
    }
  }
  const int32_t room = limits.max_context - prompt_tokens;
  if (!s.max_new_tokens.has_value()) {
    s.max_new_tokens = std::max<int32_t>(1, std::min(kDefaultMaxNewTokens, room));
  }
  const int32_t m = *s.max_new_tokens;
  if (m < 1) {
    return Invalid(absl::StrCat("max_new_tokens ", m, " is out of range; it must be >= 1"));
  }
  if (m > limits.max_context) {
    return Invalid(absl::StrCat("max_new_tokens ", m, " exceeds the model's context of ",
                                limits.max_context, " tokens"));
  }
  if (static_cast<int64_t>(prompt_tokens) + m > limits.max_context) {
    return Invalid(absl::StrCat("prompt has ", prompt_tokens, " tokens and max_new_tokens is ",
                                m, "; together they exceed the model's context of ",
                                limits.max_context, " tokens (at most ", room,
                                " new tokens fit)"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePromptBytes(size_t text_bytes, std::optional<size_t> max_bytes_per_token,
                                 const ModelLimits& limits) {
  if (!max_bytes_per_token.has_value() || *max_bytes_per_token == 0) return absl::OkStatus();
  // Each token covers at most max_bytes_per_token bytes of text, so longer text cannot fit.
  const uint64_t most = static_cast<uint64_t>(limits.max_context - 1) * *max_bytes_per_token;
  if (text_bytes > most) {
    return Invalid(absl::StrCat("prompt text has ", text_bytes, " bytes; this model accepts ",
                                limits.max_context - 1, " prompt tokens of at most ",
                                *max_bytes_per_token, " bytes each (", most,
                                " bytes), so it cannot fit"));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::router
