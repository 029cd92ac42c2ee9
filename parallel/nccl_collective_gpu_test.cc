// NcclCollective on every GPU of the machine (at least 2), one thread per GPU, against the
// values the fake collective's tests check: sums, gathers, scatters and ragged all-to-all.
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "gtest/gtest.h"
#include "parallel/nccl_collective.h"
#include "parallel/nccl_common.h"

namespace mlaserve::parallel {
namespace {

template <typename T>
T* Device(const std::vector<T>& host) {
  T* d = nullptr;
  cudaMalloc(&d, host.size() * sizeof(T) + 1);
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename T>
std::vector<T> Host(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

TEST(NcclCollectiveGpu, EveryOperationOnEveryGpu) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, found " << n;
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const std::string& what) { failures[r] += what + "; "; };
      auto c = CreateNcclCollective(*id, r, n, r, absl::Now() + absl::Seconds(60));
      if (!c.ok()) return fail(c.status().ToString());
      cudaStream_t s;
      cudaStreamCreate(&s);
      // All-reduce in place.
      float* v = Device(std::vector<float>{1.0f * r, 2.0f});
      if (auto st = (*c)->AllReduceSum(v, v, 2, kernels::DType::kF32, s); !st.ok()) return fail(st.ToString());
      // All-gather then reduce-scatter.
      std::vector<int32_t> mine(3);
      for (int i = 0; i < 3; ++i) mine[i] = 100 * r + i;
      int32_t* part = Device(mine);
      int32_t* all = Device(std::vector<int32_t>(3 * n, -1));
      int32_t* back = Device(std::vector<int32_t>(3, -1));
      if (auto st = (*c)->AllGather(part, all, 3, kernels::DType::kI32, s); !st.ok()) return fail(st.ToString());
      if (auto st = (*c)->ReduceScatterSum(all, back, 3, kernels::DType::kI32, s); !st.ok()) return fail(st.ToString());
      // All-to-all-v: rank r sends r + p + 1 values to p.
      std::vector<int64_t> sc(n), so(n), rc(n), ro(n);
      std::vector<float> send;
      int64_t in = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = r + p + 1;
        so[p] = static_cast<int64_t>(send.size());
        for (int i = 0; i < sc[p]; ++i) send.push_back(1000.0f * r + 10.0f * p + i);
        rc[p] = p + r + 1;
        ro[p] = in;
        in += rc[p];
      }
      float* dsend = Device(send);
      float* drecv = Device(std::vector<float>(in, -1.0f));
      if (auto st = (*c)->AllToAllV(dsend, sc, so, drecv, rc, ro, kernels::DType::kF32, s); !st.ok()) return fail(st.ToString());
      if (auto st = (*c)->Barrier(s); !st.ok()) return fail(st.ToString());
      const float ranks = n * (n - 1) / 2.0f;
      if (Host(v, 2) != std::vector<float>{ranks, 2.0f * n}) fail("all-reduce");
      auto got_all = Host(all, 3 * n);
      for (int p = 0; p < n; ++p) {
        for (int i = 0; i < 3; ++i) {
          if (got_all[p * 3 + i] != 100 * p + i) fail("all-gather");
        }
      }
      auto got_back = Host(back, 3);
      for (int i = 0; i < 3; ++i) {
        if (got_back[i] != n * (100 * r + i)) fail("reduce-scatter");
      }
      auto got = Host(drecv, in);
      size_t at = 0;
      for (int p = 0; p < n; ++p) {
        for (int i = 0; i < p + r + 1; ++i) {
          if (got[at++] != 1000.0f * p + 10.0f * r + i) fail("all-to-all-v");
        }
      }
      for (void* p : std::initializer_list<void*>{v, part, all, back, dsend, drecv}) cudaFree(p);
      cudaStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

// The fixed-size AllToAll captured in a CUDA graph on every rank (what a graph-captured decode
// step of the fixed-capacity MoE dispatch holds), then replayed twice over new send values:
// each replay moves the blocks of that moment.
TEST(NcclCollectiveGpu, AllToAllReplaysFromACudaGraph) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, found " << n;
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  constexpr int kCount = 1000;
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const std::string& what) { failures[r] += what + "; "; };
      auto c = CreateNcclCollective(*id, r, n, r, absl::Now() + absl::Seconds(60));
      if (!c.ok()) return fail(c.status().ToString());
      cudaStream_t s;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      auto values = [&](int round) {
        std::vector<int32_t> v(static_cast<size_t>(n) * kCount);
        for (int p = 0; p < n; ++p) {
          for (int i = 0; i < kCount; ++i) v[p * kCount + i] = round * 1000000 + 1000 * r + 10 * p + i % 10;
        }
        return v;
      };
      int32_t* send = Device(values(0));
      int32_t* recv = Device(std::vector<int32_t>(static_cast<size_t>(n) * kCount, -1));
      // Warm-up outside the capture (NCCL connects its peers on first use).
      if (auto st = (*c)->AllToAll(send, recv, kCount, kernels::DType::kI32, s); !st.ok()) return fail(st.ToString());
      cudaStreamSynchronize(s);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return fail("begin capture");
      const absl::Status in_graph = (*c)->AllToAll(send, recv, kCount, kernels::DType::kI32, s);
      if (cudaStreamEndCapture(s, &graph) != cudaSuccess || !in_graph.ok()) return fail("capture: " + in_graph.ToString());
      if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return fail("instantiate");
      for (int round = 1; round <= 2; ++round) {
        const std::vector<int32_t> v = values(round);
        cudaMemcpy(send, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
        if (cudaGraphLaunch(exec, s) != cudaSuccess) return fail("launch");
        if (cudaStreamSynchronize(s) != cudaSuccess) return fail("replay");
        const std::vector<int32_t> got = Host(recv, static_cast<size_t>(n) * kCount);
        for (int p = 0; p < n; ++p) {
          for (int i = 0; i < kCount; ++i) {
            if (got[p * kCount + i] != round * 1000000 + 1000 * p + 10 * r + i % 10) {
              return fail("round " + std::to_string(round) + ": block from rank " + std::to_string(p));
            }
          }
        }
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaFree(send);
      cudaFree(recv);
      cudaStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

}  // namespace
}  // namespace mlaserve::parallel
