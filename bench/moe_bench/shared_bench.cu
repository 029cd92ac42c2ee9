// mlaserve-moe-bench --shape shared: the shared experts' gate_up at prefill sizes, as the
// layer runs it on stacked weights (cuBLAS GEMM writing [rows, 2I] + the SiluAndMul pass) and
// fused on interleaved weights (MoeSharedGateUp: the Hopper grouped GEMM as one group with
// SiLU * up in its epilogue), for every tile configuration with a fused epilogue. Each form
// is captured in a CUDA graph and its replays timed (median of 25 after 3 warm-ups).
#include "bench/moe_bench/shared_bench.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/activation/api.h"
#include "kernels/gemm/api.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::bench {
namespace {


namespace mk = mlaserve::kernels;

#define SHARED_CHECK(expr)                                                                          \
  do {                                                                                             \
    const cudaError_t err_ = (expr);                                                               \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

// (moe_bench.cu's helpers live in its translation unit; these are the few this file needs.)
__global__ void FillRandom(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t v = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    v ^= v >> 31;
    v *= 0xBF58476D1CE4E5B9ull;
    v ^= v >> 29;
    p[i] = __float2bfloat16((2.0f * static_cast<float>(v >> 40) / static_cast<float>(1ull << 24) - 1.0f) * scale);
  }
}

class Buffer {
 public:
  explicit Buffer(size_t bytes) : bytes_(bytes) { SHARED_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16))); }
  ~Buffer() { cudaFree(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

constexpr int kWarm = 3;

std::vector<int> g_skip;  // variants the sweep leaves out
bool Skip(int v) { return std::find(g_skip.begin(), g_skip.end(), v) != g_skip.end(); }
constexpr int kReps = 25;

// Median graph-replay time of `launch` (queued on `s`), or -1 when it fails or cannot be captured.
float GraphReplayMs(const std::function<bool(cudaStream_t)>& launch, cudaStream_t s) {
  if (!launch(s)) return -1.0f;  // first call outside the capture (cuBLASLt's algorithm choice)
  SHARED_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  SHARED_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const bool ok = launch(s);
  const bool captured = cudaStreamEndCapture(s, &graph) == cudaSuccess;
  cudaGetLastError();
  cudaGraphExec_t exec = nullptr;
  if (!ok || !captured || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    if (captured) cudaGraphDestroy(graph);
    return -1.0f;
  }
  cudaGraphDestroy(graph);
  cudaEvent_t a, b;
  SHARED_CHECK(cudaEventCreate(&a));
  SHARED_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < kWarm + kReps; ++i) {
    SHARED_CHECK(cudaEventRecord(a, s));
    SHARED_CHECK(cudaGraphLaunch(exec, s));
    SHARED_CHECK(cudaEventRecord(b, s));
    SHARED_CHECK(cudaEventSynchronize(b));
    float ms;
    SHARED_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= kWarm) t.push_back(ms);
  }
  cudaGraphExecDestroy(exec);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string Name(int variant) {
  return variant < 0 ? std::string("auto") : "v" + std::to_string(variant) + " " + mk::moe_cuda::Sm90VariantName(variant);
}

void BenchShape(const char* model, int hidden, int inter, const std::vector<int>& rows_list, cudaStream_t s) {
  const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  Buffer x(static_cast<size_t>(max_rows) * hidden * 2), stacked(size_t{2} * inter * hidden * 2);
  Buffer interleaved(size_t{2} * inter * hidden * 2), product(static_cast<size_t>(max_rows) * 2 * inter * 2);
  Buffer act(static_cast<size_t>(max_rows) * inter * 2), ws(mk::MoeSharedGateUpWorkspaceBytes());
  FillRandom<<<2048, 256>>>(static_cast<__nv_bfloat16*>(x.get()), static_cast<int64_t>(max_rows) * hidden, 11, 1.0f);
  FillRandom<<<2048, 256>>>(static_cast<__nv_bfloat16*>(stacked.get()), int64_t{2} * inter * hidden, 12, 0.02f);
  SHARED_CHECK(cudaGetLastError());
  SHARED_CHECK(cudaMemcpy(interleaved.get(), stacked.get(), stacked.bytes(), cudaMemcpyDeviceToDevice));
  mk::MoePrepareParams prep;
  prep.num_experts = 1; prep.hidden = hidden; prep.inter = inter; prep.gate_up = interleaved.get();
  prep.layout = mk::MoeGateUpLayout::kInterleaved8;
  if (const auto layout = mk::MoePrepareExpertWeights(prep, {mk::Backend::kCuda, nullptr}); !layout.ok()) {
    std::fprintf(stderr, "moe prepare (shared): %s\n", std::string(layout.status().message()).c_str());
    std::exit(2);
  }
  std::printf("\n=== %s shared experts: hidden=%d, inter=%d (gate_up [%d, %d]) ===\n", model, hidden, inter,
              2 * inter, hidden);
  for (const int rows : rows_list) {
    const double flops = 2.0 * rows * 2 * inter * hidden;
    // Stacked: cuBLAS product, then SiluAndMul.
    mk::GemmParams g;
    g.dtype = mk::DType::kBF16;
    g.m = rows; g.n = 2 * inter; g.k = hidden;
    g.a = x.get(); g.lda = hidden; g.b = stacked.get(); g.ldb = hidden; g.c = product.get(); g.ldc = 2 * inter;
    mk::SiluAndMulParams sp;
    sp.dtype = mk::DType::kBF16; sp.rows = rows; sp.dim = inter;
    sp.x = product.get(); sp.x_stride = 2 * inter; sp.out = act.get(); sp.out_stride = inter;
    auto on = [](cudaStream_t st) { return mk::KernelContext{mk::Backend::kCuda, st}; };
    const float gemm_ms = GraphReplayMs([&](cudaStream_t st) { return mk::Gemm(g, on(st)).ok(); }, s);
    const float pair_ms = GraphReplayMs(
        [&](cudaStream_t st) { return mk::Gemm(g, on(st)).ok() && mk::SiluAndMul(sp, on(st)).ok(); }, s);
    std::printf("rows=%5d  cuBLAS gate_up %.4f ms (%.1f TFLOP/s) + SiluAndMul = %.4f ms\n", rows, gemm_ms,
                flops / (gemm_ms * 1e9), pair_ms);
    mk::MoeSharedGateUpParams p;
    p.rows = rows; p.hidden = hidden; p.inter = inter;
    p.x = x.get(); p.gate_up = interleaved.get(); p.act = act.get();
    p.workspace = ws.get(); p.workspace_bytes = ws.bytes();
    if (!mk::MoeSharedGateUpRuns(p, mk::Backend::kCuda)) {
      std::printf("           fused: not taken at this size or device\n");
      continue;
    }
    for (int v = -1; v < mk::moe_cuda::kSm90Variants; ++v) {
      // (Variants 7-11 run the fused epilogue of their configuration, measured under 1-6.)
      const bool twin = v >= mk::moe_cuda::kSm90FirstDirectVariant && v < mk::moe_cuda::kSm90OwnVariant;
      if (v >= 0 && (Skip(v) || !mk::moe_cuda::Sm90HasFusedSiluMul(v) || twin)) continue;
      p.sm90_variant = v;
      const float ms = GraphReplayMs([&](cudaStream_t st) { return mk::MoeSharedGateUp(p, on(st)).ok(); }, s);
      if (ms < 0) {
        std::printf("           fused %-22s failed\n", Name(v).c_str());
        continue;
      }
      std::printf("           fused %-22s %.4f ms (%.1f TFLOP/s; %+.1f%% vs GEMM + SiluAndMul)\n", Name(v).c_str(),
                  ms, flops / (ms * 1e9), 100.0 * (ms - pair_ms) / pair_ms);
    }
  }
}

}  // namespace

void BenchSharedExperts(const std::vector<int>& rows, const std::vector<int>& skip_variants) {
  g_skip = skip_variants;
  cudaStream_t s;
  SHARED_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  BenchShape("V2-Lite", 2048, 2 * 1408, rows, s);
  BenchShape("V3", 7168, 2048, rows, s);
  cudaStreamDestroy(s);
}

}  // namespace mlaserve::bench
