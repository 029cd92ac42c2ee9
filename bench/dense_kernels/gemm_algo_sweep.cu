// mlaserve-gemm-algo-sweep: how far cuBLASLt's first heuristic answer -- the one algorithm the
// engine's GEMMs take per shape (kernels/gemm/gemm.cu, MakePlan) -- is from the fastest of its
// next candidates, on the prefill-sized projections of DeepSeek-V2-Lite and -V3 (issue 12's
// "dense path: the algorithm chosen once per shape and cached"). The operands are laid out as the
// engine lays them out (C[m, n] = A[m, k] * B[n, k]^T, bf16 in and out, f32 accumulation, the
// engine's 32 MiB workspace), filled with hashed values in [-0.05, 0.05) (bench_util.cuh's
// FillRandomBf16; never zeros: the tensor cores' power, and so the H100's clock under its power
// cap, depends on the data).
//
// For each shape the heuristic is asked for up to --candidates algorithms; every candidate is
// timed (CUDA events over --reps back-to-back calls, median of --rounds rounds) with the first
// answer timed again between every two candidates, so a clock that drifts under the power cap
// moves both alike: each candidate's ratio is to the median of the first answer's timings beside
// it. Each candidate's output is digested once, to tell whether it gives the first answer's bits
// (only such a candidate could be chosen per process without breaking run-to-run determinism
// across processes). Prints one table a shape: the candidates in heuristic order with their
// configuration (algorithm id, tile, stages, split-K, reduction scheme, CTA swizzling, custom
// option, cluster shape and inner shape ids: what cublasLtMatmulAlgoInit and the config
// attributes rebuild), TFLOP/s, their time against the first answer's, and whether their bits
// are the first answer's.
//   usage: mlaserve-gemm-algo-sweep [--tokens 2048,4096,8192] [--model v2lite|v3|both]
//          [--candidates 8] [--reps 20] [--rounds 3]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench/kernel_bench/bench_util.cuh"

namespace {

using mlaserve::bench::DeviceArray;
using mlaserve::bench::FillRandomBf16;

#define SWEEP_LT(x)                                                                              \
  do {                                                                                           \
    const cublasStatus_t s_ = (x);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d %s: cuBLASLt status %d\n", __FILE__, __LINE__, #x, int(s_));   \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

constexpr size_t kWorkspaceBytes = 32u << 20;  // the engine's (kernels/gemm/gemm.cu)

// An order-free 64-bit digest of `n` bf16 values (each value's bits and index mixed, then added):
// two outputs digest alike when they hold the same bits (up to a 2^-64 chance).
__global__ void DigestBf16(const __nv_bfloat16* p, size_t n, unsigned long long* out) {
  unsigned long long sum = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned long long h = (static_cast<unsigned long long>(__bfloat16_as_ushort(p[i])) << 40) ^ i;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    sum += h;
  }
  atomicAdd(out, sum);
}

struct Shape {
  std::string name;
  int m, n, k;
};

// The prefill-sized dense projections of one layer at `t` tokens (the MHA form of a fresh
// prompt, as the prefill worker runs it); n and k as the engine's weights are stored.
std::vector<Shape> ShapesOf(const std::string& model, int t) {
  std::vector<Shape> s;
  const std::string at = " @" + std::to_string(t);
  if (model == "v2lite") {
    // hidden 2048, 16 heads of qk 192 / v 128, kv_lora 512 + rope 64, no q LoRA, 2 shared experts
    // of 1408 (the shared MLP 2816 wide).
    s.push_back({"v2lite q_proj | kv_a_proj" + at, t, 16 * 192 + 576, 2048});
    s.push_back({"v2lite kv_b_proj" + at, t, 16 * 256, 512});
    s.push_back({"v2lite o_proj" + at, t, 2048, 16 * 128});
    s.push_back({"v2lite shared down" + at, t, 2048, 2816});
  } else {
    // hidden 7168, 128 heads, q LoRA 1536, kv_lora 512 + rope 64, one shared expert of 2048.
    s.push_back({"v3 q_a_proj | kv_a_proj" + at, t, 1536 + 576, 7168});
    s.push_back({"v3 q_b_proj" + at, t, 128 * 192, 1536});
    s.push_back({"v3 kv_b_proj" + at, t, 128 * 256, 512});
    s.push_back({"v3 o_proj" + at, t, 7168, 128 * 128});
    s.push_back({"v3 shared down" + at, t, 7168, 2048});
  }
  return s;
}

struct Gemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
};

