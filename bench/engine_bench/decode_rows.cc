// The decode side of mlaserve-engine-bench (bench.h): a batch's decode steps with graphs, eager,
// sampled in Forward, masked and with the OpenAI knobs (each against the host-draw baseline), and
// the rows that print them.
#include <algorithm>
#include <cstdio>
#include <span>
#include <utility>
#include <vector>

#include <nvtx3/nvToolsExt.h>  // header-only: ranges cost nothing unless a profiler attaches

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/engine_bench/bench.h"
#include "bench/engine_bench/moe_block_trace_summary.h"
#include "bench/engine_bench/roofline.h"
#include "kernels/common/page.h"
#include "kernels/moe/block_trace.h"

namespace mlaserve::engine_bench {

using mlaserve::kernels::PagesFor;

Bench::DecodeTimes Bench::Decode(int batch, int context, int warm, int steps, int eager,
                                 int sampled, int max_tokens, TracedForward* traced, int masked,
                                 int knobs) {
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

void DecodeRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
                const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out) {
  for (int b : o.batches) {
    const Bench::DecodeTimes t =
        bench.Decode(b, o.context, o.warm, o.steps, o.eager_steps, o.sampled_steps,
                     o.max_batch_tokens, nullptr, o.masked_steps, o.knob_steps);
    // The SM clock after the batch's timed steps (one GPU), as after each prefill run.
    std::vector<double> mhz;
    if (o.tp_size == 1) mhz.push_back(mlaserve::bench::ProbeSmClockMhz());
    const double g = Median(t.graph_ms), ea = Median(t.eager_ms), sa = Median(t.sampled_ms);
    const mlaserve::bench::ForwardWork work = mlaserve::bench::DecodeStepWork(cfg, b, o.context);
    const auto row = [&](const char* what, double ms) {
      std::printf("| decode (%s), ctx %d | %d | %d | %.3f | %.0f | %s |\n", what, o.context, b, b, ms,
                  1000.0 * b / ms,
                  RooflineCells(work.bytes(), 1e9, "GB", ms, ceilings.copy_gbs, "copy").c_str());
    };
    row("graphs", g);
    if (!t.eager_ms.empty()) row("eager", ea);
    if (!t.sampled_ms.empty()) row("graphs, sampled in Forward", sa);
    if (!t.masked_device_ms.empty()) {
      row("graphs, masked rows drawn on the device", Median(t.masked_device_ms));
      row("graphs, masked rows: logits to the host + host draw, the baseline", Median(t.masked_host_ms));
    }
    if (!t.knob_device_ms.empty()) {
      row("graphs, penalty + logit_bias + logprobs 5 rows drawn on the device", Median(t.knob_device_ms));
      row("graphs, penalty + logit_bias + logprobs 5 rows: logits to the host + host draw, the baseline",
          Median(t.knob_host_ms));
    }
    if (o.moe_block_trace) {
      // The graph's launches hold its last replay's records; anything that ended more than two
      // steps before the newest record is an earlier batch's or a warm-up's.
      absl::StatusOr<std::vector<mlaserve::kernels::moe_trace::LaunchRecord>> records =
          mlaserve::kernels::moe_trace::Read();
      if (!records.ok()) Die("--moe-block-trace", records.status());
      std::printf("\ndecode b%d, %s", b,
                  mlaserve::bench::SummarizeMoeBlockTrace(*records, static_cast<uint64_t>(2e6 * g)).c_str());
    }
    out["decode"].push_back({{"batch", b}, {"context", o.context}, {"graph_median_ms", g},
                             {"sampled_median_ms", sa},
                             {"masked_device_median_ms", Median(t.masked_device_ms)},
                             {"masked_host_median_ms", Median(t.masked_host_ms)},
                             {"knob_device_median_ms", Median(t.knob_device_ms)},
                             {"knob_host_median_ms", Median(t.knob_host_ms)},
                             {"graph_tokens_per_s", 1000.0 * b / g}, {"eager_median_ms", ea},
                             {"eager_tokens_per_s", ea > 0 ? 1000.0 * b / ea : 0.0},
                             {"graph_steps_ms", t.graph_ms}, {"bytes", work.bytes()},
                             {"touched_experts", work.touched_experts}, {"sm_clock_mhz", mhz}});
  }
}

}  // namespace mlaserve::engine_bench
