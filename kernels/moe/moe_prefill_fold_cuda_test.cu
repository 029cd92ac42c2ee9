// The prefill MoE block's fold (kernels/moe/api.h, MoeExpertsFoldsAddendAndNorm): the grouped
// paths (kSm90, kTiled) summing an addend (the shared experts' output, computed before the
// call) into the combine and running the residual add + RMSNorm as its epilogue, against the
// unfolded form the layer runs otherwise: the routed combine into out, out + addend rounded to
// bf16 (as the shared down GEMM with beta 1 adds it), then kernels/norm's RmsNorm. With the
// addend within a few bf16 ulps (its roundings sit elsewhere: api.h says where), without one
// bit for bit; out left as poisoned; thousands of tokens and a few, uniform, hot and ragged
// routings (experts with no rows), rows of one vector a thread and of several. Then the queries
// and the refusals.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_testing.h"
#include "kernels/norm/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::DeviceBuffer;
using testing::Routing;

const KernelContext kCuda{Backend::kCuda, nullptr};
constexpr uint16_t kPoison = 0x7fc0;  // testing::PoisonedBf16's NaN
constexpr float kEps = 1e-6f;
// MaxScaledError bound of the folded form against the unfolded one: a few bf16 roundings
// (2^-8 relative each) moved (the addend's, the routed sum's), then the residual's and the
// norm's. A missing or doubly added addend is off by a tenth or more.
constexpr double kBf16Bound = 1.0 / 64;
// The same for the normed output y: the roundings before the norm (the routed sum's, the
// addend's, the residual's on the unfolded side; the residual's on the folded one) pass through
// the norm's scale, and both sides round y once more, so up to ~6 half-steps (2^-8) of max |y|.
// Measured on the H200 over 6-8 M values per shape: up to 4.1 (2026-11-29, ninth session).
constexpr double kBf16NormBound = 6.0 / 256;

// One prefill-shaped MoE call on the device: x, the routed experts in the layout this device's
// fastest path reads (MoePrepareExpertWeights' choice, as the loader makes it), a routing, an
// addend standing for the shared experts' output, a residual and a norm weight.
struct PrefillBlock {
  int T, H, I, E, k;
  std::vector<float> addend, residual, norm_w;
  std::vector<uint16_t> addend_bf16;
  DeviceBuffer d_x, d_gu, d_dn, d_ids, d_w, d_addend, d_norm_w;
  MoeGateUpLayout layout = MoeGateUpLayout::kStacked;

  PrefillBlock(int tokens, int hidden, int inter, int experts, int top_k, Routing routing, uint64_t seed)
      : T(tokens), H(hidden), I(inter), E(experts), k(top_k) {
    const float su = 1.0f / std::sqrt(static_cast<float>(H)), sd = 1.0f / std::sqrt(static_cast<float>(I));
    d_x = testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(T) * H, seed));
    d_gu = testing::ToDeviceBf16(
        testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -2 * su, 2 * su));
    d_dn = testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -2 * sd, 2 * sd));
    d_ids = testing::ToDevice(testing::MakeRouting(T, E, k, routing, seed + 3));
    d_w = testing::ToDevice(testing::RandomVector(static_cast<size_t>(T) * k, seed + 4, 0.1f, 1.0f));
    addend = testing::RandomVector(static_cast<size_t>(T) * H, seed + 5, -0.5f, 0.5f);
    residual = testing::RandomVector(static_cast<size_t>(T) * H, seed + 6, -2.0f, 2.0f);
    norm_w = testing::RandomVector(H, seed + 7, 0.5f, 1.5f);
    for (auto* v : {&addend, &residual, &norm_w}) testing::RoundToBf16(*v);
    addend_bf16 = testing::ToBf16(addend);
    d_addend = testing::ToDevice(addend_bf16);
    d_norm_w = testing::ToDeviceBf16(norm_w);
    MoePrepareParams prep;
    prep.num_experts = E; prep.hidden = H; prep.inter = I; prep.gate_up = d_gu.get();
    const auto prepared = MoePrepareExpertWeights(prep, kCuda);
    EXPECT_TRUE(prepared.ok()) << prepared.status();
    if (prepared.ok()) layout = *prepared;
  }

  MoeExpertsParams Experts(MoeExpertsPath path) const {
    MoeExpertsParams p;
    p.dtype = DType::kBF16;
    p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
    p.x = d_x.get(); p.gate_up = d_gu.get(); p.down = d_dn.get(); p.gate_up_layout = layout;
    p.topk_ids = d_ids.as<int32_t>(); p.topk_weights = d_w.as<float>();
    p.path = path;
    return p;
  }
};

