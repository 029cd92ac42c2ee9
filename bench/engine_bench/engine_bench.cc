// mlaserve-engine-bench: end-to-end speed of the DeepSeek engine on one GPU, or sharded over
// --tp-size GPUs in a worker's layout (--attention-parallel, --moe-parallel, --moe-dispatch;
// docs/parallel.md).
//
// Drives the model::Engine the workers use (DeepseekEngine, or the ParallelEngine over ranks on
// GPUs --device .. --device + tp - 1) directly, without RPCs:
//   prefill  one sequence of --prefill-lens tokens (random ids) per Forward, no cached prefix
//            (the MHA form, as the prefill worker runs a fresh prompt); median of --runs runs.
//   decode   --decode-batches sequences, each first prefilled to --decode-context tokens, then
//            one token per sequence per Forward (the decode worker's step), with CUDA graphs as
//            the engine uses them (the first step of a batch/width bucket is captured, later
//            steps replay), median over --decode-steps timed steps; the same batch is timed
//            eagerly too (--eager-steps) to show what the graphs save, and with graphs plus
//            sampling inside Forward (--sampled-steps; temperature 1, top-p 0.9, seeded: the
//            decode worker's path, where B ids come back instead of B x vocab logits), and
//            with every row constrained (--masked-steps: the same sampling with an allowed-token
//            mask a row, as JSON mode / structured outputs give; half the vocabulary allowed),
//            and with every row carrying the OpenAI knobs (--knob-steps: frequency_penalty 0.5
//            over the decoded ids, a logit_bias entry and logprobs 5), each drawn on the device
//            (Forward's path on CUDA) against the host path those steps took before, which the
//            engine no longer takes on CUDA: the baseline is Forward returning the logits (B x
//            vocab f32 copied back) plus model::SampleHostLogits drawing them on the host, timed
//            together; device and baseline steps alternate.
//            Under data-parallel attention the sequences go round-robin over the ranks (each
//            in its rank's pool), as a data-parallel decode worker places them.
//   mixed    (--mixed-prompts N...) the decode worker's step with local prefill: --mixed-decode-rows
//            decode rows at --decode-context and N fresh prompts of --mixed-prompt-len tokens in
//            one Forward, against the N prompts alone in one Forward and the rows' step alone
//            (eager and with graphs), and in the MHA form asked; medians of --runs rounds.
//   chunk    (--chunk-mixed N...) the prefill worker's step under chunked prefill: a long
//            prompt's later chunk of --chunk-len tokens after --chunk-prefix cached ones, then N
//            fresh prompts of --mixed-prompt-len tokens, in one Forward asked each path the
//            policy can pick (kMla, kMha, kSplit: docs/profiles.md, "The split rule"), against
//            the chunk alone (latent and MHA form) and the prompts alone; medians of --runs rounds.
//   prompt logprobs  (--prompt-logprobs-lens L...) one prompt of L tokens per Forward with every
//            position scored (SequenceChunk::prompt_targets: rows 0 .. L - 2 against the next
//            prompt token, --prompt-logprobs-top alternatives each, as vLLM's prompt_logprobs=N)
//            against the same prefill unscored, alternated in each of --runs rounds (medians);
//            the difference is the scoring's cost, set against what it must at least compute
//            (roofline.h, PromptScoringWork: the LM head over every scored row).
// Times are host wall time of Forward (ForwardInto on one reused result, as a serving loop
// steps), so they include the plan upload and the logits copy back (one f32 row of the
// vocabulary per sequence), as in serving. Decode feeds random ids
// instead of sampled ones, so host sampling is not timed.
// Memory: device memory in use (cudaMemGetInfo) before Create, after Create and at the end
// (of --device; with --tp-size > 1 the first rank's GPU).
// NVTX ranges "prefill", "decode_graph" and "decode_eager" mark the timed Forwards, so a
// profiler can keep just those kernels (tools/device/kernel_profile.sh: ncu --nvtx).
// Roofline columns (one GPU): each row's work from the config (bench/engine_bench/roofline.h: a
// decode step's bytes read, a prefill's FLOPs), its rate, and that rate's share of a ceiling
// measured in the same run before the engine loads (a 1 GiB device-to-device copy; a bf16 8192^3
// cuBLAS GEMM: bench/engine_bench/ceilings.h).
// SM clock (one GPU): after the GEMM ceiling, after each timed prefill run and after each decode
// batch's steps, outside the timed intervals, one thread counts clock64() cycles over 100 us of
// %globaltimer (ceilings.h, ProbeSmClockMhz); printed after the memory line against the boost
// clock and kept per row as "sm_clock_mhz". A GPU at its power cap lowers the clock under
// GEMM-heavy work, so a prefill's rate depends on it.
// --timeline: after all timed runs, one more prefill Forward per --prefill-lens, one more
// graph-replayed decode step per --decode-batches, and one more mixed Forward and prompts-only
// Forward per --mixed-prompts run under a CUPTI trace (GpuTimeline), and a
// summary of each says how much of its wall the GPU was busy and where it idled
// (timeline_summary.h). Tracing adds host time per launch, so those walls exceed the medians.
//
// This file sets up the engine and prints the table's head, the memory line and the timelines;
// options.h reads and checks the flags, bench.h declares what the rows share, prefill_rows.cc
// times and prints the prefill, prompt-logprobs, mixed and chunk rows, decode_rows.cc the decode
// rows.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "bench/engine_bench/bench.h"
#include "bench/engine_bench/ceilings.h"
#include "bench/engine_bench/gpu_timeline.h"
#include "bench/engine_bench/options.h"
#include "bench/engine_bench/roofline.h"
#include "bench/engine_bench/timeline_summary.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/moe/block_trace.h"
#include "model/engine.h"
#include "model/parallel_layout.h"
#include "nlohmann/json.hpp"

