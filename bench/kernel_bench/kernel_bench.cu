// mlaserve-kernel-bench: speed of the CUDA attention kernels against the two ceilings measured
// in the same run (device copy bandwidth, cuBLAS bf16 GEMM rate).
//   mla_decode  : GB/s (FlashMLA's count: KV cache bytes read once per request + q + out)
//                 as a fraction of copy bandwidth, and TFLOP/s (2 * h * s_q * sum(s_k) * (576 + 512));
//                 the wgmma kernel ("mla_decode", the default on Hopper) and the mma.sync one
//                 ("mla_decode_mmasync") in the same run; same for mla_prefill. A row times the
//                 call as a decode step's layers make it, with the batch's metadata (schedule or
//                 chunk order) built once beforehand; where the call reads metadata, a "_percall"
//                 row times it building its own, and the metadata kernel's own time follows
//                 (JSON: "metadata_ms" on both rows)
//   mha_prefill : causal TFLOP/s (FlashAttention-3's count: 2 * s^2 * h * (d_qk + d_v) / 2), head
//                 dims 192/128 and 128/128, in one run: our default kernel ("mha_prefill": the
//                 wgmma kernel on Hopper), the wgmma kernel with its default schedule's
//                 ping-pong flipped ("mha_prefill_alt") or with one query tile per CTA
//                 ("mha_prefill_single"), one CTA per work item ("mha_prefill_launched") or
//                 its staged output flipped ("mha_prefill_direct": O stored from the
//                 accumulators; qk 128 only, qk 192 stores directly anyway), its persistent
//                 CTAs' items in the flat order instead of longest first ("mha_prefill_flat")
//                 or dealt by round instead of taken by ticket ("mha_prefill_dealt"),
//                 our mma.sync kernel ("mha_prefill_mmasync") and the cuDNN provider
//                 ("mha_prefill_cudnn", when libcudnn.so.9 loads; its plan is built in the
//                 warm-up calls); then ragged batches ("ragged mean=M": 16k tokens in lengths
//                 uniform in [M/4, 7M/4], d 192/128) on ours, flat, dealt, launched and cuDNN
//   kv_pack     : GB/s over its bytes (each input read once, each output written once)
//   mla_prefill : TFLOP/s as a fraction of the GEMM rate
//   mla_decode_small : mla_decode at batch 1-8 (latent_small_bench.cu): microseconds per call in
//                 CUDA graphs, by way of cutting the keys, and the fraction of copy bandwidth
//   sampling    : one token a row of logits, the cluster select against the sort path in the
//                 same run (sampling_bench.cu); only with --only sampling
// Usage: mlaserve-kernel-bench [--json FILE] [--quick] [--no-mmasync] [--only KERNEL] [--repeat N]
//                              [--mha-min-seqlen S] [--mha-shape D,H,S] [--mha-no-lse] [--mha-rows NAME,...] [--mla-heads H]
//   --only mla_decode|mla_decode_small|mha_prefill|kv_pack|mla_prefill|sampling: just that family (the
//   ceilings are always measured)
//   --no-mmasync: no mla_decode / mla_prefill rows of the mma.sync latent kernel
//   --mla-heads 128|16: only the mla_decode rows of that head count
//   --mla-sq2-all: the mla_decode rows at s_q 2 for every batch and s_k (default: b 128, 8k only)
//   --mla-shape b,s_q,s_k: only the mla_decode rows of that shape (with --mla-heads; a profiler run)
//   --mla-auto-only: of the mla_decode rows only kAuto's plan's, warmed up with the same plan: every
//                    launch of the run is that plan's (a profiler's launch count lands in it)
//   --mla-trace N: after each mla_decode row, N more calls of its form (a spin kernel, then the call
//                  with the metadata prebuilt) under a CUPTI trace: each call's kernels with their
//                  start and end from the spin's end, which is where the row's start event falls.
//                  They run as in the timed rows (PDL overlap included, which ncu's serialized
//                  replay removes): the call's time splits into its kernels and the gaps between them
//   --mla-segment-trace: only the latent kernel's in-kernel timeline at 128 heads, balanced and chunks
//                  (segment_trace_bench.cu; a build with -DMLASERVE_MLA_SEGMENT_TRACE=ON)
//   --small-shapes "b,h,s_k;...", --small-variants "auto,pages=4,...": only these mla_decode_small
//   shapes / ways of cutting the keys (latent_small_bench.cu)
//   --repeat N: mha_prefill rows of a shape are timed in N passes over the rows in turn, pass p
//   starting at row p (so with N a multiple of the rows each row is timed in every position),
//   each row's time the median of its passes (default 1)
//   --mha-min-seqlen S, --mha-rows: only mha_prefill shapes of sequences >= S, only these rows
//   --mha-shape dqk,heads,seqlen: only that mha_prefill shape of equal sequences (no ragged rows;
//                  a profiler run: every mha launch of the run is that shape's)
//   --mha-no-lse: the mha_prefill rows (ours and cuDNN alike) write no log-sum-exp
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/engine_bench/gpu_timeline.h"
#include "bench/kernel_bench/bench_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/page.h"
#include "kernels/kv_pack/api.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mha_prefill/mha_prefill_sm90.h"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_prefill/api.h"

