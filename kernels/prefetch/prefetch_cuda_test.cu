// L2Prefetch on the GPU: the launch succeeds over ragged ranges (sizes not a multiple of its
// chunk, one range larger than the grid's first pass), in both cache policies, inside a CUDA
// graph too, and leaves every byte as it was.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/prefetch/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

void Check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

class L2PrefetchCuda : public ::testing::TestWithParam<bool> {};

TEST_P(L2PrefetchCuda, LeavesMemoryAsItWas) {
  const bool evict_last = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  // Sizes: 16 bytes, a chunk and a bit, ~3 MB (more chunks than one pass of 4 CTAs' lanes).
  const std::vector<size_t> sizes = {16, 16 * 1024 + 48, 3 * 1024 * 1024 + 4096 + 32};
  std::vector<std::vector<uint8_t>> host;
  std::vector<uint8_t*> dev;
  L2PrefetchParams p;
  p.evict_last = evict_last;
  p.ctas = 4;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> h(sizes[i]);
    uint64_t x = seed + i;
    for (auto& b : h) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      b = static_cast<uint8_t>(x >> 56);
    }
    uint8_t* d = nullptr;
    Check(cudaMalloc(&d, sizes[i]));
    Check(cudaMemcpy(d, h.data(), sizes[i], cudaMemcpyHostToDevice));
    p.ranges[i] = {d, sizes[i]};
    host.push_back(std::move(h));
    dev.push_back(d);
  }
  p.ranges[sizes.size()] = {nullptr, 0};  // an unused slot among the used ones is skipped
  p.ranges[sizes.size() + 1] = {dev[0], sizes[0]};
  p.num_ranges = static_cast<int>(sizes.size()) + 2;

  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  KernelContext ctx{Backend::kCuda, stream, 0};
  EXPECT_TRUE(L2PrefetchLaunches(ctx));
  ASSERT_TRUE(L2Prefetch(p, ctx).ok());
  // And captured in a graph, replayed twice.
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status in_graph = L2Prefetch(p, ctx);
  cudaGraph_t graph = nullptr;
  Check(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(in_graph.ok()) << in_graph;
  cudaGraphExec_t exec = nullptr;
  Check(cudaGraphInstantiate(&exec, graph, 0));
  Check(cudaGraphLaunch(exec, stream));
  Check(cudaGraphLaunch(exec, stream));
  Check(cudaStreamSynchronize(stream));
  Check(cudaGetLastError());
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> back(sizes[i]);
    Check(cudaMemcpy(back.data(), dev[i], sizes[i], cudaMemcpyDeviceToHost));
    EXPECT_EQ(back, host[i]) << "range " << i;
    Check(cudaFree(dev[i]));
  }
  Check(cudaGraphExecDestroy(exec));
  Check(cudaGraphDestroy(graph));
  Check(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(Policies, L2PrefetchCuda, ::testing::Bool());

}  // namespace
}  // namespace mlaserve::kernels
