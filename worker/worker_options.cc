#include "worker/worker_options.h"

#include <cmath>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace mlaserve::worker {

void AddWorkerFlags(CLI::App& app, WorkerRoleKind role, WorkerOptions* o) {
  const bool decode = role == WorkerRoleKind::kDecode;
  o->listen = decode ? "0.0.0.0:8200" : "0.0.0.0:8100";
  app.add_option("--listen", o->listen, "HOST:PORT to serve on (port 0 = ephemeral)")
      ->capture_default_str();
  app.add_option("--model", o->model_dir, "model directory (config.json, *.safetensors)")
      ->required();
  app.add_option("--router", o->router, "router ADDR to register with and heartbeat (optional)");
  app.add_option("--advertise", o->advertise,
                 "HOST:PORT or [IPV6]:PORT given to the router (default: the listen address, "
                 "actual port)");
  app.add_option("--backend", o->backend, "auto|cpu|cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--device", o->device, "CUDA device index (the first of --tp-size)")
      ->capture_default_str();
  app.add_option("--tp-size", o->tp_size,
                 "GPUs (ranks) of this worker: one thread per GPU, the model sharded over them "
                 "(docs/parallel.md)")
      ->capture_default_str();
  app.add_option("--attention-parallel", o->attention_parallel,
                 "tensor: attention heads split over the ranks, the latent cache replicated; "
                 "data: each rank its own requests and KV pool (--num-kv-pages, "
                 "--max-running-requests and --max-batch-tokens then hold per rank)")
      ->capture_default_str();
  app.add_option("--moe-parallel", o->moe_parallel,
                 "expert: routed experts split over the ranks; tensor: every expert split")
      ->capture_default_str();
  app.add_option("--moe-dispatch", o->moe_dispatch,
                 "with --moe-parallel expert: gather (every rank's tokens through every rank's "
                 "experts, partial sums reduced) or all-to-all (each token sent only to the "
                 "ranks of its experts; CUDA-graph decode steps still use gather)")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", o->kv_cache_dtype,
                 "auto|bf16|fp8: KV cache storage (auto = fp8 for deepseek_v32 on CUDA, else the "
                 "native dtype; fp8 = DeepSeek's 656-byte layout, deepseek_v32 only)")
      ->capture_default_str();
  app.add_option("--mha-provider", o->mha_provider,
                 "auto|ours|cudnn|prefer-cudnn: who computes MHA-prefill attention on CUDA (auto = "
                 "our Hopper kernel from 2048 keys where it applies, else as prefer-cudnn: cuDNN "
                 "where libcudnn.so.9 loads and supports the shape, else our kernel)")
      ->capture_default_str();
  app.add_option("--num-kv-pages", o->num_kv_pages,
                 "KV pool size in pages of 64 tokens; 0 = on the GPU as many as "
                 "--mem-fraction-static leaves room for, on the CPU 1024")
      ->capture_default_str();
  app.add_option("--mem-fraction-static", o->mem_fraction_static,
                 "with --num-kv-pages 0 on the GPU: the fraction of the GPU's memory that the "
                 "weights and the KV pool may take, other processes' memory counted as taken "
                 "(SGLang's meaning; workers sharing a GPU each need their own, started in turn)")
      ->capture_default_str();
  app.add_option("--max-batch-tokens", o->max_batch_tokens, "tokens per forward at most")
      ->capture_default_str();
  app.add_option("--chunk-size", o->chunk_size, "prefill chunk size in tokens")
      ->capture_default_str();
  app.add_option("--kv-transport", o->kv_transport, "auto|tcp|nccl")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "tcp", "nccl"}));
  app.add_option("--kv-layerwise", o->kv_layerwise,
                 "nccl: ship each layer's KV while the next layer computes (false: after the "
                 "forward)")
      ->capture_default_str();
  app.add_option("--prefix-cache", o->prefix_cache,
                 "keep the KV of computed whole 64-token pages in the free part of the pool and "
                 "reuse it for prompts that start with the same tokens (prefill: prompts; "
                 "decode: local prefills and preempted requests)")
      ->capture_default_str();
  app.add_option("--profiles-dir", o->profiles_dir, "directory of GPU profiles")
      ->capture_default_str();
  app.add_option("--metrics-port", o->metrics_port,
                 "Prometheus /metrics port (0 = ephemeral, -1 = off)")
      ->capture_default_str();
  common::AddMetricsTlsFlags(app, &o->metrics_tls_flags);
  app.add_option("--log-level", o->log_level, "trace|debug|info|warn|error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--kv-no-progress-ms", o->kv_no_progress_ms,
                 "a KV transfer with no progress this long fails on both sides")
      ->capture_default_str();
  common::AddClusterSecurityFlags(app, &o->security);
  if (!decode) {
    app.add_option("--attention-path", o->attention_path,
                   "auto (the GPU profile's policy) or force mha|mla|sparse_fwd where it computes "
                   "the same function")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "mha", "mla", "sparse_fwd"}));
    app.add_option("--se-threshold-scale", o->se_threshold_scale,
                   "multiply every MHA/MLA se threshold of the profile (>1: MLA more often)")
        ->capture_default_str();
    app.add_option("--split-fresh-prompts", o->split_fresh_prompts,
                   "auto path: a batch of prompts' later chunks followed by fresh prompts attends "
                   "the fresh prompts in MHA form and the later chunks in latent form where the "
                   "profile gives them alone MLA (false: one path for the whole batch)")
        ->capture_default_str();
  }
  if (decode) {
    app.add_option("--max-running-requests", o->max_running_requests,
                   "requests decoding at once at most")
        ->capture_default_str();
    app.add_option("--kv-lease-ms", o->kv_lease_ms,
                   "reserved pages return to the pool if the transfer has not started (and the "
                   "token stream is not open) this long after Reserve")
        ->capture_default_str();
    app.add_option("--max-kv-lease-ms", o->max_kv_lease_ms,
                   "Reserve calls asking for a longer lease are refused (INVALID_ARGUMENT)")
        ->capture_default_str();
    app.add_option("--local-prefill-threshold", o->local_prefill_threshold,
                   "prompts up to this many tokens are prefilled here (-1 = from the profile)")
        ->capture_default_str();
  }
}