struct Outputs {
  std::vector<uint16_t> out, residual, y;
};

// One MoeExperts call of `p` on poisoned out and y and a fresh copy of the block's residual;
// with_addend / with_norm: the block's addend, the norm epilogue.
void RunCall(const PrefillBlock& b, MoeExpertsParams p, bool with_addend, bool with_norm, Outputs* r) {
  const size_t th = static_cast<size_t>(b.T) * b.H;
  auto d_out = testing::PoisonedBf16(th), d_res = testing::ToDeviceBf16(b.residual), d_y = testing::PoisonedBf16(th);
  if (with_addend) p.addend = b.d_addend.get();
  if (with_norm) p.norm = {d_res.get(), b.d_norm_w.get(), d_y.get(), kEps};
  DeviceBuffer ws(MoeExpertsWorkspaceBytes(p));
  MLASERVE_CUDA_ASSERT(cudaMemset(ws.get(), 0xff, ws.bytes()));
  p.out = d_out.get();
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  const absl::Status st = MoeExperts(p, kCuda);
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  r->out = testing::ToHost<uint16_t>(d_out, th);
  r->residual = testing::ToHost<uint16_t>(d_res, th);
  r->y = testing::ToHost<uint16_t>(d_y, th);
}

// kernels/norm's RmsNorm of `moe` [T, H] bf16 into a fresh copy of the block's residual: the
// layer's form after an unfolded block (residual += moe; y = rmsnorm(residual)).
void NormApart(const PrefillBlock& b, const std::vector<uint16_t>& moe, Outputs* r) {
  const size_t th = static_cast<size_t>(b.T) * b.H;
  auto d_moe = testing::ToDevice(moe), d_res = testing::ToDeviceBf16(b.residual), d_y = testing::PoisonedBf16(th);
  RmsNormParams n;
  n.dtype = DType::kBF16;
  n.rows = b.T; n.dim = b.H; n.x = d_moe.get(); n.x_stride = b.H; n.residual = d_res.get();
  n.weight = b.d_norm_w.get(); n.y = d_y.get(); n.y_stride = b.H; n.eps = kEps;
  const absl::Status st = RmsNorm(n, kCuda);
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  r->residual = testing::ToHost<uint16_t>(d_res, th);
  r->y = testing::ToHost<uint16_t>(d_y, th);
}

bool AllPoisoned(const std::vector<uint16_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint16_t x) { return x == kPoison; });
}

// (tokens, hidden, inter, experts, top_k, routing, path)
using FoldCase = std::tuple<int, int, int, int, int, Routing, MoeExpertsPath>;
class MoePrefillFoldTest : public ::testing::TestWithParam<FoldCase> {};

