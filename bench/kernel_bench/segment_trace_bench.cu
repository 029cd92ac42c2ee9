// mlaserve-kernel-bench --mla-segment-trace: where a Hopper latent CTA's time goes, from the
// kernel's own timeline (kernels/mla_prefill/latent_segment_trace.h; a build configured with
// -DMLASERVE_MLA_SEGMENT_TRACE=ON). For mla_decode rows at 128 heads, balanced and chunks, the
// call is timed as the kernel bench's rows time it (a spin kernel, then the call with the batch's
// metadata prebuilt); the trace of each of kReps such calls is read back, and the last call's is
// printed as medians and maxima over its CTAs (or segments) of the phases below, in microseconds:
//   entry spread    a CTA's entry minus the grid's earliest entry (launch and waves)
//   entry->wait     entry to griddepcontrol.wait returned (barrier init, early page loads)
//   seg0 setup      first segment's start to warpgroup 0's first score product retired (the
//                   first page landed, Q loaded, plus one page's S = Q K^T)
//   segN setup      the same for a CTA's later segments (their pages and Q prefetched)
//   us/page         (last pair's products retired - first scores) / (pages - 1), segments of >= 4 pages
//   store issue     last pair's products retired (later warpgroup) to the later warpgroup's output
//                   and LSE stores issued
//   epilogue        last pair's products retired (later warpgroup) to the segment's closing barrier
//                   (output or partial + LSE stores issued by both warpgroups)
//   switch gap      a segment's closing barrier to the next one's first scores retired
//   exit tail       the last recorded segment's closing barrier to the CTA's exit
//   busy            a CTA's exit minus its entry
// and the grid's span (latest exit minus earliest entry) for each call. With
// MLASERVE_SEGMENT_TRACE_CSV=DIR the last call's rows also go to DIR/<row>.csv, times in ns from
// the grid's earliest entry (one line per CTA: its header words, then each recorded segment's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/kernel_bench/bench_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/page.h"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_prefill/latent_segment_trace.h"