namespace mlaserve::engine_bench {
namespace {

// Sets up the engine and runs what `o` asks (the table's rows, then --timeline); returns the
// exit code.
int Run(const EngineBenchOptions& o) {
  std::unique_ptr<GpuTimeline> timeline;  // before loading the model: fail fast
  if (o.trace_timeline) {
    absl::StatusOr<std::unique_ptr<GpuTimeline>> created = GpuTimeline::Create();
    if (!created.ok()) {
      std::fprintf(stderr, "mlaserve-engine-bench: --timeline: %s\n",
                   created.status().ToString().c_str());
      return 2;
    }
    timeline = std::move(*created);
  }
  if (cudaSetDevice(o.device) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device %d\n", o.device);
    return 1;
  }
  cudaFree(nullptr);  // create the context, so "before" counts it
  // The roofline's ceilings (one GPU only: a sharded step's work is split over the ranks), before
  // the engine takes the memory their buffers need.
  const mlaserve::bench::DeviceCeilings ceilings =
      o.tp_size == 1 ? mlaserve::bench::MeasureDeviceCeilings() : mlaserve::bench::DeviceCeilings{};
  const double used_before = UsedGiB();
  mlaserve::model::EngineOptions eo;
  eo.model_dir = o.model;
  eo.backend = mlaserve::kernels::Backend::kCuda;
  eo.device = o.device;
  eo.num_kv_pages = o.num_pages;
  eo.max_batch_tokens = o.max_batch_tokens;
  // Prompt logprobs score PromptSliceRows() rows a slice, at most max_batch_seqs
  // (deepseek_engine_prompt_logprobs.cc): plan for the engine's default, which the decode worker's
  // --max-running-requests default matches, so that a run with --decode-batches 1 scores in the
  // slices a serving worker uses.
  eo.max_batch_seqs =
      std::max({o.max_batch, o.mixed_prompts.empty() ? 0 : o.mixed_rows + o.max_mixed,
                o.max_chunk_mixed + 1, 1,
                o.prompt_logprobs_lens.empty() ? 0 : mlaserve::model::EngineOptions{}.max_batch_seqs});
  eo.mha_provider = mlaserve::kernels::ParseMhaPrefillProvider(o.mha_provider).value();  // checked by CLI11
  eo.parallel = o.parallel;
  const auto load_start = Clock::now();
  auto engine = Engine::Create(eo);
  if (!engine.ok()) Die("create", engine.status());
  const double load_s = Ms(Clock::now() - load_start) / 1000;
  cudaSetDevice(o.device);  // the ranks' threads set theirs; the memory lines read this one
  const double used_loaded = UsedGiB();
  BenchEngine be(*std::move(engine));
  Engine& e = be.engine();
  if (!o.prompt_logprobs_lens.empty()) {
    // Data-parallel attention refuses prompt logprobs: say so before any run.
    if (absl::Status why = e.CheckPromptLogprobs(); !why.ok()) Die("--prompt-logprobs-lens", why);
  }
  const std::string layout = mlaserve::model::DescribeParallel(eo.parallel);
  const auto& cfg = e.config();
  const double kv_gib = static_cast<double>(e.kv_pool().layer_page_bytes()) *
                        cfg.num_hidden_layers * o.num_pages / (1ull << 30);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, o.device);

