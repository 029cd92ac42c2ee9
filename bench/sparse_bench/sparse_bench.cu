// mlaserve-sparse-bench: speed of the DeepSeek-V3.2 sparse kernels (sparse_decode, sparse_fwd,
// indexer) against the ceilings measured in the same run (device copy bandwidth, cuBLAS bf16
// GEMM rate). FLOPs are counted as FlashMLA counts them:
//   sparse attention: 2 * s_q_total * h * topk * (576 + 512)
//   indexer scores  : 2 * h * d * sum over queries of the visible keys (top-k not counted)
// Bytes (the floor's other term): each gathered cache row read once per query token (656 B fp8,
// 1152 B bf16), q read and out written once; indexer: the key cache once per query's visible
// keys is NOT assumed (it stays in L2); counted as keys once + q + the f32 score rows.
// "of roofline" = max(flops / GEMM rate, bytes / copy bandwidth) / measured time.
// Usage: mlaserve-sparse-bench [--json FILE] [--quick]
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include "bench/kernel_bench/bench_util.cuh"
#include "kernels/common/page.h"
#include "kernels/indexer/api.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/api.h"

namespace mlaserve::bench {
namespace {

using kernels::Backend;
using kernels::DType;
using kernels::KernelContext;
using kernels::kPageSize;

constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
const KernelContext kCuda{Backend::kCuda, nullptr, 0};

// Pages for `batch` requests of `lk` tokens, randomly permuted; the latent cache in bf16 or
// in the fp8 layout (random bytes quantized from random bf16 rows by the kv_fp8 writer).
struct SparseSetup {
  int batch, lq, lk, heads, topk;
  bool fp8;
  int max_pages = 0, num_pages = 0;
  std::unique_ptr<DeviceArray> cache, table, seqlens, cu_q, indices, q, out, lse;
  kernels::SparseMlaParams p;

  SparseSetup(int batch_, int lq_, int lk_, int heads_, int topk_, bool fp8_, uint64_t seed)
      : batch(batch_), lq(lq_), lk(lk_), heads(heads_), topk(topk_), fp8(fp8_) {
    max_pages = kernels::PagesFor(lk);
    num_pages = batch * max_pages;
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    table = std::make_unique<DeviceArray>(perm.size() * 4);
    Upload(*table, perm);
    const size_t slots = static_cast<size_t>(num_pages) * kPageSize;
    if (fp8) {
      cache = std::make_unique<DeviceArray>(slots * kernels::kFp8LatentBytes);
      // Quantize in chunks of bf16 rows through the writer (as the engine would).
      const size_t chunk = 1 << 18;
      DeviceArray rows(chunk * kWidth * 2), slot_ids(chunk * 8);
      for (size_t s0 = 0; s0 < slots; s0 += chunk) {
        const size_t n = std::min(chunk, slots - s0);
        FillRandom(rows, seed + s0);
        std::vector<int64_t> ids(n);
        std::iota(ids.begin(), ids.end(), static_cast<int64_t>(s0));
        Upload(slot_ids, ids);
        kernels::Fp8CacheWriteParams w;
        w.dtype = DType::kBF16; w.num_tokens = static_cast<int>(n); w.src = rows.get(); w.src_stride = kWidth;
        w.slot_mapping = slot_ids.get<int64_t>(); w.cache = cache->get(); w.num_pages = num_pages;
        CheckStatus(kernels::Fp8CacheWrite(w, kCuda), "fp8 cache write");
      }
      BENCH_CHECK(cudaDeviceSynchronize());
    } else {
      cache = std::make_unique<DeviceArray>(slots * kWidth * 2);
      FillRandom(*cache, seed + 1);
    }
    seqlens = std::make_unique<DeviceArray>(batch * 4);
    Upload(*seqlens, std::vector<int32_t>(batch, lk));
    std::vector<int32_t> cu(batch + 1);
    for (int b = 0; b <= batch; ++b) cu[b] = b * lq;
    cu_q = std::make_unique<DeviceArray>(cu.size() * 4);
    Upload(*cu_q, cu);
    // topk distinct random positions per query token (a partial Fisher-Yates per row).
    const size_t total_q = static_cast<size_t>(batch) * lq;
    std::vector<int32_t> idx(total_q * topk);
    std::vector<int32_t> pool(lk);
    std::iota(pool.begin(), pool.end(), 0);
    for (size_t t = 0; t < total_q; ++t) {
      for (int j = 0; j < topk; ++j) {
        const int r = j + static_cast<int>(rng() % static_cast<uint64_t>(lk - j));
        std::swap(pool[j], pool[r]);
        idx[t * topk + j] = pool[j];
      }
    }
    indices = std::make_unique<DeviceArray>(idx.size() * 4);
    Upload(*indices, idx);
    q = std::make_unique<DeviceArray>(total_q * heads * kWidth * 2);
    FillRandom(*q, seed + 2);
    out = std::make_unique<DeviceArray>(total_q * heads * kRank * 2);
    lse = std::make_unique<DeviceArray>(total_q * heads * 4);
    p.dtype = DType::kBF16;
    p.cache_dtype = fp8 ? DType::kFP8E4M3 : DType::kBF16;
    p.batch = batch; p.num_heads = heads; p.kv_lora_rank = kRank; p.rope_dim = kRope; p.top_k = topk;
    p.q = q->get(); p.q_token_stride = static_cast<int64_t>(heads) * kWidth; p.q_head_stride = kWidth;
    p.kv_cache = cache->get(); p.num_pages = num_pages; p.block_table = table->get<int32_t>();
    p.max_pages_per_seq = max_pages; p.cu_seqlens_q = cu_q->get<int32_t>(); p.seqlens_k = seqlens->get<int32_t>();
    p.indices = indices->get<int32_t>(); p.out = out->get(); p.lse = lse->get<float>();
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kWidth));
    p.max_seqlen_q = lq;
  }
};