absl::Status ValidateWorkerOptions(WorkerRoleKind role, WorkerOptions* o) {
  auto bad = [](absl::string_view flag, auto value, absl::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " is ", value, "; ", rule));
  };
  if (auto hp = common::ParseHostPort(o->listen); !hp.ok()) return hp.status();
  // The address the router will take (RegisterWorker): refused here, at start, rather than at
  // every registration attempt.
  if (!o->advertise.empty()) {
    if (auto hp = common::ParseDialAddress(o->advertise); !hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--advertise ", hp.status().message()));
    }
  }
  if (o->device < 0) return bad("--device", o->device, "it must be >= 0");
  if (o->kv_cache_dtype != "auto" && o->kv_cache_dtype != "bf16" && o->kv_cache_dtype != "fp8") {
    return bad("--kv-cache-dtype", o->kv_cache_dtype, "it must be auto, bf16 or fp8");
  }
  // The layout flags, checked as mlaserve-run checks them (INVALID_ARGUMENT naming the flag).
  absl::StatusOr<model::ParallelOptions> parallel = model::ParseParallelFlags(
      o->tp_size, o->attention_parallel, o->moe_parallel, o->moe_dispatch);
  if (!parallel.ok()) return parallel.status();
  o->parallel = *parallel;
  if (o->mha_provider != "auto" && o->mha_provider != "ours" && o->mha_provider != "cudnn" &&
      o->mha_provider != "prefer-cudnn") {
    return bad("--mha-provider", o->mha_provider, "it must be auto, ours, cudnn or prefer-cudnn");
  }
  if (o->num_kv_pages < 0) {
    return bad("--num-kv-pages", o->num_kv_pages, "it must be >= 1, or 0 to size the pool");
  }
  if (!(o->mem_fraction_static > 0.0 && o->mem_fraction_static <= 1.0)) {
    return bad("--mem-fraction-static", o->mem_fraction_static, "it must be in (0, 1]");
  }
  if (o->max_batch_tokens < 1) {
    return bad("--max-batch-tokens", o->max_batch_tokens, "it must be >= 1");
  }
  if (o->chunk_size < 1) return bad("--chunk-size", o->chunk_size, "it must be >= 1");
  if (o->metrics_port < -1 || o->metrics_port > 65535) {
    return bad("--metrics-port", o->metrics_port, "it must be -1 (off), 0 or a port");
  }
  absl::StatusOr<common::MetricsTlsOptions> metrics_tls =
      common::ResolveMetricsTls(o->metrics_tls_flags, o->security.tls);
  if (!metrics_tls.ok()) return metrics_tls.status();
  o->metrics_tls = *std::move(metrics_tls);
  if (o->kv_no_progress_ms < 1) {
    return bad("--kv-no-progress-ms", o->kv_no_progress_ms, "it must be >= 1");
  }
  // --kv-transport nccl needs a GPU pool and an NCCL build: the worker checks once its engine
  // is up (kvtransfer/nccl/worker_transport.h, CheckNcclFlag).
  if (role == WorkerRoleKind::kPrefill) {
    if (o->attention_path != "auto" && o->attention_path != "mha" && o->attention_path != "mla" &&
        o->attention_path != "sparse_fwd") {
      return bad("--attention-path", o->attention_path, "it must be auto, mha, mla or sparse_fwd");
    }
    if (!std::isfinite(o->se_threshold_scale) || o->se_threshold_scale <= 0 ||
        o->se_threshold_scale > 1e6) {
      return bad("--se-threshold-scale", o->se_threshold_scale,
                 "it must be a finite number in (0, 1e6]");
    }
  }
  if (role == WorkerRoleKind::kDecode) {
    if (o->max_running_requests < 1) {
      return bad("--max-running-requests", o->max_running_requests, "it must be >= 1");
    }
    if (o->kv_lease_ms < 1) return bad("--kv-lease-ms", o->kv_lease_ms, "it must be >= 1");
    if (o->max_kv_lease_ms < o->kv_lease_ms) {
      return bad("--max-kv-lease-ms", o->max_kv_lease_ms,
                 absl::StrCat("it must be >= --kv-lease-ms (", o->kv_lease_ms, ")"));
    }
    if (o->local_prefill_threshold < -1) {
      return bad("--local-prefill-threshold", o->local_prefill_threshold,
                 "it must be -1 (from the profile), 0 (never) or a token count");
    }
  }
  o->kv_no_progress_timeout = absl::Milliseconds(o->kv_no_progress_ms);
  o->kv_lease = absl::Milliseconds(o->kv_lease_ms);
  o->max_kv_lease = absl::Milliseconds(o->max_kv_lease_ms);
  return absl::OkStatus();
}

void ConfigureWorkerLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("mlaserve");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace mlaserve::worker
