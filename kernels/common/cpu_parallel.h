// A small parallel-for for the CPU backend's kernels.
//
// Work items are claimed dynamically in chunks (causal attention rows differ in cost), and
// every item is computed by exactly one thread, so results do not depend on the thread count.
// Threads are spawned per call: the CPU backend serves tests and demos, and a spawn costs far
// less than the attention rows it is used for. MLASERVE_CPU_THREADS caps the thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

namespace mlaserve::kernels {

inline int CpuThreadCount() {
  static const int count = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("MLASERVE_CPU_THREADS")) {
      const int v = std::atoi(env);
      if (v > 0) n = v;
    }
    return std::max(n, 1);
  }();
  return count;
}

// Calls fn(i) for every i in [0, n). `cost_per_item` is a rough count of flops per item; work
// below ~1M flops in total runs on the calling thread.
template <typename Fn>
void ParallelFor(int64_t n, double cost_per_item, Fn&& fn) {
  constexpr double kMinCostPerThread = 1e6;
  int64_t threads = std::min<int64_t>(CpuThreadCount(), n);
  threads = std::min<int64_t>(
      threads, std::max<int64_t>(1, static_cast<int64_t>(n * cost_per_item / kMinCostPerThread)));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const int64_t chunk = std::max<int64_t>(1, n / (threads * 8));
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (;;) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= n) return;
      const int64_t end = std::min(n, begin + chunk);
      for (int64_t i = begin; i < end; ++i) fn(i);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace mlaserve::kernels
