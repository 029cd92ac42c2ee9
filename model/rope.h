// RoPE tables: the inverse frequencies and the cos/sin table that kernels/rope consumes.
//
// Matches Hugging Face transformers' rotary embeddings for DeepSeek configs: the rotary
// dimension is qk_rope_head_dim (HF sets config.head_dim to it); "default" uses
// inv_freq[i] = theta^(-2i/dim); "linear" divides those by factor; "dynamic" is HF's dynamic NTK
// table at seq_len = max_position_embeddings (it only grows past that length, which the engine
// refuses); "llama3" follows _compute_llama3_parameters; "yarn" follows modeling_rope_utils._compute_yarn_parameters
// (NTK-by-parts blend of interpolated and extrapolated frequencies, attention_factor inferred
// from factor / mscale / mscale_all_dim unless given). The attention factor is multiplied into
// cos and sin, as HF does. Arithmetic mirrors HF's float32 steps so the table agrees with it to
// the last bit or two.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "model/loader/config.h"

namespace mlaserve::model {

struct RopeFrequencies {
  std::vector<float> inv_freq;  // [dim / 2]
  float attention_factor = 1.0f;
};

// Frequencies for a rotary dimension `dim` (even). max_position_embeddings is the model's,
// used when the YaRN config omits original_max_position_embeddings.
absl::StatusOr<RopeFrequencies> ComputeRopeFrequencies(const RopeConfig& rope, int dim,
                                                       int max_position_embeddings);

// The kernels/rope table: row p = [cos(p*f_i) * af for i < dim/2 | sin(p*f_i) * af].
struct RopeTable {
  int rot_dim = 0;
  int max_position = 0;
  RopeFrequencies freqs;
  std::vector<float> cos_sin;  // [max_position, rot_dim]
};

absl::StatusOr<RopeTable> BuildRopeTable(const RopeConfig& rope, int rot_dim, int max_position,
                                         int max_position_embeddings);

// The table for a model: rot_dim = qk_rope_head_dim, rows = max_position_embeddings.
absl::StatusOr<RopeTable> BuildRopeTable(const ModelConfig& config);

}  // namespace mlaserve::model
