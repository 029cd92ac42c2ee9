// Probes of the fixed costs under small-batch latency (issue 13), printed before the
// mla_decode_small table: what one node of a CUDA graph costs, and what running a kernel's code
// costs the first time on many SMs at once. The latent kernel is ~80 KB of code (~176 KB before
// 2026-11-25's second session), and at batch 1-8 each SM runs it once per call: if instruction
// fetch is what the small shapes wait for, a kernel of the same work in 64 KB of straight-line
// code is slower than one in 4 KB of it, and more so the more SMs fetch it at once.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/kernel_bench/bench_util.cuh"

namespace mlaserve::bench {
namespace {

constexpr int kProbeCalls = 20;
constexpr int kProbeThreads = 256;
constexpr int kProbeSmem = 200 * 1024;  // one CTA per SM, as the latent kernel

// 4 * kUnroll dependent FMAs per repetition, in 4 chains: kUnroll 1024 is 64 KB of code.
template <int kUnroll>
__global__ void __launch_bounds__(kProbeThreads, 1) StraightLineKernel(float* out, int reps) {
  extern __shared__ float unused[];
  float a0 = threadIdx.x, a1 = a0 + 1.0f, a2 = a0 + 2.0f, a3 = a0 + 3.0f;
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3F7FF972;" : "+f"(a0));
      asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3F7FF972;" : "+f"(a1));
      asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3F7FF972;" : "+f"(a2));
      asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3F7FF972;" : "+f"(a3));
    }
  }
  if (a0 + a1 + a2 + a3 == 1.2345f) out[threadIdx.x] = a0 + unused[0];
}

__global__ void EmptyKernel() {}

// Microseconds per launch of `launch` in a CUDA graph of kProbeCalls launches (median of 10).
template <typename Fn>
double GraphMicros(cudaStream_t stream, Fn&& launch) {
  return GraphMicrosPerCall(stream, kProbeCalls, [&](int) { launch(); }, /*skipped=*/2);
}

}  // namespace

void RunLaunchProbes(int sms) {
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceArray out(kProbeThreads * sizeof(float));
  auto big = StraightLineKernel<1024>;
  auto small = StraightLineKernel<64>;
  BENCH_CHECK(cudaFuncSetAttribute(big, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
  BENCH_CHECK(cudaFuncSetAttribute(small, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
  std::printf("launch probes (us per launch, graphs of %d):\n", kProbeCalls);
  std::printf("  empty kernel, 1 CTA: %.2f\n", GraphMicros(stream, [&] { EmptyKernel<<<1, 32, 0, stream>>>(); }));
  std::printf("  empty kernel, %d CTAs of 256 threads with %d KB shared: %.2f\n", sms, kProbeSmem / 1024,
              GraphMicros(stream, [&] { small<<<sms, kProbeThreads, kProbeSmem, stream>>>(out.get<float>(), 0); }));
  auto huge = StraightLineKernel<2048>;
  BENCH_CHECK(cudaFuncSetAttribute(huge, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
  for (int ctas : {8, 64, 128, sms}) {
    // The same 8192 FMAs per thread: once through 128 KB of code, twice through 64 KB, or 32
    // times through 4 KB.
    auto run = [&](auto kernel, int reps) {
      return GraphMicros(stream, [&] { kernel<<<ctas, kProbeThreads, kProbeSmem, stream>>>(out.get<float>(), reps); });
    };
    std::printf("  %3d CTAs, 8192 FMAs per thread: code of 128 KB %.2f, 64 KB %.2f, 4 KB %.2f\n", ctas, run(huge, 1),
                run(big, 2), run(small, 32));
  }
  BENCH_CHECK(cudaStreamDestroy(stream));
}

}  // namespace mlaserve::bench