  nlohmann::json out;
  out["gpu"] = prop.name;
  out["model"] = o.model;
  out["layers"] = cfg.num_hidden_layers;
  out["hidden"] = cfg.hidden_size;
  out["load_s"] = load_s;
  out["mha_provider"] = mlaserve::kernels::DescribeMhaPrefillProvider(eo.mha_provider, eo.backend);
  out["layout"] = layout;
  Bench bench(be, o.seed);
  if (o.moe_block_trace) {
    if (absl::Status st = mlaserve::kernels::moe_trace::Start(); !st.ok()) Die("--moe-block-trace", st);
  }

  std::printf("mlaserve-engine-bench: %s, %s (%d layers, hidden %d), %s, load %.1f s\n", prop.name,
              o.model.c_str(), cfg.num_hidden_layers, cfg.hidden_size, layout.c_str(), load_s);
  std::printf("%s\n", out["mha_provider"].get<std::string>().c_str());
  // The roofline columns: bench/engine_bench/roofline.h says what a Forward must read and compute.
  if (o.tp_size == 1) {
    std::printf("ceilings measured in this run: copy %.0f GB/s (1 GiB device to device, read + written), "
                "bf16 GEMM %.0f TFLOP/s (8192^3, cuBLAS); decode rows read every weight a step "
                "touches once (routed experts: expected under uniform routing) and the KV cache, "
                "prefill rows compute 2 FLOP a parameter and token plus the causal attention\n",
                ceilings.copy_gbs, ceilings.gemm_tflops);
    out["ceilings"] = {{"copy_gbs", ceilings.copy_gbs}, {"gemm_tflops", ceilings.gemm_tflops},
                       {"gemm_clock_mhz", ceilings.gemm_clock_mhz}};
  }
  if (!o.prompt_logprobs_lens.empty()) {
    std::printf("prompt-logprobs rows: each prefill unscored and with every position scored, in "
                "turn in each of %d rounds (medians); the scoring alone is their difference, its "
                "work the LM head over every scored row (2 x rows x hidden x vocab FLOP), its "
                "floor that at the GEMM rate or one read of the head at the copy rate, whichever "
                "is longer (0 without ceilings)\n", o.runs);
  }
  std::printf("\n| phase | batch | tokens/step | median ms | tokens/s | work | rate | roofline |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  PrefillRows(bench, o, cfg, ceilings, out);
  PromptLogprobsRows(bench, o, cfg, ceilings, out);
  DecodeRows(bench, o, cfg, ceilings, out);
  MixedRows(bench, o, cfg, ceilings, out);
  ChunkMixedRows(bench, o, out);
  const double used_end = UsedGiB();
  const std::string graphs =
      be.graphs_captured() >= 0
          ? absl::StrFormat("decode graphs captured %d, replays %d", be.graphs_captured(),
                            be.graph_replays())
          : absl::StrFormat("graph steps %d (every rank captures or replays its own)",
                            be.graph_replays());
  std::printf("\ndevice %d memory in use: %.2f GiB before Create (context), %.2f GiB after Create "
              "(weights + KV pool of %d pages = %.2f GiB + workspaces), %.2f GiB at the end; %s\n",
              o.device, used_before, used_loaded, o.num_pages, kv_gib, used_end, graphs.c_str());
  out["memory_gib"] = {{"before_create", used_before}, {"after_create", used_loaded},
                       {"end", used_end}, {"kv_pool", kv_gib}, {"kv_pages", o.num_pages}};
  out["graphs_captured"] = be.graphs_captured();
  if (o.tp_size == 1) {
    // What clock the timed runs ended at. A row's rate means most at the clock it ran at: an H100
    // SXM at its 700 W cap runs back-to-back prefills at 1560-1710 MHz, and the per-run times
    // drift with it (docs/BENCHMARKS.md, sixty-eighth session).
    const double boost = mlaserve::bench::BoostSmClockMhz();
    out["sm_clock_boost_mhz"] = boost;
    std::printf("\nSM clock right after the timed runs (one thread's clock64 over 100 us of %%globaltimer):\n");
    std::printf("- the GEMM ceiling: %s\n",
                mlaserve::bench::ClockCell({ceilings.gemm_clock_mhz}, boost).c_str());
    const auto rows = [&](const char* phase, const char* key, const char* format) {
      if (!out.contains(phase)) return;
      for (const nlohmann::json& row : out[phase]) {
        const std::string cell =
            mlaserve::bench::ClockCell(row["sm_clock_mhz"].get<std::vector<double>>(), boost);
        std::printf(format, row[key].get<int>(), cell.c_str());
      }
    };
    rows("prefill", "prompt_len", "- prefill %d: %s\n");
    rows("decode", "batch", "- decode b%d, after its steps: %s\n");
  }
  if (timeline) {
    // After every timed run and the memory line, so those read the same with and without
    // --timeline. The first traced Forward is thrown away, so whatever CUPTI sets up lazily on
    // its first records stays out of the tables.
    std::printf("\nGPU timelines (CUPTI; tracing adds host time per launch, so walls here exceed "
                "the medians above)\n");
    TracedForward discarded{*timeline, {}};
    bench.PrefillOnce(o.prefill_lens.front(), &discarded);
    auto report = [&](const std::string& title, nlohmann::json id, const TimelineTrace& trace) {
      const TimelineSummary s = mlaserve::bench::Summarize(
          trace, {.top_gaps = 8, .top_kernels = 24, .sequence_first = o.sequence_first,
                  .sequence_count = o.sequence_count});
      std::printf("\n%s", mlaserve::bench::FormatSummary(title, s).c_str());
      out["timeline"].push_back(TimelineJson(std::move(id), s));
    };
    for (int len : o.prefill_lens) {
      TracedForward traced{*timeline, {}};
      bench.PrefillOnce(len, &traced);
      report(absl::StrFormat("timeline prefill %d", len),
             {{"phase", "prefill"}, {"prompt_len", len}}, traced.trace);
    }
    for (int b : o.batches) {
      // A fresh batch like the timed one (same context), at least one untraced step with graphs
      // first, so the traced step replays a graph rather than captures one.
      TracedForward traced{*timeline, {}};
      bench.Decode(b, o.context, std::max(o.warm, 1), /*steps=*/1, /*eager=*/0, /*sampled=*/0,
                   o.max_batch_tokens, &traced);
      report(absl::StrFormat("timeline decode b%d graph", b),
             {{"phase", "decode_graph"}, {"batch", b}, {"context", o.context}}, traced.trace);
    }
    for (int n : o.mixed_prompts) {
      TracedForward traced{*timeline, {}}, traced_prefill{*timeline, {}};
      bench.Mixed(n, o.mixed_len, o.mixed_rows, o.context, /*runs=*/0, o.max_batch_tokens,
                  &traced, &traced_prefill);
      report(absl::StrFormat("timeline mixed %d rows + %d x %d", o.mixed_rows, n, o.mixed_len),
             {{"phase", "mixed"}, {"prompts", n}, {"prompt_len", o.mixed_len},
              {"decode_rows", o.mixed_rows}, {"context", o.context}}, traced.trace);
      report(absl::StrFormat("timeline prefill %d x %d", n, o.mixed_len),
             {{"phase", "prefill_prompts"}, {"prompts", n}, {"prompt_len", o.mixed_len}},
             traced_prefill.trace);
    }
  }
  if (!o.output_json.empty()) std::ofstream(o.output_json) << out.dump(1) << "\n";
  return 0;
}

}  // namespace
}  // namespace mlaserve::engine_bench

int main(int argc, char** argv) {
  mlaserve::engine_bench::EngineBenchOptions o;
  if (std::optional<int> code = mlaserve::engine_bench::ParseEngineBenchOptions(argc, argv, &o)) {
    return *code;
  }
  return mlaserve::engine_bench::Run(o);
}
