// mla_decode with the value projection (MlaValueProjection: W_UV applied by the combine kernel)
// on fresh random inputs, every output poisoned with NaN first:
//   - against an f32 host reference: the CPU attention (MlaDecodeCpu on the same bf16-rounded
//     inputs), each latent row rounded to bf16 as the combine writes it, times W_UV;
//   - against the unfused path the engine runs without it: MlaDecode, then the per-head GEMM over
//     its latent output (same latent and LSE bits, values within one bf16 rounding);
// over 16 and 128 heads, v_dim 128 / 64 (and 24 at the fixtures' rank 64), batch 1-8, ragged
// contexts of 1 to 8192 keys (every batch of several requests has one shorter than a chunk) in
// permuted pages, the SM-count plans, hand-made chunk plans of 1-40 pages a split (some planned
// past the longest context), and the balanced schedule (with requests in one piece, which the
// combine reads back from the latent output); plus two runs bitwise equal, the predicate's
// answers, and the refusals.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/env_switch.h"
#include "kernels/gemm/api.h"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_decode/balanced_schedule.h"
#include "kernels/testing/cuda_latent.h"

namespace mlaserve::kernels {
namespace {

// kv_b_proj's layout: per head kNope rows of W_UK, then v_dim rows of W_UV, each rank wide.
constexpr int kNope = 128;
// A padded output layout: gaps after each head's values and each token's heads, which must keep
// their poison.
constexpr int kHeadPad = 8, kTokenPad = 24;
constexpr uint16_t kBf16Nan = 0x7fc0;

struct ValueCase {
  int batch = 1, heads = 16, qpr = 1, max_ctx = 1024, v_dim = 128, rank = 512;
  // 0: PlanMlaDecode for `schedule` on plan_sms SMs (0: this device's); else a chunk plan of this
  // many pages a split over plan_factor x the longest context's pages.
  int pages_per_split = 0, plan_factor = 1;
  MlaDecodeSchedule schedule = MlaDecodeSchedule::kChunks;
  int plan_sms = 0;
  bool padded_out = false;
  // Fixed contexts (the balanced schedule's pieces); empty: random, up to max_ctx.
  std::vector<int> contexts;
};

void PrintTo(const ValueCase& v, std::ostream* os) {
  *os << "b" << v.batch << "_h" << v.heads << "_q" << v.qpr << "_ctx" << v.max_ctx << "_v" << v.v_dim << "_r"
      << v.rank << "_pps" << v.pages_per_split << "x" << v.plan_factor << "_sched"
      << static_cast<int>(v.schedule) << "_sms" << v.plan_sms << (v.padded_out ? "_padded" : "");
}

// W_UV as the engine views it: inside a kv_b_proj-shaped weight, bf16-rounded on the host.
struct ValueWeight {
  int heads = 0, v_dim = 0, rank = 0;
  std::vector<float> host;  // [heads, kNope + v_dim, rank]
  testing::DeviceBuffer device;