TEST_P(MoePrefillFoldTest, AddendAndNormEpilogueMatchTheUnfoldedForm) {
  const auto [T, H, I, E, k, routing, path] = GetParam();
  if (path == MoeExpertsPath::kSm90 && !moe_cuda::Sm90Available()) GTEST_SKIP() << "not a Hopper GPU";
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " routing=" << testing::RoutingName(routing));
  const PrefillBlock b(T, H, I, E, k, routing, seed);
  const MoeExpertsParams p = b.Experts(path);
  const size_t th = static_cast<size_t>(T) * H;

  MoeExpertsParams asked = p;
  asked.addend = b.d_addend.get();
  asked.norm = {b.d_x.get(), b.d_norm_w.get(), b.d_x.get(), kEps};  // aligned; only the queries read them
  ASSERT_TRUE(MoeExpertsFoldsAddendAndNorm(asked, Backend::kCuda));
  EXPECT_FALSE(MoeExpertsFoldsAddendAndNorm(asked, Backend::kCpu));
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(asked, Backend::kCuda));

  // Unfolded: the routed combine into out; out + addend, rounded; kernels/norm's RmsNorm.
  Outputs routed, apart, apart_no_addend;
  ASSERT_NO_FATAL_FAILURE(RunCall(b, p, false, false, &routed));
  ASSERT_EQ(testing::CountNan(testing::FromBf16(routed.out)), 0u);
  std::vector<float> moe = testing::FromBf16(routed.out);
  for (size_t i = 0; i < th; ++i) moe[i] += b.addend[i];
  ASSERT_NO_FATAL_FAILURE(NormApart(b, testing::ToBf16(moe), &apart));
  ASSERT_NO_FATAL_FAILURE(NormApart(b, routed.out, &apart_no_addend));

  // Folded, with the addend: within bf16 roundings of the unfolded form, out untouched.
  Outputs folded;
  ASSERT_NO_FATAL_FAILURE(RunCall(b, p, true, true, &folded));
  EXPECT_TRUE(AllPoisoned(folded.out)) << "the norm epilogue must leave out untouched";
  const std::vector<float> res = testing::FromBf16(folded.residual), y = testing::FromBf16(folded.y);
  EXPECT_EQ(testing::CountNan(y), 0u);
  EXPECT_LE(testing::MaxScaledError(res, testing::FromBf16(apart.residual)), kBf16Bound);
  EXPECT_LE(testing::MaxScaledError(y, testing::FromBf16(apart.y)), kBf16NormBound);
  EXPECT_LE(testing::RelativeError(y, testing::FromBf16(apart.y)), 4e-3);
  // Without the addend the same values are off by it (so the bound above can see one missing).
  EXPECT_GT(testing::MaxScaledError(res, testing::FromBf16(apart_no_addend.residual)), 4 * kBf16Bound);

  // The norm alone (a block without shared experts): the combine + RmsNorm, bit for bit.
  Outputs normed;
  ASSERT_NO_FATAL_FAILURE(RunCall(b, p, false, true, &normed));
  EXPECT_TRUE(AllPoisoned(normed.out)) << "the norm epilogue must leave out untouched";
  EXPECT_TRUE(normed.residual == apart_no_addend.residual) << "residual differs from the combine + RmsNorm";
  EXPECT_TRUE(normed.y == apart_no_addend.y) << "normed output differs from the combine + RmsNorm";
}

// V2-Lite's width and routing at a prefill's tokens (one vector a thread, 256 threads), hot and
// ragged (most experts without rows); V3's width (896 threads); a few tokens, one token; odd
// widths (17 vectors: one warp, most lanes idle); past 8192 (1152 vectors over 1024 threads: the
// several-vectors kernel). Narrow inter: the combine and its epilogue are what is under test.
INSTANTIATE_TEST_SUITE_P(
    Shapes, MoePrefillFoldTest,
    ::testing::Values(FoldCase{4096, 2048, 128, 64, 6, Routing::kUniform, MoeExpertsPath::kSm90},
                      FoldCase{4096, 2048, 128, 64, 6, Routing::kRagged, MoeExpertsPath::kSm90},
                      FoldCase{3000, 2048, 128, 64, 6, Routing::kHot, MoeExpertsPath::kSm90},
                      FoldCase{2048, 7168, 128, 16, 8, Routing::kRagged, MoeExpertsPath::kSm90},
                      FoldCase{37, 256, 128, 32, 6, Routing::kRagged, MoeExpertsPath::kSm90},
                      FoldCase{1, 512, 64, 8, 2, Routing::kUniform, MoeExpertsPath::kSm90},
                      FoldCase{1000, 136, 72, 8, 2, Routing::kUniform, MoeExpertsPath::kTiled},
                      FoldCase{5000, 1024, 64, 16, 4, Routing::kHot, MoeExpertsPath::kTiled},
                      FoldCase{300, 9216, 64, 8, 3, Routing::kRagged, MoeExpertsPath::kTiled},
                      FoldCase{300, 9216, 64, 8, 3, Routing::kRagged, MoeExpertsPath::kSm90}));

