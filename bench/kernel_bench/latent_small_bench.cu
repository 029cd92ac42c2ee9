// mla_decode at small batch (the engine's batch 1-8 decode steps): microseconds per call and the
// fraction of copy bandwidth, for each way of cutting the keys, timed as the engine runs it: a
// CUDA graph of kCalls calls (so host launch cost is not in the time), each call over its own
// copy of the cache pages (so the pages come from memory, not from L2, as in a decode step whose
// layers each read their own cache; up to 2 GB of copies) through the same block table, the
// graph's first node building the batch's metadata (schedule or chunk order) that every call
// reads, as a decode step's layers share it (MlaDecodeBuildMetadata).
//   auto          PlanMlaDecode's pick (kAuto)
//   auto_pow2     the same, planned as a decode graph plans: for the context rounded up to a
//                 power of two pages (its later chunks are empty)
//   legacy        the chunk plan before 2026-11-25's second session (splits of at least 4
//                 pages, 1 page of per-CTA cost): the baseline of this table
//   pages=N       chunks of N pages, forced
//   balanced      the balanced schedule, forced; balanced_nopf without the next segment's
//                 loads issued during the current one (MLASERVE_MLA_PREFETCH=0); balanced_pc=N
//                 with a request piece costed at N pages (MLASERVE_MLA_PIECE_COST)
//   auto_gridorder  the kAuto plan with its chunk CTAs in grid order (MLASERVE_MLA_ORDER=0)
//   lf=N          (batch >= 16) chunks of N pages, N 4-128 ("all": no split), longest first, forced
//   auto_last     kAuto's plan again, after every other variant (the drift over a shape's rows)
// MLASERVE_PDL=0 in the environment times the same without programmatic dependent launch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/kernel_bench/bench_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/page.h"
#include "kernels/common/pdl.cuh"
#include "kernels/mla_decode/api.h"