void Report(Results& res, const std::string& kernel, const std::string& shape, double ms, double flops,
            double bytes, const Ceilings& ceil) {
  const double t_flop = flops / (ceil.gemm_tflops * 1e12) * 1e3, t_mem = bytes / (ceil.copy_gbs * 1e9) * 1e3;
  const bool compute = t_flop >= t_mem;
  res.Add(kernel, shape, ms, flops / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e9,
          std::max(t_flop, t_mem) / ms, compute ? "gemm" : "copy");
}

void BenchSparse(bool decode, int batch, int lq, int lk, bool fp8, const Ceilings& ceil, Results& res, int reps) {
  constexpr int kHeads = 128, kTopK = 2048;
  SparseSetup s(batch, lq, lk, kHeads, kTopK, fp8, 1000 + batch * 7 + lq * 3 + lk);
  auto call = [&] {
    CheckStatus(decode ? kernels::SparseDecode(s.p, kCuda) : kernels::SparseFwd(s.p, kCuda),
                decode ? "sparse_decode" : "sparse_fwd");
  };
  const double ms = MedianMs(call, 2, reps);
  const double total_q = static_cast<double>(batch) * lq;
  const double flops = 2.0 * total_q * kHeads * kTopK * (kWidth + kRank);
  const double row_bytes = fp8 ? kernels::kFp8LatentBytes : kWidth * 2.0;
  const double bytes = total_q * kTopK * row_bytes + total_q * kHeads * (kWidth + kRank) * 2.0;
  char shape[128];
  std::snprintf(shape, sizeof(shape), "%s b=%d s_q=%d s_k=%d h=128 topk=2048", fp8 ? "fp8" : "bf16", batch, lq, lk);
  Report(res, decode ? "sparse_decode" : "sparse_fwd", shape, ms, flops, bytes, ceil);
}

