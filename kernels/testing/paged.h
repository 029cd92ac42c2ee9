// Test helper: a paged cache with a randomly permuted page assignment, so kernels that read
// through the block table are checked with non-contiguous, out-of-order pages.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/common/types.h"

namespace mlaserve::kernels::testing {

struct PagedLayout {
  int batch = 0;
  int max_pages_per_seq = 0;
  int num_pages = 0;
  std::vector<int32_t> block_table;  // [batch, max_pages_per_seq], unused entries = -1

  int64_t Slot(int b, int64_t pos) const {
    return static_cast<int64_t>(block_table[b * max_pages_per_seq + pos / kPageSize]) *
               kPageSize + pos % kPageSize;
  }
};

// Pages for sequences of the given lengths, shuffled over a pool with `spare_pages` unused
// pages mixed in (so an off-by-one page read hits foreign data, not zeros).
inline PagedLayout MakePagedLayout(const std::vector<int>& seq_lens, uint64_t seed,
                                   int spare_pages = 3) {
  PagedLayout layout;
  layout.batch = static_cast<int>(seq_lens.size());
  int total = 0;
  for (int len : seq_lens) {
    const int pages = PagesFor(len);
    layout.max_pages_per_seq = std::max(layout.max_pages_per_seq, pages);
    total += pages;
  }
  layout.max_pages_per_seq = std::max(layout.max_pages_per_seq, 1);
  layout.num_pages = total + spare_pages;
  std::vector<int32_t> perm(layout.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  layout.block_table.assign(static_cast<size_t>(layout.batch) * layout.max_pages_per_seq, -1);
  int next = 0;
  for (int b = 0; b < layout.batch; ++b) {
    const int pages = PagesFor(seq_lens[b]);
    for (int i = 0; i < pages; ++i) layout.block_table[b * layout.max_pages_per_seq + i] = perm[next++];
  }
  return layout;
}

// Ragged offsets: cu[0] = 0, cu[b+1] = cu[b] + lens[b].
inline std::vector<int32_t> CumSum(const std::vector<int>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

}  // namespace mlaserve::kernels::testing
