// Finding the profile for this worker's GPU and attention shape in --profiles-dir.
//
// Lookup: <dir>/<sanitized device name>_<shape key>.json first; otherwise any *.json in the
// directory whose device.name and shape match (a renamed file still counts). No match, no
// directory, or an unreadable directory: a cost-model profile from the device facts, and a
// warning saying what was looked for. The CPU backend uses the cost model with nominal CPU
// facts, no warning (nobody tunes CPUs) and local-prefill threshold 0.
// A file that is meant for this GPU but is malformed is an error, never silently skipped:
// the operator put it there. Malformed files for other GPUs are skipped with a warning.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/loader/config.h"
#include "profiles/gpu_profile.h"

namespace mlaserve::profiles {

struct ResolvedProfile {
  GpuProfile profile;
  // As WorkerProfile.source: "profiles/<file>.json" (the file's name under the directory),
  // "cost-model" or "cpu".
  std::string source;
  std::string warning;  // non-empty when the worker should log a warning
};

// `device` is the live device's facts (QueryCudaDeviceFacts, or CpuDeviceFacts()). A loaded
// profile keeps its measured facts but takes the live opt-in shared memory (the sparse cap is
// computed from the device, not the file); a difference is reported in `warning`.
absl::StatusOr<ResolvedProfile> ResolveProfile(const std::string& profiles_dir,
                                               const DeviceFacts& device,
                                               const AttentionShape& shape);

// The attention shape one tensor-parallel rank runs for this model ("bf16" or "fp8" cache).
// INVALID_ARGUMENT when num_attention_heads is not divisible by tp.
absl::StatusOr<AttentionShape> AttentionShapeFor(const model::ModelConfig& config, int tp = 1,
                                                 const std::string& dtype = "bf16");

// What a worker calls at start: the live device's facts (CUDA query, or CpuDeviceFacts() when
// `cuda` is false), the model's attention shape at TP 1 with a bf16 cache, then
// ResolveProfile. Logs the warning, if any, with spdlog::warn.
absl::StatusOr<ResolvedProfile> ResolveWorkerProfile(const std::string& profiles_dir, bool cuda,
                                                     int device,
                                                     const model::ModelConfig& config);

}  // namespace mlaserve::profiles
