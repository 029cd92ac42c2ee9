// The Engine factory functions of engine.h: which engine serves the options (one rank, or a
// worker's ranks), the --backend fallback, and the --kv-cache-dtype flag.
#include "model/engine.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/request_limits.h"
#include "common/status.h"
#include "model/deepseek_engine.h"
#include "model/kv_cache/latent_kv_cache.h"
#include "model/parallel_engine.h"

namespace mlaserve::model {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  // A worker's multi-GPU engine: the ranks and their communicators are made here.
  if (options.parallel.size > 1 && options.parallel.comm == nullptr) {
    return ParallelEngine::Create(options);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DeepseekEngine> engine, DeepseekEngine::Create(options));
  return std::unique_ptr<Engine>(std::move(engine));
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngineForBackend(
    EngineOptions options, std::string_view backend,
    const std::function<void(const absl::Status&)>& on_fallback) {
  if (backend == "cpu" || backend == "cuda") {
    options.backend = backend == "cpu" ? kernels::Backend::kCpu : kernels::Backend::kCuda;
    return Engine::Create(options);
  }
  if (backend != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend ", std::string(backend), " is not one of auto, cpu, cuda"));
  }
  if (options.kv_cache_dtype == KvCacheDtype::kFp8) {
    // A cache the model cannot use is the caller's error on every backend: say so once,
    // not as a reason to leave the GPU.
    ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig(options.model_dir));
    RETURN_IF_ERROR(ResolveKvCacheFormat(options, config).status());
  }
  options.backend = kernels::Backend::kCuda;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(options);
  if (engine.ok()) return engine;
  if (on_fallback) on_fallback(engine.status());
  options.backend = kernels::Backend::kCpu;
  return Engine::Create(options);
}

absl::Status CheckChunkRanks(std::span<const SequenceChunk> batch, int data_ranks) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].rank < 0 || batch[i].rank >= data_ranks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: chunk ", i, " is for data-parallel rank ", batch[i].rank, "; this engine has ",
          data_ranks == 1 ? "one pool (rank 0)" : absl::StrCat("ranks 0..", data_ranks - 1)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPromptTargets(std::span<const SequenceChunk> batch, int vocab) {
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceChunk& c = batch[i];
    if (c.prompt_targets.empty()) continue;
    const int64_t end = static_cast<int64_t>(c.prompt_from) + c.prompt_targets.size();
    if (c.prompt_from < 0 || end > static_cast<int64_t>(c.tokens.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: chunk ", i, " scores prompt rows [", c.prompt_from, ", ", end,
          ") of its ", c.tokens.size(), " rows"));
    }
    if (c.prompt_top_n < 0 || c.prompt_top_n > common::kMaxTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: chunk ", i, " asks for ",
                                                     c.prompt_top_n, " top prompt logprobs; at most ",
                                                     common::kMaxTopLogprobs));
    }
    for (int32_t t : c.prompt_targets) {
      if (t < 0 || t >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("Forward: chunk ", i, "'s prompt target ", t,
                                                       " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<KvCacheDtype> ParseKvCacheDtype(std::string_view flag) {
  if (flag == "auto") return KvCacheDtype::kAuto;
  if (flag == "bf16") return KvCacheDtype::kNative;
  if (flag == "fp8") return KvCacheDtype::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-cache-dtype ", std::string(flag), " is not one of auto, bf16, fp8"));
}

}  // namespace mlaserve::model