// Where the fold is not taken, and refused when asked for anyway: the stream path (decode
// steps: their own fold), with shared experts in the call, with the baseline combine; the
// decode fold never takes an addend; the combine's launcher refuses an addend without the norm
// epilogue and in the early-loads kernel.
TEST(MoePrefillFoldRefusalTest, RefusesWhereNotFolded) {
  const PrefillBlock b(64, 256, 64, 16, 4, Routing::kUniform, testing::FreshSeed());
  const size_t th = static_cast<size_t>(b.T) * b.H;
  auto d_out = testing::PoisonedBf16(th), d_res = testing::ToDeviceBf16(b.residual), d_y = testing::PoisonedBf16(th);
  MoeExpertsParams p = b.Experts(MoeExpertsPath::kTiled);
  p.addend = b.d_addend.get();
  p.norm = {d_res.get(), b.d_norm_w.get(), d_y.get(), kEps};
  p.out = d_out.get();
  DeviceBuffer ws(MoeExpertsWorkspaceBytes(p));
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  ASSERT_TRUE(MoeExpertsFoldsAddendAndNorm(p, Backend::kCuda));

  MoeExpertsParams stream = p;
  stream.path = MoeExpertsPath::kStream;
  EXPECT_FALSE(MoeExpertsFoldsAddendAndNorm(stream, Backend::kCuda));
  EXPECT_FALSE(MoeExpertsFoldsSharedAndNorm(stream, Backend::kCuda));
  const absl::Status st = MoeExperts(stream, kCuda);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("an addend"), std::string::npos) << st;
  MoeExpertsParams stream_norm = stream;  // the decode fold, as before: the norm without addend
  stream_norm.addend = nullptr;
  EXPECT_TRUE(MoeExpertsFoldsSharedAndNorm(stream_norm, Backend::kCuda));

  MoeExpertsParams shared = p;
  shared.shared = {b.d_gu.get(), b.d_dn.get(), b.I};
  EXPECT_FALSE(MoeExpertsFoldsAddendAndNorm(shared, Backend::kCuda));
  EXPECT_EQ(MoeExperts(shared, kCuda).code(), absl::StatusCode::kInvalidArgument);
  MoeExpertsParams baseline = p;
  baseline.baseline.combine = true;
  EXPECT_FALSE(MoeExpertsFoldsAddendAndNorm(baseline, Backend::kCuda));
  EXPECT_EQ(MoeExperts(baseline, kCuda).code(), absl::StatusCode::kInvalidArgument);
  MoeExpertsParams misaligned = p;
  misaligned.addend = static_cast<const char*>(b.d_addend.get()) + 2;
  EXPECT_FALSE(MoeExpertsFoldsAddendAndNorm(misaligned, Backend::kCuda));
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_TRUE(AllPoisoned(testing::ToHost<uint16_t>(d_y, th))) << "a refused call wrote y";

  moe_cuda::CombineArgs ca{};
  ca.num_tokens = b.T; ca.top_k = b.k; ca.hidden = b.H;
  ca.addend = static_cast<const __nv_bfloat16*>(b.d_addend.get());
  EXPECT_EQ(moe_cuda::LaunchCombine(ca, nullptr).code(), absl::StatusCode::kInvalidArgument);  // no norm
  ca.residual = d_res.as<__nv_bfloat16>();
  ca.norm_weight = b.d_norm_w.as<__nv_bfloat16>();
  ca.norm_y = d_y.as<__nv_bfloat16>();
  ca.early_loads_kernel = true;
  EXPECT_EQ(moe_cuda::LaunchCombine(ca, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::kernels
