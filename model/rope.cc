#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::model {
namespace {

// HF's get_mscale: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1.
double YarnMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// Dimension index at which a wavelength completes `num_rotations` turns over `max_pos`.
double CorrectionDim(double num_rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}

// theta^(2i/dim) in float32, as torch computes base ** (arange(0, dim, 2).float() / dim).
float PosFreq(double theta, int i, int dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
  return static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
}

// _compute_llama3_parameters, step by step in float32 as torch runs it: low frequencies
// (wavelength above original / low_freq_factor) divided by factor, high ones kept, the band in
// between blended by a smooth factor.
absl::StatusOr<RopeFrequencies> Llama3Frequencies(const RopeConfig& rope, int dim,
                                                  int max_position_embeddings) {
  const int old_context = rope.original_max_position_embeddings > 0
                              ? rope.original_max_position_embeddings
                              : max_position_embeddings;
  if (!(rope.low_freq_factor > 0.0) || !(rope.high_freq_factor > rope.low_freq_factor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama3 low_freq_factor ", rope.low_freq_factor, " and high_freq_factor ",
        rope.high_freq_factor, " must satisfy 0 < low < high"));
  }
  const float factor = static_cast<float>(rope.factor);
  const float low_freq = static_cast<float>(rope.low_freq_factor);
  const float old_f = static_cast<float>(old_context);
  const float low_wavelen = static_cast<float>(old_context / rope.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_context / rope.high_freq_factor);
  const float band = static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);
  const float two_pi = static_cast<float>(2.0 * M_PI);
  RopeFrequencies out;
  out.inv_freq.resize(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float inv_freq = 1.0f / PosFreq(rope.theta, i, dim);
    const float wavelen = two_pi / inv_freq;
    float llama = wavelen > low_wavelen ? inv_freq / factor : inv_freq;
    const float smooth = (old_f / wavelen - low_freq) / band;
    const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) llama = smoothed;
    out.inv_freq[i] = llama;
  }
  out.attention_factor = 1.0f;
  return out;
}

}  // namespace

absl::StatusOr<RopeFrequencies> ComputeRopeFrequencies(const RopeConfig& rope, int dim,
                                                       int max_position_embeddings) {
  if (dim <= 0 || dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotary dimension is ", dim, "; it must be positive and even"));
  }
  if (!(rope.theta > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_theta is ", rope.theta, "; it must be > 0"));
  }
  const int half = dim / 2;
  RopeFrequencies out;
  out.inv_freq.resize(half);
  if (rope.type == "default") {
    for (int i = 0; i < half; ++i) out.inv_freq[i] = 1.0f / PosFreq(rope.theta, i, dim);
    out.attention_factor = 1.0f;
    return out;
  }
  if (rope.type != "yarn" && rope.type != "linear" && rope.type != "dynamic" &&
      rope.type != "llama3") {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope type \"", rope.type, "\" is not supported (default, linear, dynamic, yarn, llama3)"));
  }
  if (!(rope.factor > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(rope.type, " factor is ", rope.factor, "; it must be > 0"));
  }
  if (rope.type == "linear") {
    // _compute_linear_scaling_rope_parameters: the default frequencies divided by factor.
    const float factor_f = static_cast<float>(rope.factor);
    for (int i = 0; i < half; ++i) out.inv_freq[i] = (1.0f / PosFreq(rope.theta, i, dim)) / factor_f;
    return out;
  }
  if (rope.type == "dynamic") {
    // _compute_dynamic_ntk_parameters at seq_len = max_position_embeddings (HF's initial table;
    // it recomputes only for sequences longer than that, which the engine refuses):
    // theta * ((factor * L / L) - (factor - 1)) ^ (dim / (dim - 2)), in Python doubles.
    if (dim <= 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("dynamic RoPE needs a rotary dimension above 2, got ", dim));
    }
    const double len = static_cast<double>(max_position_embeddings);
    const double base =
        rope.theta * std::pow(rope.factor * len / len - (rope.factor - 1.0),
                              static_cast<double>(dim) / static_cast<double>(dim - 2));
    for (int i = 0; i < half; ++i) out.inv_freq[i] = 1.0f / PosFreq(base, i, dim);
    return out;
  }
  if (rope.type == "llama3") return Llama3Frequencies(rope, dim, max_position_embeddings);
  const double factor = rope.factor;
  if (!(factor > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("yarn factor is ", factor, "; it must be > 0"));
  }
  const int orig_max = rope.original_max_position_embeddings > 0
                           ? rope.original_max_position_embeddings
                           : max_position_embeddings;
  if (orig_max <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "yarn original_max_position_embeddings is ", orig_max, "; it must be positive"));
  }
  double attention_factor;
  if (rope.attention_factor.has_value()) {
    attention_factor = *rope.attention_factor;
  } else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
    attention_factor = YarnMscale(factor, rope.mscale) / YarnMscale(factor, rope.mscale_all_dim);
  } else {
    attention_factor = YarnMscale(factor, 1.0);
  }
  // HF: `beta_fast or 32`, `beta_slow or 1` (a zero means the default).
  const double beta_fast = rope.beta_fast != 0.0 ? rope.beta_fast : 32.0;
  const double beta_slow = rope.beta_slow != 0.0 ? rope.beta_slow : 1.0;
  double low = CorrectionDim(beta_fast, dim, rope.theta, orig_max);
  double high = CorrectionDim(beta_slow, dim, rope.theta, orig_max);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevent a singular ramp
  const float lowf = static_cast<float>(low);
  const float span = static_cast<float>(high - low);
  const float factor_f = static_cast<float>(factor);
  for (int i = 0; i < half; ++i) {
    const float pos_freq = PosFreq(rope.theta, i, dim);
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor_f * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - lowf) / span, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out.inv_freq[i] =
        interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  out.attention_factor = static_cast<float>(attention_factor);
  return out;
}

