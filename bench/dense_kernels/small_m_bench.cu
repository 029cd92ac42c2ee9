// mlaserve-dense-bench, decode section: the small-M GEMM (kernels/gemm/gemm_small_m.h) against
// cuBLASLt in the same run, on the projections of a DeepSeek-V2-Lite and a V3 decode step at
// 1-16 tokens, with the weight bytes per second as a fraction of device copy bandwidth (a 1 GiB
// device-to-device copy, bytes read + written, measured in the same run); then RMSNorm at
// decode row counts.
//
// Each timing is a CUDA graph of `kLaunches` back-to-back calls (as a decode step replays
// them: launch gaps included, host launch cost not), replayed kReplays times; the median replay
// over kLaunches. Consecutive calls read different copies of the weight (as many copies as
// make >= kRotateBytes), so no call finds its weight in L2.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/dense_kernels/small_m_bench.h"
#include "bench/kernel_bench/bench_util.cuh"
#include "kernels/gemm/api.h"
#include "kernels/gemm/gemm_small_m.h"
#include "kernels/norm/api.h"

namespace mlaserve::bench {
namespace {

namespace mk = mlaserve::kernels;

constexpr int kLaunches = 24;
constexpr int kReplays = 7;
constexpr size_t kRotateBytes = size_t{256} << 20;  // > 5x the H100/H200 L2
constexpr int kMaxCopies = 64;

struct Projection {
  const char* model;
  const char* name;
  int n, k, batch;
  bool f32_out;
  mk::GemmEpilogue epilogue;
  int c2_begin;  // > 0: a second output (stacked projections)
};

// Median milliseconds of one call, from graphs of kLaunches calls of call(i).
template <typename Call>
double GraphMsPerCall(cudaStream_t stream, Call&& call) {
  for (int i = 0; i < 2; ++i) call(i);  // first calls: cuBLASLt plans, outside the capture
  BENCH_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunches; ++i) call(i);
  BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  BENCH_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < kReplays; ++r) {
    BENCH_CHECK(cudaEventRecord(a, stream));
    BENCH_CHECK(cudaGraphLaunch(exec, stream));
    BENCH_CHECK(cudaEventRecord(b, stream));
    BENCH_CHECK(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / kLaunches);
  }
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  BENCH_CHECK(cudaGraphExecDestroy(exec));
  BENCH_CHECK(cudaGraphDestroy(graph));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void BenchProjection(const Projection& pr, const std::vector<int>& tokens, double copy_gbs,
                     cudaStream_t stream) {
  const size_t weight_bytes = size_t{2} * pr.n * pr.k * pr.batch;
  const int copies = static_cast<int>(std::clamp<size_t>(kRotateBytes / weight_bytes + 1, 1, kMaxCopies));
  std::vector<DeviceArray*> weights;
  for (int i = 0; i < copies; ++i) {
    weights.push_back(new DeviceArray(weight_bytes));
    FillRandomBf16<<<1024, 256>>>(weights.back()->get<__nv_bfloat16>(),
                                  static_cast<int64_t>(weight_bytes / 2), 11 + i, 0.05f);
  }
  const int max_m = *std::max_element(tokens.begin(), tokens.end());
  const bool silu = pr.epilogue == mk::GemmEpilogue::kSiluMul;
  const int out_cols = silu ? pr.n / 2 : pr.n;
  DeviceArray x(size_t{2} * max_m * pr.k * pr.batch);
  DeviceArray c(size_t{4} * max_m * out_cols * pr.batch);
  FillRandom(x, 5);
  BENCH_CHECK(cudaDeviceSynchronize());
  for (int m : tokens) {
    mk::GemmParams p;
    p.dtype = mk::DType::kBF16;
    p.m = m;
    p.n = pr.n;
    p.k = pr.k;
    p.batch = pr.batch;
    p.a = x.get();
    p.lda = pr.k;
    p.stride_a = int64_t{m} * pr.k;
    p.ldb = pr.k;
    p.stride_b = int64_t{pr.n} * pr.k;
    p.c = c.get();
    p.ldc = out_cols;
    p.stride_c = int64_t{m} * out_cols;
    p.c_f32 = pr.f32_out;
    p.epilogue = pr.epilogue;
    if (pr.c2_begin > 0) {
      p.ldc = pr.c2_begin;
      p.c2 = static_cast<char*>(c.get()) + size_t{2} * m * pr.c2_begin;
      p.c2_begin = pr.c2_begin;
      p.ldc2 = pr.n - pr.c2_begin;
    }
    double ms[2] = {-1, -1};  // cuBLASLt, small-M
    for (int path = 0; path < 2; ++path) {
      if (path == 0 && silu) continue;  // cuBLASLt has no SiLU epilogue: the fused form only
      mk::GemmParams q = p;
      q.path = path == 0 ? mk::GemmPath::kCublasLt : mk::GemmPath::kSmallM;
      bool ok = true;
      ms[path] = GraphMsPerCall(stream, [&](int i) {
        q.b = weights[i % copies]->get();
        ok &= mk::Gemm(q, {mk::Backend::kCuda, stream}).ok();
      });
      if (!ok) ms[path] = -1;
    }
    // The small-M kernel's launch choices (gemm_small_m.h, SmallMOptions): no weight traffic
    // before the PDL wait (neither L2 prefetch nor early loads), the L2 prefetch whatever the
    // weight's size, and the K split capped at 1 and 2 CTAs.
    const mk::gemm_cuda::SmallMOptions variants[] = {{8, false, 0, false},
                                                     {8, true, int64_t{1} << 40, true},
                                                     {1, true}, {2, true}};
    double var_ms[4] = {-1, -1, -1, -1};
    for (int v = 0; v < 4; ++v) {
      mk::GemmParams q = p;
      q.b = weights[0]->get();
      if (mk::gemm_cuda::SmallMRefusal(q) != nullptr) continue;
      bool ok = true;
      var_ms[v] = GraphMsPerCall(stream, [&](int i) {
        q.b = weights[i % copies]->get();
        ok &= mk::gemm_cuda::LaunchSmallM(q, stream, variants[v]).ok();
      });
      if (!ok) var_ms[v] = -1;
    }
    char shape[96];
    std::snprintf(shape, sizeof shape, "%s %s n=%d k=%d%s m=%d", pr.model, pr.name, pr.n, pr.k,
                  pr.batch > 1 ? (" x" + std::to_string(pr.batch)).c_str() : "", m);
    const auto gbs = [&](double t) { return t > 0 ? weight_bytes / (t * 1e-3) / 1e9 : 0.0; };
    mk::GemmParams auto_p = p;
    auto_p.b = weights[0]->get();
    const bool auto_small = mk::GemmRunsSmallM(auto_p, mk::Backend::kCuda);
    const mk::gemm_cuda::SmallMShape plan = mk::gemm_cuda::SmallMLaunchShape(auto_p);
    std::printf("%-52s cublasLt %8.4f ms %6.0f GB/s %5.1f%% | small-m %8.4f ms %6.0f GB/s %5.1f%% | %5.2fx | kAuto: %-8s | split %d, %lld CTAs, %lld resident, prefetch %d chunks"
                " | nothing before the wait %.4f, prefetch any size %.4f, split<=1 %.4f, <=2 %.4f ms\n",
                shape, ms[0], gbs(ms[0]), 100 * gbs(ms[0]) / copy_gbs, ms[1], gbs(ms[1]),
                100 * gbs(ms[1]) / copy_gbs, ms[0] > 0 && ms[1] > 0 ? ms[0] / ms[1] : 0.0,
                auto_small ? "small-m" : "cublasLt", plan.splits, static_cast<long long>(plan.ctas),
                static_cast<long long>(plan.resident), plan.prefetch_chunks, var_ms[0], var_ms[1],
                var_ms[2], var_ms[3]);
    std::fflush(stdout);
  }
  for (DeviceArray* w : weights) delete w;
}

void BenchDecodeNorm(double copy_gbs, cudaStream_t stream) {
  for (int dim : {512, 1536, 2048, 7168}) {
    for (int rows : {1, 4, 16}) {
      DeviceArray x(size_t{2} * rows * dim), res(size_t{2} * rows * dim), w(size_t{2} * dim),
          y(size_t{2} * rows * dim);
      FillRandom(x, 1);
      FillRandom(res, 2);
      FillRandom(w, 3);
      mk::RmsNormParams p;
      p.dtype = mk::DType::kBF16;
      p.rows = rows;
      p.dim = dim;
      p.x = x.get();
      p.x_stride = dim;
      p.residual = res.get();
      p.weight = w.get();
      p.y = y.get();
      p.y_stride = dim;
      const double ms = GraphMsPerCall(stream, [&](int) {
        CheckStatus(mk::RmsNorm(p, {mk::Backend::kCuda, stream}), "rmsnorm");
      });
      const double bytes = 4.0 * rows * dim * 2 + dim * 2;
      std::printf("rmsnorm+residual rows=%-2d dim=%-5d %8.2f us per launch (%5.0f GB/s, %4.1f%% of copy)\n",
                  rows, dim, ms * 1e3, bytes / (ms * 1e-3) / 1e9, 100 * bytes / (ms * 1e-3) / 1e9 / copy_gbs);
    }
  }
}

}  // namespace

