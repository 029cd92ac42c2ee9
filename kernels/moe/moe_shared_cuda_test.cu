// The shared experts' gate_up on interleaved weights (FeedForward::RunGatedMlp, which runs the
// dense layers' MLP the same way): the fused Hopper product (MoeSharedGateUp) against the CPU
// reference and bit for bit against the same tile configuration unfused plus the SiLU pass; and
// the two other forms the layer uses on interleaved weights (the small-M GEMM's SiLU epilogue
// batched per 8-feature block; a GEMM in interleaved column order + SiluAndMul over rows of 16)
// against the stacked forms.
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activation/api.h"
#include "kernels/gemm/api.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_testing.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr int kBlock = 8;  // kInterleaved8's features per block
const KernelContext kCuda{Backend::kCuda, nullptr};

// silu(x gate^T) * (x up^T) on the CPU, products rounded to bf16 first (as the GPU forms do).
std::vector<float> ReferenceAct(const std::vector<float>& x, const std::vector<float>& gate_up, int rows,
                                int hidden, int inter) {
  std::vector<float> act(static_cast<size_t>(rows) * inter);
  auto round_bf16 = [](float v) { return testing::FromBf16(testing::ToBf16(std::vector<float>{v}))[0]; };
  for (int r = 0; r < rows; ++r) {
    for (int f = 0; f < inter; ++f) {
      double g = 0, u = 0;
      for (int h = 0; h < hidden; ++h) {
        const double xv = x[static_cast<size_t>(r) * hidden + h];
        g += xv * gate_up[static_cast<size_t>(f) * hidden + h];
        u += xv * gate_up[static_cast<size_t>(inter + f) * hidden + h];
      }
      const float gb = round_bf16(static_cast<float>(g)), ub = round_bf16(static_cast<float>(u));
      act[static_cast<size_t>(r) * inter + f] = gb / (1.0f + std::exp(-gb)) * ub;
    }
  }
  return act;
}

struct SharedData {
  std::vector<float> x, gate_up;  // bf16-exact values, gate_up stacked [2I, H]
  testing::DeviceBuffer d_x, d_stacked, d_interleaved;
};

SharedData MakeData(int rows, int hidden, int inter, uint64_t seed) {
  SharedData d;
  d.x = testing::RandomVector(static_cast<size_t>(rows) * hidden, seed);
  const float s = 2.0f / std::sqrt(static_cast<float>(hidden));
  d.gate_up = testing::RandomVector(static_cast<size_t>(2) * inter * hidden, seed + 1, -s, s);
  testing::RoundToBf16(d.x);
  testing::RoundToBf16(d.gate_up);
  d.d_x = testing::ToDeviceBf16(d.x);
  d.d_stacked = testing::ToDeviceBf16(d.gate_up);
  d.d_interleaved = testing::ToDeviceBf16(d.gate_up);
  MoePrepareParams prep;
  prep.num_experts = 1;
  prep.hidden = hidden;
  prep.inter = inter;
  prep.gate_up = d.d_interleaved.get();
  prep.layout = MoeGateUpLayout::kInterleaved8;
  const auto layout = MoePrepareExpertWeights(prep, kCuda);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return d;
}

// (rows, hidden, inter): tails of the 128/256-row and -column tiles, V2-Lite's shared experts
// (2 x 1408) and its first layer's dense MLP (10944; FeedForward::RunGatedMlp runs it here too)
// at a prefill's 4096 tokens (past the CPU check's size: bitwise against the unfused form only).
using SharedCase = std::tuple<int, int, int>;
class MoeSharedGateUpCudaTest : public ::testing::TestWithParam<SharedCase> {};

