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
// --timeline: after all timed runs, one more prefill Forward per --prefill-lens, one more
// graph-replayed decode step per --decode-batches, and one more mixed Forward and prompts-only
// Forward per --mixed-prompts run under a CUPTI trace (GpuTimeline), and a
// summary of each says how much of its wall the GPU was busy and where it idled
// (timeline_summary.h). Tracing adds host time per launch, so those walls exceed the medians.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>  // header-only: ranges cost nothing unless a profiler attaches

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "bench/engine_bench/ceilings.h"
#include "bench/engine_bench/gpu_timeline.h"
#include "bench/engine_bench/moe_block_trace_summary.h"
#include "bench/engine_bench/roofline.h"
#include "bench/engine_bench/timeline_summary.h"
#include "common/request_limits.h"
#include "kernels/common/page.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/moe/block_trace.h"
#include "model/deepseek_engine.h"
#include "model/parallel_engine.h"
#include "model/parallel_layout.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using mlaserve::bench::GpuTimeline;
using mlaserve::bench::TimelineSummary;
using mlaserve::bench::TimelineTrace;
using mlaserve::kernels::PagesFor;
using mlaserve::model::AttentionPath;
using mlaserve::model::DeepseekEngine;
using mlaserve::model::Engine;
using mlaserve::model::ParallelEngine;
using mlaserve::model::SequenceChunk;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double UsedGiB() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return static_cast<double>(total_b - free_b) / (1ull << 30);
}

// The roofline cells of a row: the work in `unit` (`scale` of the work's own units: bytes or
// FLOPs), its rate, and the rate's share of the ceiling (in unit/s); dashes where there is no
// ceiling (sharded runs, a failed measurement).
std::string RooflineCells(double work, double scale, const char* unit, double ms, double ceiling, const char* of) {
  if (work <= 0 || ms <= 0 || ceiling <= 0) return "- | - | -";
  const double rate = work / scale / (ms / 1e3);
  return absl::StrFormat("%.2f %s | %.0f %s/s | %.0f%% of %s", work / scale, unit, rate, unit,
                         100.0 * rate / ceiling, of);
}

// A chunk of `tokens` at positions [start, start + tokens.size()) in `pages`; SequenceChunk's
// other fields keep their defaults (no sampling, rank 0, nothing scored). Assigned field by field:
// a braced SequenceChunk{...} leaves prompt_targets, which has no default member initializer, to
// -Wmissing-field-initializers.
SequenceChunk Chunk(std::span<const int32_t> tokens, int start, std::span<const int32_t> pages,
                    bool want_logits) {
  SequenceChunk c;
  c.tokens = tokens;
  c.start_pos = start;
  c.pages = pages;
  c.want_logits = want_logits;
  return c;
}