void RunSmallMBench(const std::vector<int>& tokens) {
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbs = MeasureCopyGBs();
  std::printf("== decode GEMMs: small-M kernel vs cuBLASLt (%s, %d SMs), copy bandwidth %.0f GB/s "
              "(read + write); per call in a graph of %d calls, weights rotated past L2\n",
              prop.name, prop.multiProcessorCount, copy_gbs, kLaunches);
  cudaStream_t stream = nullptr;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  using E = mk::GemmEpilogue;
  const Projection shapes[] = {
      {"V2-Lite", "q_proj", 3072, 2048, 1, false, E::kNone, 0},
      {"V2-Lite", "kv_a_proj", 576, 2048, 1, false, E::kNone, 0},
      {"V2-Lite", "q_proj|kv_a stacked", 3648, 2048, 1, false, E::kNone, 3072},
      {"V2-Lite", "kv_b_proj", 4096, 512, 1, false, E::kNone, 0},
      {"V2-Lite", "W_UV per head", 128, 512, 16, false, E::kNone, 0},
      {"V2-Lite", "W_UK^T per head", 512, 128, 16, false, E::kNone, 0},
      {"V2-Lite", "o_proj", 2048, 2048, 1, false, E::kNone, 0},
      {"V2-Lite", "router (f32)", 64, 2048, 1, true, E::kNone, 0},
      {"V2-Lite", "shared gate_up", 5632, 2048, 1, false, E::kNone, 0},
      {"V2-Lite", "shared gate_up+silu", 5632, 2048, 1, false, E::kSiluMul, 0},
      {"V2-Lite", "shared down", 2048, 2816, 1, false, E::kNone, 0},
      {"V2-Lite", "dense gate_up", 21888, 2048, 1, false, E::kNone, 0},
      {"V2-Lite", "dense down", 2048, 10944, 1, false, E::kNone, 0},
      {"V2-Lite", "lm_head (f32)", 102400, 2048, 1, true, E::kNone, 0},
      {"V3", "q_a|kv_a stacked", 2112, 7168, 1, false, E::kNone, 1536},
      {"V3", "q_a_proj", 1536, 7168, 1, false, E::kNone, 0},
      {"V3", "kv_a_proj", 576, 7168, 1, false, E::kNone, 0},
      {"V3", "q_b_proj", 24576, 1536, 1, false, E::kNone, 0},
      {"V3", "kv_b_proj", 32768, 512, 1, false, E::kNone, 0},
      {"V3", "W_UV per head", 128, 512, 128, false, E::kNone, 0},
      {"V3", "W_UK^T per head", 512, 128, 128, false, E::kNone, 0},
      {"V3", "o_proj", 7168, 16384, 1, false, E::kNone, 0},
      {"V3", "router (f32)", 256, 7168, 1, true, E::kNone, 0},
      {"V3", "shared gate_up", 4096, 7168, 1, false, E::kNone, 0},
      {"V3", "shared gate_up+silu", 4096, 7168, 1, false, E::kSiluMul, 0},
      {"V3", "shared down", 7168, 2048, 1, false, E::kNone, 0},
      {"V3", "dense gate_up", 36864, 7168, 1, false, E::kNone, 0},
      {"V3", "dense down", 7168, 18432, 1, false, E::kNone, 0},
      {"V3", "lm_head (f32)", 129280, 7168, 1, true, E::kNone, 0},
  };
  for (const Projection& pr : shapes) BenchProjection(pr, tokens, copy_gbs, stream);
  std::printf("== RMSNorm at decode rows (+residual), per launch in a graph\n");
  BenchDecodeNorm(copy_gbs, stream);
  BENCH_CHECK(cudaStreamDestroy(stream));
}

}  // namespace mlaserve::bench
