// Shared pieces of mlaserve-kernel-bench: device buffers filled with random bf16 on the GPU,
// event timing (median of many runs after warm-up), the two measured ceilings (device copy
// bandwidth, bf16 GEMM rate through cuBLAS) and the result table / JSON records.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/mla_decode/api.h"
#include "nlohmann/json.hpp"

namespace mlaserve::bench {

#define BENCH_CHECK(expr)                                                                  \
  do {                                                                                     \
    const cudaError_t bench_err_ = (expr);                                                 \
    if (bench_err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr,                    \
                   cudaGetErrorString(bench_err_));                                        \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

inline void CheckStatus(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(st.message()).c_str());
    std::exit(2);
  }
}

// The chunk length (pages) that a picking plan's metadata build wrote at `metadata`
// (MlaDecodePlan::chunk_pick_sms; a row's label); 0 for a plan that picks none.
inline int PickedChunkPages(const void* metadata, int batch, const kernels::MlaDecodePlan& plan) {
  int pages = 0;
  if (plan.chunk_pick_sms > 0) {
    BENCH_CHECK(cudaMemcpy(&pages, static_cast<const uint8_t*>(metadata) +
                                       kernels::MlaDecodeChunkPickOffset(batch, plan.num_splits),
                           sizeof(int), cudaMemcpyDeviceToHost));
  }
  return pages;
}

// Deterministic hash -> uniform [-scale, scale) bf16, so inputs are random but need no host copy.
// static: one copy per translation unit (the bench has several).
static __global__ void FillRandomBf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale = 1.0f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t x = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1ull << 24);
    p[i] = __float2bfloat16((2.0f * u - 1.0f) * scale);
  }
}

class DeviceArray {
 public:
  explicit DeviceArray(size_t bytes) : bytes_(bytes) { BENCH_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16))); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

inline void FillRandom(const DeviceArray& a, uint64_t seed) {
  FillRandomBf16<<<1024, 256>>>(a.get<__nv_bfloat16>(), static_cast<int64_t>(a.bytes() / 2), seed);
  BENCH_CHECK(cudaGetLastError());
}

template <typename T>
void Upload(const DeviceArray& a, const std::vector<T>& host) {
  BENCH_CHECK(cudaMemcpy(a.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Spins for about `cycles` clock cycles: queued before a start event, it keeps the host's work
// of the timed call (argument checks, descriptor encoding, launches) out of the interval, as
// tools/bench_flashmla_baseline.py does with torch.cuda._sleep.
static __global__ void SpinKernel(int64_t cycles) {
  const int64_t start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Median milliseconds of `reps` timed calls of fn() (events around each) after `warmup` calls.
// The spin before a timed call (MedianMs's spin_first; the kernel bench's --mla-trace spins alike).
constexpr int64_t kSpinCycles = 1000000;

// spin_first: a SpinKernel of kSpinCycles (1M, ~0.5 ms) before each start event (for calls that take
// less time on the GPU than their launches take on the host).
template <typename Fn>
double MedianMs(Fn&& fn, int warmup = 3, int reps = 20, bool spin_first = false) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    if (spin_first) SpinKernel<<<1, 1>>>(kSpinCycles);
    BENCH_CHECK(cudaEventRecord(start));
    fn();
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Microseconds per call of call(c), c = 0..calls-1, captured together in one CUDA graph on
// `stream` (after one eager pass: kernel attributes, TMA descriptors): the median over
// `timed` replays after `skipped` untimed ones.
template <typename Fn>
double GraphMicrosPerCall(cudaStream_t stream, int calls, Fn&& call, int skipped = 3, int timed = 10) {
  for (int c = 0; c < calls; ++c) call(c);
  BENCH_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int c = 0; c < calls; ++c) call(c);
  BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int r = 0; r < skipped + timed; ++r) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    BENCH_CHECK(cudaGraphLaunch(exec, stream));
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r >= skipped) us.push_back(1e3 * ms / calls);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  BENCH_CHECK(cudaGraphExecDestroy(exec));
  BENCH_CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Device-to-device copy of 1 GiB, counting bytes read + written (GB/s).
inline double MeasureCopyGBs() {
  const size_t bytes = size_t{1} << 30;
  DeviceArray a(bytes), b(bytes);
  FillRandom(a, 1);
  const double ms = MedianMs([&] { BENCH_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); });
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

// bf16 GEMM 8192^3 through cuBLAS (f32 accumulate), TFLOP/s: the matrix-unit ceiling.
inline double MeasureGemmTflops() {
  constexpr int n = 8192;
  DeviceArray a(size_t{2} * n * n), b(size_t{2} * n * n), c(size_t{2} * n * n);
  FillRandom(a, 2);
  FillRandom(b, 3);
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 0.0;
  const float alpha = 1.0f, beta = 0.0f;
  bool ok = true;
  const double ms = MedianMs([&] {
    ok &= cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF, n, b.get(),
                       CUDA_R_16BF, n, &beta, c.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  cublasDestroy(handle);
  return ok ? 2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12 : 0.0;
}

// The SM clock at this moment, MHz: one thread counts clock64() cycles across kSmClockWindowNs
// of %globaltimer (ns). The GPU's power management sets that clock: an H100 SXM under its 700 W
// cap runs GEMM-heavy work below its boost clock (docs/BENCHMARKS.md, sixty-eighth session), so a
// probe right after timed work says the clock that work ended at. 0 where the probe's launch or
// copy fails.
constexpr uint64_t kSmClockWindowNs = 100000;  // 100 us: the timer's steps (32 ns-1 us) stay < 1%

static __global__ void SmClockKernel(uint64_t window_ns, unsigned long long* out) {
  uint64_t t0 = 0, t1 = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < window_ns);
  const long long c1 = clock64();
  out[0] = t1 - t0;
  out[1] = static_cast<unsigned long long>(c1 - c0);
}

inline double MeasureSmClockMhz() {
  unsigned long long h[2] = {0, 0};
  const DeviceArray d(sizeof(h));
  SmClockKernel<<<1, 1>>>(kSmClockWindowNs, d.get<unsigned long long>());
  const bool ok = cudaGetLastError() == cudaSuccess &&
                  cudaMemcpy(h, d.get(), sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess;
  return ok && h[0] > 0 ? 1e3 * static_cast<double>(h[1]) / static_cast<double>(h[0]) : 0.0;
}

// The device's boost clock (the most its SMs run at), MHz; 0 where it cannot be read.
inline double MaxSmClockMhz() {
  int device = 0, khz = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0.0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) != cudaSuccess) return 0.0;
  return khz / 1e3;
}

struct Ceilings {
  double copy_gbs = 0, gemm_tflops = 0;
};

// One result row: printed as a table line and kept for the JSON file.
struct Results {
  nlohmann::json rows = nlohmann::json::array();
  bool print = true;  // false: a warm-up run's rows, kept (callers annotate the last) but not printed

  void Add(const std::string& kernel, const std::string& shape, double ms, double tflops, double gbs,
           double fraction, const std::string& fraction_of) {
    if (print) {
      std::printf("%-12s %-44s %9.3f ms %8.1f TFLOP/s %8.1f GB/s %6.1f%% of %s\n", kernel.c_str(), shape.c_str(),
                  ms, tflops, gbs, 100.0 * fraction, fraction_of.c_str());
      std::fflush(stdout);
    }
    rows.push_back({{"kernel", kernel}, {"shape", shape}, {"ms", ms}, {"tflops", tflops}, {"gbs", gbs},
                    {"fraction", fraction}, {"fraction_of", fraction_of}});
  }
};

}  // namespace mlaserve::bench