[[noreturn]] void Die(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "mlaserve-engine-bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// A Forward run under --timeline: `timeline` is started right before it and stopped right after
// it, and `trace` receives what it recorded.
struct TracedForward {
  GpuTimeline& timeline;
  TimelineTrace trace;
};

void BeginTrace(TracedForward* traced) {
  if (traced == nullptr) return;
  if (absl::Status s = traced->timeline.Start(); !s.ok()) Die("timeline start", s);
}

void EndTrace(TracedForward* traced) {
  if (traced == nullptr) return;
  absl::StatusOr<TimelineTrace> trace = traced->timeline.Stop();
  if (!trace.ok()) Die("timeline stop", trace.status());
  traced->trace = std::move(*trace);
}

// The summary as --output-json's "timeline" entries: `id` (phase, length or batch) plus the
// numbers FormatSummary prints.
nlohmann::json TimelineJson(nlohmann::json id, const TimelineSummary& s) {
  nlohmann::json gaps = nlohmann::json::array(), kernels = nlohmann::json::array();
  nlohmann::json copies = nlohmann::json::object();
  for (const mlaserve::bench::IdleGap& g : s.largest_gaps) {
    nlohmann::json calls = nlohmann::json::array();
    for (const auto& c : g.host_calls) {
      calls.push_back({{"name", c.name}, {"calls", c.calls}, {"overlap_us", c.overlap_us}});
    }
    gaps.push_back({{"begin_ms", g.begin_ms}, {"duration_ms", g.duration_ms},
                    {"previous", g.previous}, {"next", g.next}, {"host_calls", calls},
                    {"outside_calls_us", g.outside_calls_us}});
  }
  for (int d = 0; d < mlaserve::bench::kNumCopyDirections; ++d) {
    const mlaserve::bench::CopyTotals& c = s.copies[d];
    if (c.count == 0) continue;
    const auto direction = static_cast<mlaserve::bench::CopyDirection>(d);
    copies[std::string(mlaserve::bench::CopyDirectionName(direction))] = {
        {"count", c.count}, {"pageable", c.pageable}, {"bytes", c.bytes}, {"ms", c.ms}};
  }
  for (const mlaserve::bench::KernelTime& k : s.top_kernels) {
    kernels.push_back({{"name", k.name},
                       {"launches", k.launches},
                       {"ms", k.ms},
                       {"exclusive_ms", k.exclusive_ms},
                       {"path_ms", k.path_ms}});
  }
  id.update({{"wall_ms", s.wall_ms}, {"gpu_span_ms", s.gpu_span_ms}, {"busy_ms", s.busy_ms},
             {"idle_ms", s.idle_ms}, {"idle_gaps", s.idle_gaps},
             {"before_first_ms", s.before_first_ms}, {"after_last_ms", s.after_last_ms},
             {"kernels", s.kernels}, {"memsets", s.memsets}, {"runtime_calls", s.runtime_calls},
             {"syncs", s.syncs}, {"largest_gaps", gaps}, {"copies", copies},
             {"top_kernels", kernels}});
  return id;
}

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
  double PrefillOnce(int len, TracedForward* traced = nullptr, int prompt_top_n = kUnscored) {
    auto pages = e_.kv_pool().Allocate(PagesFor(len));
    if (!pages.ok()) Die("allocate", pages.status());
    const std::vector<int32_t> prompt = RandomIds(len);
    SequenceChunk c = Chunk(prompt, 0, *pages, true);
    const bool scored = prompt_top_n != kUnscored;
    if (scored) {
      c.prompt_targets = std::span<const int32_t>(prompt).subspan(1);
      c.prompt_from = 0;
      c.prompt_top_n = prompt_top_n;
    }
    nvtxRangePushA(scored ? "prefill_prompt_logprobs" : "prefill");
    BeginTrace(traced);
    const auto start = Clock::now();
    auto r = e_.Forward({&c, 1});
    const double ms = Ms(Clock::now() - start);
    EndTrace(traced);
    nvtxRangePop();
    if (!r.ok()) Die("prefill", r.status());
    if (scored && (r->prompt_logprobs.size() != 1 || r->prompt_logprobs[0].size() != c.prompt_targets.size())) {
      Die("prefill with prompt logprobs",
          absl::InternalError(absl::StrFormat(
              "Forward returned %d scored chunks (%d entries in the first) for one chunk of %d "
              "scored rows", r->prompt_logprobs.size(),
              r->prompt_logprobs.empty() ? 0 : r->prompt_logprobs[0].size(), c.prompt_targets.size())));
    }
    e_.kv_pool().Free(*pages);
    return ms;
  }

  struct PromptLogprobsTimes {
    std::vector<double> plain_ms;                 // the prefill unscored
    std::vector<std::vector<double>> scored_ms;   // [i]: every position scored, top_ns[i] each
  };

  // A `len`-token prefill unscored and then scored at each of `top_ns` (PrefillOnce), in turn in
  // each of `runs` rounds after one untimed round (the first scored Forward sizes its result's
  // vectors and the first slices warm cuBLAS's heuristics for their shape), so a drift of the
  // GPU's clocks lands on every arm alike.
  PromptLogprobsTimes PromptLogprobs(int len, const std::vector<int>& top_ns, int runs) {
    PromptLogprobsTimes t;
    t.scored_ms.resize(top_ns.size());
    for (int round = -1; round < runs; ++round) {
      const double plain = PrefillOnce(len);
      if (round >= 0) t.plain_ms.push_back(plain);
      for (size_t i = 0; i < top_ns.size(); ++i) {
        const double scored = PrefillOnce(len, nullptr, top_ns[i]);
        if (round >= 0) t.scored_ms[i].push_back(scored);
      }
    }
    return t;
  }

  struct DecodeTimes {
    std::vector<double> graph_ms, eager_ms, sampled_ms, masked_device_ms, masked_host_ms;
    std::vector<double> knob_device_ms, knob_host_ms;
  };

  // `batch` sequences prefilled to `context` tokens (packed into Forwards of at most
  // max_tokens), then `warm` untimed steps, `steps` timed steps with graphs and `eager` timed
  // steps without. With `traced`, the last step with graphs runs under its timeline.
  DecodeTimes Decode(int batch, int context, int warm, int steps, int eager, int sampled,
                     int max_tokens, TracedForward* traced = nullptr, int masked = 0,
                     int knobs = 0) {
    const int total = context + warm + steps + eager + sampled + 2 * masked + 2 * knobs + 6;
    std::vector<std::vector<int32_t>> pages(batch), seqs(batch);
    // Data-parallel attention: sequence b on rank b mod ranks, in that rank's pool.
    const int ranks = e_.data_ranks();
    const auto rank_of = [&](int b) { return b % ranks; };
    for (int b = 0; b < batch; ++b) {
      auto p = e_.rank_pool(rank_of(b)).Allocate(PagesFor(total));
      if (!p.ok()) Die("allocate", p.status());
      pages[b] = std::move(*p);
      seqs[b] = RandomIds(context);
    }
    const int per_fwd = std::max(1, max_tokens / context);
    for (int b0 = 0; b0 < batch; b0 += per_fwd) {
      std::vector<SequenceChunk> chunks;
      for (int b = b0; b < std::min(batch, b0 + per_fwd); ++b) {
        chunks.push_back(Chunk(seqs[b], 0, pages[b], false));
        chunks.back().rank = rank_of(b);
      }
      auto r = e_.Forward(chunks);
      if (!r.ok()) Die("decode setup prefill", r.status());
    }
    DecodeTimes t;
    std::vector<mlaserve::model::SampleRow> rows(batch);
    for (int b = 0; b < batch; ++b) {
      rows[b].options.temperature = 1.0f;
      rows[b].options.top_p = 0.9f;
      rows[b].options.seed = 1000 + b;
    }
    // Masked steps: each row's mask allows a pseudo-random half of the vocabulary.
    const int vocab = e_.config().vocab_size;
    std::vector<std::vector<uint64_t>> masks(masked > 0 ? batch : 0);
    for (auto& m : masks) {
      m.resize((vocab + 63) / 64);
      for (auto& w : m) w = rng_();
      m[0] |= 1;  // never empty
    }
    // One result reused over the steps, as a serving loop keeps it (Engine::ForwardInto): the
    // logits rows land in storage sized once, not in a fresh allocation per step.
    mlaserve::model::ForwardResult result;
    // A sampled step's rows: plain, masked (half the vocabulary each) or with the OpenAI knobs;
    // drawn on the device in Forward, or by the host baseline (above).
    enum class Rows { kPlain, kMasked, kKnobs };
    enum class Draw { kDevice, kHost };
    std::vector<const mlaserve::model::SampleRow*> row_ptrs;
    for (const auto& r : rows) row_ptrs.push_back(&r);
    std::vector<mlaserve::model::TokenLogprobs> host_logprobs;
    auto step = [&](std::vector<double>* out, const char* range, bool sample = false,
                    TracedForward* traced_step = nullptr, Rows kind = Rows::kPlain,
                    Draw draw = Draw::kDevice) {
      std::vector<int32_t> next = RandomIds(batch);
      std::vector<SequenceChunk> chunks(batch);
      for (int b = 0; b < batch; ++b) {
        seqs[b].push_back(next[b]);
        chunks[b] = Chunk(std::span<const int32_t>(&seqs[b].back(), 1),
                          static_cast<int>(seqs[b].size()) - 1, pages[b], true);
        chunks[b].rank = rank_of(b);
        rows[b].step = seqs[b].size();
        rows[b].history = {};
        rows[b].allowed = kind == Rows::kMasked ? std::span<const uint64_t>(masks[b]) : std::span<const uint64_t>();
        rows[b].options.logit_bias.clear();
        rows[b].options.frequency_penalty = 0.0f;
        rows[b].options.logprobs = -1;
        if (kind == Rows::kKnobs) {
          // The decoded ids are the generated ones (the frequency penalty counts them).
          rows[b].history = seqs[b];
          rows[b].step = seqs[b].size() - context;
          rows[b].options.frequency_penalty = 0.5f;
          rows[b].options.logit_bias = {{static_cast<int32_t>((7919 * b) % vocab), 2.0f}};
          rows[b].options.logprobs = 5;
        }
        if (sample && draw == Draw::kDevice) chunks[b].sample = &rows[b];
      }
      if (out) nvtxRangePushA(range);
      BeginTrace(traced_step);
      const auto start = Clock::now();
      absl::Status r = e_.ForwardInto(chunks, AttentionPath::kAuto, nullptr, &result);
      if (r.ok() && sample && draw == Draw::kHost) {
        auto drawn = mlaserve::model::SampleHostLogits(result.logits, vocab, row_ptrs, &host_logprobs);
        r = drawn.status();
      }
      const double ms = Ms(Clock::now() - start);
      EndTrace(traced_step);
      if (out) nvtxRangePop();
      if (!r.ok()) Die("decode", r);
      if (out) out->push_back(ms);
    };
    be_.set_decode_graphs(true);
    for (int s = 0; s < warm; ++s) step(nullptr, nullptr);
    for (int s = 0; s < steps; ++s) {
      step(&t.graph_ms, "decode_graph", false, s == steps - 1 ? traced : nullptr);
    }
    if (sampled > 0) step(nullptr, nullptr, true);
    for (int s = 0; s < sampled; ++s) step(&t.sampled_ms, "decode_sampled", true);
    if (masked > 0) {
      step(nullptr, nullptr, true, nullptr, Rows::kMasked, Draw::kDevice);
      step(nullptr, nullptr, true, nullptr, Rows::kMasked, Draw::kHost);
    }
    for (int s = 0; s < masked; ++s) {
      step(&t.masked_device_ms, "decode_masked_device", true, nullptr, Rows::kMasked, Draw::kDevice);
      step(&t.masked_host_ms, "decode_masked_host", true, nullptr, Rows::kMasked, Draw::kHost);
    }
    if (knobs > 0) {
      step(nullptr, nullptr, true, nullptr, Rows::kKnobs, Draw::kDevice);
      step(nullptr, nullptr, true, nullptr, Rows::kKnobs, Draw::kHost);
    }
    for (int s = 0; s < knobs; ++s) {
      step(&t.knob_device_ms, "decode_knobs_device", true, nullptr, Rows::kKnobs, Draw::kDevice);
      step(&t.knob_host_ms, "decode_knobs_host", true, nullptr, Rows::kKnobs, Draw::kHost);
    }
    be_.set_decode_graphs(false);
    if (eager > 0) step(nullptr, nullptr);
    for (int s = 0; s < eager; ++s) step(&t.eager_ms, "decode_eager");
    be_.set_decode_graphs(true);
    for (int b = 0; b < batch; ++b) e_.rank_pool(rank_of(b)).Free(pages[b]);
    return t;
  }

  // Appends `prompts` fresh prompts of `len` random tokens to `chunks` (prefix 0, logits
  // wanted), their ids in `ids` and their pages, freshly allocated, in `pages`.
  void AddFreshPrompts(int prompts, int len, std::vector<std::vector<int32_t>>* ids,
                       std::vector<std::vector<int32_t>>* pages, std::vector<SequenceChunk>* chunks) {
    for (int p = 0; p < prompts; ++p) {
      auto pp = e_.kv_pool().Allocate(PagesFor(len));
      if (!pp.ok()) Die("allocate", pp.status());
      pages->push_back(std::move(*pp));
      (*ids)[p] = RandomIds(len);
    }
    for (int p = 0; p < prompts; ++p) chunks->push_back(Chunk((*ids)[p], 0, (*pages)[p], true));
  }

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
                   TracedForward* traced = nullptr, TracedForward* traced_prefill = nullptr) {
    const int new_tokens = 5 * (runs + 1) + 1;  // each row's: five steps a round, one traced
    std::vector<std::vector<int32_t>> pages(rows), seqs(rows);
    for (int b = 0; b < rows; ++b) {
      auto p = e_.kv_pool().Allocate(PagesFor(context + new_tokens));
      if (!p.ok()) Die("allocate", p.status());
      pages[b] = std::move(*p);
      seqs[b] = RandomIds(context);
    }
    const int per_fwd = std::max(1, max_tokens / context);
    for (int b0 = 0; b0 < rows; b0 += per_fwd) {
      std::vector<SequenceChunk> chunks;
      for (int b = b0; b < std::min(rows, b0 + per_fwd); ++b) chunks.push_back(Chunk(seqs[b], 0, pages[b], false));
      auto r = e_.Forward(chunks);
      if (!r.ok()) Die("mixed setup prefill", r.status());
    }
    mlaserve::model::ForwardResult result;
    std::vector<std::vector<int32_t>> prompt_ids(prompts);
    // One Forward: the decode rows (each one new token) if `with_rows`, then the prompts if
    // `with_prompts`; returns the wall time in ms.
    auto forward = [&](bool with_rows, bool with_prompts, TracedForward* tr,
                       AttentionPath path = AttentionPath::kAuto) {
      std::vector<SequenceChunk> chunks;
      std::vector<std::vector<int32_t>> prompt_pages;
      if (with_rows) {
        const std::vector<int32_t> next = RandomIds(rows);
        for (int b = 0; b < rows; ++b) {
          seqs[b].push_back(next[b]);
          chunks.push_back(Chunk(std::span<const int32_t>(&seqs[b].back(), 1),
                                 static_cast<int>(seqs[b].size()) - 1, pages[b], true));
        }
      }
      if (with_prompts) AddFreshPrompts(prompts, len, &prompt_ids, &prompt_pages, &chunks);
      BeginTrace(tr);
      const auto start = Clock::now();
      const absl::Status r = e_.ForwardInto(chunks, path, nullptr, &result);
      const double ms = Ms(Clock::now() - start);
      EndTrace(tr);
      if (!r.ok()) Die("mixed", r);
      for (const auto& pp : prompt_pages) e_.kv_pool().Free(pp);
      return ms;
    };
    MixedTimes t;
    for (int round = -1; round < runs; ++round) {
      const bool timed = round >= 0;
      const double p = forward(false, true, nullptr);
      be_.set_decode_graphs(false);
      const double de = forward(true, false, nullptr);
      be_.set_decode_graphs(true);
      const double m = forward(true, true, nullptr);
      const double mm = forward(true, true, nullptr, AttentionPath::kMha);
      forward(true, false, nullptr);  // captures (first round) or replays the rows' graph
      const double dg = forward(true, false, nullptr);
      if (!timed) continue;
      t.prefill_ms.push_back(p);
      t.decode_eager_ms.push_back(de);
      t.mixed_ms.push_back(m);
      t.mixed_mha_ms.push_back(mm);
      t.decode_graph_ms.push_back(dg);
    }
    if (traced) forward(true, true, traced);
    if (traced_prefill) forward(false, true, traced_prefill);
    for (int b = 0; b < rows; ++b) e_.kv_pool().Free(pages[b]);
    return t;
  }

  struct ChunkMixedTimes {
    std::vector<double> chunk_mla_ms, chunk_mha_ms, prompts_ms, mla_ms, mha_ms, split_ms;
  };

  // The prefill worker's step: one long prompt's later chunk (`chunk` tokens at positions
  // [prefix, prefix + chunk), its prefix cached once before the rounds) followed by `prompts`
  // fresh prompts of `len` tokens, in one Forward asked kMla, kMha and kSplit in turn, and its
  // halves alone (the chunk in either form, the prompts under kAuto: MHA). Every round rewrites
  // the chunk's cache rows with the same values. `runs` rounds after one untimed round.
  ChunkMixedTimes ChunkMixed(int prompts, int len, int prefix, int chunk, int runs, int max_tokens) {
    auto pages = e_.kv_pool().Allocate(PagesFor(prefix + chunk));
    if (!pages.ok()) Die("allocate", pages.status());
    const std::vector<int32_t> ids = RandomIds(prefix + chunk);
    for (int start = 0; start < prefix; start += max_tokens) {
      const int n = std::min(max_tokens, prefix - start);
      const std::vector<SequenceChunk> piece = {
          Chunk(std::span<const int32_t>(ids).subspan(start, n), start, *pages, false)};
      auto r = e_.Forward(piece);
      if (!r.ok()) Die("chunk setup prefill", r.status());
    }
    mlaserve::model::ForwardResult result;
    std::vector<std::vector<int32_t>> prompt_ids(prompts);
    auto forward = [&](bool with_chunk, bool with_prompts, AttentionPath path) {
      std::vector<SequenceChunk> chunks;
      std::vector<std::vector<int32_t>> prompt_pages;
      if (with_chunk) chunks.push_back(Chunk(std::span<const int32_t>(ids).subspan(prefix, chunk), prefix, *pages, true));
      if (with_prompts) AddFreshPrompts(prompts, len, &prompt_ids, &prompt_pages, &chunks);
      const auto start = Clock::now();
      const absl::Status r = e_.ForwardInto(chunks, path, nullptr, &result);
      const double ms = Ms(Clock::now() - start);
      if (!r.ok()) Die("chunk mixed", r);
      for (const auto& pp : prompt_pages) e_.kv_pool().Free(pp);
      return ms;
    };
    ChunkMixedTimes t;
    for (int round = -1; round < runs; ++round) {
      const double cm = forward(true, false, AttentionPath::kMla);
      const double ch = forward(true, false, AttentionPath::kMha);
      const double p = forward(false, true, AttentionPath::kAuto);
      const double m = forward(true, true, AttentionPath::kMla);
      const double h = forward(true, true, AttentionPath::kMha);
      const double sp = forward(true, true, AttentionPath::kSplit);
      if (round < 0) continue;
      t.chunk_mla_ms.push_back(cm);
      t.chunk_mha_ms.push_back(ch);
      t.prompts_ms.push_back(p);
      t.mla_ms.push_back(m);
      t.mha_ms.push_back(h);
      t.split_ms.push_back(sp);
    }
    e_.kv_pool().Free(*pages);
    return t;
  }

 private:
  BenchEngine& be_;
  Engine& e_;
  std::mt19937_64 rng_;
  std::uniform_int_distribution<int32_t> ids_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model, output_json;
  std::vector<int> prefill_lens = {1024, 4096}, batches = {1, 32, 128};
  int runs = 5, context = 1024, warm = 3, steps = 32, eager_steps = 8, sampled_steps = 16, device = 0;
  int masked_steps = 0, knob_steps = 0;
  int max_batch_tokens = 8192, num_pages = 0;
  uint64_t seed = 1;
  bool trace_timeline = false, moe_block_trace = false;
  int sequence_first = 0, sequence_count = 0;
  std::string mha_provider = "auto";
  std::vector<int> mixed_prompts;
  int mixed_len = 1024, mixed_rows = 56;
  std::vector<int> chunk_mixed;
  int chunk_prefix = 6144, chunk_len = 2048;
  std::vector<int> prompt_logprobs_lens, prompt_logprobs_top = {5};
  int tp_size = 1;
  std::string attention_parallel = "tensor", moe_parallel = "expert", moe_dispatch = "gather";
  CLI::App app{"mlaserve-engine-bench: prefill and decode speed of the engine on one GPU or "
               "sharded over several"};
  app.add_option("--model", model, "model directory")->required();
  app.add_option("--mha-provider", mha_provider, "auto|ours|cudnn|prefer-cudnn: MHA-prefill attention")
      ->check(CLI::IsMember({"auto", "ours", "cudnn"}))->capture_default_str();
  app.add_option("--prefill-lens", prefill_lens, "prompt lengths timed")->capture_default_str();
  app.add_option("--decode-batches", batches, "decode batch sizes")->capture_default_str();
  app.add_option("--decode-context", context, "tokens in each sequence before decode")
      ->capture_default_str();
  app.add_option("--runs", runs, "prefill repetitions (median)")->capture_default_str();
  app.add_option("--decode-steps", steps, "timed decode steps with graphs (median)")
      ->capture_default_str();
  app.add_option("--eager-steps", eager_steps, "timed decode steps without graphs (0 = skip)")
      ->capture_default_str();
  app.add_option("--sampled-steps", sampled_steps,
                 "timed decode steps with graphs and sampling inside Forward (0 = skip)")
      ->capture_default_str();
  app.add_option("--masked-steps", masked_steps,
                 "timed decode steps with graphs, sampling and an allowed-token mask on every row, "
                 "drawn on the device and (alternated) by the host baseline: logits copied back and "
                 "drawn on the host (0 = skip)")
      ->capture_default_str();
  app.add_option("--knob-steps", knob_steps,
                 "timed decode steps with graphs where every row has frequency_penalty 0.5, a "
                 "logit_bias entry and logprobs 5, drawn on the device and (alternated) by the host "
                 "baseline: logits copied back and drawn on the host (0 = skip)")
      ->capture_default_str();
  app.add_option("--mixed-prompts", mixed_prompts,
                 "decode steps with local prefill: for each N, N prompts of --mixed-prompt-len "
                 "tokens after --mixed-decode-rows decode rows at --decode-context, in one Forward, "
                 "timed against the prompts alone and the rows' step alone (empty = skip)");
  app.add_option("--mixed-prompt-len", mixed_len, "tokens of each prompt in a mixed step")
      ->capture_default_str();
  app.add_option("--mixed-decode-rows", mixed_rows, "decode rows of a mixed step")
      ->capture_default_str();
  app.add_option("--chunk-mixed", chunk_mixed,
                 "the prefill worker's step: for each N, a prompt's later chunk of --chunk-len "
                 "tokens after --chunk-prefix cached ones then N fresh prompts of "
                 "--mixed-prompt-len tokens, in one Forward asked kMla, kMha and kSplit, timed "
                 "against its halves (empty = skip)");
  app.add_option("--chunk-prefix", chunk_prefix, "cached tokens before the chunk")
      ->capture_default_str();
  app.add_option("--chunk-len", chunk_len, "tokens of the later chunk")->capture_default_str();
  app.add_option("--prompt-logprobs-lens", prompt_logprobs_lens,
                 "prompt logprobs: for each L, the prefill of an L-token prompt with every position "
                 "scored (vLLM's prompt_logprobs) against the same prefill unscored, alternated in "
                 "each of --runs rounds, and the difference against the scoring's floor (empty or "
                 "0 = skip)");
  app.add_option("--prompt-logprobs-top", prompt_logprobs_top,
                 "with --prompt-logprobs-lens: the alternatives a scored position returns, as "
                 "vLLM's prompt_logprobs=N (0 = the prompt token's own logprob and rank only); "
                 "several values are timed in turn in the same rounds")
      ->capture_default_str();
  app.add_option("--warmup-steps", warm, "untimed decode steps first (capture)")->capture_default_str();
  app.add_option("--max-batch-tokens", max_batch_tokens, "engine workspace planning")
      ->capture_default_str();
  app.add_option("--num-kv-pages", num_pages, "KV pool pages (0 = what the runs need)");
  app.add_option("--device", device, "CUDA device (the first rank's with --tp-size > 1)")
      ->capture_default_str();
  app.add_option("--tp-size", tp_size, "ranks to shard the model over, as a worker's --tp-size "
                 "(GPUs --device .. --device + N - 1)")->capture_default_str();
  app.add_option("--attention-parallel", attention_parallel, "with --tp-size > 1: tensor or data")
      ->capture_default_str();
  app.add_option("--moe-parallel", moe_parallel, "with --tp-size > 1: expert or tensor")
      ->capture_default_str();
  app.add_option("--moe-dispatch", moe_dispatch,
                 "with --moe-parallel expert: gather or all-to-all")->capture_default_str();
  app.add_option("--seed", seed, "token id seed")->capture_default_str();
  app.add_option("--output-json", output_json, "write the results as JSON");
  app.add_flag("--timeline", trace_timeline,
               "after the timed runs, trace one more prefill Forward per --prefill-lens and one "
               "more decode step with graphs per --decode-batches with CUPTI and print where the "
               "GPU idles in each (needs a build with CUPTI)");
  app.add_option("--timeline-sequence", sequence_count,
                 "with --timeline: also list this many device launches one by one, in start order, "
                 "with their exclusive times (one layer's kernels, say)")
      ->capture_default_str();
  app.add_option("--timeline-sequence-from", sequence_first,
                 "with --timeline-sequence: the first launch listed (0-based, in start order)")
      ->capture_default_str();
  app.add_flag("--moe-block-trace", moe_block_trace,
               "after each decode batch, print where the last step's one-token MoE launches' blocks "
               "ran (router, gate_up, down: SM, start, PDL wait and end of every block; "
               "kernels/moe/block_trace.h); needs --eager-steps 0 --sampled-steps 0 and one GPU");
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<mlaserve::model::ParallelOptions> parallel = mlaserve::model::ParseParallelFlags(
      tp_size, attention_parallel, moe_parallel, moe_dispatch);
  if (!parallel.ok()) {
    std::fprintf(stderr, "mlaserve-engine-bench: %s\n", parallel.status().message().data());
    return 2;
  }
  if (trace_timeline && tp_size > 1) {
    std::fprintf(stderr, "mlaserve-engine-bench: --timeline traces one GPU; --tp-size is %d\n",
                 tp_size);
    return 2;
  }

  if (moe_block_trace && (tp_size > 1 || eager_steps != 0 || sampled_steps != 0)) {
    std::fprintf(stderr, "mlaserve-engine-bench: --moe-block-trace reads the last graph replay of one GPU: it "
                 "needs --tp-size 1, --eager-steps 0 and --sampled-steps 0 (got %d, %d, %d)\n",
                 tp_size, eager_steps, sampled_steps);
    return 2;
  }

  const int max_batch = std::max(*std::max_element(batches.begin(), batches.end()),
                                 mixed_prompts.empty() ? 0 : mixed_rows);
  const int max_prefill = *std::max_element(prefill_lens.begin(), prefill_lens.end());
  if (max_prefill > max_batch_tokens) {
    std::fprintf(stderr, "--prefill-lens %d exceeds --max-batch-tokens %d\n", max_prefill,
                 max_batch_tokens);
    return 2;
  }
  const int max_mixed = mixed_prompts.empty() ? 0 : *std::max_element(mixed_prompts.begin(), mixed_prompts.end());
  if (!mixed_prompts.empty()) {
    if (*std::min_element(mixed_prompts.begin(), mixed_prompts.end()) < 1 || mixed_len < 1 ||
        mixed_rows < 1 || tp_size > 1) {
      std::fprintf(stderr, "mlaserve-engine-bench: --mixed-prompts needs prompts >= 1, "
                   "--mixed-prompt-len >= 1, --mixed-decode-rows >= 1 and one GPU (got %d, %d, %d, "
                   "--tp-size %d)\n", *std::min_element(mixed_prompts.begin(), mixed_prompts.end()),
                   mixed_len, mixed_rows, tp_size);
      return 2;
    }
    if (max_mixed * mixed_len + mixed_rows > max_batch_tokens) {
      std::fprintf(stderr, "mlaserve-engine-bench: a mixed step of %d prompts of %d tokens and %d "
                   "rows exceeds --max-batch-tokens %d\n", max_mixed, mixed_len, mixed_rows,
                   max_batch_tokens);
      return 2;
    }
  }
  const int max_chunk_mixed =
      chunk_mixed.empty() ? 0 : *std::max_element(chunk_mixed.begin(), chunk_mixed.end());
  if (!chunk_mixed.empty()) {
    const int least = *std::min_element(chunk_mixed.begin(), chunk_mixed.end());
    if (least < 1 || mixed_len < 2 || chunk_prefix < 1 || chunk_len < 1 || tp_size > 1 ||
        chunk_len + max_chunk_mixed * mixed_len > max_batch_tokens) {
      std::fprintf(stderr, "mlaserve-engine-bench: --chunk-mixed needs prompts >= 1 (got %d), "
                   "--mixed-prompt-len >= 2 (%d), --chunk-prefix >= 1 (%d), --chunk-len >= 1 "
                   "(%d), one GPU (--tp-size %d), and the chunk and %d prompts within "
                   "--max-batch-tokens %d\n", least, mixed_len, chunk_prefix, chunk_len, tp_size,
                   max_chunk_mixed, max_batch_tokens);
      return 2;
    }
  }
  // --prompt-logprobs-lens: 0 is "skip", as an empty list (a script's default can pass it).
  std::erase(prompt_logprobs_lens, 0);
  const int max_prompt_logprobs =
      prompt_logprobs_lens.empty() ? 0 : *std::max_element(prompt_logprobs_lens.begin(), prompt_logprobs_lens.end());
  if (!prompt_logprobs_lens.empty()) {
    const int shortest = *std::min_element(prompt_logprobs_lens.begin(), prompt_logprobs_lens.end());
    const auto [least_top, most_top] =
        std::minmax_element(prompt_logprobs_top.begin(), prompt_logprobs_top.end());
    if (shortest < 2 || max_prompt_logprobs > max_batch_tokens || prompt_logprobs_top.empty() ||
        *least_top < 0 || *most_top > mlaserve::common::kMaxTopLogprobs || runs < 1) {
      std::fprintf(stderr, "mlaserve-engine-bench: --prompt-logprobs-lens needs lengths in [2, "
                   "--max-batch-tokens %d] (got %d to %d; a one-token prompt has no position to "
                   "score), --prompt-logprobs-top values in [0, %d] (got %s) and --runs >= 1 (got "
                   "%d)\n",
                   max_batch_tokens, shortest, max_prompt_logprobs, mlaserve::common::kMaxTopLogprobs,
                   prompt_logprobs_top.empty()
                       ? "none"
                       : absl::StrFormat("%d to %d", *least_top, *most_top).c_str(),
                   runs);
      return 2;
    }
  }
  if (num_pages == 0) {
    // As Decode's `total`: every decode step of a sequence, the untimed ones included.
    const int decode_tokens = context + warm + steps + eager_steps + sampled_steps +
                              2 * masked_steps + 2 * knob_steps + 6;
    const int mixed_pages = mixed_prompts.empty()
                                ? 0
                                : mixed_rows * PagesFor(context + 5 * (runs + 1) + 1) +
                                      max_mixed * PagesFor(mixed_len);
    const int chunk_pages = chunk_mixed.empty() ? 0
                                                : PagesFor(chunk_prefix + chunk_len) +
                                                      max_chunk_mixed * PagesFor(mixed_len);
    num_pages = std::max({max_batch * PagesFor(decode_tokens), PagesFor(max_prefill), mixed_pages,
                          chunk_pages, PagesFor(max_prompt_logprobs)}) + 8;
  }
  std::unique_ptr<GpuTimeline> timeline;  // before loading the model: fail fast
  if (trace_timeline) {
    absl::StatusOr<std::unique_ptr<GpuTimeline>> created = GpuTimeline::Create();
    if (!created.ok()) {
      std::fprintf(stderr, "mlaserve-engine-bench: --timeline: %s\n",
                   created.status().ToString().c_str());
      return 2;
    }
    timeline = std::move(*created);
  }
  if (cudaSetDevice(device) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device %d\n", device);
    return 1;
  }
  cudaFree(nullptr);  // create the context, so "before" counts it
  // The roofline's ceilings (one GPU only: a sharded step's work is split over the ranks), before
  // the engine takes the memory their buffers need.
  const mlaserve::bench::DeviceCeilings ceilings =
      tp_size == 1 ? mlaserve::bench::MeasureDeviceCeilings() : mlaserve::bench::DeviceCeilings{};
  const double used_before = UsedGiB();
  mlaserve::model::EngineOptions o;
  o.model_dir = model;
  o.backend = mlaserve::kernels::Backend::kCuda;
  o.device = device;
  o.num_kv_pages = num_pages;
  o.max_batch_tokens = max_batch_tokens;
  // Prompt logprobs score PromptSliceRows() rows a slice, at most max_batch_seqs
  // (deepseek_engine_prompt_logprobs.cc): plan for the engine's default, which the decode worker's
  // --max-running-requests default matches, so that a run with --decode-batches 1 scores in the
  // slices a serving worker uses.
  o.max_batch_seqs = std::max({max_batch, mixed_prompts.empty() ? 0 : mixed_rows + max_mixed,
                               max_chunk_mixed + 1, 1,
                               prompt_logprobs_lens.empty() ? 0 : mlaserve::model::EngineOptions{}.max_batch_seqs});
  o.mha_provider = mlaserve::kernels::ParseMhaPrefillProvider(mha_provider).value();  // checked by CLI11
  o.parallel = *parallel;
  const auto load_start = Clock::now();
  auto engine = Engine::Create(o);
  if (!engine.ok()) Die("create", engine.status());
  const double load_s = Ms(Clock::now() - load_start) / 1000;
  cudaSetDevice(device);  // the ranks' threads set theirs; the memory lines read this one
  const double used_loaded = UsedGiB();
  BenchEngine be(*std::move(engine));
  Engine& e = be.engine();
  if (!prompt_logprobs_lens.empty()) {
    // Data-parallel attention refuses prompt logprobs: say so before any run.
    if (absl::Status why = e.CheckPromptLogprobs(); !why.ok()) Die("--prompt-logprobs-lens", why);
  }
  const std::string layout = mlaserve::model::DescribeParallel(o.parallel);
  const auto& cfg = e.config();
  const double kv_gib = static_cast<double>(e.kv_pool().layer_page_bytes()) *
                        cfg.num_hidden_layers * num_pages / (1ull << 30);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);

  nlohmann::json out;
  out["gpu"] = prop.name;
  out["model"] = model;
  out["layers"] = cfg.num_hidden_layers;
  out["hidden"] = cfg.hidden_size;
  out["load_s"] = load_s;
  out["mha_provider"] = mlaserve::kernels::DescribeMhaPrefillProvider(o.mha_provider, o.backend);
  out["layout"] = layout;
  Bench bench(be, seed);
  if (moe_block_trace) {
    if (absl::Status st = mlaserve::kernels::moe_trace::Start(); !st.ok()) Die("--moe-block-trace", st);
  }

  std::printf("mlaserve-engine-bench: %s, %s (%d layers, hidden %d), %s, load %.1f s\n", prop.name,
              model.c_str(), cfg.num_hidden_layers, cfg.hidden_size, layout.c_str(), load_s);
  std::printf("%s\n", out["mha_provider"].get<std::string>().c_str());
  // The roofline columns: bench/engine_bench/roofline.h says what a Forward must read and compute.
  if (tp_size == 1) {
    std::printf("ceilings measured in this run: copy %.0f GB/s (1 GiB device to device, read + written), "
                "bf16 GEMM %.0f TFLOP/s (8192^3, cuBLAS); decode rows read every weight a step "
                "touches once (routed experts: expected under uniform routing) and the KV cache, "
                "prefill rows compute 2 FLOP a parameter and token plus the causal attention\n",
                ceilings.copy_gbs, ceilings.gemm_tflops);
    out["ceilings"] = {{"copy_gbs", ceilings.copy_gbs}, {"gemm_tflops", ceilings.gemm_tflops}};
  }
  if (!prompt_logprobs_lens.empty()) {
    std::printf("prompt-logprobs rows: each prefill unscored and with every position scored, in "
                "turn in each of %d rounds (medians); the scoring alone is their difference, its "
                "work the LM head over every scored row (2 x rows x hidden x vocab FLOP), its "
                "floor that at the GEMM rate or one read of the head at the copy rate, whichever "
                "is longer (0 without ceilings)\n", runs);
  }
  std::printf("\n| phase | batch | tokens/step | median ms | tokens/s | work | rate | roofline |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int len : prefill_lens) {
    bench.PrefillOnce(len);  // warm-up: cuBLAS heuristics, first-touch of workspaces
    std::vector<double> ms;
    for (int r = 0; r < runs; ++r) ms.push_back(bench.PrefillOnce(len));
    const double m = Median(ms);
    const mlaserve::bench::ForwardWork work = mlaserve::bench::PrefillWork(cfg, len);
    std::printf("| prefill %d | 1 | %d | %.2f | %.0f | %s |\n", len, len, m, 1000.0 * len / m,
                RooflineCells(work.flops, 1e12, "TFLOP", m, ceilings.gemm_tflops, "GEMM").c_str());
    out["prefill"].push_back({{"prompt_len", len}, {"median_ms", m}, {"runs_ms", ms},
                              {"tokens_per_s", 1000.0 * len / m}, {"flops", work.flops}});
  }
  for (int len : prompt_logprobs_lens) {
    const Bench::PromptLogprobsTimes t = bench.PromptLogprobs(len, prompt_logprobs_top, runs);
    const double plain = Median(t.plain_ms);
    const int rows = len - 1;  // the last position has no next prompt token
    const mlaserve::bench::ForwardWork prefill = mlaserve::bench::PrefillWork(cfg, len);
    const mlaserve::bench::ForwardWork scoring = mlaserve::bench::PromptScoringWork(cfg, rows);
    const double floor_ms =
        mlaserve::bench::FloorMs(scoring, ceilings.gemm_tflops, ceilings.copy_gbs);
    std::printf("| prefill %d, unscored (the prompt-logprobs rows' baseline) | 1 | %d | %.2f | %.0f | %s |\n",
                len, len, plain, 1000.0 * len / plain,
                RooflineCells(prefill.flops, 1e12, "TFLOP", plain, ceilings.gemm_tflops, "GEMM").c_str());
    for (size_t i = 0; i < prompt_logprobs_top.size(); ++i) {
      const int top = prompt_logprobs_top[i];
      const double scored = Median(t.scored_ms[i]), added = scored - plain;
      std::printf("| prefill %d + prompt logprobs top %d (%d rows scored) | 1 | %d | %.2f | %.0f | %s |\n",
                  len, top, rows, len, scored, 1000.0 * len / scored,
                  RooflineCells(prefill.flops + scoring.flops, 1e12, "TFLOP", scored,
                                ceilings.gemm_tflops, "GEMM").c_str());
      // The scoring alone: the difference of the two medians, its rate over the LM head's FLOPs
      // on every scored row (tokens/s here: rows scored a second).
      std::printf("| prompt logprobs top %d, the scoring alone: %+.2f ms (%+.1f%%) over the unscored "
                  "prefill %d, floor %.2f ms | 1 | %d | %.2f | %.0f | %s |\n",
                  top, added, 100.0 * added / plain, len, floor_ms, rows, added,
                  added > 0 ? 1000.0 * rows / added : 0.0,
                  RooflineCells(scoring.flops, 1e12, "TFLOP", added, ceilings.gemm_tflops, "GEMM").c_str());
      out["prompt_logprobs"].push_back(
          {{"prompt_len", len}, {"top_n", top}, {"scored_rows", rows},
           {"plain_median_ms", plain}, {"plain_runs_ms", t.plain_ms},
           {"scored_median_ms", scored}, {"scored_runs_ms", t.scored_ms[i]},
           {"added_ms", added}, {"added_pct", 100.0 * added / plain},
           {"scoring_flops", scoring.flops}, {"scoring_bytes", scoring.bytes()},
           {"floor_ms", floor_ms}});
    }
  }
  for (int b : batches) {
    const Bench::DecodeTimes t =
        bench.Decode(b, context, warm, steps, eager_steps, sampled_steps, max_batch_tokens,
                     nullptr, masked_steps, knob_steps);
    const double g = Median(t.graph_ms), ea = Median(t.eager_ms), sa = Median(t.sampled_ms);
    const mlaserve::bench::ForwardWork work = mlaserve::bench::DecodeStepWork(cfg, b, context);
    const auto cells = [&](double ms) { return RooflineCells(work.bytes(), 1e9, "GB", ms, ceilings.copy_gbs, "copy"); };
    std::printf("| decode (graphs), ctx %d | %d | %d | %.3f | %.0f | %s |\n", context, b, b, g,
                1000.0 * b / g, cells(g).c_str());
    if (!t.eager_ms.empty()) {
      std::printf("| decode (eager), ctx %d | %d | %d | %.3f | %.0f | %s |\n", context, b, b, ea,
                  1000.0 * b / ea, cells(ea).c_str());
    }
    if (!t.sampled_ms.empty()) {
      std::printf("| decode (graphs, sampled in Forward), ctx %d | %d | %d | %.3f | %.0f | %s |\n", context, b,
                  b, sa, 1000.0 * b / sa, cells(sa).c_str());
    }
    if (!t.masked_device_ms.empty()) {
      const double md = Median(t.masked_device_ms), mh = Median(t.masked_host_ms);
      std::printf("| decode (graphs, masked rows drawn on the device), ctx %d | %d | %d | %.3f | %.0f | %s |\n",
                  context, b, b, md, 1000.0 * b / md, cells(md).c_str());
      std::printf("| decode (graphs, masked rows: logits to the host + host draw, the baseline), ctx %d | %d | %d | %.3f | %.0f | %s |\n",
                  context, b, b, mh, 1000.0 * b / mh, cells(mh).c_str());
    }
    if (!t.knob_device_ms.empty()) {
      const double kd = Median(t.knob_device_ms), kh = Median(t.knob_host_ms);
      std::printf("| decode (graphs, penalty + logit_bias + logprobs 5 rows drawn on the device), ctx %d | %d | %d | %.3f | %.0f | %s |\n",
                  context, b, b, kd, 1000.0 * b / kd, cells(kd).c_str());
      std::printf("| decode (graphs, penalty + logit_bias + logprobs 5 rows: logits to the host + host draw, the baseline), ctx %d | %d | %d | %.3f | %.0f | %s |\n",
                  context, b, b, kh, 1000.0 * b / kh, cells(kh).c_str());
    }
    if (moe_block_trace) {
      // The graph's launches hold its last replay's records; anything that ended more than two
      // steps before the newest record is an earlier batch's or a warm-up's.
      absl::StatusOr<std::vector<mlaserve::kernels::moe_trace::LaunchRecord>> records =
          mlaserve::kernels::moe_trace::Read();
      if (!records.ok()) Die("--moe-block-trace", records.status());
      std::printf("\ndecode b%d, %s", b,
                  mlaserve::bench::SummarizeMoeBlockTrace(*records, static_cast<uint64_t>(2e6 * g)).c_str());
    }
    out["decode"].push_back({{"batch", b}, {"context", context}, {"graph_median_ms", g},
                             {"sampled_median_ms", sa},
                             {"masked_device_median_ms", Median(t.masked_device_ms)},
                             {"masked_host_median_ms", Median(t.masked_host_ms)},
                             {"knob_device_median_ms", Median(t.knob_device_ms)},
                             {"knob_host_median_ms", Median(t.knob_host_ms)},
                             {"graph_tokens_per_s", 1000.0 * b / g}, {"eager_median_ms", ea},
                             {"eager_tokens_per_s", ea > 0 ? 1000.0 * b / ea : 0.0},
                             {"graph_steps_ms", t.graph_ms}, {"bytes", work.bytes()},
                             {"touched_experts", work.touched_experts}});
  }
  for (int n : mixed_prompts) {
    const Bench::MixedTimes t =
        bench.Mixed(n, mixed_len, mixed_rows, context, runs, max_batch_tokens);
    const double p = Median(t.prefill_ms), de = Median(t.decode_eager_ms),
                 dg = Median(t.decode_graph_ms), m = Median(t.mixed_ms),
                 mm = Median(t.mixed_mha_ms);
    const int tokens = n * mixed_len;
    // A prompt's FLOPs do not depend on the other prompts of its Forward.
    const double flops = n * mlaserve::bench::PrefillWork(cfg, mixed_len).flops;
    std::printf("| prefill %d x %d (one Forward) | %d | %d | %.2f | %.0f | %s |\n", n, mixed_len, n,
                tokens, p, 1000.0 * tokens / p,
                RooflineCells(flops, 1e12, "TFLOP", p, ceilings.gemm_tflops, "GEMM").c_str());
    std::printf("| mixed: %d decode rows, ctx %d + prefill %d x %d | %d | %d | %.2f | %.0f | "
                "prompts alone + the rows' eager step %.2f ms (%+.1f%%), + their graph step %.2f "
                "(%+.1f%%) | - | - |\n",
                mixed_rows, context, n, mixed_len, mixed_rows + n, tokens + mixed_rows, m,
                1000.0 * tokens / m, p + de, 100.0 * (m / (p + de) - 1), p + dg,
                100.0 * (m / (p + dg) - 1));
    std::printf("| mixed, the MHA form asked | %d | %d | %.2f | %.0f | %+.1f%% against the prompts "
                "alone + the rows' eager step | - | - |\n",
                mixed_rows + n, tokens + mixed_rows, mm, 1000.0 * tokens / mm, 100.0 * (mm / (p + de) - 1));
    out["mixed"].push_back({{"prompts", n}, {"prompt_len", mixed_len}, {"decode_rows", mixed_rows},
                            {"context", context}, {"prefill_median_ms", p},
                            {"decode_eager_median_ms", de}, {"decode_graph_median_ms", dg},
                            {"mixed_median_ms", m}, {"mixed_runs_ms", t.mixed_ms},
                            {"mixed_mha_median_ms", mm},
                            {"prefill_runs_ms", t.prefill_ms}});
  }
  for (int n : chunk_mixed) {
    const Bench::ChunkMixedTimes t =
        bench.ChunkMixed(n, mixed_len, chunk_prefix, chunk_len, runs, max_batch_tokens);
    const double cm = Median(t.chunk_mla_ms), ch = Median(t.chunk_mha_ms),
                 p = Median(t.prompts_ms), m = Median(t.mla_ms), h = Median(t.mha_ms),
                 sp = Median(t.split_ms);
    const int tokens = chunk_len + n * mixed_len;
    const double halves = std::min(cm, ch) + p;  // the best of each half, alone
    std::printf("| chunk %d after %d, latent form (kMla) | 1 | %d | %.2f | %.0f | - | - | - |\n",
                chunk_len, chunk_prefix, chunk_len, cm, 1000.0 * chunk_len / cm);
    std::printf("| chunk %d after %d, MHA form (kMha) | 1 | %d | %.2f | %.0f | - | - | - |\n",
                chunk_len, chunk_prefix, chunk_len, ch, 1000.0 * chunk_len / ch);
    std::printf("| prefill %d x %d (one Forward) | %d | %d | %.2f | %.0f | - | - | - |\n", n,
                mixed_len, n, n * mixed_len, p, 1000.0 * n * mixed_len / p);
    for (const auto& [name, ms] : {std::pair<const char*, double>{"kMla", m}, {"kMha", h},
                                   {"kSplit", sp}}) {
      std::printf("| chunk + %d x %d, %s asked | %d | %d | %.2f | %.0f | %+.1f%% against the best "
                  "halves alone (%.2f ms) | - | - |\n",
                  n, mixed_len, name, n + 1, tokens, ms, 1000.0 * tokens / ms,
                  100.0 * (ms / halves - 1), halves);
    }
    out["chunk_mixed"].push_back(
        {{"prompts", n}, {"prompt_len", mixed_len}, {"chunk_prefix", chunk_prefix},
         {"chunk_len", chunk_len}, {"chunk_mla_median_ms", cm}, {"chunk_mha_median_ms", ch},
         {"prompts_median_ms", p}, {"mla_median_ms", m}, {"mha_median_ms", h},
         {"split_median_ms", sp}, {"mla_runs_ms", t.mla_ms}, {"mha_runs_ms", t.mha_ms},
         {"split_runs_ms", t.split_ms}});
  }
  const double used_end = UsedGiB();
  const std::string graphs =
      be.graphs_captured() >= 0
          ? absl::StrFormat("decode graphs captured %d, replays %d", be.graphs_captured(),
                            be.graph_replays())
          : absl::StrFormat("graph steps %d (every rank captures or replays its own)",
                            be.graph_replays());
  std::printf("\ndevice %d memory in use: %.2f GiB before Create (context), %.2f GiB after Create "
              "(weights + KV pool of %d pages = %.2f GiB + workspaces), %.2f GiB at the end; %s\n",
              device, used_before, used_loaded, num_pages, kv_gib, used_end, graphs.c_str());
  out["memory_gib"] = {{"before_create", used_before}, {"after_create", used_loaded},
                       {"end", used_end}, {"kv_pool", kv_gib}, {"kv_pages", num_pages}};
  out["graphs_captured"] = be.graphs_captured();
  if (timeline) {
    // After every timed run and the memory line, so those read the same with and without
    // --timeline. The first traced Forward is thrown away, so whatever CUPTI sets up lazily on
    // its first records stays out of the tables.
    std::printf("\nGPU timelines (CUPTI; tracing adds host time per launch, so walls here exceed "
                "the medians above)\n");
    TracedForward discarded{*timeline, {}};
    bench.PrefillOnce(prefill_lens.front(), &discarded);
    auto report = [&](const std::string& title, nlohmann::json id, const TimelineTrace& trace) {
      const TimelineSummary s = mlaserve::bench::Summarize(
          trace, {.top_gaps = 8, .top_kernels = 24, .sequence_first = sequence_first,
                  .sequence_count = sequence_count});
      std::printf("\n%s", mlaserve::bench::FormatSummary(title, s).c_str());
      out["timeline"].push_back(TimelineJson(std::move(id), s));
    };
    for (int len : prefill_lens) {
      TracedForward traced{*timeline, {}};
      bench.PrefillOnce(len, &traced);
      report(absl::StrFormat("timeline prefill %d", len),
             {{"phase", "prefill"}, {"prompt_len", len}}, traced.trace);
    }
    for (int b : batches) {
      // A fresh batch like the timed one (same context), at least one untraced step with graphs
      // first, so the traced step replays a graph rather than captures one.
      TracedForward traced{*timeline, {}};
      bench.Decode(b, context, std::max(warm, 1), /*steps=*/1, /*eager=*/0, /*sampled=*/0,
                   max_batch_tokens, &traced);
      report(absl::StrFormat("timeline decode b%d graph", b),
             {{"phase", "decode_graph"}, {"batch", b}, {"context", context}}, traced.trace);
    }
    for (int n : mixed_prompts) {
      TracedForward traced{*timeline, {}}, traced_prefill{*timeline, {}};
      bench.Mixed(n, mixed_len, mixed_rows, context, /*runs=*/0, max_batch_tokens, &traced,
                  &traced_prefill);
      report(absl::StrFormat("timeline mixed %d rows + %d x %d", mixed_rows, n, mixed_len),
             {{"phase", "mixed"}, {"prompts", n}, {"prompt_len", mixed_len},
              {"decode_rows", mixed_rows}, {"context", context}}, traced.trace);
      report(absl::StrFormat("timeline prefill %d x %d", n, mixed_len),
             {{"phase", "prefill_prompts"}, {"prompts", n}, {"prompt_len", mixed_len}},
             traced_prefill.trace);
    }
  }
  if (!output_json.empty()) std::ofstream(output_json) << out.dump(1) << "\n";
  return 0;
}