TEST_P(MoeSharedGateUpCudaTest, FusedMatchesCpuAndTheUnfusedProductBitwise) {
  if (!moe_cuda::Sm90Available()) GTEST_SKIP() << "not a Hopper GPU";
  const auto [rows, hidden, inter] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  SharedData d = MakeData(rows, hidden, inter, seed);
  const size_t act_n = static_cast<size_t>(rows) * inter;
  const bool check_cpu = static_cast<int64_t>(rows) * hidden * inter <= (int64_t{1} << 31);
  const std::vector<float> want = check_cpu ? ReferenceAct(d.x, d.gate_up, rows, hidden, inter) : std::vector<float>{};

  MoeSharedGateUpParams p;
  p.rows = rows;
  p.hidden = hidden;
  p.inter = inter;
  p.x = d.d_x.get();
  p.gate_up = d.d_interleaved.get();
  testing::DeviceBuffer ws(MoeSharedGateUpWorkspaceBytes() + 16);
  p.workspace = static_cast<char*>(ws.get()) + 16;  // not 256-byte aligned on purpose
  p.workspace_bytes = MoeSharedGateUpWorkspaceBytes();
  auto d_act = testing::PoisonedBf16(act_n);
  p.act = d_act.get();
  ASSERT_TRUE(MoeSharedGateUpRuns(p, Backend::kCuda));
  for (int v = 0; v < moe_cuda::kSm90Variants; ++v) {
    if (!moe_cuda::Sm90HasFusedSiluMul(v)) continue;
    SCOPED_TRACE(::testing::Message() << "sm90_variant=" << v);
    MLASERVE_CUDA_ASSERT(cudaMemset(d_act.get(), 0xff, act_n * 2));
    p.sm90_variant = v;
    const absl::Status st = MoeSharedGateUp(p, kCuda);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const auto fused = testing::ToHost<uint16_t>(d_act, act_n);
    if (check_cpu) {
      const auto got = testing::FromBf16(fused);
      EXPECT_LE(testing::RelativeError(got, want), 1e-2);
      EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);
    }
    // The same tile configuration unfused ([rows, 2I] in interleaved column order), then
    // SiluAndMul over its [gate 8 | up 8] pieces.
    auto d_product = testing::PoisonedBf16(static_cast<size_t>(rows) * 2 * inter);
    testing::DeviceBuffer args(moe_cuda::Sm90ArgsBlockBytes(1)), cutlass_ws(moe_cuda::Sm90WorkspaceBytes(1));
    moe_cuda::Sm90GroupedArgs g{};
    g.a = d.d_x.as<__nv_bfloat16>(); g.lda = hidden;
    g.w = d.d_interleaved.as<__nv_bfloat16>();
    g.d = d_product.get(); g.ldd = 2 * inter;
    g.n = 2 * inter; g.k = hidden; g.num_experts = 1; g.offsets = nullptr; g.rows = rows;
    g.args_block = args.get(); g.workspace = cutlass_ws.get();
    ASSERT_TRUE(moe_cuda::LaunchSm90Grouped(v, g, nullptr).ok());
    auto d_unfused = testing::PoisonedBf16(act_n);
    SiluAndMulParams sp;
    sp.dtype = DType::kBF16; sp.rows = rows * (inter / kBlock); sp.dim = kBlock;
    sp.x = d_product.get(); sp.x_stride = 2 * kBlock; sp.out = d_unfused.get(); sp.out_stride = kBlock;
    ASSERT_TRUE(SiluAndMul(sp, kCuda).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const auto unfused = testing::ToHost<uint16_t>(d_unfused, act_n);
    size_t differ = 0;
    for (size_t i = 0; i < act_n; ++i) differ += fused[i] != unfused[i];
    EXPECT_EQ(differ, 0u) << "of " << act_n << " values differ from the unfused product + SiLU pass";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeSharedGateUpCudaTest,
                         ::testing::Values(SharedCase{1024, 256, 136}, SharedCase{1111, 520, 264},
                                           SharedCase{2048, 2048, 2816}, SharedCase{4096, 2048, 10944}));

// Below kMoeSharedGateUpMinRows the layer uses the small-M GEMM (batched per block) or a GEMM
// + SiluAndMul over rows of 16; both on interleaved weights give the stacked forms' bits.
TEST(MoeSharedInterleavedFormsCudaTest, MatchTheStackedForms) {
  const int hidden = 512, inter = 264;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const int rows : {1, 5, 8, 40, 300}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows);
    SharedData d = MakeData(rows, hidden, inter, seed + rows);
    const size_t act_n = static_cast<size_t>(rows) * inter;
    const auto want = ReferenceAct(d.x, d.gate_up, rows, hidden, inter);
    // Small-M, stacked: one GEMM with the SiLU epilogue; interleaved: a batch entry per block.
    GemmParams stacked;
    stacked.dtype = DType::kBF16;
    stacked.m = rows; stacked.n = 2 * inter; stacked.k = hidden;
    stacked.a = d.d_x.get(); stacked.lda = hidden;
    stacked.b = d.d_stacked.get(); stacked.ldb = hidden;
    stacked.ldc = inter;
    stacked.epilogue = GemmEpilogue::kSiluMul;
    GemmParams blocks = stacked;
    blocks.n = 2 * kBlock; blocks.batch = inter / kBlock;
    blocks.stride_a = 0; blocks.b = d.d_interleaved.get(); blocks.stride_b = int64_t{2} * kBlock * hidden;
    blocks.stride_c = kBlock;
    if (GemmRunsSmallM(stacked, Backend::kCuda)) {
      ASSERT_TRUE(GemmRunsSmallM(blocks, Backend::kCuda));
      auto d_a = testing::PoisonedBf16(act_n), d_b = testing::PoisonedBf16(act_n);
      stacked.c = d_a.get();
      blocks.c = d_b.get();
      ASSERT_TRUE(Gemm(stacked, kCuda).ok());
      ASSERT_TRUE(Gemm(blocks, kCuda).ok());
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      const auto a = testing::ToHost<uint16_t>(d_a, act_n), b = testing::ToHost<uint16_t>(d_b, act_n);
      EXPECT_TRUE(a == b) << "the batched small-M form differs from the stacked one";
      EXPECT_LE(testing::RelativeError(testing::FromBf16(b), want), 1e-2);
    }
    // GEMM + SiluAndMul: stacked (pairs inter apart) and interleaved (rows of 16).
    for (const bool interleaved : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (interleaved ? "interleaved" : "stacked") << " GEMM + SiluAndMul");
      auto d_product = testing::PoisonedBf16(static_cast<size_t>(rows) * 2 * inter);
      auto d_act = testing::PoisonedBf16(act_n);
      GemmParams gemm;
      gemm.dtype = DType::kBF16;
      gemm.m = rows; gemm.n = 2 * inter; gemm.k = hidden;
      gemm.a = d.d_x.get(); gemm.lda = hidden;
      gemm.b = interleaved ? d.d_interleaved.get() : d.d_stacked.get(); gemm.ldb = hidden;
      gemm.c = d_product.get(); gemm.ldc = 2 * inter;
      gemm.path = GemmPath::kCublasLt;
      ASSERT_TRUE(Gemm(gemm, kCuda).ok());
      SiluAndMulParams sp;
      sp.dtype = DType::kBF16;
      sp.rows = interleaved ? rows * (inter / kBlock) : rows;
      sp.dim = interleaved ? kBlock : inter;
      sp.x = d_product.get(); sp.x_stride = interleaved ? 2 * kBlock : 2 * inter;
      sp.out = d_act.get(); sp.out_stride = interleaved ? kBlock : inter;
      ASSERT_TRUE(SiluAndMul(sp, kCuda).ok());
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      const auto got = testing::ToHostBf16(d_act, act_n);
      EXPECT_LE(testing::RelativeError(got, want), 1e-2);
      EXPECT_LE(testing::MaxScaledError(got, want), 5e-2);
    }
  }
}

}  // namespace
}  // namespace mlaserve::kernels
