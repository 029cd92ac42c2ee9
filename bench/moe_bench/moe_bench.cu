// mlaserve-moe-bench: the routed experts' CUDA paths (kStream, kSm90, kTiled and what kAuto
// picks) on DeepSeek-V2-Lite and V3 expert shapes, from decode (1 token) to prefill (4096),
// next to two baselines measured in the same run:
//   - cuBLAS's dense bf16 GEMM rate on the same total rows (the two products of A = T * top_k
//     rows, as if every row went to one expert): the compute roofline the grouped GEMM aims at;
//   - device copy bandwidth (a 2 GiB device-to-device copy, bytes read + written): the floor
//     for reading the touched experts' weights, which bounds decode.
// Routing is uniform random top-k per token; four routings rotate so that repeated runs do not
// find the same experts' weights in L2. Each call is captured in a CUDA graph (as the engine's
// decode steps are; a path that cannot be captured fails here) and the replays are timed:
// medians of CUDA-event timings after warm-up, free of host launch overhead.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm/api.h"
#include "kernels/moe/api.h"

namespace mk = mlaserve::kernels;

namespace {

#define CHECK_CUDA(x)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

__global__ void FillBf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) * scale);
  }
}

void* Bf16(size_t n, float scale) {
  void* p;
  CHECK_CUDA(cudaMalloc(&p, n * 2));
  FillBf16<<<2048, 256>>>(static_cast<__nv_bfloat16*>(p), n, static_cast<uint32_t>(n * 7 + 1), scale);
  return p;
}

