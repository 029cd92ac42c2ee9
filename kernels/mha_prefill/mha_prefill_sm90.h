// mha_prefill's Hopper kernel (sm_90a; design in mha_prefill_sm90_kernel.cuh): when it takes a
// call and how it is launched. MhaPrefillOursCuda (mha_prefill.cu) runs it for
// MhaPrefillKernel::kAuto where MhaPrefillWgmmaApplies, and the mma.sync kernel otherwise.
// Plain C++ (no CUDA types), so the dispatcher (mha_prefill.cc) can ask it too.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "kernels/mha_prefill/api.h"

namespace mlaserve::kernels::mha_sm90 {

// Whether this build has the sm_90a kernel and the current device is an sm_90 GPU (asked on
// every call: the answer is remembered per device).
bool Available();
// Why the kernel does not take p's shape and layout, or "" when it does (dtype bf16, head dims
// 192/128 or 128/128, 16-byte aligned pointers and strides, TMA-addressable lengths).
std::string Refusal(const MhaPrefillParams& p);
// How the kernel schedules its work (mha_prefill_sm90_kernel.cuh); both choices compute the
// same function.
struct Schedule {
  bool pingpong = false;   // the consumer warpgroups take turns issuing their products
  bool paired = true;      // a work item is query tiles count-1-x and x of its sequence, not one
  bool persistent = true;  // one CTA per SM walks the work items, not one CTA per item
  // O goes out through shared memory and TMA stores instead of from the accumulators; the same
  // bytes. qk 128 only: the launcher writes directly for qk 192 (no shared memory left) and
  // where out lies less than max_seqlen_q rows above address 0 (its TMA view starts there).
  bool staged_out = false;
  // Persistent CTAs take the work items longest sequence first instead of in the flat
  // (x, head, sequence) order (2-128 sequences; the kernel says why).
  bool longest_first = true;
  // Persistent CTAs take each item after their first by ticket from MhaPrefillParams::
  // work_counter where the call gives one (the CTA free first takes the next item), instead of
  // dealt by round (a snake over the CTAs in the longest-first order).
  bool tickets = true;
  // Persistent CTAs to launch (at most one per SM): 0 takes every SM. Tests set a few, so that
  // small problems have many items a CTA.
  int ctas = 0;
  // The online softmax moves a row's reference maximum only when a tile's exceeds it by more
  // than 2^8, and rescales O only then (warp by warp) instead of after every key tile.
  bool lazy_rescale = false;
  // The CTAs load the next query tile's Q (the next item's, or a pair's second tile) into a
  // second buffer while the current tile runs, and each consumer warpgroup issues that tile's first S product before it writes the
  // current tile's output, so the output's stores overlap the tensor cores' work (qk 128 only:
  // qk 192 has no shared memory for a second Q; the launcher turns it off there).
  bool lookahead = false;
};
// Field by field (the .cu files that include this are C++17: no defaulted comparison).
inline bool operator==(const Schedule& a, const Schedule& b) {
  return a.pingpong == b.pingpong && a.paired == b.paired && a.persistent == b.persistent &&
         a.staged_out == b.staged_out && a.longest_first == b.longest_first && a.tickets == b.tickets &&
         a.ctas == b.ctas && a.lazy_rescale == b.lazy_rescale && a.lookahead == b.lookahead;
}
// The schedule MhaPrefill uses for these head dims: ping-pong for qk 128 and not for qk 192
// (FlashAttention-3's measured choice: the longer S product leaves less to hide), paired,
// persistent, the staged output where it fits and the lazy rescale (qk 128 both: measured
// faster on the H200).
Schedule DefaultSchedule(int head_dim_qk);
// "pingpong+paired+persistent", ... ("+staged" where staged_out, "+flat" without longest_first,
// "+dealt" without tickets, "+ctas=N" with N persistent CTAs, "+lazy" with lazy_rescale,
// "+ahead" with lookahead):
// for test and benchmark labels.
std::string ScheduleName(Schedule schedule);
// Launches the kernel on `stream` (a cudaStream_t) with `schedule`; the caller has checked
// Refusal(p) == "". Tests run every schedule; benchmarks time them.
absl::Status Launch(const MhaPrefillParams& p, Schedule schedule, void* stream);

}  // namespace mlaserve::kernels::mha_sm90