namespace mlaserve::bench {

void RunLaunchProbes(int sms);  // launch_probe.cu

namespace {

using kernels::kPageSize;

constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kCalls = 20;  // calls per graph, each over its own copy of the pages

// A chunk plan of `pps` pages per split over `pages` pages, in grid order or longest first.
kernels::MlaDecodePlan ChunkPlan(int batch, int heads, int pages, int pps, bool longest_first = false) {
  kernels::MlaDecodePlan plan;
  plan.longest_first = longest_first;
  if (pps < pages) {
    plan.num_splits = (pages + pps - 1) / pps;
    plan.chunk_tokens = pps * kPageSize;
  }
  plan.workspace_bytes = kernels::MlaDecodeChunkWorkspaceBytes(batch, heads, kRank, plan.num_splits, longest_first);
  if (longest_first) plan.metadata_bytes = kernels::MlaDecodeChunkOrderBytes(batch, plan.num_splits);
  return plan;
}

// The legacy chunk plan (PlanMlaDecode before this session's change), for the baseline row.
kernels::MlaDecodePlan LegacyPlan(int batch, int heads, int max_k, int sms) {
  const int64_t rows = heads;
  const int64_t units = static_cast<int64_t>(batch) * ((rows + 63) / 64);
  const int pages = kernels::PagesFor(max_k);
  const int max_splits = std::clamp(pages / 4, 1, 64);
  int best = pages;
  int64_t best_cost = -1;
  for (int want = 1; want <= max_splits; ++want) {
    const int pps = (pages + want - 1) / want;
    const int splits = (pages + pps - 1) / pps;
    const int64_t cost = (units * splits + sms - 1) / sms * (pps + 1);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best = pps;
  }
  return ChunkPlan(batch, heads, pages, best);
}

struct Variant {
  std::string name;
  kernels::MlaDecodePlan plan;
  bool prefetch = true;
  bool order = true;  // false: MLASERVE_MLA_ORDER=0
  int piece_cost = 0;  // > 0: MLASERVE_MLA_PIECE_COST (the balanced schedule's cost of a piece)
};

void BenchShape(int batch, int heads, int ctx, int sms, const std::vector<std::string>& only_variants,
                const Ceilings& ceil, Results& res, std::vector<std::string>& table) {
  std::mt19937 rng(batch * 977 + heads * 13 + ctx);
  std::vector<int> lk(batch, ctx);
  if (batch > 1) {
    for (auto& l : lk) l = ctx * 3 / 4 + static_cast<int>(rng() % (ctx / 2 + 1));  // +-25%
  }
  const int max_k = *std::max_element(lk.begin(), lk.end());
  const int max_pages = kernels::PagesFor(max_k);
  int pages_per_copy = 0;
  for (int l : lk) pages_per_copy += kernels::PagesFor(l);
  // Copies of the pages: one per call, at most 2 GB of them (larger shapes do not fit in L2 anyway).
  const double copy_bytes = 2.0 * pages_per_copy * kPageSize * kWidth;
  const int copies = std::clamp(static_cast<int>(2e9 / copy_bytes), 1, kCalls);
  // Call c reads copy c % copies, as a layer its own cache, through the one block table (a random
  // permutation of a copy's pages) that the metadata was built from.
  std::vector<int32_t> perm(pages_per_copy);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> block_table(static_cast<size_t>(batch) * max_pages, 0);
  int next = 0;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < kernels::PagesFor(lk[b]); ++i) {
      block_table[static_cast<size_t>(b) * max_pages + i] = perm[next++];
    }
  const size_t copy_elems = static_cast<size_t>(pages_per_copy) * kPageSize * kWidth;
  DeviceArray cache(size_t{2} * copies * copy_elems), d_table(block_table.size() * 4);
  FillRandom(cache, rng());
  Upload(d_table, block_table);
  DeviceArray seqlens(batch * 4), cu_q((batch + 1) * 4);
  Upload(seqlens, std::vector<int32_t>(lk.begin(), lk.end()));
  std::vector<int32_t> cu(batch + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b;
  Upload(cu_q, cu);
  const int64_t rows = static_cast<int64_t>(batch) * heads;
  DeviceArray q(rows * kWidth * 2), out(rows * kRank * 2), lse(rows * 4);
  FillRandom(q, 5);

  std::vector<Variant> variants;
  auto plan_for = [&](int k, kernels::MlaDecodeSchedule schedule) {
    const int64_t total_k = std::accumulate(lk.begin(), lk.end(), int64_t{0});
    const double dram = kernels::cuda::CurrentDeviceDramBytesPerSmClock();  // kAuto reads it
    auto plan = kernels::PlanMlaDecode({batch, heads, 1, kRank, kRope, k, sms, schedule, total_k, dram});
    CheckStatus(plan.status(), "PlanMlaDecode");
    return *plan;
  };
  int pow2 = 1;
  while (pow2 < max_pages) pow2 *= 2;
  variants.push_back({"auto", plan_for(max_k, kernels::MlaDecodeSchedule::kAuto)});
  // kAuto's plan with the chunk length picked on the device from the lengths forced off and on
  // (MLASERVE_MLA_CHUNK_PICK, read per plan; on applies only where the pick's condition holds).
  for (const char* pick : {"0", "1"}) {
    const char* before = std::getenv("MLASERVE_MLA_CHUNK_PICK");
    const std::string saved = before != nullptr ? before : "";
    setenv("MLASERVE_MLA_CHUNK_PICK", pick, 1);
    variants.push_back({std::string(pick[0] == '0' ? "auto_nopick" : "auto_pick"),
                        plan_for(max_k, kernels::MlaDecodeSchedule::kAuto)});
    if (before != nullptr) {
      setenv("MLASERVE_MLA_CHUNK_PICK", saved.c_str(), 1);
    } else {
      unsetenv("MLASERVE_MLA_CHUNK_PICK");
    }
  }
  variants.push_back({"auto_pow2", plan_for(pow2 * kPageSize, kernels::MlaDecodeSchedule::kAuto)});
  variants.push_back({"legacy", LegacyPlan(batch, heads, max_k, sms)});
  for (int pps : {1, 2, 4, 8, 16}) {
    if (pps >= max_pages || (max_pages + pps - 1) / pps > 128) continue;
    variants.push_back({"pages=" + std::to_string(pps), ChunkPlan(batch, heads, max_pages, pps)});
  }
  variants.push_back({"balanced", plan_for(max_k, kernels::MlaDecodeSchedule::kBalanced)});
  variants.push_back({"balanced_nopf", variants.back().plan, false});
  for (int cost : {1, 3, 4, 5, 6, 8}) {
    variants.push_back({"balanced_pc=" + std::to_string(cost), variants.back().plan, true, true, cost});
  }
  variants.push_back({"auto_gridorder", variants.front().plan, true, false});
  if (batch >= 16) {
    for (int pps : {4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128}) {
      if (pps >= max_pages || static_cast<int64_t>(batch) * ((max_pages + pps - 1) / pps) > kernels::kMlaDecodeMaxOrderedChunks) {
        continue;
      }
      variants.push_back({"lf=" + std::to_string(pps), ChunkPlan(batch, heads, max_pages, pps, true)});
    }
    variants.push_back({"lf=all", ChunkPlan(batch, heads, max_pages, max_pages, true)});
  }
  // kAuto's plan again, timed last: the drift over a shape's variants (clocks, heat).
  variants.push_back({"auto_last", variants.front().plan});

  const double sum_k = std::accumulate(lk.begin(), lk.end(), 0.0);
  const double bytes = sum_k * kWidth * 2 + rows * kWidth * 2.0 + rows * kRank * 2.0;
  char head[64];
  std::snprintf(head, sizeof(head), "b=%d h=%d s_k=%-5d", batch, heads, ctx);
  std::string line = head;
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Variant& v : variants) {
    if (!only_variants.empty() && std::find(only_variants.begin(), only_variants.end(), v.name) == only_variants.end()) {
      continue;
    }
    setenv("MLASERVE_MLA_PREFETCH", v.prefetch ? "1" : "0", 1);
    setenv("MLASERVE_MLA_ORDER", v.order ? "1" : "0", 1);
    if (v.piece_cost > 0) {
      setenv("MLASERVE_MLA_PIECE_COST", std::to_string(v.piece_cost).c_str(), 1);
    } else {
      unsetenv("MLASERVE_MLA_PIECE_COST");
    }
    DeviceArray workspace(v.plan.workspace_bytes), metadata(v.plan.metadata_bytes);
    kernels::MlaParams p;
    p.dtype = kernels::DType::kBF16; p.batch = batch; p.num_heads = heads; p.kv_lora_rank = kRank;
    p.rope_dim = kRope; p.q = q.get(); p.q_token_stride = static_cast<int64_t>(heads) * kWidth;
    p.q_head_stride = kWidth; p.num_pages = pages_per_copy; p.block_table = d_table.get<int32_t>();
    p.max_pages_per_seq = max_pages; p.cu_seqlens_q = cu_q.get<int32_t>(); p.seqlens_k = seqlens.get<int32_t>();
    p.max_seqlen_q = 1; p.max_seqlen_k = max_k; p.out = out.get(); p.lse = lse.get<float>();
    p.softmax_scale = 1.0f / std::sqrt(192.0f);
    const kernels::KernelContext ctx_cuda{kernels::Backend::kCuda, stream, 0};
    const void* shared = v.plan.metadata_bytes > 0 ? metadata.get() : nullptr;
    auto call = [&](int c) {
      p.kv_cache = cache.get<uint16_t>() + (c % copies) * copy_elems;
      if (c == 0) {
        CheckStatus(kernels::MlaDecodeBuildMetadata(p, v.plan, metadata.get(), ctx_cuda), "MlaDecodeBuildMetadata");
      }
      CheckStatus(kernels::MlaDecode(p, v.plan, workspace.get(), ctx_cuda, nullptr, shared), "MlaDecode");
    };
    const double t = GraphMicrosPerCall(stream, kCalls, call);
    const double gbs = bytes / (t * 1e-6) / 1e9;
    std::string desc = v.plan.num_parts > 0 ? "parts=" + std::to_string(v.plan.num_parts)
                                            : std::to_string(v.plan.num_splits) + "x" +
                                                  std::to_string(v.plan.chunk_tokens / kPageSize) +
                                                  (v.plan.longest_first && v.order ? " lf" : "");
    if (v.plan.chunk_pick_sms > 0 && v.order) {  // the length the order kernel picked (built in the graph)
      desc += " pick=" + std::to_string(PickedChunkPages(metadata.get(), batch, v.plan));
    }
    char shape[160];
    std::snprintf(shape, sizeof(shape), "b=%d h=%d s_k~%d %s(%s)", batch, heads, ctx, v.name.c_str(), desc.c_str());
    res.Add("mla_decode_small", shape, t * 1e-3, 2.0 * heads * sum_k * (kWidth + kRank) / (t * 1e-6) / 1e12, gbs,
            gbs / ceil.copy_gbs, "copy BW");
    char cell[160];
    std::snprintf(cell, sizeof(cell), " | %s(%s) %.1f", v.name.c_str(), desc.c_str(), t);
    line += cell;
  }
  unsetenv("MLASERVE_MLA_PREFETCH");
  unsetenv("MLASERVE_MLA_ORDER");
  unsetenv("MLASERVE_MLA_PIECE_COST");
  BENCH_CHECK(cudaStreamDestroy(stream));
  table.push_back(line);
}

}  // namespace