  int64_t head_stride() const { return static_cast<int64_t>(kNope + v_dim) * rank; }
  float at(int h, int c, int k) const { return host[h * head_stride() + static_cast<int64_t>(kNope + c) * rank + k]; }
  const void* w_uv() const { return device.as<uint16_t>() + static_cast<int64_t>(kNope) * rank; }
};

ValueWeight MakeValueWeight(int heads, int v_dim, int rank, uint64_t seed) {
  ValueWeight w;
  w.heads = heads;
  w.v_dim = v_dim;
  w.rank = rank;
  w.host = testing::RandomVector(static_cast<size_t>(heads) * w.head_stride(), seed);
  testing::RoundToBf16(w.host);
  w.device = testing::ToDeviceBf16(w.host);
  return w;
}

// The output layout of one case: [T, H, v_dim] contiguous, or with gaps.
struct ValueLayout {
  int64_t head_stride = 0, token_stride = 0;
  size_t elems = 0;
  ValueLayout(int total_q, int heads, int v_dim, bool padded) {
    head_stride = v_dim + (padded ? kHeadPad : 0);
    token_stride = heads * head_stride + (padded ? kTokenPad : 0);
    elems = static_cast<size_t>(total_q) * token_stride;
  }
};

// value[t, h, c] = sum_k bf16(latent[t, h, k]) * W_UV[h][c][k] in double: the attention's f32
// reference rounded to bf16 as the combine writes it, then the projection.
std::vector<float> ReferenceValues(const testing::LatentBatch& c, const std::vector<float>& latent,
                                   const ValueWeight& w) {
  std::vector<float> rounded = latent;
  testing::RoundToBf16(rounded);
  std::vector<float> out(static_cast<size_t>(c.total_q()) * c.num_heads * w.v_dim);
  for (int t = 0; t < c.total_q(); ++t) {
    for (int h = 0; h < c.num_heads; ++h) {
      const float* row = &rounded[(static_cast<size_t>(t) * c.num_heads + h) * c.rank];
      for (int col = 0; col < w.v_dim; ++col) {
        double sum = 0;
        for (int k = 0; k < c.rank; ++k) sum += static_cast<double>(row[k]) * w.at(h, col, k);
        out[(static_cast<size_t>(t) * c.num_heads + h) * w.v_dim + col] = static_cast<float>(sum);
      }
    }
  }
  return out;
}

int DeviceSms() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 0;
  }
  return sms;
}

// A random batch for the case (its seed printed on failure by the caller).
testing::LatentBatch MakeBatch(const ValueCase& v, uint64_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> lq(v.batch, v.qpr), prefix(v.batch);
  if (!v.contexts.empty()) {
    lq.assign(v.contexts.size(), v.qpr);
    prefix.clear();
    for (int ctx : v.contexts) prefix.push_back(std::max(ctx - v.qpr, 0));
  } else {
    for (auto& x : prefix) x = static_cast<int>(rng() % (v.max_ctx - v.qpr + 1));
    prefix[0] = v.max_ctx - v.qpr;  // the longest
    if (v.batch > 1) prefix[v.batch - 1] = static_cast<int>(rng() % 40);  // shorter than any chunk
  }
  const int rope = v.rank == 512 ? 64 : 16;
  auto c = testing::MakeLatentBatch(lq, prefix, v.heads, v.rank, rope, seed);
  testing::PoisonSlotsPastLength(c);
  testing::RoundLatentBatch(c);
  return c;
}

absl::StatusOr<MlaDecodePlan> PlanFor(const ValueCase& v, const testing::LatentBatch& c) {
  const int max_k = *std::max_element(c.lk.begin(), c.lk.end());
  if (v.pages_per_split == 0) {
    return PlanMlaDecode({c.batch, v.heads, v.qpr, v.rank, c.rope, max_k, v.plan_sms > 0 ? v.plan_sms : DeviceSms(),
                          v.schedule});
  }
  const int pages = PagesFor(max_k) * v.plan_factor;
  MlaDecodePlan plan;
  plan.num_splits = (pages + v.pages_per_split - 1) / v.pages_per_split;
  plan.chunk_tokens = v.pages_per_split * kPageSize;
  plan.workspace_bytes = MlaDecodeChunkWorkspaceBytes(c.batch, v.heads * v.qpr, v.rank, plan.num_splits, false);
  return plan;
}

// One MlaDecode call with the workspace and every output poisoned (the value buffer with `fill`
// bytes), then the outputs.
struct DecodeOutputs {
  std::vector<uint16_t> latent, values;
  std::vector<float> lse;
};