float MedianMs(const std::function<bool(int)>& fn, cudaStream_t stream = nullptr, int warm = 3, int reps = 25) {
  for (int i = 0; i < warm; ++i) if (!fn(i)) return -1.0f;
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    if (!fn(i)) return -1.0f;
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double CopyBandwidthGBs() {
  const size_t bytes = size_t(2) << 30;
  void *src, *dst;
  CHECK_CUDA(cudaMalloc(&src, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  CHECK_CUDA(cudaMemset(src, 1, bytes));
  const float ms = MedianMs([&](int) { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess; });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * bytes / ms / 1e6;
}

struct Shape { const char* model; int H, I, E, k; };

const char* PathName(mk::MoeExpertsPath p) {
  switch (p) {
    case mk::MoeExpertsPath::kAuto: return "auto";
    case mk::MoeExpertsPath::kStream: return "stream";
    case mk::MoeExpertsPath::kSm90: return "sm90";
    case mk::MoeExpertsPath::kTiled: return "tiled";
  }
  return "?";
}

void BenchShape(const Shape& s, const std::vector<int>& tokens, double copy_gbs) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int H = s.H, I = s.I, E = s.E, k = s.k;
  void* gu = Bf16(size_t(E) * 2 * I * H, 0.02f);
  void* dn = Bf16(size_t(E) * H * I, 0.02f);
  const int max_t = *std::max_element(tokens.begin(), tokens.end());
  void* x = Bf16(size_t(max_t) * H, 1.0f);
  void* out;
  CHECK_CUDA(cudaMalloc(&out, size_t(max_t) * H * 2));
  float* w;
  CHECK_CUDA(cudaMalloc(&w, size_t(max_t) * k * 4));
  std::vector<float> ones(size_t(max_t) * k, 1.0f / k);
  CHECK_CUDA(cudaMemcpy(w, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
  // Dense baseline operands: A = max_t * k rows.
  const size_t max_a = size_t(max_t) * k;
  void* da = Bf16(max_a * std::max(H, I), 1.0f);
  void* dc;
  CHECK_CUDA(cudaMalloc(&dc, max_a * std::max(2 * I, H) * 2));
  for (int T : tokens) {
    constexpr int kRoutings = 4;
    std::mt19937 rng(1234 + T);
    std::vector<int32_t*> ids(kRoutings);
    std::vector<int> active(kRoutings);
    std::vector<int> perm(E);
    for (int r = 0; r < kRoutings; ++r) {
      std::vector<int32_t> h(size_t(T) * k);
      std::vector<char> used(E, 0);
      for (int t = 0; t < T; ++t) {
        for (int e = 0; e < E; ++e) perm[e] = e;
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int j = 0; j < k; ++j) { h[size_t(t) * k + j] = perm[j]; used[perm[j]] = 1; }
      }
      active[r] = static_cast<int>(std::count(used.begin(), used.end(), 1));
      CHECK_CUDA(cudaMalloc(&ids[r], h.size() * 4));
      CHECK_CUDA(cudaMemcpy(ids[r], h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    }
    double mean_active = 0;
    for (int a : active) mean_active += a;
    mean_active /= kRoutings;
    mk::MoeExpertsParams p;
    p.dtype = mk::DType::kBF16; p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
    p.x = x; p.topk_weights = w; p.gate_up = gu; p.down = dn; p.out = out;
    p.workspace_bytes = mk::MoeExpertsWorkspaceBytes(p);
    CHECK_CUDA(cudaMalloc(&p.workspace, p.workspace_bytes));
    const int A = T * k;
    // cuBLAS dense rate on A rows: [A, H] x [H, 2I] and [A, I] x [I, H].
    mk::GemmParams g1, g2;
    g1.dtype = g2.dtype = mk::DType::kBF16;
    g1.m = A; g1.n = 2 * I; g1.k = H; g1.a = da; g1.lda = H; g1.b = gu; g1.ldb = H; g1.c = dc; g1.ldc = 2 * I;
    g2.m = A; g2.n = H; g2.k = I; g2.a = da; g2.lda = I; g2.b = dn; g2.ldb = I; g2.c = dc; g2.ldc = H;
    auto dense = [&](int) {
      return mk::Gemm(g1, {mk::Backend::kCuda, stream}).ok() && mk::Gemm(g2, {mk::Backend::kCuda, stream}).ok();
    };
    dense(0);  // cuBLASLt picks and caches its algorithm outside the capture
    CHECK_CUDA(cudaStreamSynchronize(stream));
    float dense_ms;
    {  // as a graph too, so both sides are timed without host overhead
      cudaGraph_t graph;
      cudaGraphExec_t exec = nullptr;
      CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const bool ok = dense(0);
      const bool captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
      cudaGetLastError();
      if (ok && captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
        dense_ms = MedianMs([&](int) { return cudaGraphLaunch(exec, stream) == cudaSuccess; }, stream);
        cudaGraphExecDestroy(exec);
      } else {
        dense_ms = MedianMs(dense, stream);
      }
      if (captured) cudaGraphDestroy(graph);
    }
    const double flops = 2.0 * A * 3.0 * I * H;
    const double weight_bytes = mean_active * 3.0 * I * H * 2;
    const double dense_tflops = flops / dense_ms / 1e9;
    struct Variant { mk::MoeExpertsPath path; int sm90; };
    std::vector<Variant> variants = {{mk::MoeExpertsPath::kAuto, -1}, {mk::MoeExpertsPath::kStream, -1}};
    for (int v = 0; v < 4; ++v) variants.push_back({mk::MoeExpertsPath::kSm90, v});
    variants.push_back({mk::MoeExpertsPath::kTiled, -1});
    for (const Variant& var : variants) {
      const mk::MoeExpertsPath path = var.path;
      if (path == mk::MoeExpertsPath::kStream && T > 256) continue;  // passes of 16: not its regime
      p.path = path;
      p.sm90_variant = var.sm90;
      std::string err;
      std::vector<cudaGraphExec_t> graphs(kRoutings, nullptr);
      for (int r = 0; r < kRoutings && err.empty(); ++r) {
        p.topk_ids = ids[r];
        cudaGraph_t graph;
        CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        const auto st = mk::MoeExperts(p, {mk::Backend::kCuda, stream});
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        if (!st.ok()) err = std::string(st.message());
        else if (end != cudaSuccess) err = std::string("capture: ") + cudaGetErrorString(end);
        else CHECK_CUDA(cudaGraphInstantiate(&graphs[r], graph, 0));
        if (end == cudaSuccess) cudaGraphDestroy(graph);
        cudaGetLastError();
      }
      const float ms = !err.empty() ? -1.0f : MedianMs([&](int i) {
        return cudaGraphLaunch(graphs[i % kRoutings], stream) == cudaSuccess;
      }, stream);
      for (auto g : graphs) if (g) cudaGraphExecDestroy(g);
      char name[32];
      std::snprintf(name, sizeof name, var.sm90 >= 0 ? "%s/v%d" : "%s", PathName(path), var.sm90);
      if (ms < 0) {
        std::printf("%-8s T=%-5d %-9s failed: %s\n", s.model, T, name, err.c_str());
        continue;
      }
      const double tflops = flops / ms / 1e9;
      const double gbs = weight_bytes / ms / 1e6;
      // Roofline: the larger of the compute floor (cuBLAS's dense rate) and the memory floor
      // (touched weights at copy bandwidth); the fraction is floor / time.
      const double floor_ms = std::max(flops / (dense_tflops * 1e9), weight_bytes / (copy_gbs * 1e6));
      std::printf("%-8s T=%-5d %-9s %8.3f ms %6.1f TFLOP/s (%5.1f%% of cuBLAS %5.1f) %5.0f GB/s (%5.1f%% of copy) roofline %5.1f%%\n",
                  s.model, T, name, ms, tflops, 100.0 * tflops / dense_tflops, dense_tflops, gbs,
                  100.0 * gbs / copy_gbs, 100.0 * floor_ms / ms);
    }
    for (auto* d : ids) cudaFree(d);
    cudaFree(p.workspace);
  }
  cudaFree(gu); cudaFree(dn); cudaFree(x); cudaFree(out); cudaFree(w); cudaFree(da); cudaFree(dc);
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double copy = CopyBandwidthGBs();
  std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy);
  std::printf("columns: model, tokens, path, median time, rate (share of cuBLAS's dense rate on the same rows),\n"
              "         bandwidth over the touched experts' weights (share of copy bandwidth)\n");
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  BenchShape({"V2-Lite", 2048, 1408, 64, 6},
             quick ? std::vector<int>{1, 16, 4096} : std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 512, 2048, 4096}, copy);
  BenchShape({"V3", 7168, 2048, 256, 8},
             quick ? std::vector<int>{1, 4096} : std::vector<int>{1, 4, 16, 32, 128, 512, 2048, 4096}, copy);
  return 0;
}
