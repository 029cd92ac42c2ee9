// Test helpers of the moe family's CUDA tests: routings with the shapes that break sorts
// (uniform, hot experts, ragged counts with idle experts), the host form of the interleaved
// gate_up layout, and the error measures used against the CPU reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

namespace mlaserve::kernels::testing {

enum class Routing {
  kUniform,  // k distinct experts uniformly at random
  kHot,      // every token picks experts 0..k-1 (shuffled): most experts idle, hot ones huge
  kRagged,   // k distinct experts drawn with Zipf weights from a random half of the experts:
             // ragged counts, many experts with no tokens
};

inline const char* RoutingName(Routing r) {
  switch (r) {
    case Routing::kUniform: return "uniform";
    case Routing::kHot: return "hot";
    case Routing::kRagged: return "ragged";
  }
  return "?";
}

// gtest prints test parameters through this.
inline void PrintTo(Routing r, std::ostream* os) { *os << RoutingName(r); }

// [T, k] expert ids, distinct within a token.
inline std::vector<int32_t> MakeRouting(int T, int E, int k, Routing routing, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(T) * k);
  std::vector<int> perm(E);
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int> pool;
  std::vector<double> zipf;
  if (routing == Routing::kRagged) {
    std::shuffle(perm.begin(), perm.end(), rng);
    pool.assign(perm.begin(), perm.begin() + std::max(k, E / 2));
    for (size_t i = 0; i < pool.size(); ++i) zipf.push_back(1.0 / (1.0 + i));
  }
  for (int t = 0; t < T; ++t) {
    int32_t* row = ids.data() + static_cast<size_t>(t) * k;
    if (routing == Routing::kRagged) {
      std::discrete_distribution<int> pick(zipf.begin(), zipf.end());
      for (int j = 0; j < k;) {
        const int e = pool[pick(rng)];
        if (std::find(row, row + j, e) == row + j) row[j++] = e;
      }
      continue;
    }
    std::iota(perm.begin(), perm.end(), 0);
    if (routing == Routing::kHot) {
      std::shuffle(perm.begin(), perm.begin() + k, rng);
    } else {
      std::shuffle(perm.begin(), perm.end(), rng);
    }
    std::copy(perm.begin(), perm.begin() + k, row);
  }
  return ids;
}

// MoeGateUpLayout::kInterleaved8 of a stacked [E, 2I, H] stack: row 16j + i <- gate row 8j + i,
// row 16j + 8 + i <- up row I + 8j + i.
template <typename T>
std::vector<T> InterleaveGateUp(const std::vector<T>& stacked, int E, int I, int H) {
  std::vector<T> out(stacked.size());
  for (int64_t e = 0; e < E; ++e) {
    for (int r = 0; r < 2 * I; ++r) {
      const int block = r / 16, i = r % 16;
      const int src = i < 8 ? block * 8 + i : I + block * 8 + (i - 8);
      std::copy_n(stacked.begin() + (e * 2 * I + src) * H, H, out.begin() + (e * 2 * I + r) * H);
    }
  }
  return out;
}

// max_i |out_i - ref_i| / (rms(ref) + |ref_i|); NaN anywhere gives +inf. The bf16 roundings of
// the intermediates (gate/up, activations, expert outputs) keep this under a few percent; a
// misplaced, unwritten or doubly added row does not.
inline double MaxScaledError(const std::vector<float>& out, const std::vector<float>& ref) {
  double sq = 0;
  for (float r : ref) sq += static_cast<double>(r) * r;
  const double rms = std::sqrt(sq / std::max<size_t>(1, ref.size()));
  double worst = 0;
  for (size_t i = 0; i < ref.size() && i < out.size(); ++i) {
    if (std::isnan(out[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - ref[i]) / (rms + std::abs(ref[i])));
  }
  return worst;
}

}  // namespace mlaserve::kernels::testing
