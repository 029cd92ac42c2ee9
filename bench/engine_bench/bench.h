// What mlaserve-engine-bench's files share: Bench, which runs and times the Forwards of each kind
// of row (prefill side in prefill_rows.cc, decode side in decode_rows.cc), the engine it drives,
// the rows' printers, and the timing, table and JSON pieces they use (bench.cc). engine_bench.cc
// says what each row measures.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench/engine_bench/ceilings.h"
#include "bench/engine_bench/gpu_timeline.h"
#include "bench/engine_bench/options.h"
#include "bench/engine_bench/timeline_summary.h"
#include "model/deepseek_engine.h"
#include "model/parallel_engine.h"
#include "nlohmann/json.hpp"

namespace mlaserve::engine_bench {

using Clock = std::chrono::steady_clock;
using mlaserve::bench::GpuTimeline;
using mlaserve::bench::TimelineSummary;
using mlaserve::bench::TimelineTrace;
using mlaserve::model::AttentionPath;
using mlaserve::model::DeepseekEngine;
using mlaserve::model::Engine;
using mlaserve::model::ParallelEngine;
using mlaserve::model::SequenceChunk;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v);

// Device memory in use on the current device (cudaMemGetInfo), GiB; -1 where it cannot be read.
double UsedGiB();

// The roofline cells of a row: the work in `unit` (`scale` of the work's own units: bytes or
// FLOPs), its rate, and the rate's share of the ceiling (in unit/s); dashes where there is no
// ceiling (sharded runs, a failed measurement).
std::string RooflineCells(double work, double scale, const char* unit, double ms, double ceiling,
                          const char* of);

// A chunk of `tokens` at positions [start, start + tokens.size()) in `pages`; SequenceChunk's
// other fields keep their defaults (no sampling, rank 0, nothing scored). Assigned field by field:
// a braced SequenceChunk{...} leaves prompt_targets, which has no default member initializer, to
// -Wmissing-field-initializers.
SequenceChunk Chunk(std::span<const int32_t> tokens, int start, std::span<const int32_t> pages,
                    bool want_logits);

// Prints "mlaserve-engine-bench: `what`: `s`" on stderr and exits with 1.
[[noreturn]] void Die(const char* what, const absl::Status& s);

// A Forward run under --timeline: `timeline` is started right before it and stopped right after
// it, and `trace` receives what it recorded.
struct TracedForward {
  GpuTimeline& timeline;
  TimelineTrace trace;
};

// Start and stop `traced`'s timeline around a Forward; nothing where `traced` is null.
void BeginTrace(TracedForward* traced);
void EndTrace(TracedForward* traced);

// The summary as --output-json's "timeline" entries: `id` (phase, length or batch) plus the
// numbers FormatSummary prints.
nlohmann::json TimelineJson(nlohmann::json id, const TimelineSummary& s);

// The engine under test, one GPU or sharded: the calls the benchmark needs from either.
class BenchEngine {
 public:
  explicit BenchEngine(std::unique_ptr<Engine> e)
      : engine_(std::move(e)),
        single_(dynamic_cast<DeepseekEngine*>(engine_.get())),
        sharded_(dynamic_cast<ParallelEngine*>(engine_.get())) {}
  Engine& engine() { return *engine_; }
  void set_decode_graphs(bool on) {
    if (single_) single_->set_decode_graphs(on);
    if (sharded_) sharded_->set_decode_graphs(on);
  }
  // Graphs captured (one GPU) and steps replayed from graphs; sharded: graph steps (every rank
  // captures or replays its own), captures not counted.
  int graphs_captured() const { return single_ ? single_->decode_graphs_captured() : -1; }
  int64_t graph_replays() const {
    return single_ ? single_->decode_graph_replays() : sharded_ ? sharded_->graph_steps() : 0;
  }

 private:
  std::unique_ptr<Engine> engine_;
  DeepseekEngine* single_;
  ParallelEngine* sharded_;
};

class Bench {
 public:
  Bench(BenchEngine& be, uint64_t seed)
      : be_(be), e_(be.engine()), rng_(seed), ids_(0, e_.config().vocab_size - 1) {}

  std::vector<int32_t> RandomIds(int n) {
    std::vector<int32_t> v(n);
    for (auto& id : v) id = ids_(rng_);
    return v;
  }

  // PrefillOnce's prompt_top_n for a prefill whose prompt is not scored.
  static constexpr int kUnscored = -1;