// The engine's plan (MakePlan, b_transposed): cuBLASLt's "A" is our B [n, k] row-major, i.e.
// k x n column-major transposed; "B" is our A [m, k] row-major (k x m column-major); C [m, n].
Gemm MakeGemm(const Shape& s) {
  Gemm g;
  SWEEP_LT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  SWEEP_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  SWEEP_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  SWEEP_LT(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, s.k, s.n, s.k));
  SWEEP_LT(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, s.k, s.m, s.k));
  SWEEP_LT(cublasLtMatrixLayoutCreate(&g.c, CUDA_R_16BF, s.n, s.m, s.n));
  return g;
}

void FreeGemm(Gemm& g) {
  cublasLtMatrixLayoutDestroy(g.a);
  cublasLtMatrixLayoutDestroy(g.b);
  cublasLtMatrixLayoutDestroy(g.c);
  cublasLtMatmulDescDestroy(g.desc);
}

std::string AlgoText(const cublasLtMatmulAlgo_t& algo, size_t workspace) {
  int32_t id = 0, tile = 0, stages = 0, splitk = 0, scheme = 0;
  uint32_t swizzle = 0, custom = 0;
  uint16_t cluster = 0, inner = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof(custom), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &inner, sizeof(inner), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme), &w);
  std::ostringstream o;
  o << "algo " << id << " tile " << tile << " stages " << stages << " splitk " << splitk << " red " << scheme
    << " swizzle " << swizzle << " custom " << custom << " cluster " << cluster << " inner " << inner << " ws "
    << (workspace >> 10) << "K";
  return o.str();
}