// Every small-batch shape (b 1, 2, 4, 8; h 16, 128; s_k 512 .. 8k), then the table of
// microseconds per call by variant. shapes ("b,h,s_k;..."), variants ("auto,pages=4,..."): only
// these (empty: all; a shape list also skips the launch probes), e.g. for a profiler run.
void BenchMlaDecodeSmall(int sms, bool quick, const std::string& shapes, const std::string& variants,
                         const Ceilings& ceil, Results& res) {
  std::printf("mla_decode_small: CUDA graphs of %d calls, each over its own pages; PDL %s\n", kCalls,
              kernels::cuda::PdlEnabled() ? "on" : "off (MLASERVE_PDL=0)");
  std::vector<std::string> only_variants;
  for (size_t at = 0; at < variants.size();) {
    const size_t end = std::min(variants.find(',', at), variants.size());
    only_variants.push_back(variants.substr(at, end - at));
    at = end + 1;
  }
  std::vector<std::string> table;
  if (!shapes.empty()) {
    for (size_t at = 0; at < shapes.size();) {
      const size_t end = std::min(shapes.find(';', at), shapes.size());
      int b = 0, h = 0, ctx = 0;
      if (std::sscanf(shapes.substr(at, end - at).c_str(), "%d,%d,%d", &b, &h, &ctx) != 3 || b <= 0 || h <= 0 ||
          ctx <= 0) {
        std::fprintf(stderr, "--small-shapes: '%s' is not b,h,s_k\n", shapes.substr(at, end - at).c_str());
        std::exit(1);
      }
      BenchShape(b, h, ctx, sms, only_variants, ceil, res, table);
      at = end + 1;
    }
  } else {
    RunLaunchProbes(sms);
    for (int heads : {16, 128})
      for (int batch : {1, 2, 4, 8})
        for (int ctx : {512, 1024, 2048, 4096, 8192}) {
          if (quick && (batch == 2 || ctx == 512 || ctx == 2048)) continue;
          BenchShape(batch, heads, ctx, sms, only_variants, ceil, res, table);
        }
  }
  std::printf("mla_decode_small, us per call by variant:\n");
  for (const auto& line : table) std::printf("  %s\n", line.c_str());
}

}  // namespace mlaserve::bench