absl::StatusOr<RopeTable> BuildRopeTable(const RopeConfig& rope, int rot_dim, int max_position,
                                         int max_position_embeddings) {
  if (max_position <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope table size is ", max_position, "; it must be positive"));
  }
  // The table holds every position up front, and max_position comes from config.json: refuse
  // sizes no host should hold instead of letting the allocation throw.
  constexpr uint64_t kMaxTableBytes = uint64_t{4} << 30;
  const uint64_t table_bytes = uint64_t(max_position) * uint64_t(rot_dim) * sizeof(float);
  if (table_bytes > kMaxTableBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a RoPE table of ", max_position, " positions x ", rot_dim, " rotary dims needs ",
        table_bytes, " bytes; mlaserve builds at most ", kMaxTableBytes,
        " (max_position_embeddings in config.json)"));
  }
  RopeTable table;
  table.rot_dim = rot_dim;
  table.max_position = max_position;
  auto freqs = ComputeRopeFrequencies(rope, rot_dim, max_position_embeddings);
  if (!freqs.ok()) return freqs.status();
  table.freqs = *std::move(freqs);
  const int half = rot_dim / 2;
  const float af = table.freqs.attention_factor;
  table.cos_sin.resize(static_cast<size_t>(max_position) * rot_dim);
  for (int p = 0; p < max_position; ++p) {
    float* row = table.cos_sin.data() + static_cast<size_t>(p) * rot_dim;
    for (int i = 0; i < half; ++i) {
      // HF: freqs = inv_freq @ position (one f32 product), then cos/sin in f32, times af.
      const float angle = table.freqs.inv_freq[i] * static_cast<float>(p);
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * af;
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * af;
    }
  }
  return table;
}

absl::StatusOr<RopeTable> BuildRopeTable(const ModelConfig& config) {
  // The config parser saw the raw JSON (absent vs. zero mscale fields) and resolved HF's
  // attention_scaling; use its value rather than re-deriving it from defaults.
  RopeConfig rope = config.rope;
  if (rope.type == "yarn") rope.attention_factor = rope.attention_scaling;
  return BuildRopeTable(rope, config.qk_rope_head_dim, config.max_position_embeddings,
                        config.max_position_embeddings);
}

}  // namespace mlaserve::model