namespace mlaserve::bench {

#if MLASERVE_MLA_SEGMENT_TRACE
namespace {

namespace trace = kernels::mla_cuda::segment_trace;
using kernels::kPageSize;

constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kReps = 5;               // traced calls per row; the last is printed
constexpr int64_t kMaxCtas = 1 << 16;  // the trace buffer's rows (b 128 x 2 row blocks x 256 splits)

// Median and maximum of a phase over the CTAs (or segments) that have it.
struct Stat {
  std::vector<double> v;
  void Add(double us) { v.push_back(us); }
  void Print(const char* name) {
    std::sort(v.begin(), v.end());
    if (v.empty()) {
      std::printf("    %-14s        -\n", name);
      return;
    }
    std::printf("    %-14s median %8.2f  max %8.2f  min %8.2f  (n %zu)\n", name, v[v.size() / 2], v.back(), v.front(),
                v.size());
  }
};

// One call's trace rows -> the table. Returns the grid's span in microseconds.
double Report(const std::vector<uint64_t>& rows, int64_t ctas, bool print) {
  auto at = [&](int64_t c, int word) { return rows[c * trace::kWords + word]; };
  uint64_t t0 = UINT64_MAX, t_end = 0;
  std::vector<uint64_t> stamps;
  for (int64_t c = 0; c < ctas; ++c) {
    if (at(c, trace::kEntry) == 0) continue;
    t0 = std::min(t0, at(c, trace::kEntry));
    t_end = std::max({t_end, at(c, trace::kExit0), at(c, trace::kExit1)});
    stamps.push_back(at(c, trace::kEntry));
    stamps.push_back(at(c, trace::kAfterWait));
  }
  if (t0 == UINT64_MAX) {
    if (print) std::printf("    no trace rows written\n");
    return 0;
  }
  const double span = (t_end - t0) * 1e-3;
  if (!print) return span;
  auto us = [](uint64_t from, uint64_t to) { return to >= from ? (to - from) * 1e-3 : -((from - to) * 1e-3); };
  Stat spread, wait, setup0, setup_n, per_page, store_issue, epilogue, gap, tail, busy, segs, pages;
  for (int64_t c = 0; c < ctas; ++c) {
    const uint64_t entry = at(c, trace::kEntry);
    if (entry == 0) continue;
    const uint64_t exit = std::max(at(c, trace::kExit0), at(c, trace::kExit1));
    spread.Add(us(t0, entry));
    wait.Add(us(entry, at(c, trace::kAfterWait)));
    busy.Add(us(entry, exit));
    const int n_segs = static_cast<int>(at(c, trace::kSegmentCount));
    segs.Add(n_segs);
    const int recorded = std::min(n_segs, trace::kMaxSegments);
    int cta_pages = 0;
    uint64_t last_end = 0;
    for (int k = 0; k < recorded; ++k) {
      auto word = [&](int w) { return at(c, trace::SegmentWordAt(k, w)); };
      const int seg_pages = static_cast<int>(word(trace::kInfo) & 0x7fffffffu);
      cta_pages += seg_pages;
      if (seg_pages == 0) continue;
      const uint64_t first = word(trace::kFirstScores0);
      const uint64_t done = std::max(word(trace::kPagesDone0), word(trace::kPagesDone1));
      (k == 0 ? setup0 : setup_n).Add(us(word(trace::kStart), first));
      if (seg_pages >= 4) per_page.Add(us(first, done) / (seg_pages - 1));
      store_issue.Add(us(done, std::max(word(trace::kStoresIssued0), word(trace::kStoresIssued1))));
      epilogue.Add(us(done, word(trace::kEnd)));
      if (k + 1 < recorded && (at(c, trace::SegmentWordAt(k + 1, trace::kInfo)) & 0x7fffffffu) > 0) {
        gap.Add(us(word(trace::kEnd), at(c, trace::SegmentWordAt(k + 1, trace::kFirstScores0))));
      }
      last_end = word(trace::kEnd);
    }
    pages.Add(cta_pages);
    if (n_segs <= trace::kMaxSegments && last_end != 0) tail.Add(us(last_end, exit));
  }
  // The timer's step: the least non-zero difference between the entry and wait stamps.
  std::sort(stamps.begin(), stamps.end());
  uint64_t step = UINT64_MAX;
  for (size_t i = 1; i < stamps.size(); ++i) {
    if (stamps[i] != stamps[i - 1]) step = std::min(step, stamps[i] - stamps[i - 1]);
  }
  std::printf("    grid span %.2f us; globaltimer's least step seen %llu ns\n", span,
              static_cast<unsigned long long>(step == UINT64_MAX ? 0 : step));
  segs.Print("segments/CTA");
  pages.Print("pages/CTA");  // of its first kMaxSegments segments
  spread.Print("entry spread");
  wait.Print("entry->wait");
  setup0.Print("seg0 setup");
  setup_n.Print("segN setup");
  per_page.Print("us/page");
  store_issue.Print("store issue");
  epilogue.Print("epilogue");
  gap.Print("switch gap");
  tail.Print("exit tail");
  busy.Print("busy");
  return span;
}

// The rows as CSV (see the top of the file).
void WriteCsv(const std::string& path, const std::vector<uint64_t>& rows, int64_t ctas) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::printf("    cannot write %s\n", path.c_str());
    return;
  }
  auto at = [&](int64_t c, int word) { return rows[c * trace::kWords + word]; };
  uint64_t t0 = UINT64_MAX;
  for (int64_t c = 0; c < ctas; ++c) {
    if (at(c, trace::kEntry) != 0) t0 = std::min(t0, at(c, trace::kEntry));
  }
  auto rel = [&](uint64_t t) { return t == 0 ? -1LL : static_cast<long long>(t - t0); };
  std::fprintf(f, "cta,sm,segments,entry,after_wait,exit0,exit1");
  for (int k = 0; k < trace::kMaxSegments; ++k) {
    std::fprintf(f, ",s%d_start,s%d_pages,s%d_direct,s%d_request,s%d_first0,s%d_first1,s%d_done0,s%d_done1,"
                 "s%d_stores0,s%d_stores1,s%d_end", k, k, k, k, k, k, k, k, k, k, k);
  }
  std::fprintf(f, "\n");
  for (int64_t c = 0; c < ctas; ++c) {
    if (at(c, trace::kEntry) == 0) continue;
    const int n_segs = static_cast<int>(at(c, trace::kSegmentCount));
    std::fprintf(f, "%lld,%llu,%d,%lld,%lld,%lld,%lld", static_cast<long long>(c),
                 static_cast<unsigned long long>(at(c, trace::kSmId)), n_segs, rel(at(c, trace::kEntry)),
                 rel(at(c, trace::kAfterWait)), rel(at(c, trace::kExit0)), rel(at(c, trace::kExit1)));
    for (int k = 0; k < std::min(n_segs, trace::kMaxSegments); ++k) {
      auto word = [&](int w) { return at(c, trace::SegmentWordAt(k, w)); };
      const uint64_t info = word(trace::kInfo);
      std::fprintf(f, ",%lld,%llu,%d,%llu", rel(word(trace::kStart)),
                   static_cast<unsigned long long>(info & 0x7fffffffu), static_cast<int>((info >> 31) & 1),
                   static_cast<unsigned long long>(info >> 32));
      for (int w : {trace::kFirstScores0, trace::kFirstScores1, trace::kPagesDone0, trace::kPagesDone1,
                    trace::kStoresIssued0, trace::kStoresIssued1, trace::kEnd}) {
        std::fprintf(f, ",%lld", rel(word(w)));
      }
    }
    std::fprintf(f, "\n");
  }
  std::fclose(f);
  std::printf("    wrote %s\n", path.c_str());
}