int ArgInt(int argc, char** argv, const char* flag, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}
std::string ArgStr(int argc, char** argv, const char* flag, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int candidates = std::clamp(ArgInt(argc, argv, "--candidates", 8), 1, 32);
  const int reps = std::max(1, ArgInt(argc, argv, "--reps", 20));
  const int rounds = std::max(1, ArgInt(argc, argv, "--rounds", 3));
  const std::string model = ArgStr(argc, argv, "--model", "both");
  std::vector<int> tokens;
  {
    std::stringstream ss(ArgStr(argc, argv, "--tokens", "2048,4096,8192"));
    for (std::string t; std::getline(ss, t, ',');) tokens.push_back(std::atoi(t.c_str()));
  }
  std::vector<Shape> shapes;
  for (const char* m : {"v2lite", "v3"}) {
    if (model != "both" && model != m) continue;
    for (int t : tokens) {
      for (const Shape& s : ShapesOf(m, t)) shapes.push_back(s);
    }
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("mlaserve-gemm-algo-sweep on %s: %d candidates a shape, %d calls a timing, %d rounds\n\n", prop.name,
              candidates, reps, rounds);
  size_t most_a = 0, most_b = 0, most_c = 0;
  for (const Shape& s : shapes) {
    most_a = std::max(most_a, size_t(s.m) * s.k);
    most_b = std::max(most_b, size_t(s.n) * s.k);
    most_c = std::max(most_c, size_t(s.m) * s.n);
  }
  const DeviceArray a_buf(most_a * 2), b_buf(most_b * 2), c_buf(most_c * 2), workspace_buf(kWorkspaceBytes);
  const auto *a = a_buf.get<__nv_bfloat16>(), *b = b_buf.get<__nv_bfloat16>();
  auto* c = c_buf.get<__nv_bfloat16>();
  void* workspace = workspace_buf.get();
  FillRandomBf16<<<1024, 256>>>(a_buf.get<__nv_bfloat16>(), static_cast<int64_t>(most_a), 1u, 0.05f);
  FillRandomBf16<<<1024, 256>>>(b_buf.get<__nv_bfloat16>(), static_cast<int64_t>(most_b), 2u, 0.05f);
  BENCH_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreate(&stream));
  cublasLtHandle_t handle;
  SWEEP_LT(cublasLtCreate(&handle));
  const DeviceArray digest_buf(sizeof(unsigned long long));
  auto* digest = digest_buf.get<unsigned long long>();
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  const float alpha = 1.0f, beta = 0.0f;

  for (const Shape& s : shapes) {
    Gemm g = MakeGemm(s);
    cublasLtMatmulPreference_t pref;
    SWEEP_LT(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    SWEEP_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    std::vector<cublasLtMatmulHeuristicResult_t> found(candidates);
    int count = 0;
    SWEEP_LT(cublasLtMatmulAlgoGetHeuristic(handle, g.desc, g.a, g.b, g.c, g.c, pref, candidates, found.data(),
                                            &count));
    cublasLtMatmulPreferenceDestroy(pref);
    const double flop = 2.0 * s.m * s.n * s.k;
    // One call of candidate i.
    auto call = [&](int i) {
      return cublasLtMatmul(handle, g.desc, &alpha, b, g.a, a, g.b, &beta, c, g.c, c, g.c, &found[i].algo,
                            workspace, kWorkspaceBytes, stream);
    };
    // Milliseconds a call over `reps` back-to-back calls of candidate i, or -1 where it fails to run.
    auto time = [&](int i) -> double {
      if (call(i) != CUBLAS_STATUS_SUCCESS) return -1.0;  // warm-up, and a check that it runs
      BENCH_CHECK(cudaEventRecord(e0, stream));
      for (int r = 0; r < reps; ++r) call(i);
      BENCH_CHECK(cudaEventRecord(e1, stream));
      BENCH_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      return ms / reps;
    };
    // Each candidate's output digested once (after one call): whether it gives the first answer's
    // bits, i.e. whether choosing it would keep every process's results the same.
    std::vector<unsigned long long> digests(count, 0);
    for (int i = 0; i < count; ++i) {
      BENCH_CHECK(cudaMemsetAsync(c, 0xff, size_t(s.m) * s.n * 2, stream));
      if (call(i) != CUBLAS_STATUS_SUCCESS) continue;
      BENCH_CHECK(cudaMemsetAsync(digest, 0, sizeof(unsigned long long), stream));
      DigestBf16<<<528, 256, 0, stream>>>(c, size_t(s.m) * s.n, digest);
      BENCH_CHECK(cudaMemcpyAsync(&digests[i], digest, sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream));
      BENCH_CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<std::vector<double>> ms(count), first_beside(count);
    for (int round = 0; round < rounds; ++round) {
      for (int i = 0; i < count; ++i) {
        // The first answer just before each candidate (and candidate 0 is the first answer).
        const double f = time(0);
        const double t = i == 0 ? f : time(i);
        ms[i].push_back(t);
        first_beside[i].push_back(f);
      }
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? -1.0 : v[v.size() / 2];
    };
    std::printf("### %s: m %d n %d k %d (%.1f GFLOP)\n\n", s.name.c_str(), s.m, s.n, s.k, flop * 1e-9);
    std::printf("| # | algorithm | ms | TFLOP/s | the first answer beside it, ms | vs the first | the first's bits |\n");
    std::printf("|---:|---|---:|---:|---:|---:|---|\n");
    double best = 1e30, best_same = 1e30;
    int best_i = 0, best_same_i = 0;
    for (int i = 0; i < count; ++i) {
      const double t = median(ms[i]), f = median(first_beside[i]);
      if (t <= 0) {
        std::printf("| %d | %s | failed | | | |\n", i, AlgoText(found[i].algo, found[i].workspaceSize).c_str());
        continue;
      }
      const double ratio = t / f;
      if (ratio < best) best = ratio, best_i = i;
      std::printf("| %d | %s | %.4f | %.1f | %.4f | %.3f | %s |\n", i,
                  AlgoText(found[i].algo, found[i].workspaceSize).c_str(), t, flop / t * 1e-9, f, ratio,
                  digests[i] == digests[0] ? "same" : "differ");
      if (digests[i] == digests[0] && ratio < best_same) best_same = ratio, best_same_i = i;
    }
    std::printf("\nfastest: #%d at %.3fx the first answer's time; fastest with the first's bits: #%d at %.3fx\n\n",
                best_i, best, best_same_i, best_same);
    FreeGemm(g);
  }
  cublasLtDestroy(handle);
  return 0;
}
