// Profile lookup in a directory, with the cost-model fallback.
#include "profiles/profile_store.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "profiles/cost_model.h"
#include "profiles/device_facts.h"
#include "spdlog/spdlog.h"

namespace mlaserve::profiles {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<ResolvedProfile> Fallback(const DeviceFacts& device, const AttentionShape& shape,
                                         const std::string& why) {
  ResolvedProfile r;
  ASSIGN_OR_RETURN(r.profile, BuildCostModelProfile(device, shape));
  r.source = "cost-model";
  r.warning = absl::StrCat("no GPU profile for '", device.name, "' shape ", shape.Key(), " (",
                           why, "); using the cost model from device facts (",
                           device.sm_count, " SMs, ", device.copy_gbs, " GB/s, ",
                           device.matrix_tflops,
                           " TFLOP/s): run mlaserve-tune on this GPU for measured thresholds");
  return r;
}

ResolvedProfile Use(GpuProfile p, const fs::path& file, const DeviceFacts& device) {
  ResolvedProfile r;
  r.source = absl::StrCat("profiles/", file.filename().string());
  if (device.smem_optin_bytes > 0 && p.device.smem_optin_bytes != device.smem_optin_bytes) {
    r.warning = absl::StrCat(r.source, " was tuned with ", p.device.smem_optin_bytes,
                             " bytes of opt-in shared memory; this device has ",
                             device.smem_optin_bytes, " (the sparse cap follows the device)");
    p.device.smem_optin_bytes = device.smem_optin_bytes;
  }
  r.profile = std::move(p);
  return r;
}

}  // namespace

absl::StatusOr<AttentionShape> AttentionShapeFor(const model::ModelConfig& config, int tp,
                                                 const std::string& dtype) {
  if (tp < 1 || config.num_attention_heads % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads ",
                                                   config.num_attention_heads,
                                                   " is not divisible by tensor parallelism ", tp));
  }
  AttentionShape s;
  s.heads = config.num_attention_heads / tp;
  s.qk_nope_head_dim = config.qk_nope_head_dim;
  s.qk_rope_head_dim = config.qk_rope_head_dim;
  s.v_head_dim = config.v_head_dim;
  s.kv_lora_rank = config.kv_lora_rank;
  s.dtype = dtype;
  return s;
}

absl::StatusOr<ResolvedProfile> ResolveProfile(const std::string& profiles_dir,
                                               const DeviceFacts& device,
                                               const AttentionShape& shape) {
  if (device.name == "cpu") {
    ResolvedProfile r;
    ASSIGN_OR_RETURN(r.profile, BuildCostModelProfile(device, shape));
    r.source = "cpu";
    // A CPU decode worker never prefills locally unless its flag says so: the CPU backend
    // serves tests and demos, where disaggregation is the point.
    r.profile.local_prefill_threshold = 0;
    return r;
  }
  if (profiles_dir.empty()) return Fallback(device, shape, "no --profiles-dir");
  const fs::path dir(profiles_dir);
  const fs::path exact = dir / ProfileFileName(device.name, shape);
  std::error_code ec;
  if (fs::exists(exact, ec)) {
    ASSIGN_OR_RETURN(GpuProfile p, LoadProfile(exact.string()));
    if (p.device.name != device.name || !(p.shape == shape)) {
      return absl::FailedPreconditionError(absl::StrCat(
          exact.string(), " is for '", p.device.name, "' shape ", p.shape.Key(),
          ", but this worker runs '", device.name, "' shape ", shape.Key()));
    }
    return Use(std::move(p), exact, device);
  }
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".json") files.push_back(it->path());
  }
  if (ec) return Fallback(device, shape, absl::StrCat("cannot read ", profiles_dir, ": ",
                                                      ec.message()));
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    auto p = LoadProfile(f.string());
    if (!p.ok()) {
      spdlog::warn("skipping {}: {}", f.string(), p.status().ToString());
      continue;
    }
    if (p->device.name == device.name && p->shape == shape) return Use(*std::move(p), f, device);
  }
  return Fallback(device, shape, absl::StrCat("none of ", files.size(), " files in ",
                                              profiles_dir, " matches"));
}

absl::StatusOr<ResolvedProfile> ResolveWorkerProfile(const std::string& profiles_dir, bool cuda,
                                                     int device,
                                                     const model::ModelConfig& config) {
  DeviceFacts facts = CpuDeviceFacts();
  if (cuda) {
    ASSIGN_OR_RETURN(facts, QueryCudaDeviceFacts(device));
  }
  ASSIGN_OR_RETURN(const AttentionShape shape, AttentionShapeFor(config));
  ASSIGN_OR_RETURN(ResolvedProfile r, ResolveProfile(profiles_dir, facts, shape));
  if (!r.warning.empty()) spdlog::warn("{}", r.warning);
  spdlog::info("GPU profile for {} {}: {} (local prefill threshold {}, chunk {})", facts.name,
               shape.Key(), r.source, r.profile.local_prefill_threshold, r.profile.chunk_size);
  return r;
}

}  // namespace mlaserve::profiles
