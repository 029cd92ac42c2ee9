// sampling: one token a row of f32 logits, as the decode worker draws after the LM head
// (kernels/sampling, docs/kernels.md "sampling"). Each row of the table times one path in CUDA
// graphs of kCalls calls over the same logits (in L2 after the first, as the LM head leaves
// them): the cluster select (Sample's choice on sm_90) and, in the same run, the sort path it
// replaced. The roofline column is the logits' bytes read once at copy bandwidth. After a row
// pair the ids of the two paths are compared (they draw the same tokens by design; a mismatch
// is printed, not fatal: this is a benchmark).
// Logits: "peaked" ~ N(0, 3) (a trained model's few likely tokens), "flat" ~ N(0, 0.1) (a random
// checkpoint's, as the engine bench's: top_p 0.9 then keeps ~90% of the vocabulary).
#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/kernel_bench/bench_util.cuh"
#include "kernels/sampling/api.h"
#include "kernels/sampling/sampling_cuda.h"

namespace mlaserve::bench {
namespace {

struct Mode {
  const char* name;
  float temperature, top_p, min_p;
  int top_k;
};

constexpr Mode kModes[] = {
    {"greedy", 0.0f, 1.0f, 0.0f, 0},
    {"T1", 1.0f, 1.0f, 0.0f, 0},  // the OpenAI API's defaults: no filter
    {"T1_p0.9", 1.0f, 0.9f, 0.0f, 0},  // mlaserve-engine-bench's sampled rows
    {"T0.7_k50_p0.95", 0.7f, 0.95f, 0.0f, 50},
    {"T1_minp0.05", 1.0f, 1.0f, 0.05f, 0},
    {"T1_minp1", 1.0f, 1.0f, 1.0f, 0},  // the max's ties only: the softmax and one short select
};

// A new device array in `keep` holding v.
template <typename T>
T* UploadVec(std::deque<DeviceArray>& keep, const std::vector<T>& v) {
  keep.emplace_back(v.size() * sizeof(T));
  Upload(keep.back(), v);
  return keep.back().get<T>();
}

// One more call of the cluster path with its step trace (sampling_cuda.h): the microseconds from
// the kernel's start to the end of each cluster step of row 0.
void PrintTrace(const kernels::SamplingParams& p, int ctas, cudaStream_t stream) {
  constexpr int kSteps = 64;
  DeviceArray trace(kSteps * sizeof(unsigned long long));
  BENCH_CHECK(cudaMemset(trace.get(), 0, kSteps * sizeof(unsigned long long)));
  CheckStatus(kernels::sampling_cuda::SampleByCluster(p, ctas, stream, trace.get<unsigned long long>()), "sampling");
  BENCH_CHECK(cudaStreamSynchronize(stream));
  std::vector<unsigned long long> t(kSteps);
  BENCH_CHECK(cudaMemcpy(t.data(), trace.get(), sizeof(unsigned long long) * kSteps, cudaMemcpyDeviceToHost));
  std::printf("  steps (us from the start):");
  for (int i = 1; i < kSteps && t[i] != 0; ++i) std::printf(" %.1f", (t[i] - t[0]) * 1e-3);
  std::printf("\n");
}

}  // namespace

void BenchSampling(const Ceilings& ceil, Results& res) {
  constexpr int kCalls = 8;
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct Shape {
    int vocab, batch;
  };
  std::vector<Shape> shapes;
  for (int b : {1, 4, 16, 32, 64, 128}) shapes.push_back({102400, b});
  for (int b : {1, 64}) shapes.push_back({129280, b});
  int mismatches = 0, compared = 0;
  for (const Shape& sh : shapes) {
    for (const bool flat : {false, true}) {
      std::mt19937_64 rng(1234 + sh.vocab + sh.batch);
      std::normal_distribution<float> normal(0.0f, flat ? 0.1f : 3.0f);
      std::vector<float> logits(static_cast<size_t>(sh.batch) * sh.vocab);
      for (float& v : logits) v = normal(rng);
      std::deque<DeviceArray> keep;  // a deque: the arrays do not move
      const float* d_logits = UploadVec(keep, logits);
      for (const Mode& m : kModes) {
        if (flat && m.temperature == 0.0f) continue;  // greedy does not care
        std::vector<uint64_t> seeds(sh.batch), steps(sh.batch);
        for (int b = 0; b < sh.batch; ++b) seeds[b] = 1000 + b, steps[b] = 77 + b;
        kernels::SamplingParams p;
        p.batch = sh.batch;
        p.vocab = sh.vocab;
        p.logits = d_logits;
        p.temperature = UploadVec(keep, std::vector<float>(sh.batch, m.temperature));
        p.top_k = UploadVec(keep, std::vector<int32_t>(sh.batch, m.top_k));
        p.top_p = UploadVec(keep, std::vector<float>(sh.batch, m.top_p));
        p.min_p = UploadVec(keep, std::vector<float>(sh.batch, m.min_p));
        p.seed = UploadVec(keep, seeds);
        p.step = UploadVec(keep, steps);
        keep.emplace_back(kernels::SamplingWorkspaceBytes(sh.batch, sh.vocab));
        p.workspace = keep.back().get();
        // Paths: the cluster at Sample's CTA count, at 16 CTAs a row for small batches (where
        // the device allows), then the sort (0 CTAs).
        // (Above the batch cut, where Sample takes the sort, the cluster at 8 rows' CTA count.)
        int ctas = kernels::sampling_cuda::ClusterCtasPerRow(sh.vocab, sh.batch);
        if (ctas == 0) ctas = kernels::sampling_cuda::ClusterCtasPerRow(sh.vocab, 8);
        std::vector<int> paths;
        if (ctas > 0) paths.push_back(ctas);
        if (ctas > 0 && ctas < 16 && sh.batch <= 8 && kernels::sampling_cuda::ClusterCanRun(sh.vocab, 16)) {
          paths.push_back(16);
        }
        paths.push_back(0);
        std::vector<int32_t*> outs;
        for (size_t i = 0; i < paths.size(); ++i) outs.push_back(UploadVec(keep, std::vector<int32_t>(sh.batch, -1)));
        const double bytes = 4.0 * sh.batch * sh.vocab;
        for (size_t i = 0; i < paths.size(); ++i) {
          kernels::SamplingParams q = p;
          q.out_ids = outs[i];
          const int c = paths[i];
          const double us = GraphMicrosPerCall(stream, kCalls, [&](int) {
            CheckStatus(c > 0 ? kernels::sampling_cuda::SampleByCluster(q, c, stream)
                              : kernels::sampling_cuda::SampleBySort(q, stream),
                        "sampling");
          });
          const double gbs = bytes / (us * 1e-6) / 1e9;
          if (c > 0 && sh.batch == 1) PrintTrace(q, c, stream);
          res.Add(c > 0 ? "sampling" : "sampling_sort",
                  absl::StrCat("b=", sh.batch, " V=", sh.vocab, " ", m.name, flat ? " flat" : " peaked",
                               c > 0 ? absl::StrCat(" (", c, " CTAs a row)") : std::string()),
                  us * 1e-3, 0.0, gbs, gbs / ceil.copy_gbs, "copy BW (logits read once)");
        }
        std::vector<int32_t> sorted(sh.batch), other(sh.batch);
        BENCH_CHECK(cudaMemcpy(sorted.data(), outs.back(), sh.batch * sizeof(int32_t), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i + 1 < outs.size(); ++i) {
          BENCH_CHECK(cudaMemcpy(other.data(), outs[i], sh.batch * sizeof(int32_t), cudaMemcpyDeviceToHost));
          for (int b = 0; b < sh.batch; ++b) mismatches += other[b] != sorted[b], ++compared;
        }
      }
    }
  }
  std::printf("sampling: the cluster path and the sort path drew different ids in %d of %d rows\n", mismatches,
              compared);
  BENCH_CHECK(cudaStreamDestroy(stream));
}

}  // namespace mlaserve::bench
