// mha_prefill, cuDNN provider (kCudnn), vs the CPU reference on fresh random ragged batches:
// the DeepSeek dims (qk 192 / v 128) with 16 and 128 heads and 128/128, causal with a key
// prefix (queries fewer than keys, bottom-right), rows that see no key, GQA, padded strides,
// LSE checked, and again without LSE (lse = null: out only); kAuto on the same; and the
// CUDA-graph contract (no plan during a capture; a planned call replays inside a captured graph).
// Skipped, saying why, where cuDNN cannot be loaded.
#include <cuda_runtime.h>

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mha_prefill/mha_prefill_cuda_case.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::MhaCase;
using testing::MhaProblem;

#define SKIP_WITHOUT_CUDNN()                                                              \
  do {                                                                                    \
    const auto cudnn_version = MhaPrefillCudnnVersion();                                  \
    if (!cudnn_version.ok()) GTEST_SKIP() << "cuDNN unavailable: " << cudnn_version.status(); \
  } while (0)

const std::vector<MhaCase>& Cases() {
  static const auto* cases = new std::vector<MhaCase>{
      {16, 16, 192, 128, {1, 17, 128, 129, 300}, 0},
      {16, 16, 192, 128, {5, 200, 64}, 300},          // chunk after a prefix
      {128, 128, 192, 128, {1, 77, 256}, 100},
      {16, 16, 192, 128, {8192}, 0},                  // one long sequence
      {128, 128, 192, 128, {1000, 1, 700}, 300},
      {16, 16, 128, 128, {64, 300, 7}, 200},
      {128, 128, 128, 128, {513, 40}, 0},
      {16, 16, 192, 128, {40, 90, 3, 200}, 50, /*keyless=*/true},
      {16, 16, 128, 128, {120, 1, 66}, 0, /*keyless=*/true},
      {16, 4, 128, 128, {1, 50, 200}, 40},            // GQA
  };
  return *cases;
}

// (case index, causal). One CPU reference per case serves both runs (it is the slow part).
class MhaPrefillCudnnTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MhaPrefillCudnnTest, CudnnAndAutoMatchCpuReference) {
  const auto [index, causal] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  const MhaCase& c = Cases()[index];
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << c.heads << "/" << c.kv_heads
                                    << " dqk=" << c.dqk << " dv=" << c.dv << " causal=" << causal);
  MhaProblem problem(c, causal, seed);
  const bool cudnn = MhaPrefillCudnnVersion().ok();
  // Then lse = null: for cuDNN a graph without the stats output (its own plan key); out only,
  // nothing at lse.
  for (const bool lse_asked : {true, false}) {
    for (auto provider : {MhaPrefillProvider::kCudnn, MhaPrefillProvider::kAuto}) {
      if (provider == MhaPrefillProvider::kCudnn && !cudnn) continue;
      SCOPED_TRACE(std::string(MhaPrefillProviderName(provider)) + (lse_asked ? "" : ", no lse"));
      MhaPrefillParams p = problem.device(provider);
      if (!lse_asked) p.lse = nullptr;
      problem.Poison();
      const auto st = MhaPrefill(p, KernelContext{Backend::kCuda, nullptr});
      ASSERT_TRUE(st.ok()) << st;
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      problem.ExpectMatchesReference(lse_asked);
    }
  }
  if (!cudnn) GTEST_SKIP() << "cuDNN unavailable (kAuto ran ours): " << MhaPrefillCudnnVersion().status();
}

INSTANTIATE_TEST_SUITE_P(Sweep, MhaPrefillCudnnTest,
                         ::testing::Combine(::testing::Range(0, 10), ::testing::Bool()));

// The same plan serves calls whose lengths differ below its planned maxima.
TEST(MhaPrefillCudnn, ReusesAPlanAcrossLengths) {
  SKIP_WITHOUT_CUDNN();
  const uint64_t seed = testing::FreshSeed();
  for (const auto& lq : {std::vector<int>{100, 30}, std::vector<int>{128, 1}, std::vector<int>{65, 90}}) {
    testing::RunMhaCase({16, 16, 192, 128, lq, 60}, /*causal=*/true, seed, MhaPrefillProvider::kCudnn);
  }
}

TEST(MhaPrefillCudnn, NamesUnsupportedCombination) {
  SKIP_WITHOUT_CUDNN();
  MhaPrefillParams p;
  p.dtype = DType::kBF16; p.batch = 1; p.num_heads = 1; p.num_kv_heads = 1;
  p.head_dim_qk = 264; p.head_dim_v = 16; p.max_seqlen_q = 1; p.max_seqlen_k = 1;  // qk past 256
  static uint16_t dummy[272] __attribute__((aligned(16)));
  static int32_t cu[2] = {0, 1};
  p.q = p.k = p.v = dummy; p.out = dummy;
  p.q_token_stride = p.k_token_stride = p.v_token_stride = p.out_token_stride = 272;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = 272;
  p.cu_seqlens_q = p.cu_seqlens_k = cu;
  p.provider = MhaPrefillProvider::kCudnn;
  const auto st = MhaPrefill(p, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head_dim_qk=264"), std::string::npos) << st.message();
}

// Nothing is planned while a stream is being captured: kCudnn refuses, kAuto captures ours.
// Once planned eagerly, the cuDNN call replays inside a captured graph.
TEST(MhaPrefillCudnn, PlansOutsideCapturesAndReplaysInside) {
  SKIP_WITHOUT_CUDNN();
  // Plans are kept per (device, stream): nothing is planned yet for the stream created here.
  MhaProblem problem({16, 16, 192, 128, {1500, 17}, 2000}, /*causal=*/true, testing::FreshSeed());
  cudaStream_t stream;
  MLASERVE_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const KernelContext ctx{Backend::kCuda, stream};
  // Captures one call on `stream`, then replays the graph and waits; the call's status.
  auto capture = [&](MhaPrefillProvider provider) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    absl::Status status = MhaPrefill(problem.device(provider), ctx);
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return status;
  };

  const absl::Status refused = capture(MhaPrefillProvider::kCudnn);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;

  problem.Poison();
  const absl::Status ours = capture(MhaPrefillProvider::kAuto);
  ASSERT_TRUE(ours.ok()) << ours;
  problem.ExpectMatchesReference();

  problem.Poison();
  ASSERT_TRUE(MhaPrefill(problem.device(MhaPrefillProvider::kCudnn), ctx).ok());
  MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
  problem.ExpectMatchesReference();

  problem.Poison();
  const absl::Status replayed = capture(MhaPrefillProvider::kCudnn);
  ASSERT_TRUE(replayed.ok()) << replayed;
  problem.ExpectMatchesReference();
  MLASERVE_CUDA_ASSERT(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mlaserve::kernels