  // One sequence of `len` tokens in one Forward; returns the wall time in ms. With `traced`, the
  // Forward runs under its timeline. With prompt_top_n >= 0 every prompt position is scored, as
  // the decode worker asks for vLLM's prompt_logprobs=N: rows 0 .. len - 2 against the prompt
  // token after each, prompt_top_n alternatives (the NVTX range is then "prefill_prompt_logprobs",
  // so a profile of "prefill" keeps the plain ones).
  double PrefillOnce(int len, TracedForward* traced = nullptr, int prompt_top_n = kUnscored);

  struct PromptLogprobsTimes {
    std::vector<double> plain_ms;                 // the prefill unscored
    std::vector<std::vector<double>> scored_ms;   // [i]: every position scored, top_ns[i] each
  };

  // A `len`-token prefill unscored and then scored at each of `top_ns` (PrefillOnce), in turn in
  // each of `runs` rounds after one untimed round (the first scored Forward sizes its result's
  // vectors and the first slices warm cuBLAS's heuristics for their shape), so a drift of the
  // GPU's clocks lands on every arm alike.
  PromptLogprobsTimes PromptLogprobs(int len, const std::vector<int>& top_ns, int runs);

  struct DecodeTimes {
    std::vector<double> graph_ms, eager_ms, sampled_ms, masked_device_ms, masked_host_ms;
    std::vector<double> knob_device_ms, knob_host_ms;
  };

  // `batch` sequences prefilled to `context` tokens (packed into Forwards of at most
  // max_tokens), then `warm` untimed steps, `steps` timed steps with graphs and `eager` timed
  // steps without. With `traced`, the last step with graphs runs under its timeline.
  DecodeTimes Decode(int batch, int context, int warm, int steps, int eager, int sampled,
                     int max_tokens, TracedForward* traced = nullptr, int masked = 0,
                     int knobs = 0);

  // Appends `prompts` fresh prompts of `len` random tokens to `chunks` (prefix 0, logits
  // wanted), their ids in `ids` and their pages, freshly allocated, in `pages`.
  void AddFreshPrompts(int prompts, int len, std::vector<std::vector<int32_t>>* ids,
                       std::vector<std::vector<int32_t>>* pages,
                       std::vector<SequenceChunk>* chunks);

  struct MixedTimes {
    std::vector<double> prefill_ms, decode_eager_ms, decode_graph_ms, mixed_ms, mixed_mha_ms;
  };

  // The decode worker's step with local prefill: `rows` decode rows at `context` tokens (one token
  // each) followed by `prompts` fresh prompts of `len` tokens, in one Forward (decode rows first,
  // as DecodeScheduler::Schedule orders them), against its two halves alone: the prompts in one
  // Forward, and the rows' step eagerly and with graphs (a step with prompts replays no graph);
  // the mixed Forward also with AttentionPath::kMha asked (the whole batch in the MHA form, the
  // rows' cached prefixes decompressed), where kAuto runs it in the latent form (the rows have a
  // prefix). `runs` rounds, the five Forwards in turn each round after one untimed round. With `traced`,
  // one more mixed Forward runs under the timeline (and `traced_prefill`, if given, one more
  // prompts-only Forward under its own).
  MixedTimes Mixed(int prompts, int len, int rows, int context, int runs, int max_tokens,
                   TracedForward* traced = nullptr, TracedForward* traced_prefill = nullptr);

  struct ChunkMixedTimes {
    std::vector<double> chunk_mla_ms, chunk_mha_ms, prompts_ms, mla_ms, mha_ms, split_ms;
  };

  // The prefill worker's step: one long prompt's later chunk (`chunk` tokens at positions
  // [prefix, prefix + chunk), its prefix cached once before the rounds) followed by `prompts`
  // fresh prompts of `len` tokens, in one Forward asked kMla, kMha and kSplit in turn, and its
  // halves alone (the chunk in either form, the prompts under kAuto: MHA). Every round rewrites
  // the chunk's cache rows with the same values. `runs` rounds after one untimed round.
  ChunkMixedTimes ChunkMixed(int prompts, int len, int prefix, int chunk, int runs, int max_tokens);

 private:
  BenchEngine& be_;
  Engine& e_;
  std::mt19937_64 rng_;
  std::uniform_int_distribution<int32_t> ids_;
};

// The table's rows of each kind, timed with `bench` as `o` asks, printed in the table main
// started, and appended to `out` (--output-json) under "prefill", "prompt_logprobs", "decode",
// "mixed" and "chunk_mixed". `ceilings` fills the roofline columns (zeros: dashes). Each does
// nothing where its flag's list is empty.
void PrefillRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
                 const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out);
void PromptLogprobsRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
                        const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out);
void DecodeRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
                const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out);
void MixedRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
               const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out);
void ChunkMixedRows(Bench& bench, const EngineBenchOptions& o, nlohmann::json& out);

}  // namespace mlaserve::engine_bench
