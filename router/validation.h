// Request validation for Generate. Every failure is INVALID_ARGUMENT with a message that names
// the offending value and the allowed range, so a client can fix its request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "router/request.h"

namespace mlaserve::router {

// OK when `text` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF);
// otherwise names `what`, the byte offset and the byte value.
absl::Status ValidateUtf8(std::string_view text, std::string_view what);

// Prompt token ids: not empty, every id in [0, vocab_size), and shorter than the context
// (at least one token must be left to generate).
absl::Status ValidatePrompt(std::span<const int32_t> prompt_ids, const ModelLimits& limits);

// Before tokenizing: INVALID_ARGUMENT when text of `text_bytes` bytes must have more tokens than
// the context holds (no token of the tokenizer is longer than `max_bytes_per_token`).
absl::Status ValidatePromptBytes(size_t text_bytes, std::optional<size_t> max_bytes_per_token,
                                 const ModelLimits& limits);

// The router's edge: the sampling ranges (common::ValidateSamplingValues), stop_token_ids
// inside the vocabulary, stop strings non-empty UTF-8 within the counts and sizes of
// common/request_limits.h, and max_new_tokens: >= 1, and prompt + max_new_tokens within the
// context. An unset max_new_tokens is resolved here to min(kDefaultMaxNewTokens, context -
// prompt).
absl::Status ValidateAndResolveSampling(SamplingConfig& sampling, int32_t prompt_tokens,
                                        const ModelLimits& limits);

}  // namespace mlaserve::router
