#include "worker/worker_proto.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/request_limits.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"

#ifndef MLASERVE_WORKER_VERSION
#define MLASERVE_WORKER_VERSION "0.1.0"
#endif

namespace mlaserve::worker {
namespace {

// The repetition penalty divides a positive logit and multiplies a negative one, in float32.
// Any value > 0 is valid (api.proto), but one below kMinRepetitionPenalty or above
// kMaxRepetitionPenalty turns ordinary logits into +/-infinity. The sampler is well defined on
// such rows by itself now (kernels/sampling/api.h, "Non-finite logits"; its softmax used to meet
// inf - inf = NaN and draw any token), but an overflow still loses what the exact values say:
// 0.5 and 0.25 divided by 1.4e-45 are both +infinity, which share the draw, where the exact values
// give the first every time; -2 and -3 times 3.4e38 are both -infinity, and when they are the
// only tokens a JSON mask allows the row has no distribution left: the sampler's greedy pick is
// then a token the mask refused (the request ends INTERNAL "breaks the JSON constraint").
// WorkerProtoTest.ExtremeRepetitionPenaltiesKeepTheMaskedDrawInsideTheMask holds both. At these
// bounds the logits the penalty touches (|logit| < 3e8 stays finite) are already 1e30 times
// their size, so the draw is the one the exact value gives: clamping changes what float32
// computes, not the distribution.
constexpr float kMinRepetitionPenalty = 1e-30f;
constexpr float kMaxRepetitionPenalty = 1e30f;

float EffectiveRepetitionPenalty(float penalty) {
  // NaN, infinity and values <= 0 stay as they are, for ValidateSamplingValues to refuse.
  if (!(penalty > 0.0f) || std::isinf(penalty)) return penalty;
  return std::clamp(penalty, kMinRepetitionPenalty, kMaxRepetitionPenalty);
}

}  // namespace

absl::StatusOr<model::SamplingOptions> ToSamplingOptions(const mlaserve::v1::SamplingParams& p,
                                                         int32_t vocab_size) {
  model::SamplingOptions o;
  if (p.has_temperature()) o.temperature = p.temperature();
  if (p.has_top_p()) o.top_p = p.top_p();
  if (p.has_top_k()) o.top_k = p.top_k();
  if (p.has_min_p()) o.min_p = p.min_p();
  if (p.has_repetition_penalty()) {
    o.repetition_penalty = EffectiveRepetitionPenalty(p.repetition_penalty());
  }
  if (p.has_presence_penalty()) o.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) o.frequency_penalty = p.frequency_penalty();
  for (const auto& [id, bias] : p.logit_bias()) o.logit_bias.emplace_back(id, bias);
  if (p.has_logprobs()) o.logprobs = p.logprobs();
  if (p.has_prompt_logprobs()) o.prompt_logprobs = p.prompt_logprobs();
  if (!mlaserve::v1::ResponseFormat_IsValid(p.response_format())) {
    // proto3 keeps an enum value it does not know (a newer client's format): refuse it rather
    // than generate unconstrained text.
    return absl::InvalidArgumentError(absl::StrCat("response_format ", p.response_format(),
                                                   " is unknown; this worker knows TEXT (0), "
                                                   "JSON_OBJECT (1) and JSON_SCHEMA (2)"));
  }
  const bool schema = p.response_format() == mlaserve::v1::RESPONSE_FORMAT_JSON_SCHEMA;
  if (schema != (!p.response_format_schema().empty() || p.response_format_choices_size() > 0)) {
    return absl::InvalidArgumentError(
        schema ? "response_format JSON_SCHEMA needs response_format_schema (the JSON Schema) or "
                 "response_format_choices"
               : "response_format_schema / response_format_choices is set without "
                 "response_format JSON_SCHEMA");
  }
  for (const mlaserve::v1::SchemaChoice& c : p.response_format_choices()) {
    o.json_choices.push_back({c.prefix(), c.schema(), c.strict()});
  }
  o.json_object = p.response_format() == mlaserve::v1::RESPONSE_FORMAT_JSON_OBJECT;
  o.json_schema = p.response_format_schema();
  o.json_schema_strict = p.response_format_schema_strict();
  o.json_schema_requested = schema;
  o.json_after = p.response_format_after();
  o.seed = p.has_seed() ? p.seed() : model::RandomSeed();
  absl::Status s = common::ValidateSamplingValues(o, vocab_size);
  if (s.ok()) s = common::ValidateResponseFormat(o, p.ignore_eos());
  if (s.ok()) s = common::NormalizeLogitBias(o);
  // The schema compiles (once per process: the runners get it again from the same cache).
  if (s.ok() && !o.json_schema.empty()) {
    s = model::JsonSchema::Get(o.json_schema, o.json_schema_strict).status();
  }
  if (s.ok()) s = model::CompileSchemaChoices(o.json_choices).status();
  if (!s.ok()) return s;
  return o;
}

absl::Status ValidatePromptTokens(const std::vector<int32_t>& ids, int vocab_size, int max_len) {
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (max_len > 0 && static_cast<int>(ids.size()) > max_len) {
    return absl::InvalidArgumentError(absl::StrCat("prompt has ", ids.size(),
                                                   " tokens; this worker accepts ", max_len));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ",
                                                     vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

mlaserve::v1::ModelIdentity MakeModelIdentity(const model::ModelConfig& config,
                                              const std::string& model_dir,
                                              const std::string& kv_compat_hash) {
  mlaserve::v1::ModelIdentity m;
  std::filesystem::path dir(model_dir);
  if (dir.filename().empty()) dir = dir.parent_path();  // "models/v3/" -> "v3"
  m.set_model_name(dir.filename().string());
  m.set_model_type(config.model_type_name);
  m.set_vocab_size(config.vocab_size);
  m.set_hidden_size(config.hidden_size);
  m.set_num_hidden_layers(config.num_hidden_layers);
  m.set_kv_lora_rank(config.kv_lora_rank);
  m.set_qk_rope_head_dim(config.qk_rope_head_dim);
  m.set_max_position_embeddings(config.max_position_embeddings);
  m.set_kv_compat_hash(kv_compat_hash);
  return m;
}

mlaserve::v1::WorkerDescriptor MakeWorkerDescriptor(const WorkerFacts& f) {
  mlaserve::v1::WorkerDescriptor d;
  d.set_role(f.role);
  d.set_address(f.address);
  *d.mutable_model() = f.model;
  d.set_backend(f.backend);
  d.set_device(f.device);
  d.set_gpus(f.gpus);
  d.set_parallel_layout(f.parallel_layout);
  d.set_prefix_cache(f.prefix_cache);
  d.set_version(MLASERVE_WORKER_VERSION);
  d.set_kv_transport(f.kv_transport);
  auto* p = d.mutable_profile();
  // GPU profiles (profiles/) are not loaded by the workers yet: a CPU worker says so, a CUDA
  // worker reports its flags as the effective settings.
  p->set_gpu_name(f.backend == "cpu" ? "cpu" : "unknown");
  p->set_source(f.backend == "cpu" ? "cpu" : "flags");
  p->set_chunk_size(f.chunk_size);
  p->set_local_prefill_threshold(f.local_prefill_threshold);
  return d;
}

}  // namespace mlaserve::worker
