// Domain form of a Generate request, after defaults are filled and values validated.
// router/api_conversion.h builds it from api.proto; router/validation.h checks it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/request_limits.h"

namespace mlaserve::router {

// The defaults here are the documented defaults of api.proto's SamplingParams (the sampling
// knobs' own in common::SamplingValues).
struct SamplingConfig : common::SamplingValues {
  std::optional<uint64_t> seed;            // unset until the router draws one
  std::optional<int32_t> max_new_tokens;   // unset until resolved against the prompt
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
};

// What the router must know about the model to validate a request.
struct ModelLimits {
  int32_t vocab_size = 0;
  int32_t max_context = 0;  // max_position_embeddings
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
};

// Used when max_new_tokens is unset (capped by what the context leaves).
inline constexpr int32_t kDefaultMaxNewTokens = 128;

}  // namespace mlaserve::router
