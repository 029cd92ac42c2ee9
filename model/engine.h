// Engine: the model runtime as the serving layer sees it.
//
// An Engine owns the weights (loaded once, on its backend), the paged latent KV pool and the
// workspaces, and runs forward steps over batches of sequence chunks. It does not schedule,
// tokenize or serve RPCs: prefill/decode workers own scheduling, the router owns
// tokenization. Sampling semantics are model/sampler.h's; a caller that passes each row's
// SampleRow gets the sampled ids from Forward, drawn where the logits are (on the GPU for
// kCuda: a decode step then copies B ids back instead of B x vocab logits).
//
// Threading: one thread drives Forward at a time (the worker's scheduler thread). The KV pool's
// page accounting (KvPool) is thread-safe; page payload access (ReadPage / WritePage) for a page
// must not race with a Forward that writes the same page.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "kernels/mha_prefill/api.h"
#include "model/loader/config.h"
#include "model/kv_pool.h"
#include "model/kv_pool_sizing.h"
#include "model/sampler.h"
#include "model/parallel_layout.h"

namespace mlaserve::model {

// Which attention form prefill uses (decode always uses the absorbed MLA form, or sparse MLA
// for DSA models). kAuto asks the AttentionPathPolicy (profiles/) per batch; without one it
// uses MHA when there is no cached prefix and MLA otherwise. kMhaOurs is kMha with this
// project's own mha_prefill kernel for the call (the GPU profile found it faster than cuDNN
// in the batch's cell), kMhaCudnn kMha with cuDNN where it can run the call and ours where it
// cannot (the cell found cuDNN faster); kMha uses EngineOptions::mha_provider. A
// --mha-provider other than auto wins over both. kSplit: a batch whose fresh prompts (start 0,
// more than one token) come after prefixed or single-token chunks runs the leading chunks in
// the latent (MLA) form and the fresh prompts in MHA form on the engine's default provider
// (AttentionForm::kSplit, which kAuto also reaches for such a batch when it has a cached
// prefix); a batch of fresh prompts only runs in MHA form, and any other batch that cannot
// split (no fresh part, sparse DSA, no MHA form at the model's widths, MLASERVE_SPLIT_FORM=0)
// as kMla. ForwardResult::path_used says kMla for a split batch.
enum class AttentionPath : uint8_t { kAuto, kMha, kMla, kMhaOurs, kMhaCudnn, kSplit };

// The KV cache's storage (the --kv-cache-dtype flag). kNative: the engine's activation dtype
// (bf16 on kCuda, f32 on kCpu). kFp8: DeepSeek's fp8 layouts (KvCacheFormat::kFp8Ds; DSA
// models, i.e. deepseek_v32, only). kAuto: kFp8 for deepseek_v32 on kCuda, else kNative.
enum class KvCacheDtype : uint8_t { kAuto, kNative, kFp8 };
// "auto" | "bf16" (the native cache) | "fp8"; INVALID_ARGUMENT naming anything else.
absl::StatusOr<KvCacheDtype> ParseKvCacheDtype(std::string_view flag);

struct EngineOptions {
  std::string model_dir;  // config.json, *.safetensors, tokenizer.json
  kernels::Backend backend = kernels::Backend::kCpu;
  int device = 0;
  // Pages of kPageSize tokens in the pool. 0: sized from the device's memory on kCuda
  // (mem_fraction_static, model/kv_pool_sizing.h), kDefaultCpuKvPages on kCpu; the engine's
  // kv_pool().total_pages() says what it got.
  int num_kv_pages = 1024;
  // With num_kv_pages 0 on kCuda: the fraction of the device's total memory that the weights
  // and the pool may take, what other processes hold counted as taken (SGLang's meaning).
  double mem_fraction_static = kDefaultMemFractionStatic;
  // Set by ParallelEngine for its ranks with num_kv_pages 0: each rank offers the pages its
  // device fits and every rank takes the smallest (the pools must agree; AgreeOnFewestPages).
  std::shared_ptr<parallel::RankRendezvous> kv_pages_rendezvous;
  int max_batch_tokens = 8192; // largest Forward (sum of chunk lengths) workspaces are planned for
  int max_batch_seqs = 256;
  AttentionPath attention = AttentionPath::kAuto;
  // Library default: the native cache; the binaries' --kv-cache-dtype defaults to auto.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kNative;
  // This engine's rank in a multi-GPU worker (docs/parallel.md); the default is one GPU.
  ParallelOptions parallel;
  // Who computes the MHA form's attention on kCuda (the --mha-provider flag): kAuto = cuDNN
  // where it is loadable and supports the shape, else our kernel (kernels/mha_prefill/api.h).
  // Create refuses kCudnn where it cannot run (CPU backend, no cuDNN).
  kernels::MhaPrefillProvider mha_provider = kernels::MhaPrefillProvider::kAuto;
};

// One sequence's share of a forward step: `tokens` at positions [start_pos, start_pos + n).
// Positions [0, start_pos) are already in the cache. `pages` must cover start_pos + n tokens.
struct SequenceChunk {
  std::span<const int32_t> tokens;
  int start_pos = 0;
  std::span<const int32_t> pages;
  bool want_logits = true;  // return the logits of the last token of this chunk
  // With want_logits: how to sample this row's next token, or null for logits only. Must
  // outlive the Forward call.
  const SampleRow* sample = nullptr;
  // Data-parallel attention (Engine::data_ranks() > 1): the rank that runs this chunk, whose
  // pool (Engine::rank_pool) holds `pages`. 0 for every other engine.
  int rank = 0;
  // Prompt logprobs (SamplingOptions::prompt_logprobs): rows [prompt_from, prompt_from +
  // prompt_targets.size()) of this chunk are scored against prompt_targets, each row's next
  // prompt token (ScorePromptRow, prompt_top_n alternatives, at most common::kMaxTopLogprobs):
  // ForwardResult::prompt_logprobs[this chunk's index] gets one entry per target. The rows'
  // logits are computed a bounded slice at a time, never the chunk's rows x vocab at once.
  // Empty: none (a chunk's last row, whose logits want_logits returns, may be scored too).
  // Engine::CheckPromptLogprobs says whether the engine can; must outlive the Forward call.
  std::span<const int32_t> prompt_targets;
  int prompt_from = 0;
  int prompt_top_n = 0;
};

// INVALID_ARGUMENT naming the first chunk whose prompt scoring is out of bounds: rows past the
// chunk, a target outside [0, vocab), top_n outside [0, common::kMaxTopLogprobs].
absl::Status CheckPromptTargets(std::span<const SequenceChunk> batch, int vocab);
// Whether some chunk of `batch` asks for prompt logprobs.
inline bool AnyPromptTargets(std::span<const SequenceChunk> batch) {
  for (const SequenceChunk& c : batch) {
    if (!c.prompt_targets.empty()) return true;
  }
  return false;
}

// INVALID_ARGUMENT naming the first chunk whose rank is outside [0, data_ranks).
absl::Status CheckChunkRanks(std::span<const SequenceChunk> batch, int data_ranks);

// The SampleRow of every want_logits chunk of `batch` in order, or empty if one lacks it (then
// Forward returns logits only).
inline std::vector<const SampleRow*> RequestedSamples(std::span<const SequenceChunk> batch) {
  std::vector<const SampleRow*> rows;
  for (const SequenceChunk& c : batch) {
    if (!c.want_logits) continue;
    if (c.sample == nullptr) return {};
    rows.push_back(c.sample);
  }
  return rows;
}

// Called after layer `layer`'s KV of every chunk in the batch is in the pool (prefill streams
// each layer's pages to the decode worker from here). Return non-OK to abort the forward.
// With data-parallel attention it runs for every layer in order once the whole step is done
// on every rank (the ranks' layers do not finish together), with nothing left on any stream;
// Engine::ForwardStreamingRanks streams such a step rank by rank instead.
using LayerDoneFn = std::function<absl::Status(int layer)>;
// Data-parallel attention, Engine::ForwardStreamingRanks: rank `rank` has written layer
// `layer`'s KV of its own chunks (into rank_pool(rank); on kCuda enqueued on
// rank_stream(rank)).
using RankLayerDoneFn = std::function<absl::Status(int rank, int layer)>;

struct ForwardResult {
  // Row r holds the logits (f32, vocab wide) of the r-th chunk with want_logits, in batch order.
  // Empty when token_ids are returned and the logits never left the device.
  std::vector<float> logits;
  // When every chunk with want_logits carries `sample`: the sampled id of each row (the same
  // ids model::Sampler would draw from `logits`). Empty otherwise.
  std::vector<int32_t> token_ids;
  // With token_ids, when some row's options ask for logprobs: one entry per row (the others'
  // left empty). Empty otherwise.
  std::vector<TokenLogprobs> logprobs;
  // Prompt logprobs: one vector per chunk of the batch, in batch order, with an entry per
  // SequenceChunk::prompt_targets entry (empty for chunks without); empty when no chunk asked.
  std::vector<std::vector<PromptTokenLogprobs>> prompt_logprobs;
  int rows = 0;
  AttentionPath path_used = AttentionPath::kMla;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual kernels::Backend backend() const = 0;
  virtual KvPool& kv_pool() = 0;
  // Data-parallel attention (docs/parallel.md): how many ranks run requests of their own over
  // a KV pool of their own. A request lives on one rank: its chunks name it (SequenceChunk::
  // rank) and its pages are that rank's. 1 for every other engine, whose one pool kv_pool() is.
  virtual int data_ranks() const { return 1; }
  // Rank `rank`'s pool, rank in [0, data_ranks()); rank_pool(0) is kv_pool().
  virtual KvPool& rank_pool(int rank) { return kv_pool(); }
  // kCuda: the cudaStream_t Forward enqueues on. on_layer_done runs once a layer's work is
  // enqueued, not finished: a consumer on another stream orders itself after an event recorded
  // here (the nccl KV sender does). Null for the CPU backend.
  virtual void* device_stream() const { return nullptr; }
  // kCuda: the stream rank `rank`'s chunks run on (rank in [0, data_ranks())); rank 0's is
  // device_stream(). Null for the CPU backend.
  virtual void* rank_stream(int rank) const {
    (void)rank;
    return device_stream();
  }