// One row: lengths as BenchMlaDecode draws them (mean_sk +-25%, the same seed), s_q 1.
void TraceRow(int batch, int heads, int mean_sk, int sms, kernels::MlaDecodeSchedule schedule, uint64_t* d_trace) {
  std::mt19937 rng(batch * 131 + heads * 7 + mean_sk);
  std::vector<int> lk(batch);
  for (auto& l : lk) l = mean_sk * 3 / 4 + static_cast<int>(rng() % (mean_sk / 2 + 1));
  // The cache's pages in a random permutation, as kernel_bench.cu's PagedCache.
  int max_pages = 0, num_pages = 0;
  for (int l : lk) {
    max_pages = std::max(max_pages, kernels::PagesFor(l));
    num_pages += kernels::PagesFor(l);
  }
  std::vector<int32_t> perm(num_pages), table(static_cast<size_t>(batch) * max_pages, 0);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(rng()));
  for (int b = 0, next = 0; b < batch; ++b)
    for (int i = 0; i < kernels::PagesFor(lk[b]); ++i) table[static_cast<size_t>(b) * max_pages + i] = perm[next++];
  DeviceArray cache(size_t{2} * num_pages * kPageSize * kWidth), d_table(table.size() * 4), d_lk(lk.size() * 4);
  FillRandom(cache, 1);
  Upload(d_table, table);
  Upload(d_lk, std::vector<int32_t>(lk.begin(), lk.end()));
  const int64_t rows = static_cast<int64_t>(batch) * heads;
  DeviceArray q(rows * kWidth * 2), out(rows * kRank * 2), lse(rows * 4), cu_q((batch + 1) * 4);
  FillRandom(q, 7);
  std::vector<int32_t> cu(batch + 1);
  std::iota(cu.begin(), cu.end(), 0);
  Upload(cu_q, cu);
  const int max_k = *std::max_element(lk.begin(), lk.end());
  const int64_t total_k = std::accumulate(lk.begin(), lk.end(), int64_t{0});
  const double dram = kernels::cuda::CurrentDeviceDramBytesPerSmClock();  // kAuto reads it
  auto plan = kernels::PlanMlaDecode({batch, heads, 1, kRank, kRope, max_k, sms, schedule, total_k, dram});
  CheckStatus(plan.status(), "PlanMlaDecode");
  DeviceArray workspace(plan->workspace_bytes), metadata(plan->metadata_bytes);
  kernels::MlaParams p;
  p.dtype = kernels::DType::kBF16; p.batch = batch; p.num_heads = heads; p.kv_lora_rank = kRank; p.rope_dim = kRope;
  p.q = q.get(); p.q_token_stride = static_cast<int64_t>(heads) * kWidth; p.q_head_stride = kWidth;
  p.kv_cache = cache.get(); p.num_pages = num_pages; p.block_table = d_table.get<int32_t>();
  p.max_pages_per_seq = max_pages; p.cu_seqlens_q = cu_q.get<int32_t>();
  p.seqlens_k = d_lk.get<int32_t>(); p.max_seqlen_q = 1; p.max_seqlen_k = max_k;
  p.out = out.get(); p.lse = lse.get<float>(); p.softmax_scale = 1.0f / std::sqrt(192.0f);
  const kernels::KernelContext cuda_ctx{kernels::Backend::kCuda, nullptr, 0};
  const bool balanced = plan->num_parts > 0;
  const bool uses_metadata = balanced || plan->longest_first;
  if (uses_metadata) {
    CheckStatus(kernels::MlaDecodeBuildMetadata(p, *plan, metadata.get(), cuda_ctx), "MlaDecodeBuildMetadata");
  }
  const auto call = [&] {
    CheckStatus(kernels::MlaDecode(p, *plan, workspace.get(), cuda_ctx, nullptr,
                                   uses_metadata ? metadata.get() : nullptr),
                "MlaDecode");
  };
  const std::string cut =
      balanced ? "balanced"
               : "splits=" + std::to_string(plan->num_splits) + (plan->longest_first ? " longest-first" : "");
  std::printf("mla_decode b=%d h=%d s_q=1 s_k~%d %s\n", batch, heads, mean_sk, cut.c_str());
  for (int i = 0; i < 20; ++i) call();  // warm-up (kernel attributes, TMA descriptors, clocks)
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<double> spans;
  for (int r = 0; r < kReps; ++r) {
    BENCH_CHECK(cudaMemset(d_trace, 0, kMaxCtas * trace::kWords * sizeof(uint64_t)));
    SpinKernel<<<1, 1>>>(kSpinCycles);
    call();
    BENCH_CHECK(cudaDeviceSynchronize());
    const trace::Launch launch = trace::LastLaunch();
    if (!launch.traced) {
      std::printf("    the grid (%u x %u x %u) does not fit the trace buffer\n", launch.grid[0], launch.grid[1],
                  launch.grid[2]);
      return;
    }
    const int64_t ctas = static_cast<int64_t>(launch.grid[0]) * launch.grid[1] * launch.grid[2];
    std::vector<uint64_t> host(ctas * trace::kWords);
    BENCH_CHECK(cudaMemcpy(host.data(), d_trace, host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    const bool last = r + 1 == kReps;
    if (last) {
      std::printf("  grid %u x %u x %u (%s kernel); the last of %d calls:\n", launch.grid[0], launch.grid[1],
                  launch.grid[2], launch.segments ? "segment" : "chunk", kReps);
    }
    spans.push_back(Report(host, ctas, last));
    const char* csv_dir = std::getenv("MLASERVE_SEGMENT_TRACE_CSV");
    if (last && csv_dir != nullptr && *csv_dir != 0) {
      WriteCsv(std::string(csv_dir) + "/b" + std::to_string(batch) + "_" + std::to_string(mean_sk / 1024) + "k_" +
                   (balanced ? "balanced" : "chunks") + ".csv",
               host, ctas);
    }
  }
  std::printf("    spans of the %d calls:", kReps);
  for (double s : spans) std::printf(" %.2f", s);
  std::printf(" us\n");
}

}  // namespace

