// The chunk length that a chunk plan's metadata kernel picks from the batch's own lengths
// (MlaDecodePlan::chunk_pick_sms): the cost model it charges each candidate, shared by the
// device (mla_decode.cu, MlaChunkOrderKernel) and the tests' host reference.
//
// Where it applies: the 64-row Hopper kernel with every request's first chunk in the first wave
// (row blocks x batch <= SMs) and more than 7/8 of the SMs taken by them (PlanMlaDecode): b 58-66
// at 128 heads, one query token, on 132 SMs. There a chunk plan's time is decided by its tail -- the
// second chunks of the longest requests, and the SMs they land on -- and the best chunk length is
// narrow: on an H100 (2026-12-07, seventy-ninth session, b 64 x 128 heads, lengths +-25% of 4k /
// 8k / 16k) 68 / 136 / 256 pages were 2.5% / 2.0% / 1.1% faster than kAuto's plan, eight pages
// either side 1-7% slower. No length from the plan's shape alone (the longest request, the mean)
// lands there, and a decode graph replays one plan over changing lengths; so the metadata kernel,
// which sees the lengths, tries the lengths from half the longest request's pages to all of them.
// Fewer first chunks than that (b 40 / 48, 80 / 96 of 132 SMs) measured 3% behind / even with the
// balanced schedule; the model does not weigh the balanced schedule, so the plan keeps it there.
//
// The model: a candidate of C pages cuts request b of P_b pages into min(P_b, C) and, where
// P_b > C, a tail of P_b - C (at most two chunks: C >= half the longest). Each chunk is one CTA
// per row block costing its pages by pairs plus kPickCtaPages. The first chunks fill one SM each;
// the tails, longest first, go to the SM that is free first (the GPU starts CTAs in the order the
// metadata sorts them), giving every SM its load L_i. The SMs then run at a shared rate: where
// fewer than SMs / kPickLoneSpeedup are still busy, each runs kPickLoneSpeedup times as fast as
// with all of them busy (a CTA alone has more of the DRAM bandwidth), so the call takes
//   T = sum(L) / SMs + (max(L) - V) / kPickLoneSpeedup - sum(max(L - V, 0)) / SMs,
// with V the floor(SMs / kPickLoneSpeedup)-th largest load, plus the combine: kPickCombinePages a
// split row block and kPickCombineFixedPages where any request is split. The least T wins; ties
// go to the longer chunk (fewer splits). Fitted to the nineteen forced lengths of that H100 call
// (tools/chunk_pick_model.py): every row within 1.6% of the measured TFLOP/s, the best of each
// context where it was measured.
#pragma once

namespace mlaserve::kernels::mla_decode_internal {

inline constexpr int kPickCtaPages = 4;             // a chunk CTA's fixed cost, in pages
inline constexpr float kPickLoneSpeedup = 1.2f;     // an SM's speed with few busy, over all busy
inline constexpr float kPickCombinePages = 0.1f;    // the combine's cost per split row block
inline constexpr float kPickCombineFixedPages = 3;  // ... and for having any split at all
// Lengths tried: at most this many, evenly spaced from the longest request's pages down to half;
// one CTA of one warp each (MlaChunkPickKernel), the order kernel then takes the cheapest.
inline constexpr int kPickMaxCandidates = 32;
// The most SMs the pick keeps loads for (five a lane of its warp).
inline constexpr int kPickMaxSms = 160;
// The pick's words after the chunk order (MlaDecodeChunkPickOffset): the picked length in pages
// (the attention and combine kernels read it), the longest request's pages, two unused, then each
// candidate's time (f32).
inline constexpr int kPickWordChunk = 0, kPickWordLongest = 1, kPickWordCosts = 4;
inline constexpr int kPickHeaderBytes = (kPickWordCosts + kPickMaxCandidates) * 4;

// A chunk of `pages` pages: one CTA per row block, its pages by pairs plus the fixed cost.
constexpr int PickChunkCost(int pages) { return (pages + 1) / 2 * 2 + kPickCtaPages; }

// The candidates for a batch whose longest request has max_pages pages: max_pages - k * step for
// k < count, all at least half of max_pages (rounded up).
struct PickCandidates {
  int step = 1, count = 1;
};
constexpr PickCandidates PickCandidatesFor(int max_pages) {
  const int lo = (max_pages + 1) / 2;
  const int range = max_pages - lo + 1;
  PickCandidates c;
  c.step = (range + kPickMaxCandidates - 1) / kPickMaxCandidates;
  if (c.step < 1) c.step = 1;
  c.count = (range + c.step - 1) / c.step;
  if (c.count < 1) c.count = 1;
  return c;
}

}  // namespace mlaserve::kernels::mla_decode_internal