  // OK when Forward scores prompt rows (SequenceChunk::prompt_targets); otherwise why not
  // (FAILED_PRECONDITION naming the layout, or UNIMPLEMENTED), which a worker gives a request
  // that asks for prompt logprobs before it runs. (Inline, as the default is the refusal.)
  virtual absl::Status CheckPromptLogprobs() const {
    return absl::UnimplementedError("this engine does not compute prompt logprobs");
  }

  virtual absl::StatusOr<ForwardResult> Forward(std::span<const SequenceChunk> batch,
                                                AttentionPath path = AttentionPath::kAuto,
                                                const LayerDoneFn& on_layer_done = nullptr) = 0;
  // Forward into *result, reusing its vectors' storage: a caller that steps in a loop keeps
  // one ForwardResult, so a step that returns logits (B x vocab f32: 52 MB at batch 128 of a
  // 102400-token vocabulary) allocates nothing on the host once an earlier step sized it.
  // *result is overwritten whole (its capacity kept). The default moves Forward's result in.
  // (Inline: engine.h is all some engines, the workers' fakes, link of it.)
  virtual absl::Status ForwardInto(std::span<const SequenceChunk> batch, AttentionPath path,
                                   const LayerDoneFn& on_layer_done, ForwardResult* result) {
    absl::StatusOr<ForwardResult> r = Forward(batch, path, on_layer_done);
    if (!r.ok()) return r.status();
    *result = std::move(r).value();
    return absl::OkStatus();
  }
  // Forward that hands every data-parallel rank's layers over as that rank writes them, not
  // after the step: on_rank_layer_done(r, l) runs once rank r's layer l is enqueued, in layer
  // order for each rank, for every rank with chunks in `batch`. A multi-rank engine calls it
  // on rank r's own thread while the other ranks compute, so calls for different ranks may
  // run at once (the caller waits in this call meanwhile). A failing callback fails this call
  // only, after every rank finished the step (their collectives must match).
  // This default is Forward whose layer callback calls (r, l) for each rank with chunks in
  // rank order: for a one-pool engine (rank 0 only) that streams; an engine with several pools
  // that does not override it hands the layers over only as Forward's callback runs.
  // (Inline: serving code and test fakes use the interface without the model runtime.)
  virtual absl::StatusOr<ForwardResult> ForwardStreamingRanks(
      std::span<const SequenceChunk> batch, AttentionPath path,
      const RankLayerDoneFn& on_rank_layer_done) {
    if (!on_rank_layer_done) return Forward(batch, path);
    std::vector<bool> has_chunks(data_ranks(), false);
    for (const SequenceChunk& c : batch) {
      if (c.rank >= 0 && c.rank < data_ranks()) has_chunks[c.rank] = true;
    }
    return Forward(batch, path, [&](int layer) -> absl::Status {
      for (int r = 0; r < data_ranks(); ++r) {
        if (!has_chunks[r]) continue;
        if (absl::Status s = on_rank_layer_done(r, layer); !s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }
};

// The engine for a `--backend` flag value, the same for every binary: "cpu", "cuda", or "auto"
// (the GPU when this build and machine have one, else the CPU, telling `on_fallback` why; a
// CPU-only build reports FAILED_PRECONDITION). options.backend is ignored. Any other value is
// INVALID_ARGUMENT naming it.
absl::StatusOr<std::unique_ptr<Engine>> CreateEngineForBackend(
    EngineOptions options, std::string_view backend,
    const std::function<void(const absl::Status&)>& on_fallback);

}  // namespace mlaserve::model