namespace mlaserve::bench {

void BenchSampling(const Ceilings& ceil, Results& res);  // sampling_bench.cu

void BenchMlaDecodeSmall(int sms, bool quick, const std::string& shapes, const std::string& variants,
                         const Ceilings& ceil, Results& res);  // latent_small_bench.cu
int BenchMlaSegmentTrace(int sms);                             // segment_trace_bench.cu

namespace {

using kernels::Backend;
using kernels::DType;
using kernels::KernelContext;
using kernels::kPageSize;

constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
const KernelContext kCuda{Backend::kCuda, nullptr, 0};

// A paged latent cache for requests of the given lengths, pages randomly permuted.
struct PagedCache {
  std::vector<int32_t> table;
  int max_pages = 0, num_pages = 0;
  std::unique_ptr<DeviceArray> cache, d_table, d_seqlens;

  explicit PagedCache(const std::vector<int>& lk, uint64_t seed) {
    for (int l : lk) {
      max_pages = std::max(max_pages, kernels::PagesFor(l));
      num_pages += kernels::PagesFor(l);
    }
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
    table.assign(lk.size() * max_pages, 0);
    int next = 0;
    for (size_t b = 0; b < lk.size(); ++b)
      for (int i = 0; i < kernels::PagesFor(lk[b]); ++i) table[b * max_pages + i] = perm[next++];
    cache = std::make_unique<DeviceArray>(size_t{2} * num_pages * kPageSize * kWidth);
    FillRandom(*cache, seed + 1);
    d_table = std::make_unique<DeviceArray>(table.size() * 4);
    Upload(*d_table, table);
    d_seqlens = std::make_unique<DeviceArray>(lk.size() * 4);
    Upload(*d_seqlens, std::vector<int32_t>(lk.begin(), lk.end()));
  }
};

// The latent kernel's name in the results: the wgmma kernel is the family's default.
std::string LatentFamily(const char* family, kernels::LatentKernel kernel) {
  return kernel == kernels::LatentKernel::kMmaSync ? std::string(family) + "_mmasync" : family;
}

// --mla-trace: calls per mla_decode row traced (0: none).
int g_mla_trace_calls = 0;
// --mha-no-lse: the mha_prefill rows write no log-sum-exp (MhaPrefillParams::lse null), as a
// forward that merges no prefix chunks asks, and as PyTorch's SDPA asks cuDNN when its inputs need
// no gradient (its same-run baseline, tools/device/cudnn_suite.sh).
bool g_mha_no_lse = false;

// `calls` calls of `call`, each after a spin kernel as the timed rows run them, under a CUPTI trace:
// per call, each kernel's start and end in microseconds from the spin's end, and the call's span
// (the spin's end to its last kernel's end: what the row's events measure). Then the medians over
// the calls of each kernel's duration (by its place in the call) and of the span.
void TraceMlaCalls(int calls, const std::function<void()>& call) {
  absl::StatusOr<std::unique_ptr<GpuTimeline>> timeline = GpuTimeline::Create();
  if (!timeline.ok()) {
    std::printf("  trace: %s\n", std::string(timeline.status().message()).c_str());
    return;
  }
  call();  // the call's host state (kernel attributes) outside the trace
  BENCH_CHECK(cudaDeviceSynchronize());
  CheckStatus((*timeline)->Start(), "trace start");
  for (int c = 0; c < calls; ++c) {
    SpinKernel<<<1, 1>>>(kSpinCycles);
    call();
  }
  absl::StatusOr<TimelineTrace> trace = (*timeline)->Stop();
  CheckStatus(trace.status(), "trace stop");
  std::vector<ActivityRecord> kernels;
  for (const ActivityRecord& r : trace->records) {
    if (r.kind == ActivityKind::kKernel) kernels.push_back(r);
  }
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  std::vector<std::vector<double>> durations;  // [kernel's place in the call][call]
  std::vector<double> spans;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (kernels[i].name.find("SpinKernel") == std::string::npos) continue;
    const int64_t t0 = kernels[i].end_ns;
    int64_t last_end = t0;
    std::printf("  trace call %zu:", spans.size());
    size_t place = 0;
    for (size_t j = i + 1; j < kernels.size() && kernels[j].name.find("SpinKernel") == std::string::npos; ++j, ++place) {
      const ActivityRecord& k = kernels[j];
      std::string name = k.name.substr(0, k.name.find('<'));
      name = name.substr(name.rfind("::") == std::string::npos ? 0 : name.rfind("::") + 2);
      std::printf("  %s [%.1f, %.1f] us", name.c_str(), (k.start_ns - t0) * 1e-3, (k.end_ns - t0) * 1e-3);
      if (durations.size() <= place) durations.resize(place + 1);
      durations[place].push_back((k.end_ns - k.start_ns) * 1e-3);
      last_end = std::max(last_end, k.end_ns);
    }
    spans.push_back((last_end - t0) * 1e-3);
    std::printf("  span %.1f us\n", spans.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::printf("  trace medians over %zu calls: span %.1f us; kernel durations", spans.size(), median(spans));
  for (const auto& d : durations) std::printf(" %.1f", median(d));
  std::printf(" us\n");
}

// skewed: one request of 16 x mean_sk, the others mean_sk / 4 +-25% (a long conversation among
// short ones), else every length mean_sk +-25%. grid_order: chunk CTAs in grid order even where
// the plan runs them longest first (MLASERVE_MLA_ORDER=0; the row's family gets "_gridorder").
void BenchMlaDecode(int batch, int heads, int qpr, int mean_sk, int sms, kernels::LatentKernel kernel,
                    kernels::MlaDecodeSchedule schedule, bool skewed, const Ceilings& ceil, Results& res,
                    bool grid_order = false) {
  std::mt19937 rng(batch * 131 + heads * 7 + mean_sk);
  std::vector<int> lk(batch);
  for (auto& l : lk) l = mean_sk * 3 / 4 + static_cast<int>(rng() % (mean_sk / 2 + 1));  // +-25%
  if (skewed) {
    for (auto& l : lk) l /= 4;
    lk[0] = 16 * mean_sk;
  }
  PagedCache pc(lk, rng());
  const int64_t rows = static_cast<int64_t>(batch) * heads * qpr;
  DeviceArray q(rows * kWidth * 2), out(rows * kRank * 2), lse(rows * 4), cu_q((batch + 1) * 4);
  FillRandom(q, 7);
  std::vector<int32_t> cu(batch + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b * qpr;
  Upload(cu_q, cu);
  const int max_k = *std::max_element(lk.begin(), lk.end());
  const int64_t total_k = std::accumulate(lk.begin(), lk.end(), int64_t{0});
  const double dram = kernels::cuda::CurrentDeviceDramBytesPerSmClock();  // kAuto reads it
  auto plan = kernels::PlanMlaDecode({batch, heads, qpr, kRank, kRope, max_k, sms, schedule, total_k, dram});
  CheckStatus(plan.status(), "PlanMlaDecode");
  DeviceArray workspace(plan->workspace_bytes);
  kernels::MlaParams p;
  p.dtype = DType::kBF16; p.batch = batch; p.num_heads = heads; p.kv_lora_rank = kRank; p.rope_dim = kRope;
  p.q = q.get(); p.q_token_stride = static_cast<int64_t>(heads) * kWidth; p.q_head_stride = kWidth;
  p.kv_cache = pc.cache->get(); p.num_pages = pc.num_pages; p.block_table = pc.d_table->get<int32_t>();
  p.max_pages_per_seq = pc.max_pages; p.cu_seqlens_q = cu_q.get<int32_t>();
  p.seqlens_k = pc.d_seqlens->get<int32_t>(); p.max_seqlen_q = qpr; p.max_seqlen_k = max_k;
  p.out = out.get(); p.lse = lse.get<float>(); p.softmax_scale = 1.0f / std::sqrt(192.0f);
  p.kernel = kernel;
  const bool balanced = plan->num_parts > 0 && kernel != kernels::LatentKernel::kMmaSync;
  // The call reads metadata (the balanced schedule, or the chunks' order) that a decode step's
  // layers share: built once per step (MlaDecodeBuildMetadata, as FlashMLA's get_mla_metadata), so
  // the family's row times the call with it prebuilt, as FlashMLA's benchmark times its call. The
  // "_percall" row times the call building its own (one launch more per call).
  const bool uses_metadata = balanced || (plan->longest_first && !grid_order);
  DeviceArray metadata(plan->metadata_bytes);
  const auto build_metadata = [&] {
    CheckStatus(kernels::MlaDecodeBuildMetadata(p, *plan, metadata.get(), kCuda), "MlaDecodeBuildMetadata");
  };
  if (uses_metadata) build_metadata();
  const void* prebuilt = uses_metadata ? metadata.get() : nullptr;
  // A picking plan's chunk length, as the order kernel picked it from these lengths (the row's label).
  const int picked_pages = uses_metadata ? PickedChunkPages(prebuilt, batch, *plan) : 0;
  if (grid_order) setenv("MLASERVE_MLA_ORDER", "0", 1);
  // Spin first: at batch 1-4 the call's host work (plan checks, TMA descriptor) outlasts its GPU work.
  const auto call = [&](const void* metadata_arg) {
    CheckStatus(kernels::MlaDecode(p, *plan, workspace.get(), kCuda, nullptr, metadata_arg), "MlaDecode");
  };
  double ms = 0, percall_ms = 0, metadata_ms = 0;
  if (!uses_metadata) {
    ms = MedianMs([&] { call(nullptr); }, 3, 20, true);
  } else {
    // The two forms in alternating rounds, the median of the rounds' medians each: at 128 heads the
    // GPU's clock drifts by a few % within a row's runs, as much as the one launch between them.
    constexpr int kRounds = 5;
    std::vector<double> with, without;
    for (int r = 0; r < kRounds; ++r) {
      with.push_back(MedianMs([&] { call(prebuilt); }, 2, 8, true));
      without.push_back(MedianMs([&] { call(nullptr); }, 2, 8, true));
    }
    std::sort(with.begin(), with.end());
    std::sort(without.begin(), without.end());
    ms = with[kRounds / 2];
    percall_ms = without[kRounds / 2];
    metadata_ms = MedianMs(build_metadata, 3, 20, true);
  }
  const double sum_k = std::accumulate(lk.begin(), lk.end(), 0.0);
  const double bytes = sum_k * kWidth * 2 + rows * kWidth * 2.0 + rows * kRank * 2.0;
  // FlashMLA's count: every query row against the whole context (s_q = 2 included).
  const double flops = 2.0 * heads * qpr * sum_k * (kWidth + kRank);
  char shape[128];
  const std::string cut = balanced ? "balanced"
                                   : "splits=" + std::to_string(plan->num_splits) +
                                         (plan->longest_first && !grid_order ? " longest-first" : "") +
                                         (picked_pages > 0 ? " pick=" + std::to_string(picked_pages) : "");
  std::snprintf(shape, sizeof(shape), "b=%d h=%d s_q=%d s_k~%d%s %s", batch, heads, qpr, mean_sk,
                skewed ? " skewed" : "", cut.c_str());
  std::string family = LatentFamily("mla_decode", kernel);
  if (schedule == kernels::MlaDecodeSchedule::kChunks) family += "_chunks";
  if (schedule == kernels::MlaDecodeSchedule::kBalanced) family += "_balanced";
  if (grid_order) family += "_gridorder";
  const auto add = [&](const std::string& name, double t) {
    const double gbs = bytes / (t * 1e-3) / 1e9;
    res.Add(name, shape, t, flops / (t * 1e-3) / 1e12, gbs, gbs / ceil.copy_gbs, "copy BW");
    if (uses_metadata) res.rows.back()["metadata_ms"] = metadata_ms;
  };
  add(family, ms);
  if (uses_metadata) {
    add(family + "_percall", percall_ms);
    std::printf("%-12s %-44s %9.3f ms\n", "", "  its metadata kernel alone (MlaDecodeBuildMetadata)", metadata_ms);
  }
  if (g_mla_trace_calls > 0 && res.print) {  // not the unprinted warm-up rows
    TraceMlaCalls(g_mla_trace_calls, [&] { call(prebuilt); });
  }
  if (grid_order) unsetenv("MLASERVE_MLA_ORDER");
}

// Who computes an mha_prefill row: our default kernel, the wgmma kernel with its default
// schedule's ping-pong flipped ("alt"), unpaired ("single"), one CTA per work item instead of
// persistent CTAs ("launched") or O stored from the accumulators instead of through shared memory
// and TMA ("direct"), the persistent CTAs' items in the flat order instead of longest first
// ("flat"), dealt by round instead of taken by ticket ("dealt"), our mma.sync kernel, cuDNN.
enum class MhaRow {
  kOurs, kWgmmaAlt, kWgmmaSingle, kWgmmaLaunched, kWgmmaDirect, kWgmmaFlat, kWgmmaDealt, kWgmmaLazy, kWgmmaAhead,
  kMmaSync, kCudnn
};

constexpr MhaRow kAllMhaRows[] = {MhaRow::kOurs,         MhaRow::kWgmmaAlt,    MhaRow::kWgmmaSingle,
                                  MhaRow::kWgmmaLaunched, MhaRow::kWgmmaDirect, MhaRow::kWgmmaFlat,
                                  MhaRow::kWgmmaDealt,    MhaRow::kWgmmaLazy,   MhaRow::kWgmmaAhead,
                                  MhaRow::kMmaSync,       MhaRow::kCudnn};

const char* MhaRowName(MhaRow row) {
  switch (row) {
    case MhaRow::kOurs: return "mha_prefill";
    case MhaRow::kWgmmaAlt: return "mha_prefill_alt";
    case MhaRow::kWgmmaSingle: return "mha_prefill_single";
    case MhaRow::kWgmmaLaunched: return "mha_prefill_launched";
    case MhaRow::kWgmmaDirect: return "mha_prefill_direct";
    case MhaRow::kWgmmaFlat: return "mha_prefill_flat";
    case MhaRow::kWgmmaDealt: return "mha_prefill_dealt";
    case MhaRow::kWgmmaLazy: return "mha_prefill_lazy";
    case MhaRow::kWgmmaAhead: return "mha_prefill_ahead";
    case MhaRow::kMmaSync: return "mha_prefill_mmasync";
    case MhaRow::kCudnn: return "mha_prefill_cudnn";
  }
  return "?";
}

// The default schedule's field a wgmma variant row flips, or null for a row that is not one.
bool kernels::mha_sm90::Schedule::*FlippedField(MhaRow row) {
  using S = kernels::mha_sm90::Schedule;
  switch (row) {
    case MhaRow::kWgmmaAlt: return &S::pingpong;
    case MhaRow::kWgmmaSingle: return &S::paired;
    case MhaRow::kWgmmaLaunched: return &S::persistent;
    case MhaRow::kWgmmaDirect: return &S::staged_out;
    case MhaRow::kWgmmaFlat: return &S::longest_first;
    case MhaRow::kWgmmaDealt: return &S::tickets;
    case MhaRow::kWgmmaLazy: return &S::lazy_rescale;
    case MhaRow::kWgmmaAhead: return &S::lookahead;
    default: return nullptr;
  }
}

// The sequence lengths of a ragged batch: `total` tokens in lengths drawn uniformly from
// [mean / 4, 7 mean / 4] (a fixed generator: every run the same batch), the last one cut to fit.
std::vector<int> RaggedLengths(int mean, int total) {
  std::vector<int> out;
  uint32_t state = 20261130u + static_cast<uint32_t>(mean);
  int left = total;
  while (left > 0) {
    state = state * 1664525u + 1013904223u;
    const int len = std::min(left, mean / 4 + static_cast<int>((state >> 8) % static_cast<uint32_t>(3 * mean / 2 + 1)));
    out.push_back(len);
    left -= len;
  }
  return out;
}

// One causal mha_prefill shape (sequences of `lengths`, head dims dqk / 128), timed for each of
// `rows` on the same inputs: `repeat` passes over the rows in turn (so slow drifts of the clock
// fall on all of them alike), each row's time the median of its passes.
void BenchMhaPrefill(int heads, const std::vector<int>& lengths, bool ragged, int dqk, const std::vector<MhaRow>& rows,
                     int repeat, const Ceilings& ceil, Results& res) {
  constexpr int kDv = 128;
  const int batch = static_cast<int>(lengths.size());
  int64_t tokens = 0;
  int seqlen = 0;  // the longest
  double sq = 0;   // sum of squared lengths (the causal FLOPs)
  for (int len : lengths) tokens += len, seqlen = std::max(seqlen, len), sq += static_cast<double>(len) * len;
  DeviceArray q(tokens * heads * dqk * 2), k(tokens * heads * dqk * 2), v(tokens * heads * kDv * 2);
  DeviceArray out(tokens * heads * kDv * 2), lse(tokens * heads * 4), cu((batch + 1) * 4);
  FillRandom(q, 11);
  FillRandom(k, 12);
  FillRandom(v, 13);
  std::vector<int32_t> cu_host(batch + 1, 0);
  for (int b = 0; b < batch; ++b) cu_host[b + 1] = cu_host[b] + lengths[b];
  Upload(cu, cu_host);
  kernels::MhaPrefillParams p;
  p.dtype = DType::kBF16; p.batch = batch; p.num_heads = heads; p.num_kv_heads = heads;
  p.head_dim_qk = dqk; p.head_dim_v = kDv;
  p.q = q.get(); p.q_token_stride = static_cast<int64_t>(heads) * dqk; p.q_head_stride = dqk;
  p.k = k.get(); p.k_token_stride = static_cast<int64_t>(heads) * dqk; p.k_head_stride = dqk;
  p.v = v.get(); p.v_token_stride = static_cast<int64_t>(heads) * kDv; p.v_head_stride = kDv;
  p.out = out.get(); p.out_token_stride = static_cast<int64_t>(heads) * kDv; p.out_head_stride = kDv;
  p.lse = g_mha_no_lse ? nullptr : lse.get<float>(); p.cu_seqlens_q = cu.get<int32_t>(); p.cu_seqlens_k = cu.get<int32_t>();
  p.max_seqlen_q = seqlen; p.max_seqlen_k = seqlen; p.softmax_scale = 1.0f / std::sqrt(float(dqk));
  p.causal = true;
  // The work counter (api.h: zero, and left zero by every call), as the engine gives one.
  DeviceArray counter(4);
  Upload(counter, std::vector<int32_t>{0});
  p.work_counter = counter.get<uint32_t>();
  // The call of each row; the wgmma schedule variants only where the wgmma kernel runs.
  std::vector<std::pair<MhaRow, std::function<void()>>> calls;
  for (MhaRow row : rows) {
    kernels::MhaPrefillParams rp = p;
    rp.provider = row == MhaRow::kCudnn ? kernels::MhaPrefillProvider::kCudnn : kernels::MhaPrefillProvider::kOurs;
    rp.kernel = row == MhaRow::kMmaSync ? kernels::MhaPrefillKernel::kMmaSync : kernels::MhaPrefillKernel::kAuto;
    if (bool kernels::mha_sm90::Schedule::*field = FlippedField(row)) {
      if (!kernels::MhaPrefillWgmmaApplies(rp)) continue;  // not a Hopper GPU with an sm_90a build
      kernels::mha_sm90::Schedule schedule = kernels::mha_sm90::DefaultSchedule(dqk);
      schedule.*field = !(schedule.*field);
      calls.emplace_back(row, [rp, schedule] {
        CheckStatus(kernels::mha_sm90::Launch(rp, schedule, nullptr), "mha_sm90::Launch");
      });
    } else {
      calls.emplace_back(row, [rp] { CheckStatus(kernels::MhaPrefill(rp, kCuda), "MhaPrefill"); });
    }
  }
  // Pass p starts at row p (mod rows) and goes round: on an H100 under its power cap the rows of a
  // pass ran 1-11% slower the later they came (two identical kernels, first and ninth row: 2026-12-06,
  // docs/BENCHMARKS.md), so a fixed order favoured the first row (ours) over the last (cuDNN). With
  // --repeat a multiple of the rows, every row is timed once in every position. The SM clock right
  // after each timing goes with the row (JSON "sm_clock_mhz": the median over its passes).
  static bool warned = false;
  if (calls.size() > 1 && repeat % static_cast<int>(calls.size()) != 0 && !warned) {
    std::printf("note: mha_prefill --repeat %d is not a multiple of the %zu rows: the rows take the passes' positions "
                "unevenly (a row timed later in a pass runs slower on a power-capped GPU)\n", repeat, calls.size());
    warned = true;
  }
  std::vector<std::vector<double>> ms(calls.size()), mhz(calls.size());
  for (int pass = 0; pass < repeat; ++pass)
    for (size_t i = 0; i < calls.size(); ++i) {
      const size_t c = (static_cast<size_t>(pass) + i) % calls.size();
      ms[c].push_back(MedianMs(calls[c].second, 2, 10));
      mhz[c].push_back(MeasureSmClockMhz());
    }
  const double flops = 2.0 * sq * heads * (dqk + kDv) / 2.0;
  char shape[128];
  if (ragged) {
    std::snprintf(shape, sizeof(shape), "causal h=%d ragged mean=%d batch=%d d=%d/%d", heads,
                  static_cast<int>(tokens / batch), batch, dqk, kDv);
  } else {
    std::snprintf(shape, sizeof(shape), "causal h=%d seqlen=%d batch=%d d=%d/%d", heads, seqlen, batch, dqk, kDv);
  }
  if (g_mha_no_lse) std::strncat(shape, " no-lse", sizeof(shape) - std::strlen(shape) - 1);
  for (size_t c = 0; c < calls.size(); ++c) {
    std::sort(ms[c].begin(), ms[c].end());
    std::sort(mhz[c].begin(), mhz[c].end());
    const double t = ms[c][ms[c].size() / 2];
    const double tflops = flops / (t * 1e-3) / 1e12;
    res.Add(MhaRowName(calls[c].first), shape, t, tflops, 0.0, tflops / ceil.gemm_tflops, "GEMM");
    res.rows.back()["sm_clock_mhz"] = mhz[c][mhz[c].size() / 2];
  }
}

void BenchKvPack(int tokens, int heads, const Ceilings& ceil, Results& res) {
  constexpr int kNope = 128, kPe = 64, kV = 128;
  const int64_t th = static_cast<int64_t>(tokens) * heads;
  DeviceArray kv(th * (kNope + kV) * 2), k_pe(int64_t{tokens} * kPe * 2), k(th * (kNope + kPe) * 2), v(th * kV * 2);
  FillRandom(kv, 21);
  FillRandom(k_pe, 22);
  kernels::KvPackParams p;
  p.dtype = DType::kBF16; p.num_tokens = tokens; p.num_heads = heads; p.nope_dim = kNope; p.rope_dim = kPe;
  p.v_dim = kV; p.kv = kv.get(); p.k_pe = k_pe.get(); p.k_pe_stride = kPe; p.k = k.get(); p.v = v.get();
  const double ms = MedianMs([&] { CheckStatus(kernels::KvPack(p, kCuda), "KvPack"); });
  const double bytes = static_cast<double>(kv.bytes() + k_pe.bytes() + k.bytes() + v.bytes());
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  char shape[128];
  std::snprintf(shape, sizeof(shape), "tokens=%d h=%d 128+64 / 128", tokens, heads);
  res.Add("kv_pack", shape, ms, 0.0, gbs, gbs / ceil.copy_gbs, "copy BW");
}

void BenchMlaPrefill(int batch, int heads, int extend, int prefix, kernels::LatentKernel kernel,
                     const Ceilings& ceil, Results& res) {
  std::vector<int> lk(batch, extend + prefix);
  PagedCache pc(lk, 31 + heads);
  const int64_t rows = static_cast<int64_t>(batch) * extend * heads;
  DeviceArray q(rows * kWidth * 2), out(rows * kRank * 2), lse(rows * 4), cu_q((batch + 1) * 4);
  FillRandom(q, 33);
  std::vector<int32_t> cu(batch + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b * extend;
  Upload(cu_q, cu);
  kernels::MlaParams p;
  p.dtype = DType::kBF16; p.batch = batch; p.num_heads = heads; p.kv_lora_rank = kRank; p.rope_dim = kRope;
  p.q = q.get(); p.q_token_stride = static_cast<int64_t>(heads) * kWidth; p.q_head_stride = kWidth;
  p.kv_cache = pc.cache->get(); p.num_pages = pc.num_pages; p.block_table = pc.d_table->get<int32_t>();
  p.max_pages_per_seq = pc.max_pages; p.cu_seqlens_q = cu_q.get<int32_t>();
  p.seqlens_k = pc.d_seqlens->get<int32_t>(); p.max_seqlen_q = extend; p.max_seqlen_k = extend + prefix;
  p.out = out.get(); p.lse = lse.get<float>(); p.softmax_scale = 1.0f / std::sqrt(192.0f);
  p.kernel = kernel;
  const double ms = MedianMs([&] { CheckStatus(kernels::MlaPrefill(p, kCuda), "MlaPrefill"); }, 2, 10);
  // Query i of a chunk sees prefix + i + 1 keys.
  const double visible = batch * (static_cast<double>(extend) * prefix + extend * (extend + 1) / 2.0);
  const double flops = 2.0 * heads * visible * (kWidth + kRank);
  const double tflops = flops / (ms * 1e-3) / 1e12;
  char shape[128];
  std::snprintf(shape, sizeof(shape), "b=%d h=%d extend=%d prefix=%d", batch, heads, extend, prefix);
  res.Add(LatentFamily("mla_prefill", kernel), shape, ms, tflops, 0.0, tflops / ceil.gemm_tflops, "GEMM");
}

}  // namespace
}  // namespace mlaserve::bench

int main(int argc, char** argv) {
  using namespace mlaserve::bench;
  std::string json_path;
  std::string only;
  bool quick = false;
  int mha_repeat = 1, mha_min_seqlen = 0;
  int mha_shape[3] = {0, 0, 0};  // --mha-shape dqk,heads,seqlen: only that mha_prefill shape (0: all)
  int mla_heads = 0;  // 0: the mla_decode rows at 128 and 16 heads
  bool mla_sq2_all = false;  // the s_q 2 rows at every batch and s_k, not only b 128, 8k
  int mla_shape[3] = {0, 0, 0};  // --mla-shape b,s_q,s_k: only that mla_decode shape (0: all)
  bool mla_auto_only = false;     // --mla-auto-only: only the kAuto rows (and a kAuto warm-up)
  bool latent_mmasync = true;
  bool mla_segment_trace = false;  // --mla-segment-trace: only the latent kernel's timeline
  std::string small_shapes, small_variants;
  std::vector<MhaRow> mha_rows(std::begin(kAllMhaRows), std::end(kAllMhaRows));
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--no-mmasync") == 0) latent_mmasync = false;
    else if (std::strcmp(argv[i], "--small-shapes") == 0 && i + 1 < argc) small_shapes = argv[++i];
    else if (std::strcmp(argv[i], "--small-variants") == 0 && i + 1 < argc) small_variants = argv[++i];
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) mha_repeat = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--mha-min-seqlen") == 0 && i + 1 < argc) mha_min_seqlen = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--mha-no-lse") == 0) g_mha_no_lse = true;
    else if (std::strcmp(argv[i], "--mla-heads") == 0 && i + 1 < argc) mla_heads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--mla-sq2-all") == 0) mla_sq2_all = true;
    else if (std::strcmp(argv[i], "--mla-auto-only") == 0) mla_auto_only = true;
    else if (std::strcmp(argv[i], "--mla-segment-trace") == 0) mla_segment_trace = true;
    else if (std::strcmp(argv[i], "--mla-trace") == 0 && i + 1 < argc) g_mla_trace_calls = std::max(0, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--mla-shape") == 0 && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d,%d", &mla_shape[0], &mla_shape[1], &mla_shape[2]) != 3) {
        std::fprintf(stderr, "--mla-shape: '%s' is not b,s_q,s_k\n", argv[i]);
        return 1;
      }
    }
    else if (std::strcmp(argv[i], "--mha-shape") == 0 && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d,%d", &mha_shape[0], &mha_shape[1], &mha_shape[2]) != 3) {
        std::fprintf(stderr, "--mha-shape: '%s' is not dqk,heads,seqlen\n", argv[i]);
        return 1;
      }
    }
    else if (std::strcmp(argv[i], "--mha-rows") == 0 && i + 1 < argc) {
      mha_rows.clear();
      for (const std::string& name : std::vector<std::string>(absl::StrSplit(argv[++i], ','))) {
        bool known = false;
        for (MhaRow row : kAllMhaRows) {
          if (name == MhaRowName(row)) mha_rows.push_back(row), known = true;
        }
        if (!known) {
          std::fprintf(stderr, "--mha-rows: %s is not a row name\n", name.c_str());
          return 1;
        }
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--quick] [--no-mmasync] [--small-shapes S] [--small-variants V] [--only KERNEL] "
                   "[--repeat N] [--mha-min-seqlen S] [--mha-shape dqk,heads,seqlen] [--mha-no-lse] [--mla-heads 128|16] [--mla-segment-trace] "
                   "[--mha-rows mha_prefill,mha_prefill_alt,mha_prefill_single,mha_prefill_launched,mha_prefill_direct,"
                   "mha_prefill_flat,mha_prefill_dealt,mha_prefill_lazy,mha_prefill_ahead,"
                   "mha_prefill_mmasync,mha_prefill_cudnn]\n",
                   argv[0]);
      return 1;
    }
  }
  const auto wanted = [&](const char* family) { return only.empty() || only == family; };
  const auto heads_wanted = [&](int heads) { return mla_heads == 0 || mla_heads == heads; };
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (mla_segment_trace) {
    std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    return BenchMlaSegmentTrace(prop.multiProcessorCount);
  }
  Ceilings ceil;
  ceil.copy_gbs = MeasureCopyGBs();
  ceil.gemm_tflops = MeasureGemmTflops();
  std::printf("device %s, %d SMs; device copy %.0f GB/s (read+write); cuBLAS bf16 GEMM %.0f TFLOP/s\n",
              prop.name, prop.multiProcessorCount, ceil.copy_gbs, ceil.gemm_tflops);
  Results res;
  // Both latent kernels in the same run: the wgmma one (the default on Hopper) and mma.sync.
  using mlaserve::kernels::LatentKernel;
  using mlaserve::kernels::MlaDecodeSchedule;
  std::vector<LatentKernel> latent_kernels = {LatentKernel::kAuto};
  if (latent_mmasync) latent_kernels.push_back(LatentKernel::kMmaSync);
  const bool one_shape = mla_shape[0] > 0;  // --mla-shape
  // The first rows ran 5-15% slow and unsteady after the ceilings' GEMM (b 64 4k at 128 heads:
  // 400-485 TFLOP/s between identical launches, the same shape later in the run 475; H200,
  // 2026-12-01): the first row's shape twice, unprinted, before any row is timed (with --mla-shape,
  // that shape: without, its first row ran 447 and 511 TFLOP/s where its later rows ran 475 and 568
  // at b 64, 4k and 8k).
  if (wanted("mla_decode") && !quick) {
    Results warm_up;
    warm_up.print = false;
    for (int r = 0; r < 2; ++r)
      BenchMlaDecode(one_shape ? mla_shape[0] : 64, heads_wanted(128) ? 128 : 16, one_shape ? mla_shape[1] : 1,
                     one_shape ? mla_shape[2] : 4096, prop.multiProcessorCount, LatentKernel::kAuto,
                     mla_auto_only ? MlaDecodeSchedule::kAuto : MlaDecodeSchedule::kBalanced, false, ceil, warm_up);
  }
  for (int heads : {128, 16})
    for (int qpr : {1, 2})
      for (int batch : {64, 128})
        for (int sk : {4096, 8192, 16384}) {
          if ((quick && (sk != 8192 || batch != 128)) || !wanted("mla_decode") || !heads_wanted(heads)) continue;
          if (one_shape && (batch != mla_shape[0] || qpr != mla_shape[1] || sk != mla_shape[2])) continue;
          if (qpr == 2 && !mla_sq2_all && !one_shape && (batch != 128 || sk != 8192)) continue;
          for (LatentKernel k : latent_kernels)
            BenchMlaDecode(batch, heads, qpr, sk, prop.multiProcessorCount, k, MlaDecodeSchedule::kAuto,
                           false, ceil, res);
          if (mla_auto_only) continue;
          // The wgmma kernel's two ways of cutting the keys, each forced (kAuto picks one).
          if (!quick) {
            for (MlaDecodeSchedule sched : {MlaDecodeSchedule::kChunks, MlaDecodeSchedule::kBalanced})
              BenchMlaDecode(batch, heads, qpr, sk, prop.multiProcessorCount, LatentKernel::kAuto, sched,
                             false, ceil, res);
          }
          // The chunks as the GPU starts them without the longest-first order (same call, baseline).
          BenchMlaDecode(batch, heads, qpr, sk, prop.multiProcessorCount, LatentKernel::kAuto,
                         MlaDecodeSchedule::kChunks, false, ceil, res, /*grid_order=*/true);
        }
  if (wanted("mla_decode_small")) {
    BenchMlaDecodeSmall(prop.multiProcessorCount, quick, small_shapes, small_variants, ceil, res);
  }
  // Small batches (the engine's decode steps at batch 1-4), as FlashMLA is timed on them
  // (tools/device/flashmla_baseline.sh --batch 1 4): the kAuto plan and each schedule.
  for (int heads : {128, 16})
    for (int batch : {1, 4})
      for (int sk : {1024, 4096}) {
        if ((quick && sk != 4096) || !wanted("mla_decode") || !heads_wanted(heads) || one_shape) continue;
        for (MlaDecodeSchedule sched : {MlaDecodeSchedule::kAuto, MlaDecodeSchedule::kChunks, MlaDecodeSchedule::kBalanced})
          BenchMlaDecode(batch, heads, 1, sk, prop.multiProcessorCount, LatentKernel::kAuto, sched, false, ceil, res);
      }
  // Mixed lengths: one long request among short ones, each schedule.
  for (int heads : {128, 16}) {
    if (quick || !wanted("mla_decode") || !heads_wanted(heads) || one_shape) continue;
    for (MlaDecodeSchedule sched : {MlaDecodeSchedule::kAuto, MlaDecodeSchedule::kChunks, MlaDecodeSchedule::kBalanced})
      BenchMlaDecode(64, heads, 1, 4096, prop.multiProcessorCount, LatentKernel::kAuto, sched, true, ceil, res);
  }
  const auto cudnn = mlaserve::kernels::MhaPrefillCudnnVersion();
  std::printf("mha_prefill_cudnn: %s\n",
              cudnn.ok() ? cudnn->c_str() : std::string(cudnn.status().message()).c_str());
  std::printf("mha_prefill (ours) on this device: %s\n",
              mlaserve::kernels::mha_sm90::Available() ? "the wgmma kernel (d 192/128, 128/128)"
                                                       : "the mma.sync kernel (no sm_90a kernel here)");
  // DeepSeek's dims at 1k-16k, 128/128 at 4k-16k; 16k tokens per call.
  for (int dqk : {192, 128})
    for (int heads : {128, 16})
      for (int seqlen : {1024, 2048, 4096, 8192, 16384}) {
        if ((quick && seqlen != 8192) || !wanted("mha_prefill")) continue;
        if (dqk == 128 && seqlen < 4096) continue;
        if (seqlen < mha_min_seqlen) continue;
        if (mha_shape[0] != 0 && (dqk != mha_shape[0] || heads != mha_shape[1] || seqlen != mha_shape[2])) continue;
        std::vector<MhaRow> rows;
        for (MhaRow row : mha_rows) {
          if (row == MhaRow::kCudnn && !cudnn.ok()) continue;
          // The schedule variants at 4k-16k only.
          if ((row == MhaRow::kWgmmaAlt || row == MhaRow::kWgmmaSingle || row == MhaRow::kWgmmaFlat ||
               row == MhaRow::kWgmmaDealt) &&
              seqlen < 4096) {
            continue;
          }
          // qk 192 has no staged output (its launcher writes directly): the row would time the default.
          if (row == MhaRow::kWgmmaDirect && dqk != 128) continue;
          rows.push_back(row);
        }
        BenchMhaPrefill(heads, std::vector<int>(16384 / seqlen, seqlen), false, dqk, rows, mha_repeat, ceil, res);
      }
  // Ragged batches (as a server's prefill batches are): 16k tokens in lengths uniform in
  // [mean / 4, 7 mean / 4], DeepSeek's dims; our default (longest first, by ticket), the flat
  // order, dealt by round, one CTA an item, cuDNN.
  for (int heads : {128, 16})
    for (int mean : {1024, 2048, 4096}) {
      if (quick || !wanted("mha_prefill") || mean < mha_min_seqlen || mha_shape[0] != 0) continue;
      std::vector<MhaRow> rows;
      for (MhaRow row : mha_rows) {
        if (row == MhaRow::kCudnn && !cudnn.ok()) continue;
        if (row == MhaRow::kOurs || row == MhaRow::kWgmmaFlat || row == MhaRow::kWgmmaDealt ||
            row == MhaRow::kWgmmaLazy || row == MhaRow::kWgmmaLaunched || row == MhaRow::kCudnn) {
          rows.push_back(row);
        }
      }
      BenchMhaPrefill(heads, RaggedLengths(mean, 16384), true, 192, rows, mha_repeat, ceil, res);
    }
  if (only == "sampling") BenchSampling(ceil, res);
  if (wanted("kv_pack")) BenchKvPack(16384, 128, ceil, res);
  if (wanted("mla_prefill")) {
    for (LatentKernel k : latent_kernels) {
      BenchMlaPrefill(4, 128, 1024, 3072, k, ceil, res);
      BenchMlaPrefill(4, 16, 1024, 3072, k, ceil, res);
    }
  }
  if (!json_path.empty()) {
    nlohmann::json doc = {{"device", prop.name}, {"sms", prop.multiProcessorCount},
                          {"copy_gbs", ceil.copy_gbs}, {"gemm_tflops", ceil.gemm_tflops},
                          {"cudnn", cudnn.ok() ? *cudnn : std::string(cudnn.status().message())},
                          {"results", res.rows}};
    std::ofstream(json_path) << doc.dump(2) << "\n";
  }
  return 0;
}
