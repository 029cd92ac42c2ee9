// The prefill side of mlaserve-engine-bench (bench.h): one prompt's prefill, the same with every
// position scored (prompt logprobs), the decode worker's step with local prefill (mixed) and the
// prefill worker's step under chunked prefill (chunk), and the rows that print them.
#include <algorithm>
#include <cstdio>
#include <span>
#include <utility>
#include <vector>

#include <nvtx3/nvToolsExt.h>  // header-only: ranges cost nothing unless a profiler attaches

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "bench/engine_bench/bench.h"
#include "bench/engine_bench/roofline.h"
#include "kernels/common/page.h"

namespace mlaserve::engine_bench {

using mlaserve::kernels::PagesFor;

double Bench::PrefillOnce(int len, TracedForward* traced, int prompt_top_n) {
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

Bench::PromptLogprobsTimes Bench::PromptLogprobs(int len, const std::vector<int>& top_ns,
                                                 int runs) {
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

void Bench::AddFreshPrompts(int prompts, int len, std::vector<std::vector<int32_t>>* ids,
                            std::vector<std::vector<int32_t>>* pages,
                            std::vector<SequenceChunk>* chunks) {
  for (int p = 0; p < prompts; ++p) {
    auto pp = e_.kv_pool().Allocate(PagesFor(len));
    if (!pp.ok()) Die("allocate", pp.status());
    pages->push_back(std::move(*pp));
    (*ids)[p] = RandomIds(len);
  }
  for (int p = 0; p < prompts; ++p) chunks->push_back(Chunk((*ids)[p], 0, (*pages)[p], true));
}

Bench::MixedTimes Bench::Mixed(int prompts, int len, int rows, int context, int runs,
                                int max_tokens, TracedForward* traced,
                                TracedForward* traced_prefill) {
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

Bench::ChunkMixedTimes Bench::ChunkMixed(int prompts, int len, int prefix, int chunk, int runs,
                                          int max_tokens) {
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

void PrefillRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
                 const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out) {
  for (int len : o.prefill_lens) {
    bench.PrefillOnce(len);  // warm-up: cuBLAS heuristics, first-touch of workspaces
    // The SM clock each run ended at (one GPU: the probe reads the bench's device), outside the
    // timed interval: back-to-back prefills can hold a GPU at its power cap (engine_bench.cc).
    const bool probe = o.tp_size == 1;
    std::vector<double> ms, mhz;
    for (int r = 0; r < o.runs; ++r) {
      ms.push_back(bench.PrefillOnce(len));
      if (probe) mhz.push_back(mlaserve::bench::ProbeSmClockMhz());
    }
    const double m = Median(ms);
    const mlaserve::bench::ForwardWork work = mlaserve::bench::PrefillWork(cfg, len);
    std::printf("| prefill %d | 1 | %d | %.2f | %.0f | %s |\n", len, len, m, 1000.0 * len / m,
                RooflineCells(work.flops, 1e12, "TFLOP", m, ceilings.gemm_tflops, "GEMM").c_str());
    out["prefill"].push_back({{"prompt_len", len}, {"median_ms", m}, {"runs_ms", ms},
                              {"tokens_per_s", 1000.0 * len / m}, {"flops", work.flops},
                              {"sm_clock_mhz", mhz}});
  }
}

void PromptLogprobsRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
                        const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out) {
  for (int len : o.prompt_logprobs_lens) {
    const Bench::PromptLogprobsTimes t = bench.PromptLogprobs(len, o.prompt_logprobs_top, o.runs);
    const double plain = Median(t.plain_ms);
    const int rows = len - 1;  // the last position has no next prompt token
    const mlaserve::bench::ForwardWork prefill = mlaserve::bench::PrefillWork(cfg, len);
    const mlaserve::bench::ForwardWork scoring = mlaserve::bench::PromptScoringWork(cfg, rows);
    const double floor_ms =
        mlaserve::bench::FloorMs(scoring, ceilings.gemm_tflops, ceilings.copy_gbs);
    std::printf("| prefill %d, unscored (the prompt-logprobs rows' baseline) | 1 | %d | %.2f | %.0f | %s |\n",
                len, len, plain, 1000.0 * len / plain,
                RooflineCells(prefill.flops, 1e12, "TFLOP", plain, ceilings.gemm_tflops, "GEMM").c_str());
    for (size_t i = 0; i < o.prompt_logprobs_top.size(); ++i) {
      const int top = o.prompt_logprobs_top[i];
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
}

void MixedRows(Bench& bench, const EngineBenchOptions& o, const model::ModelConfig& cfg,
               const mlaserve::bench::DeviceCeilings& ceilings, nlohmann::json& out) {
  for (int n : o.mixed_prompts) {
    const Bench::MixedTimes t =
        bench.Mixed(n, o.mixed_len, o.mixed_rows, o.context, o.runs, o.max_batch_tokens);
    const double p = Median(t.prefill_ms), de = Median(t.decode_eager_ms),
                 dg = Median(t.decode_graph_ms), m = Median(t.mixed_ms),
                 mm = Median(t.mixed_mha_ms);
    const int tokens = n * o.mixed_len;
    // A prompt's FLOPs do not depend on the other prompts of its Forward.
    const double flops = n * mlaserve::bench::PrefillWork(cfg, o.mixed_len).flops;
    std::printf("| prefill %d x %d (one Forward) | %d | %d | %.2f | %.0f | %s |\n", n, o.mixed_len,
                n, tokens, p, 1000.0 * tokens / p,
                RooflineCells(flops, 1e12, "TFLOP", p, ceilings.gemm_tflops, "GEMM").c_str());
    std::printf("| mixed: %d decode rows, ctx %d + prefill %d x %d | %d | %d | %.2f | %.0f | "
                "prompts alone + the rows' eager step %.2f ms (%+.1f%%), + their graph step %.2f "
                "(%+.1f%%) | - | - |\n",
                o.mixed_rows, o.context, n, o.mixed_len, o.mixed_rows + n, tokens + o.mixed_rows, m,
                1000.0 * tokens / m, p + de, 100.0 * (m / (p + de) - 1), p + dg,
                100.0 * (m / (p + dg) - 1));
    std::printf("| mixed, the MHA form asked | %d | %d | %.2f | %.0f | %+.1f%% against the prompts "
                "alone + the rows' eager step | - | - |\n",
                o.mixed_rows + n, tokens + o.mixed_rows, mm, 1000.0 * tokens / mm,
                100.0 * (mm / (p + de) - 1));
    out["mixed"].push_back({{"prompts", n}, {"prompt_len", o.mixed_len},
                            {"decode_rows", o.mixed_rows}, {"context", o.context},
                            {"prefill_median_ms", p},
                            {"decode_eager_median_ms", de}, {"decode_graph_median_ms", dg},
                            {"mixed_median_ms", m}, {"mixed_runs_ms", t.mixed_ms},
                            {"mixed_mha_median_ms", mm},
                            {"prefill_runs_ms", t.prefill_ms}});
  }
}

void ChunkMixedRows(Bench& bench, const EngineBenchOptions& o, nlohmann::json& out) {
  for (int n : o.chunk_mixed) {
    const Bench::ChunkMixedTimes t =
        bench.ChunkMixed(n, o.mixed_len, o.chunk_prefix, o.chunk_len, o.runs, o.max_batch_tokens);
    const double cm = Median(t.chunk_mla_ms), ch = Median(t.chunk_mha_ms),
                 p = Median(t.prompts_ms), m = Median(t.mla_ms), h = Median(t.mha_ms),
                 sp = Median(t.split_ms);
    const int tokens = o.chunk_len + n * o.mixed_len;
    const double halves = std::min(cm, ch) + p;  // the best of each half, alone
    std::printf("| chunk %d after %d, latent form (kMla) | 1 | %d | %.2f | %.0f | - | - | - |\n",
                o.chunk_len, o.chunk_prefix, o.chunk_len, cm, 1000.0 * o.chunk_len / cm);
    std::printf("| chunk %d after %d, MHA form (kMha) | 1 | %d | %.2f | %.0f | - | - | - |\n",
                o.chunk_len, o.chunk_prefix, o.chunk_len, ch, 1000.0 * o.chunk_len / ch);
    std::printf("| prefill %d x %d (one Forward) | %d | %d | %.2f | %.0f | - | - | - |\n", n,
                o.mixed_len, n, n * o.mixed_len, p, 1000.0 * n * o.mixed_len / p);
    for (const auto& [name, ms] : {std::pair<const char*, double>{"kMla", m}, {"kMha", h},
                                   {"kSplit", sp}}) {
      std::printf("| chunk + %d x %d, %s asked | %d | %d | %.2f | %.0f | %+.1f%% against the best "
                  "halves alone (%.2f ms) | - | - |\n",
                  n, o.mixed_len, name, n + 1, tokens, ms, 1000.0 * tokens / ms,
                  100.0 * (ms / halves - 1), halves);
    }
    out["chunk_mixed"].push_back(
        {{"prompts", n}, {"prompt_len", o.mixed_len}, {"chunk_prefix", o.chunk_prefix},
         {"chunk_len", o.chunk_len}, {"chunk_mla_median_ms", cm}, {"chunk_mha_median_ms", ch},
         {"prompts_median_ms", p}, {"mla_median_ms", m}, {"mha_median_ms", h},
         {"split_median_ms", sp}, {"mla_runs_ms", t.mla_ms}, {"mha_runs_ms", t.mha_ms},
         {"split_runs_ms", t.split_ms}});
  }
}

}  // namespace mlaserve::engine_bench
