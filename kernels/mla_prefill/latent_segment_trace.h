// An in-kernel timeline of the Hopper latent kernel (latent_attention_sm90.cu), for experiments:
// compiled in only with -DMLASERVE_MLA_SEGMENT_TRACE=ON (CMake; it defines
// MLASERVE_MLA_SEGMENT_TRACE=1 for latent_attention_sm90.cu and the bench's trace tool), so the
// default build's kernels are token for token what they are without it.
//
// Each CTA's first thread of a warpgroup writes %globaltimer (ns) at its phase boundaries into
// its row of a device buffer: trace[cta][kWords], cta = x + gridDim.x * (y + gridDim.y * z). Of
// a CTA's segments (the balanced schedule's pieces; a chunk CTA has one) the first kMaxSegments
// are recorded. Only the stamps sit in the code, none inside the page-pair loop, so a segment's
// steady per-page time is (pages done - first scores) over its pages. The bench's
// --mla-segment-trace (bench/kernel_bench/segment_trace_bench.cu) reads and prints it.
#pragma once

#include <cstdint>

namespace mlaserve::kernels::mla_cuda::segment_trace {

constexpr int kMaxSegments = 6;

// A CTA's row: kHeaderWords, then kSegmentWords per segment.
enum HeaderWord : int {
  kEntry,         // the kernel's first instruction (thread 0)
  kAfterWait,     // griddepcontrol.wait returned (thread 0)
  kExit0,         // warpgroup 0 leaves the body
  kExit1,         // warpgroup 1 leaves the body
  kSegmentCount,  // the CTA's segments (not a time)
  kSmId,          // %smid (not a time)
  kHeaderWords = 8,
};
enum SegmentWord : int {
  kStart,          // top of the segment (warpgroup 0), before its record is read
  kInfo,           // pages | direct << 31 | request << 32 (not a time)
  kFirstScores0,   // warpgroup 0's score product of the first page retired (its tiles landed)
  kFirstScores1,   // warpgroup 1's (the second page); 0 if the segment has one page
  kPagesDone0,     // warpgroup 0 left the page-pair loop (its last products retired)
  kPagesDone1,     // warpgroup 1 left it
  kStoresIssued0,  // warpgroup 0 issued its output (direct or partial) and LSE stores
  kStoresIssued1,  // warpgroup 1 issued its output stores
  kEnd,            // after the segment's closing CTA barrier (warpgroup 0): both halves stored
  kSegmentWords,
};
constexpr int kWords = kHeaderWords + kMaxSegments * kSegmentWords;
constexpr int SegmentWordAt(int segment, int word) { return kHeaderWords + segment * kSegmentWords + word; }

// The grid of the last launch of the (64-row) Hopper kernel, and which instantiation ran.
struct Launch {
  unsigned grid[3] = {0, 0, 0};
  bool segments = false;  // the balanced schedule's kernel (else chunks)
  bool traced = false;    // the grid fitted the buffer: its rows were written
};

// Host, trace builds only (defined in latent_attention_sm90.cu): the following launches write
// their rows into `trace` (device, max_ctas x kWords, or null: none) where the grid has at most
// max_ctas CTAs. Not thread-safe; for the bench.
void SetTraceBuffer(uint64_t* trace, int64_t max_ctas);
Launch LastLaunch();

}  // namespace mlaserve::kernels::mla_cuda::segment_trace