DecodeOutputs RunDecode(testing::DeviceLatent& d, const MlaDecodePlan& plan, const MlaValueProjection* proj,
                        size_t value_elems, int fill) {
  DecodeOutputs r;
  testing::DeviceBuffer workspace(plan.workspace_bytes);
  EXPECT_EQ(cudaMemset(workspace.get(), fill, workspace.bytes()), cudaSuccess);
  EXPECT_EQ(cudaMemset(d.out.get(), fill, d.out.bytes()), cudaSuccess);
  EXPECT_EQ(cudaMemset(d.lse.get(), fill, d.lse.bytes()), cudaSuccess);
  if (proj != nullptr) EXPECT_EQ(cudaMemset(proj->out, fill, value_elems * sizeof(uint16_t)), cudaSuccess);
  const auto st = MlaDecode(d.params, plan, workspace.get(), KernelContext{Backend::kCuda, nullptr}, proj);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.latent = testing::ToHost<uint16_t>(d.out, d.out.bytes() / sizeof(uint16_t));
  r.lse = testing::ToHost<float>(d.lse, d.lse.bytes() / sizeof(float));
  if (proj != nullptr) {
    r.values.resize(value_elems);
    EXPECT_EQ(cudaMemcpy(r.values.data(), proj->out, value_elems * sizeof(uint16_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return r;
}

class MlaDecodeValueTest : public ::testing::TestWithParam<std::tuple<ValueCase, LatentKernel>> {};

TEST_P(MlaDecodeValueTest, MatchesReferenceAndUnfusedPath) {
  const ValueCase v = std::get<0>(GetParam());
  const LatentKernel kernel = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto c = MakeBatch(v, seed);
  std::vector<float> want, want_lse;
  MlaParams hp = testing::HostLatentParams(c, want, want_lse);
  ASSERT_TRUE(MlaDecode(hp, MlaDecodePlan{}, nullptr, KernelContext{}).ok());
  const ValueWeight w = MakeValueWeight(v.heads, v.v_dim, v.rank, seed + 7);
  const std::vector<float> want_values = ReferenceValues(c, want, w);

  testing::DeviceLatent d(c);
  d.params.kernel = kernel;  // kAuto: the Hopper kernels where they apply
  auto plan = PlanFor(v, c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (v.schedule == MlaDecodeSchedule::kBalanced) {
    if (!mla_decode_internal::RunsBalancedSchedule(d.params, *plan)) {
      GTEST_SKIP() << "the balanced schedule is the wgmma kernel's";
    }
  } else {
    ASSERT_GT(plan->num_splits, 1) << "the case should have a combine";
  }
  const int64_t tokens = static_cast<int64_t>(c.batch) * v.qpr;
  EXPECT_EQ(MlaDecodeTakesValueProjection(d.params, *plan, KernelContext{Backend::kCuda, nullptr}),
            tokens <= kMlaFusedValueMaxTokens && !EnvSwitchedOff("MLASERVE_MLA_FUSED_UV"));

  const ValueLayout layout(c.total_q(), v.heads, v.v_dim, v.padded_out);
  testing::DeviceBuffer values(layout.elems * sizeof(uint16_t));
  const MlaValueProjection proj{w.w_uv(), v.rank, w.head_stride(), v.v_dim, values.get(), layout.token_stride,
                                layout.head_stride};
  const DecodeOutputs fused = RunDecode(d, *plan, &proj, layout.elems, 0xff);
  // The latent output and LSE are still written, as without the projection.
  testing::ExpectLatentMatches(c, d, want, want_lse);

  // Every value written (no NaN), nothing in the gaps, within bf16 error of the reference.
  std::vector<float> got(want_values.size());
  size_t gap_written = 0;
  for (size_t i = 0; i < layout.elems; ++i) {
    const size_t t = i / layout.token_stride, rest = i % layout.token_stride;
    const size_t h = rest / layout.head_stride, col = rest % layout.head_stride;
    if (h >= static_cast<size_t>(v.heads) || col >= static_cast<size_t>(v.v_dim)) {
      gap_written += fused.values[i] != 0xffff;
      continue;
    }
    got[(t * v.heads + h) * v.v_dim + col] = Bf16ToFloat(fused.values[i]);
  }
  EXPECT_EQ(gap_written, 0u) << "values written outside [T, H, v_dim]";
  EXPECT_EQ(testing::CountNan(got), 0u);
  EXPECT_LE(testing::RelativeError(got, want_values), 1e-2);

  // The unfused path: MlaDecode alone, then the per-head GEMM over its latent output.
  const DecodeOutputs plain = RunDecode(d, *plan, nullptr, 0, 0x7f);
  EXPECT_TRUE(plain.latent == fused.latent) << "the latent output differs from the combine's without W_UV";
  EXPECT_EQ(std::memcmp(plain.lse.data(), fused.lse.data(), plain.lse.size() * sizeof(float)), 0);
  testing::DeviceBuffer gemm_out = testing::PoisonedBf16(want_values.size());
  GemmParams g;
  g.dtype = DType::kBF16;
  g.m = c.total_q();
  g.n = v.v_dim;
  g.k = v.rank;
  g.batch = v.heads;
  g.a = d.out.get();
  g.lda = static_cast<int64_t>(v.heads) * v.rank;
  g.stride_a = v.rank;
  g.b = w.w_uv();
  g.ldb = v.rank;
  g.stride_b = w.head_stride();
  g.b_transposed = true;
  g.c = gemm_out.get();
  g.ldc = static_cast<int64_t>(v.heads) * v.v_dim;
  g.stride_c = v.v_dim;
  const auto st = Gemm(g, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto unfused = testing::ToHostBf16(gemm_out, want_values.size());
  EXPECT_LE(testing::RelativeError(got, unfused), 1e-2);
  // Both round an f32 sum of the same products: at most one bf16 step apart, plus the f32
  // summation orders' difference, small against the largest value.
  float scale = 0.0f;
  for (float x : unfused) scale = std::max(scale, std::fabs(x));
  size_t apart = 0;
  for (size_t i = 0; i < unfused.size(); ++i) {
    const float bound = std::ldexp(std::max(std::fabs(got[i]), std::fabs(unfused[i])), -7) + 1e-4f * scale;
    apart += !(std::fabs(got[i] - unfused[i]) <= bound);
  }
  EXPECT_EQ(apart, 0u) << "of " << unfused.size() << " values, beyond one bf16 step of the per-head GEMM's";
}

std::vector<ValueCase> SweepCases() {
  std::vector<ValueCase> cases;
  // The SM-count chunk plans at batch 1-8 (16 heads: V2-Lite, V3 at TP 8; 128 heads: V3).
  for (const auto& [batch, heads, ctx, v_dim] : std::vector<std::tuple<int, int, int, int>>{
           {1, 16, 8192, 128}, {1, 16, 1024, 128}, {2, 16, 4096, 128}, {4, 16, 2048, 128}, {8, 16, 1024, 128},
           {1, 16, 1100, 64}, {8, 16, 8192, 64}, {1, 128, 8192, 128}, {1, 128, 1024, 128}, {2, 128, 3000, 128},
           {4, 128, 2000, 64}, {8, 128, 1500, 128}}) {
    ValueCase v;
    v.batch = batch;
    v.heads = heads;
    v.max_ctx = ctx;
    v.v_dim = v_dim;
    cases.push_back(v);
  }
  ValueCase v;
  v.batch = 3;
  v.qpr = 2;  // 2 queries a request (speculative decode)
  v.max_ctx = 2000;
  cases.push_back(v);
  v = ValueCase{};
  v.batch = 4;
  v.heads = 8;
  v.max_ctx = 700;
  v.rank = 64;  // the fixtures' widths: half a warp's vectors, v_dim not a multiple of 16
  v.v_dim = 24;
  v.padded_out = true;
  cases.push_back(v);
  // Hand-made chunk plans: one page a split (a plan for twice the context: its later chunks are
  // empty), 2-3 pages, and 40 pages (most requests in one chunk, the shortest in part of one).
  for (const auto& [batch, heads, ctx, v_dim, pps, factor, padded] :
       std::vector<std::tuple<int, int, int, int, int, int, bool>>{{1, 16, 64, 128, 1, 2, false},
                                                                   {2, 16, 129, 128, 1, 4, false},
                                                                   {4, 16, 1500, 128, 2, 1, true},
                                                                   {8, 16, 3000, 64, 3, 2, false},
                                                                   {2, 128, 700, 128, 1, 1, true},
                                                                   {5, 16, 4000, 128, 40, 1, false}}) {
    ValueCase h;
    h.batch = batch;
    h.heads = heads;
    h.max_ctx = ctx;
    h.v_dim = v_dim;
    h.pages_per_split = pps;
    h.plan_factor = factor;
    h.padded_out = padded;
    cases.push_back(h);
  }
  // The balanced schedule: on this device's SMs, and on 3-7 (parts that walk several requests,
  // requests cut into pieces, and requests in one piece that the attention kernel wrote).
  v = ValueCase{};
  v.batch = 8;
  v.max_ctx = 8192;
  v.schedule = MlaDecodeSchedule::kBalanced;
  cases.push_back(v);
  v.heads = 128;
  v.batch = 2;
  v.max_ctx = 3000;
  cases.push_back(v);
  v = ValueCase{};
  v.schedule = MlaDecodeSchedule::kBalanced;
  v.contexts = {6000, 3, 70, 64, 128, 1, 2500, 65};
  v.batch = static_cast<int>(v.contexts.size());
  v.max_ctx = 6000;
  for (const int sms : {3, 5}) {
    v.plan_sms = sms;
    cases.push_back(v);
  }
  v.heads = 128;
  v.v_dim = 64;
  v.plan_sms = 7;
  v.padded_out = true;
  cases.push_back(v);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, MlaDecodeValueTest,
                         ::testing::Combine(::testing::ValuesIn(SweepCases()),
                                            ::testing::Values(LatentKernel::kAuto, LatentKernel::kMmaSync)));

// Two fused runs with the workspace and the outputs poisoned differently give the same bytes.
class MlaDecodeValueDeterminismTest : public ::testing::TestWithParam<ValueCase> {};

TEST_P(MlaDecodeValueDeterminismTest, TwoRunsAreBitwiseEqual) {
  const ValueCase v = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto c = MakeBatch(v, seed);
  const ValueWeight w = MakeValueWeight(v.heads, v.v_dim, v.rank, seed + 7);
  testing::DeviceLatent d(c);
  auto plan = PlanFor(v, c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (!mla_decode_internal::CombinesEveryRow(d.params, *plan)) {
    GTEST_SKIP() << "no combine in this plan on this device (the balanced schedule is the wgmma kernel's)";
  }
  const ValueLayout layout(c.total_q(), v.heads, v.v_dim, false);
  testing::DeviceBuffer values(layout.elems * sizeof(uint16_t));
  const MlaValueProjection proj{w.w_uv(), v.rank, w.head_stride(), v.v_dim, values.get(), layout.token_stride,
                                layout.head_stride};
  const DecodeOutputs a = RunDecode(d, *plan, &proj, layout.elems, 0x00);
  const DecodeOutputs b = RunDecode(d, *plan, &proj, layout.elems, 0xff);
  EXPECT_EQ(testing::CountNan(testing::FromBf16(a.values)), 0u);
  EXPECT_TRUE(a.values == b.values) << "values differ between two runs";
  EXPECT_TRUE(a.latent == b.latent) << "latent outputs differ between two runs";
}

std::vector<ValueCase> DeterminismCases() {
  std::vector<ValueCase> cases;
  ValueCase v;
  v.max_ctx = 8192;
  cases.push_back(v);  // batch 1, 16 heads
  v.batch = 8;
  v.max_ctx = 4000;
  cases.push_back(v);
  v.batch = 1;
  v.heads = 128;
  v.max_ctx = 8192;
  cases.push_back(v);
  v = ValueCase{};
  v.batch = 8;
  v.max_ctx = 8192;
  v.schedule = MlaDecodeSchedule::kBalanced;
  cases.push_back(v);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, MlaDecodeValueDeterminismTest, ::testing::ValuesIn(DeterminismCases()));

// Where MlaDecodeTakesValueProjection says yes, and what MlaDecode refuses on the GPU (the
// contract's checks that need no device are in mla_decode_ref_test.cc).
TEST(MlaDecodeValuePlan, TakesItWhereTheCombineRunsForEveryRow) {
  const bool switched_off = EnvSwitchedOff("MLASERVE_MLA_FUSED_UV");
  const KernelContext cuda{Backend::kCuda, nullptr};
  const int sms = DeviceSms();
  ASSERT_GT(sms, 0);
  ValueCase v;
  auto c = MakeBatch(v, 1);
  testing::DeviceLatent d(c);
  auto plan = PlanMlaDecode({1, 16, 1, 512, 64, 1024, sms, MlaDecodeSchedule::kChunks});
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->num_splits, 1);
  EXPECT_EQ(MlaDecodeTakesValueProjection(d.params, *plan, cuda), !switched_off);
  EXPECT_FALSE(MlaDecodeTakesValueProjection(d.params, *plan, KernelContext{}));  // the CPU backend
  MlaParams f32 = d.params;
  f32.dtype = DType::kF32;
  EXPECT_FALSE(MlaDecodeTakesValueProjection(f32, *plan, cuda));
  // 9 requests of 16 heads: 144 rows.
  MlaParams wide = d.params;
  wide.batch = 9;
  EXPECT_FALSE(MlaDecodeTakesValueProjection(wide, *plan, cuda));
  // One chunk: the attention kernel writes the output, no combine.
  EXPECT_FALSE(MlaDecodeTakesValueProjection(d.params, MlaDecodePlan{}, cuda));
  // The balanced schedule: taken where the Hopper kernel runs it; the mma.sync kernel runs a
  // balanced plan as its chunks (one here).
  auto balanced = PlanMlaDecode({1, 16, 1, 512, 64, 1024, sms, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(balanced.ok());
  ASSERT_GT(balanced->num_parts, 0);
  balanced->num_splits = 1;
  EXPECT_EQ(MlaDecodeTakesValueProjection(d.params, *balanced, cuda), LatentWgmmaApplies(d.params) && !switched_off);
  MlaParams mma = d.params;
  mma.kernel = LatentKernel::kMmaSync;
  EXPECT_FALSE(MlaDecodeTakesValueProjection(mma, *balanced, cuda));

  // MlaDecode refuses the projection on a plan without a combine, and writes nothing.
  const ValueWeight w = MakeValueWeight(16, 128, 512, 2);
  testing::DeviceBuffer values = testing::PoisonedBf16(static_cast<size_t>(16) * 128);
  const MlaValueProjection proj{w.w_uv(), 512, w.head_stride(), 128, values.get(), 16 * 128, 128};
  const auto one_chunk = MlaDecode(d.params, MlaDecodePlan{}, nullptr, cuda, &proj);
  EXPECT_EQ(one_chunk.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(one_chunk.message().find("plan.num_splits=1"), std::string::npos) << one_chunk.message();
  testing::DeviceBuffer workspace(balanced->workspace_bytes);
  const auto mma_balanced = MlaDecode(mma, *balanced, workspace.get(), cuda, &proj);
  EXPECT_EQ(mma_balanced.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mma_balanced.message().find("plan.num_parts="), std::string::npos) << mma_balanced.message();
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto untouched = testing::ToHost<uint16_t>(values, static_cast<size_t>(16) * 128);
  EXPECT_EQ(std::count(untouched.begin(), untouched.end(), kBf16Nan), 16 * 128);
}

}  // namespace
}  // namespace mlaserve::kernels
