// L2 prefetch hints: weights that a later kernel of the same step will stream, fetched into L2
// ahead of time by an earlier launch that leaves DRAM mostly idle.
//
// Why: a decode step at batch 1 is a chain of short kernels. Between the first projection of a
// layer's attention and its MoE block (rope, the absorbed products, the attention kernel, the
// combine, o_proj, the router, the routing) DRAM moves ~15 MB in ~40 us; the MoE block after it
// is bound by DRAM bandwidth. The shared experts' weights are known before the routing, so they
// can be moved into L2 during that window (one bulk prefetch per 64 KiB piece, issued from a few
// blocks of a launch already in the chain: kernels/rope's norm+rope launch takes a hint), and
// the MoE kernels then find them in L2 while their DRAM time goes to the routed experts.
//
// A hint is only that: nothing waits for the prefetches, and a kernel reading a region reads
// the same bytes whether they came from L2 or DRAM. The budget keeps the regions well inside
// L2, so they are still there when read and do not push out what the kernels in between use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mlaserve::kernels {

struct L2PrefetchRegion {
  const void* data = nullptr;
  size_t bytes = 0;
};

// What a launch prefetches: at most kMaxRegions regions (by value in kernel parameters). The
// device rounds each region inward to 16-byte boundaries (bulk prefetch's granule).
struct L2PrefetchHint {
  static constexpr int kMaxRegions = 6;
  L2PrefetchRegion regions[kMaxRegions] = {};
  int count = 0;

  size_t total_bytes() const {
    size_t total = 0;
    for (int i = 0; i < count; ++i) total += regions[i].bytes;
    return total;
  }
  bool empty() const { return count == 0; }
};

// Takes wanted[0, count) in order (most useful first) while the total stays within
// `budget_bytes`: the region that crosses the budget contributes its first bytes, the ones after
// it nothing. Null or empty regions are skipped; at most kMaxRegions are kept. (A pointer and a
// count: the CUDA sources that include this header build as C++17.)
inline L2PrefetchHint FitL2Prefetch(const L2PrefetchRegion* wanted, size_t count,
                                    size_t budget_bytes) {
  L2PrefetchHint hint;
  size_t left = budget_bytes;
  for (size_t i = 0; i < count; ++i) {
    const L2PrefetchRegion& r = wanted[i];
    if (left == 0 || hint.count == L2PrefetchHint::kMaxRegions) break;
    if (r.data == nullptr || r.bytes == 0) continue;
    hint.regions[hint.count++] = {r.data, std::min(r.bytes, left)};
    left -= std::min(r.bytes, left);
  }
  return hint;
}

// Blocks a launch spends on issuing `hint`: one per kL2PrefetchBytesPerBlock (an SM's bulk
// prefetch requests go out at a bounded rate, so tens of MB need several SMs to be issued
// within a few microseconds), at least 1 for a non-empty hint, at most `max_blocks`.
inline constexpr size_t kL2PrefetchBytesPerBlock = size_t{1} << 20;
inline int L2PrefetchBlocks(const L2PrefetchHint& hint, int max_blocks) {
  if (hint.empty() || max_blocks <= 0) return 0;
  const size_t blocks = (hint.total_bytes() + kL2PrefetchBytesPerBlock - 1) / kL2PrefetchBytesPerBlock;
  return static_cast<int>(std::clamp<size_t>(blocks, 1, static_cast<size_t>(max_blocks)));
}

}  // namespace mlaserve::kernels