int BenchMlaSegmentTrace(int sms) {
  DeviceArray d_trace(kMaxCtas * trace::kWords * sizeof(uint64_t));
  trace::SetTraceBuffer(d_trace.get<uint64_t>(), kMaxCtas);
  using kernels::MlaDecodeSchedule;
  struct Row {
    int batch, mean_sk;
    MlaDecodeSchedule schedule;
  };
  // b 64 4k: balanced (0.92x FlashMLA) against chunks; b 128 4k chunks (1.0x); 8k for scale.
  const Row rows[] = {
      {64, 4096, MlaDecodeSchedule::kBalanced},  {64, 4096, MlaDecodeSchedule::kChunks},
      {128, 4096, MlaDecodeSchedule::kChunks},   {128, 4096, MlaDecodeSchedule::kBalanced},
      {64, 8192, MlaDecodeSchedule::kBalanced},  {64, 8192, MlaDecodeSchedule::kChunks},
  };
  for (const Row& row : rows) TraceRow(row.batch, 128, row.mean_sk, sms, row.schedule, d_trace.get<uint64_t>());
  trace::SetTraceBuffer(nullptr, 0);
  return 0;
}

#else  // !MLASERVE_MLA_SEGMENT_TRACE

int BenchMlaSegmentTrace(int) {
  std::fprintf(stderr,
               "--mla-segment-trace: this build has no segment trace; configure with "
               "-DMLASERVE_MLA_SEGMENT_TRACE=ON (tools/device/segment_trace.sh)\n");
  return 1;
}

#endif  // MLASERVE_MLA_SEGMENT_TRACE

}  // namespace mlaserve::bench