void BenchIndexer(int batch, int lq, int lk, bool fp8, const Ceilings& ceil, Results& res, int reps) {
  constexpr int kHeads = 64, kDim = 128, kTopK = 2048;
  const int max_pages = kernels::PagesFor(lk), num_pages = batch * max_pages;
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(lk + batch));
  DeviceArray table(perm.size() * 4);
  Upload(table, perm);
  const size_t slots = static_cast<size_t>(num_pages) * kPageSize;
  std::unique_ptr<DeviceArray> kc;
  if (fp8) {
    kc = std::make_unique<DeviceArray>(static_cast<size_t>(num_pages) * kernels::IndexKFp8PageBytes(kDim));
    DeviceArray rows(slots * kDim * 2), ids(slots * 8);
    FillRandom(rows, 77);
    std::vector<int64_t> all(slots);
    std::iota(all.begin(), all.end(), 0);
    Upload(ids, all);
    kernels::Fp8CacheWriteParams w;
    w.kind = kernels::Fp8CacheKind::kIndexK; w.dtype = DType::kBF16; w.num_tokens = static_cast<int>(slots);
    w.head_dim = kDim; w.src = rows.get(); w.src_stride = kDim; w.slot_mapping = ids.get<int64_t>();
    w.cache = kc->get(); w.num_pages = num_pages;
    CheckStatus(kernels::Fp8CacheWrite(w, kCuda), "fp8 index key write");
    BENCH_CHECK(cudaDeviceSynchronize());
  } else {
    kc = std::make_unique<DeviceArray>(slots * kDim * 2);
    FillRandom(*kc, 78);
  }
  const size_t total_q = static_cast<size_t>(batch) * lq;
  DeviceArray q(total_q * kHeads * kDim * 2), w(total_q * kHeads * 4), out(total_q * kTopK * 4);
  FillRandom(q, 79);
  std::vector<float> wh(total_q * kHeads);
  std::mt19937 rng(5);
  for (auto& x : wh) x = std::uniform_real_distribution<float>(-0.2f, 1.0f)(rng);
  Upload(w, wh);
  std::vector<int32_t> cu(batch + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b * lq;
  DeviceArray d_cu(cu.size() * 4), d_lk(batch * 4);
  Upload(d_cu, cu);
  Upload(d_lk, std::vector<int32_t>(batch, lk));
  kernels::IndexerParams p;
  p.dtype = DType::kBF16; p.k_cache_dtype = fp8 ? DType::kFP8E4M3 : DType::kBF16;
  p.batch = batch; p.num_heads = kHeads; p.head_dim = kDim; p.top_k = kTopK;
  p.q = q.get(); p.weights = w.get<float>(); p.k_cache = kc->get(); p.num_pages = num_pages;
  p.block_table = table.get<int32_t>(); p.max_pages_per_seq = max_pages;
  p.cu_seqlens_q = d_cu.get<int32_t>(); p.seqlens_k = d_lk.get<int32_t>();
  p.max_seqlen_q = lq; p.max_seqlen_k = lk; p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  p.topk_indices = out.get<int32_t>();
  DeviceArray ws(kernels::IndexerWorkspaceBytes(p));
  p.workspace = ws.get();
  const double ms = MedianMs([&] { CheckStatus(kernels::Indexer(p, kCuda), "indexer"); }, 2, reps);
  double visible = 0;  // causal: query i of a request sees lk - lq + i + 1 keys
  for (int i = 0; i < lq; ++i) visible += lk - lq + i + 1;
  visible *= batch;
  const double flops = 2.0 * kHeads * kDim * visible;
  const double bytes = static_cast<double>(slots) * (fp8 ? kDim + 4 : kDim * 2) + total_q * kHeads * kDim * 2.0 +
                       visible * 4.0 * 2 /* score rows written, read back */ + total_q * kTopK * 4.0;
  char shape[128];
  std::snprintf(shape, sizeof(shape), "%s b=%d s_q=%d s_k=%d H=64 D=128 topk=2048", fp8 ? "fp8" : "bf16", batch, lq, lk);
  Report(res, "indexer", shape, ms, flops, bytes, ceil);
}

}  // namespace
}  // namespace mlaserve::bench

int main(int argc, char** argv) {
  using namespace mlaserve::bench;
  std::string json_path;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  Ceilings ceil;
  ceil.copy_gbs = MeasureCopyGBs();
  ceil.gemm_tflops = MeasureGemmTflops();
  std::printf("device %s, %d SMs: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", prop.name, prop.multiProcessorCount,
              ceil.copy_gbs, ceil.gemm_tflops);
  Results res;
  const int reps = quick ? 5 : 10;
  for (int b : {64, 128})
    for (int sq : {1, 2})
      for (bool fp8 : {true, false}) BenchSparse(true, b, sq, 32768, fp8, ceil, res, reps);
  for (int sk : quick ? std::vector<int>{8192, 32768} : std::vector<int>{8192, 32768, 65536, 131072})
    BenchSparse(false, 1, 4096, sk, false, ceil, res, reps);
  BenchSparse(false, 1, 4096, 32768, true, ceil, res, reps);
  BenchIndexer(1, 4096, 8192, false, ceil, res, reps);
  BenchIndexer(1, 4096, 32768, false, ceil, res, reps);
  BenchIndexer(1, 4096, 32768, true, ceil, res, reps);
  BenchIndexer(128, 1, 32768, false, ceil, res, reps);
  BenchIndexer(128, 1, 32768, true, ceil, res, reps);
  if (!json_path.empty()) {
    nlohmann::json doc{{"device", prop.name}, {"copy_gbs", ceil.copy_gbs}, {"gemm_tflops", ceil.gemm_tflops},
                       {"results", res.rows}};
    std::ofstream(json_path) << doc.dump(2) << "\n";
  }
  return 0;
}
