// WorkerOptions: the prefill and decode workers' flags (docs/serving.md, "Worker flags"),
// registered on a CLI11 app in main() and validated once into typed values.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cluster_security.h"
#include "common/metrics_tls.h"
#include "model/kv_pool_sizing.h"
#include "model/parallel_layout.h"

namespace CLI {
class App;
}

namespace mlaserve::worker {

enum class WorkerRoleKind { kPrefill, kDecode };

struct WorkerOptions {
  // Flags, as given.
  std::string listen;
  std::string model_dir;
  std::string router;     // empty: no self-registration
  std::string advertise;  // empty: the listen address with the bound port
  std::string backend = "auto";
  // KV cache storage: auto|bf16|fp8 (auto = DeepSeek's fp8 layout for deepseek_v32 on CUDA,
  // the native cache otherwise; the engine refuses fp8 for models without a DSA indexer).
  std::string kv_cache_dtype = "auto";
  // MHA-prefill attention on CUDA: auto|ours|cudnn (auto = cuDNN where it is loadable and
  // supports the shape, else our kernel; kernels/mha_prefill/api.h).
  std::string mha_provider = "auto";
  int device = 0;
  // Multi-GPU workers (docs/parallel.md): ranks on devices [device, device + tp_size), the
  // attention layout (tensor|data), the MoE layout (expert|tensor) and, for expert MoE, how
  // tokens reach the experts (gather|all-to-all).
  int tp_size = 1;
  std::string attention_parallel = "tensor";
  std::string moe_parallel = "expert";
  std::string moe_dispatch = "gather";
  int num_kv_pages = 0;  // 0: sized from the GPU's memory (mem_fraction_static); 1024 on the CPU
  double mem_fraction_static = model::kDefaultMemFractionStatic;
  int max_batch_tokens = 8192;
  int chunk_size = 2048;
  std::string kv_transport = "auto";
  bool kv_layerwise = true;  // prefill, nccl: ship each layer while the next one computes
  bool prefix_cache = true;  // reuse the KV of earlier prompts' whole pages (docs/serving.md)
  std::string profiles_dir = "profiles";
  int metrics_port = -1;
  std::string log_level = "info";
  int64_t kv_no_progress_ms = 30'000;
  // Prefill only: operator overrides of the attention-path policy (docs/profiles.md).
  std::string attention_path = "auto";  // auto|mha|mla|sparse_fwd (force a path)
  double se_threshold_scale = 1.0;      // every se threshold times this; finite, (0, 1e6]
  bool split_fresh_prompts = true;      // the policy's split rule (profiles::PolicyOptions)
  // Decode only.
  int max_running_requests = 256;
  int64_t kv_lease_ms = 30'000;
  // The longest lease a Reserve may ask for (kv_lease_ms in the request): a caller cannot hold
  // pages longer than this without sending their KV.
  int64_t max_kv_lease_ms = 120'000;
  int local_prefill_threshold = -1;  // tokens; -1 = from the GPU profile
  // --insecure / --tls-* / --cluster-token-file (common/cluster_security.h).
  common::ClusterSecurityOptions security;
  // --metrics-tls / --metrics-tls-cert / --metrics-tls-key (common/metrics_tls.h).
  common::MetricsTlsFlags metrics_tls_flags;

  // Derived by Validate().
  // --tp-size / --attention-parallel / --moe-parallel / --moe-dispatch as the engine takes
  // them (model::ParseParallelFlags, which mlaserve-run shares); rank and comm unset.
  model::ParallelOptions parallel;
  absl::Duration kv_no_progress_timeout;
  absl::Duration kv_lease;
  absl::Duration max_kv_lease;
  common::MetricsTlsOptions metrics_tls;
};

// Registers the flags of `role` (defaults: listen 0.0.0.0:8100 prefill, 0.0.0.0:8200 decode).
void AddWorkerFlags(CLI::App& app, WorkerRoleKind role, WorkerOptions* options);

// INVALID_ARGUMENT naming the flag and its value; fills the derived fields.
absl::Status ValidateWorkerOptions(WorkerRoleKind role, WorkerOptions* options);

// Sends spdlog's default logger to stderr (stdout carries only "listening on ...") at `level`.
void ConfigureWorkerLogging(const std::string& level);

}  // namespace mlaserve::worker
