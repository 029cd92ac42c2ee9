// mla_decode CUDA vs the CPU reference (MlaDecodeCpu on the same bf16-rounded inputs): 1 or 2
// query tokens per request, 16 and 128 heads, ragged contexts up to 8k in permuted pages, with
// the plan the GPU's SM count gives (split-KV + combine for small batches) and with no split,
// each with both latent kernels (mma.sync, and the Hopper wgmma kernel where it applies, i.e.
// rank 512 on an sm_90 device) and, for the wgmma kernel, both ways of cutting the keys (chunks,
// the balanced schedule); cache slots past each context are NaN; two runs of the split path
// bitwise equal; the layers of a decode step sharing one prebuilt metadata (the schedule or
// the chunk order) bitwise equal to the plain call; and the chunk length picked on the device from
// the lengths against a host reference of its model.
#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <queue>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gtest/gtest.h"
#include "kernels/common/pdl.cuh"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_decode/balanced_schedule.h"
#include "kernels/mla_decode/chunk_pick.h"
#include "kernels/mla_prefill/latent_tiling.h"
#include "kernels/testing/cuda_latent.h"

namespace mlaserve::kernels {
namespace {

// Prefixes of `batch` requests of `qpr` queries, each uniform in [0, max_ctx - qpr], the first
// at the longest, so that a plan for max_ctx covers the batch exactly.
std::vector<int> RaggedPrefixes(int batch, int qpr, int max_ctx, std::mt19937& rng) {
  std::vector<int> prefix(batch);
  for (auto& x : prefix) x = static_cast<int>(rng() % (max_ctx - qpr + 1));
  prefix[0] = max_ctx - qpr;
  return prefix;
}

// A batch as these tests draw it -- NaN in every cache slot past a request's length, q and cache
// rounded to bf16 -- and the CPU reference's output and LSE for it.
struct ReferencedBatch {
  testing::LatentBatch c;
  std::vector<float> want, want_lse;
};
ReferencedBatch MakeReferencedBatch(const std::vector<int>& lq, const std::vector<int>& prefix, int heads, int rank,
                                    int rope, uint64_t seed) {
  ReferencedBatch r{testing::MakeLatentBatch(lq, prefix, heads, rank, rope, seed), {}, {}};
  testing::PoisonSlotsPastLength(r.c);
  testing::RoundLatentBatch(r.c);
  MlaParams hp = testing::HostLatentParams(r.c, r.want, r.want_lse);
  const auto st = MlaDecode(hp, MlaDecodePlan{}, nullptr, KernelContext{});
  EXPECT_TRUE(st.ok()) << "the CPU reference: " << st;
  return r;
}

// (batch, heads, q per request, max context, latent rank, use the SM-count plan)
using DecodeCase = std::tuple<int, int, int, int, int, bool>;
class MlaDecodeCudaTest
    : public ::testing::TestWithParam<std::tuple<DecodeCase, LatentKernel, MlaDecodeSchedule>> {};

TEST_P(MlaDecodeCudaTest, MatchesCpuReference) {
  const auto [batch, heads, qpr, max_ctx, rank, split] = std::get<0>(GetParam());
  const LatentKernel kernel = std::get<1>(GetParam());
  const MlaDecodeSchedule schedule = std::get<2>(GetParam());
  const bool hopper = kernel == LatentKernel::kWgmma || kernel == LatentKernel::kWgmma64;
  if (schedule == MlaDecodeSchedule::kBalanced && (!hopper || !split)) {
    GTEST_SKIP() << "the balanced schedule is the wgmma kernel's, with the SM-count plan";
  }
  const int rope = rank == 512 ? 64 : 16;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> lq(batch, qpr), prefix(batch);
  for (auto& x : prefix) x = static_cast<int>(rng() % (max_ctx - qpr + 1));
  const ReferencedBatch ref = MakeReferencedBatch(lq, prefix, heads, rank, rope, seed);
  const testing::LatentBatch& c = ref.c;

  int device = 0, sms = 0;
  MLASERVE_CUDA_ASSERT(cudaGetDevice(&device));
  MLASERVE_CUDA_ASSERT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int max_k = *std::max_element(c.lk.begin(), c.lk.end());
  auto plan = PlanMlaDecode({batch, heads, qpr, rank, rope, max_k, split ? sms : 0, schedule});
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (schedule == MlaDecodeSchedule::kBalanced) EXPECT_GT(plan->num_parts, 0);
  if (schedule == MlaDecodeSchedule::kChunks) EXPECT_EQ(plan->num_parts, 0);
  if (schedule == MlaDecodeSchedule::kChunks && split && batch == 1 && max_k >= 1024) {
    EXPECT_GT(plan->num_splits, 1);
  }
  if (schedule == MlaDecodeSchedule::kChunks && split) {
    // More chunk CTAs than SMs: longest first (the order kernel, then the CTAs in its order).
    const int64_t rows = static_cast<int64_t>(heads) * qpr;
    const int64_t rows_per_cta = mla_internal::LatentRowsPerCta(rows);
    const int64_t ctas = batch * ((rows + rows_per_cta - 1) / rows_per_cta) * plan->num_splits;
    EXPECT_EQ(plan->longest_first, ctas > sms) << ctas << " CTAs on " << sms << " SMs";
  }
  testing::DeviceBuffer workspace(plan->workspace_bytes);
  testing::DeviceLatent d(c);
  if (hopper && !LatentWgmmaApplies(d.params)) {
    GTEST_SKIP() << "the wgmma latent kernels do not apply here (rank " << rank
                 << ", or no sm_90a kernel for this device)";
  }
  d.params.kernel = kernel;
  const auto st = MlaDecode(d.params, *plan, workspace.get(), KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  testing::ExpectLatentMatches(c, d, ref.want, ref.want_lse);
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, MlaDecodeCudaTest,
    ::testing::Combine(::testing::Values(DecodeCase{1, 16, 1, 8192, 512, true}, DecodeCase{1, 128, 1, 8192, 512, true},
                      DecodeCase{1, 128, 2, 5000, 512, true}, DecodeCase{5, 16, 2, 3000, 512, true},
                      DecodeCase{5, 16, 1, 3000, 512, false}, DecodeCase{64, 16, 1, 1000, 512, true},
                      DecodeCase{64, 128, 1, 600, 512, true}, DecodeCase{64, 128, 2, 300, 512, false},
                      DecodeCase{7, 4, 1, 700, 32, true}, DecodeCase{3, 16, 2, 2000, 64, true},
                      DecodeCase{2, 32, 1, 2, 512, true},
                      DecodeCase{3, 6, 1, 700, 40, true},  // a rank that is no power of two
                      DecodeCase{1, 16, 1, 1100, 512, true}, DecodeCase{4, 128, 1, 3000, 512, true},
                      // more chunk CTAs than SMs: the longest-first order
                      DecodeCase{150, 16, 1, 2000, 512, true}, DecodeCase{80, 128, 2, 1500, 512, true},
                      DecodeCase{140, 4, 1, 900, 64, true},
                      // few rows (the few-rows kernel's 16, partly filled): 5 heads x 2, 12 heads,
                      // 8 heads, 8 heads x 2; and 200 requests of 16 heads
                      DecodeCase{6, 5, 2, 1500, 512, true}, DecodeCase{3, 12, 1, 2500, 512, true},
                      DecodeCase{2, 8, 1, 300, 512, false}, DecodeCase{4, 8, 2, 900, 512, true},
                      DecodeCase{200, 16, 1, 700, 512, true}),
                       ::testing::Values(LatentKernel::kMmaSync, LatentKernel::kWgmma, LatentKernel::kWgmma64),
                       ::testing::Values(MlaDecodeSchedule::kChunks, MlaDecodeSchedule::kBalanced)));

// Chunk plans built by hand: splits of 1-3 pages (the small-batch plans, many short splits) and
// plans for a longer context than the batch holds, as a decode graph plans for its width (the
// later chunks hold no keys: the wgmma kernel's CTAs for them return at once and the combine does
// not read them), in grid order or longest first (the order kernel sorts the chunks, empty ones
// last). The workspace is poisoned with NaN, so a partial the combine should not read, or an
// order entry not written, would show. Both kernels; the 64-row Hopper kernel with its requests of
// one chunk written directly (the default) and as partials (MLASERVE_MLA_CHUNK_DIRECT=0), with the
// same values: a lone partial merges to itself (weight 1). (batch, heads, q per request, max
// context, pages per split, plan context as a multiple of the longest, longest first)
using ChunkCase = std::tuple<int, int, int, int, int, int, bool>;
class MlaDecodeChunkTest : public ::testing::TestWithParam<std::tuple<ChunkCase, LatentKernel>> {};

TEST_P(MlaDecodeChunkTest, MatchesCpuReference) {
  const auto [batch, heads, qpr, max_ctx, pages_per_split, plan_factor, longest_first] = std::get<0>(GetParam());
  const LatentKernel kernel = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const std::vector<int> lq(batch, qpr), prefix = RaggedPrefixes(batch, qpr, max_ctx, rng);
  const ReferencedBatch ref = MakeReferencedBatch(lq, prefix, heads, 512, 64, seed);
  const testing::LatentBatch& c = ref.c;
  testing::DeviceLatent d(c);
  if ((kernel == LatentKernel::kWgmma || kernel == LatentKernel::kWgmma64) && !LatentWgmmaApplies(d.params)) {
    GTEST_SKIP() << "no sm_90a kernel for this device";
  }
  d.params.kernel = kernel;
  const int pages = PagesFor(max_ctx) * plan_factor;
  MlaDecodePlan plan;
  plan.num_splits = (pages + pages_per_split - 1) / pages_per_split;
  plan.chunk_tokens = pages_per_split * kPageSize;
  plan.longest_first = longest_first;
  plan.workspace_bytes = MlaDecodeChunkWorkspaceBytes(batch, heads * qpr, 512, plan.num_splits, longest_first);
  testing::DeviceBuffer workspace(plan.workspace_bytes);
  std::vector<float> direct_out, direct_lse;
  for (const char* direct : {"1", "0"}) {
    SCOPED_TRACE(::testing::Message() << "MLASERVE_MLA_CHUNK_DIRECT=" << direct);
    testing::ScopedEnv env("MLASERVE_MLA_CHUNK_DIRECT", direct);
    MLASERVE_CUDA_ASSERT(cudaMemset(workspace.get(), 0xff, workspace.bytes()));  // NaN partials
    MLASERVE_CUDA_ASSERT(cudaMemset(d.out.get(), 0xff, d.out.bytes()));
    MLASERVE_CUDA_ASSERT(cudaMemset(d.lse.get(), 0xff, d.lse.bytes()));
    const auto st = MlaDecode(d.params, plan, workspace.get(), KernelContext{Backend::kCuda, nullptr});
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    testing::ExpectLatentMatches(c, d, ref.want, ref.want_lse);
    const auto out = testing::FromBf16(testing::ToHost<uint16_t>(d.out, d.out.bytes() / sizeof(uint16_t)));
    const auto lse = testing::ToHost<float>(d.lse, d.lse.bytes() / sizeof(float));
    if (direct_out.empty()) {
      direct_out = out;
      direct_lse = lse;
    } else {
      EXPECT_TRUE(out == direct_out) << "the output differs with the partials";
      EXPECT_TRUE(lse == direct_lse) << "the LSE differs with the partials";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    ShortSplits, MlaDecodeChunkTest,
    ::testing::Combine(::testing::Values(ChunkCase{1, 16, 1, 1025, 1, 2, false}, ChunkCase{1, 16, 1, 1024, 2, 1, false},
                                         ChunkCase{1, 128, 1, 700, 1, 1, false}, ChunkCase{4, 16, 1, 2000, 2, 2, false},
                                         ChunkCase{3, 128, 2, 1500, 3, 2, false}, ChunkCase{2, 16, 2, 129, 1, 4, false},
                                         ChunkCase{8, 128, 1, 64, 1, 2, false}, ChunkCase{40, 128, 1, 3000, 3, 1, true},
                                         ChunkCase{9, 16, 2, 2000, 2, 2, true}, ChunkCase{5, 128, 1, 700, 64, 1, true},
                                         ChunkCase{3, 16, 1, 3000, 40, 1, false},
                                         // an uneven cut beyond one wave, longest first (64-page
                                         // chunks: only the longer requests in two)
                                         ChunkCase{24, 128, 1, 5000, 64, 1, true}),
                       ::testing::Values(LatentKernel::kMmaSync, LatentKernel::kWgmma, LatentKernel::kWgmma64)));

// The Hopper kernel's balanced schedule with few persistent CTAs (a plan for a 3-, 5- or 7-SM
// device), so that parts walk several requests and cut others into pieces: one long request,
// several of a page or less, lengths on page edges. Same reference check as above.
// (heads, q per request, SMs the plan is made for)
using BalancedCase = std::tuple<int, int, int>;
class MlaDecodeBalancedTest : public ::testing::TestWithParam<BalancedCase> {};

TEST_P(MlaDecodeBalancedTest, MatchesCpuReference) {
  const auto [heads, qpr, sms] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const std::vector<int> contexts = {6000, 3, 70, 64, 128, 1, 2500, 65, 700, 4100};
  std::vector<int> lq(contexts.size(), qpr), prefix;
  for (int ctx : contexts) prefix.push_back(std::max(ctx - qpr, 0));
  const ReferencedBatch ref = MakeReferencedBatch(lq, prefix, heads, 512, 64, seed);
  const testing::LatentBatch& c = ref.c;
  const int max_k = *std::max_element(c.lk.begin(), c.lk.end());
  auto plan = PlanMlaDecode(
      {static_cast<int>(contexts.size()), heads, qpr, 512, 64, max_k, sms, MlaDecodeSchedule::kBalanced});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->num_parts, 0);
  testing::DeviceLatent d(c);
  if (!LatentWgmmaApplies(d.params)) GTEST_SKIP() << "no sm_90a kernel for this device";
  // The segment kernel's outputs staged and stored by bulk copies (the default), then stored from
  // its accumulators (MLASERVE_MLA_BULK_OUT=0), each with the partials in bf16 (the default) and
  // in f32 (MLASERVE_MLA_BF16_PARTIALS=0), outputs and partials poisoned before each.
  const char* const kUnset = nullptr;
  for (const auto& [bulk_out, bf16_partials] :
       {std::pair{kUnset, kUnset}, std::pair{kUnset, "0"}, std::pair{"0", kUnset}, std::pair{"0", "0"}}) {
    SCOPED_TRACE(::testing::Message() << "MLASERVE_MLA_BULK_OUT=" << (bulk_out ? bulk_out : "(unset)")
                                      << " MLASERVE_MLA_BF16_PARTIALS=" << (bf16_partials ? bf16_partials : "(unset)"));
    testing::ScopedEnv bulk("MLASERVE_MLA_BULK_OUT", bulk_out);
    testing::ScopedEnv partials("MLASERVE_MLA_BF16_PARTIALS", bf16_partials);
    testing::DeviceBuffer workspace(plan->workspace_bytes);
    MLASERVE_CUDA_ASSERT(cudaMemset(workspace.get(), 0xff, workspace.bytes()));  // NaN partials
    MLASERVE_CUDA_ASSERT(cudaMemset(d.out.get(), 0xff, d.out.bytes()));
    MLASERVE_CUDA_ASSERT(cudaMemset(d.lse.get(), 0xff, d.lse.bytes()));
    const auto st = MlaDecode(d.params, *plan, workspace.get(), KernelContext{Backend::kCuda, nullptr});
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    testing::ExpectLatentMatches(c, d, ref.want, ref.want_lse);
  }
}

INSTANTIATE_TEST_SUITE_P(FewParts, MlaDecodeBalancedTest,
                         ::testing::Values(BalancedCase{16, 1, 3}, BalancedCase{16, 2, 5},
                                           BalancedCase{128, 1, 7}, BalancedCase{128, 2, 5},
                                           BalancedCase{16, 1, 132}, BalancedCase{128, 1, 132}));

// The combine's two kernels (mla_combine.cu): a CTA of 4 warps per row (MlaCombineKernel), and a
// warp per row (MlaCombineRowsKernel, where the plan expects few pieces a row) doing the same
// arithmetic piece for piece. Each case runs with the first forced (MLASERVE_MLA_COMBINE_ROWS=0),
// the second forced (=1: also for rows of many pieces, its later rounds; in its full form,
// MLASERVE_MLA_COMBINE_LEAN=0, and its lean form, =1: a row of more than 4 pieces merged one
// column at a time; both also with the row blocks along the grid's x, MLASERVE_MLA_COMBINE_BATCH_MAJOR=0),
// the plan's choice (and it with the full form), and
// the few-rows kernel's chunk CTAs storing from their accumulators rather than through staged
// rows (MLASERVE_MLA_STAGED_EPILOGUE=0; the partials, or with one split the output itself), and
// the 64-row kernel's P stored by 32-bit stores instead of stmatrix at one query token a request
// (MLASERVE_MLA_STMATRIX=0), and the 64-row kernel's segment outputs stored from its accumulators
// instead of staged and stored by bulk copies (MLASERVE_MLA_BULK_OUT=0): the same output and LSE
// bytes, and the CPU reference's values. All of it twice: with the balanced schedule's partials in
// bf16 on the 64-row kernel (the default), and in f32 (MLASERVE_MLA_BF16_PARTIALS=0; other bytes
// than bf16's).
// Chunk plans of 4 to 18 splits (a partial last CTA of rows: 10 and 5 rows a request; 128 heads
// at one and two query tokens), latent rank 64 (lanes past the rank), the balanced schedule for a
// 3-, 5- or 7-SM device (requests in one or a few pieces) and for 132 SMs at batch 4 (tens of
// pieces a request). Outputs, LSEs and workspace are poisoned differently before each run.
// (batch, heads, q per request, max context, rank, pages per split (0: balanced), SMs of the plan)
using CombineCase = std::tuple<int, int, int, int, int, int, int>;
class MlaDecodeCombineTest : public ::testing::TestWithParam<CombineCase> {};

TEST_P(MlaDecodeCombineTest, BothKernelsWriteTheSameBytes) {
  const auto [batch, heads, qpr, max_ctx, rank, pages_per_split, sms] = GetParam();
  const int rope = rank == 512 ? 64 : 16;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> lq(batch, qpr), prefix = RaggedPrefixes(batch, qpr, max_ctx, rng);
  if (pages_per_split == 0 && batch > 2) prefix[1] = std::min(prefix[1], 3);  // a short request too
  const ReferencedBatch ref = MakeReferencedBatch(lq, prefix, heads, rank, rope, seed);
  const testing::LatentBatch& c = ref.c;
  testing::DeviceLatent d(c);
  if (pages_per_split == 0 && !LatentWgmmaApplies(d.params)) GTEST_SKIP() << "no sm_90a kernel for this device";
  const int max_k = *std::max_element(c.lk.begin(), c.lk.end());
  MlaDecodePlan plan;
  if (pages_per_split == 0) {
    auto planned = PlanMlaDecode({batch, heads, qpr, rank, rope, max_k, sms, MlaDecodeSchedule::kBalanced});
    ASSERT_TRUE(planned.ok()) << planned.status();
    plan = *planned;
    ASSERT_GT(plan.num_parts, 0);
  } else {
    plan.num_splits = (PagesFor(max_ctx) + pages_per_split - 1) / pages_per_split;
    plan.chunk_tokens = pages_per_split * kPageSize;
    plan.workspace_bytes = MlaDecodeChunkWorkspaceBytes(batch, heads * qpr, rank, plan.num_splits, false);
  }
  const size_t rows = static_cast<size_t>(c.total_q()) * c.num_heads;
  // The runs: the 4-warp combine, the rows kernel forced, the defaults, and the few-rows kernel's
  // chunk CTAs storing straight from their accumulators instead of through the staged rows.
  struct Setting {
    const char* combine_rows;
    const char* staged_epilogue;
    const char* stmatrix = nullptr;
    const char* combine_lean = nullptr;
    const char* batch_major = nullptr;
    const char* bulk_out = nullptr;
  };
  constexpr Setting kSettings[] = {{"0", nullptr},
                                   {"1", nullptr, nullptr, "0"},
                                   {nullptr, nullptr},
                                   {nullptr, "0"},
                                   {nullptr, nullptr, "0"},
                                   {"1", nullptr, nullptr, "1"},
                                   {nullptr, nullptr, nullptr, "0"},
                                   {"1", nullptr, nullptr, "0", "0"},
                                   {"1", nullptr, nullptr, "1", "0"},
                                   {nullptr, nullptr, nullptr, nullptr, nullptr, "0"},
                                   {"1", nullptr, "0", "1", nullptr, "0"}};
  constexpr int kRuns = static_cast<int>(std::size(kSettings));
  // Every setting with the balanced 64-row kernel's partials in bf16 (the default), then in f32
  // (MLASERVE_MLA_BF16_PARTIALS=0): the same bytes within each, the reference's values in both.
  for (const char* bf16_partials : {static_cast<const char*>(nullptr), "0"}) {
    SCOPED_TRACE(::testing::Message() << "MLASERVE_MLA_BF16_PARTIALS="
                                      << (bf16_partials ? bf16_partials : "(unset)"));
    testing::ScopedEnv partials("MLASERVE_MLA_BF16_PARTIALS", bf16_partials);
    std::vector<uint16_t> out[kRuns];
    std::vector<float> lse[kRuns];
    for (int run = 0; run < kRuns; ++run) {
      const Setting& setting = kSettings[run];
      SCOPED_TRACE(::testing::Message() << "MLASERVE_MLA_COMBINE_ROWS="
                                        << (setting.combine_rows ? setting.combine_rows : "(unset)")
                                        << " MLASERVE_MLA_STAGED_EPILOGUE="
                                        << (setting.staged_epilogue ? setting.staged_epilogue : "(unset)")
                                        << " MLASERVE_MLA_STMATRIX="
                                        << (setting.stmatrix ? setting.stmatrix : "(unset)")
                                        << " MLASERVE_MLA_COMBINE_LEAN="
                                        << (setting.combine_lean ? setting.combine_lean : "(unset)")
                                        << " MLASERVE_MLA_COMBINE_BATCH_MAJOR="
                                        << (setting.batch_major ? setting.batch_major : "(unset)")
                                        << " MLASERVE_MLA_BULK_OUT="
                                        << (setting.bulk_out ? setting.bulk_out : "(unset)"));
      testing::ScopedEnv combine("MLASERVE_MLA_COMBINE_ROWS", setting.combine_rows);
      testing::ScopedEnv combine_lean("MLASERVE_MLA_COMBINE_LEAN", setting.combine_lean);
      testing::ScopedEnv batch_major("MLASERVE_MLA_COMBINE_BATCH_MAJOR", setting.batch_major);
      testing::ScopedEnv staged("MLASERVE_MLA_STAGED_EPILOGUE", setting.staged_epilogue);
      testing::ScopedEnv stmatrix("MLASERVE_MLA_STMATRIX", setting.stmatrix);
      testing::ScopedEnv bulk_out("MLASERVE_MLA_BULK_OUT", setting.bulk_out);
      testing::DeviceBuffer workspace(plan.workspace_bytes);
      const int poison = run == 1 ? 0x7f : 0xff;
      MLASERVE_CUDA_ASSERT(cudaMemset(workspace.get(), poison, workspace.bytes()));
      MLASERVE_CUDA_ASSERT(cudaMemset(d.out.get(), poison, d.out.bytes()));
      MLASERVE_CUDA_ASSERT(cudaMemset(d.lse.get(), poison, d.lse.bytes()));
      const auto st = MlaDecode(d.params, plan, workspace.get(), KernelContext{Backend::kCuda, nullptr});
      ASSERT_TRUE(st.ok()) << st;
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      testing::ExpectLatentMatches(c, d, ref.want, ref.want_lse);
      out[run] = testing::ToHost<uint16_t>(d.out, rows * c.rank);
      lse[run] = testing::ToHost<float>(d.lse, rows);
    }
    for (int run = 1; run < kRuns; ++run) {
      EXPECT_TRUE(out[run] == out[0]) << "run " << run << ": outputs differ from the first run's";
      EXPECT_EQ(std::memcmp(lse[run].data(), lse[0].data(), rows * sizeof(float)), 0)
          << "run " << run << ": LSEs differ from the first run's";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pieces, MlaDecodeCombineTest,
    ::testing::Values(CombineCase{3, 16, 1, 2000, 512, 8, 0}, CombineCase{2, 128, 2, 1500, 512, 3, 0},
                      CombineCase{1, 16, 1, 1100, 512, 1, 0}, CombineCase{4, 5, 2, 900, 512, 2, 0},
                      CombineCase{3, 4, 1, 700, 64, 2, 0}, CombineCase{10, 16, 1, 3000, 512, 0, 3},
                      CombineCase{10, 128, 1, 3000, 512, 0, 7}, CombineCase{6, 8, 2, 2000, 512, 0, 5},
                      CombineCase{4, 16, 1, 6000, 512, 0, 132}, CombineCase{3, 128, 1, 1500, 512, 3, 0},
                      // one split: the few-rows kernel writes the output (bf16) itself
                      CombineCase{3, 16, 1, 700, 512, 64, 0}, CombineCase{4, 5, 2, 300, 512, 8, 0}));

// Copies n 16-byte words after the PDL wait: in the second run below it writes q right before the
// attention kernel (launched with PDL), as the absorbed query's GEMM does in a decode step.
__global__ void CopyAfterWaitKernel(const uint4* src, uint4* dst, int64_t n) {
  cuda::PdlEnter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// Copies rows (row_words 16-byte words each) of src to dst after the PDL wait, the rows listed
// by index: below it writes each request's newest cache rows right before the attention kernel,
// as the decode step's rope launch does when it also absorbs the query.
__global__ void CopyRowsAfterWaitKernel(const uint4* src, uint4* dst, const int64_t* rows, int n_rows,
                                        int row_words) {
  cuda::PdlEnter();
  const int64_t n = static_cast<int64_t>(n_rows) * row_words;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = rows[i / row_words] * row_words + i % row_words;
    dst[at] = src[at];
  }
}

// Queues CopyAfterWaitKernel over `bytes` (whole 16-byte words) / CopyRowsAfterWaitKernel over
// the listed rows of `row_bytes`, launched with PDL.
cuda::LaunchShape CopyShape() {
  cuda::LaunchShape shape;
  shape.grid = dim3(8);
  shape.block = dim3(256);
  return shape;
}
absl::Status LaunchCopyAfterWait(const void* src, void* dst, size_t bytes) {
  return cuda::LaunchPdl("copy after wait", CopyShape(), CopyAfterWaitKernel, static_cast<const uint4*>(src),
                         static_cast<uint4*>(dst), static_cast<int64_t>(bytes / sizeof(uint4)));
}
absl::Status LaunchCopyRowsAfterWait(const void* src, void* dst, const int64_t* rows, int n_rows, int row_bytes) {
  return cuda::LaunchPdl("rows copy after wait", CopyShape(), CopyRowsAfterWaitKernel, static_cast<const uint4*>(src),
                         static_cast<uint4*>(dst), rows, n_rows, row_bytes / static_cast<int>(sizeof(uint4)));
}

// Determinism of the split-KV path: two runs on the same inputs, with the workspace and the
// outputs poisoned differently each time, give the same output and LSE bytes. The combine
// merges the splits in split order (no atomics), and rows past a request's heads (the
// fixture's 4 heads fill 4 of a CTA's 16 rows) read only zero-filled shared memory. The second
// run sets inputs_before_wait (the chunk CTAs start their first pages' loads before the PDL wait)
// with q poisoned and written back by a PDL kernel just before the call: q must still be read
// only after the wait.
// (batch, heads, q per request, context, latent rank)
// The kernel is kAuto: the wgmma kernel where it applies.
using DeterminismCase = std::tuple<int, int, int, int, int>;
class MlaDecodeDeterminismTest
    : public ::testing::TestWithParam<std::tuple<DeterminismCase, MlaDecodeSchedule>> {};

TEST_P(MlaDecodeDeterminismTest, TwoRunsAreBitwiseEqual) {
  const auto [batch, heads, qpr, ctx, rank] = std::get<0>(GetParam());
  const MlaDecodeSchedule schedule = std::get<1>(GetParam());
  const int rope = rank == 512 ? 64 : 16;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::vector<int> lq(batch, qpr), prefix(batch);
  for (int b = 0; b < batch; ++b) prefix[b] = ctx - qpr - 37 * b;
  auto c = testing::MakeLatentBatch(lq, prefix, heads, rank, rope, seed);
  testing::RoundLatentBatch(c);
  int device = 0, sms = 0;
  MLASERVE_CUDA_ASSERT(cudaGetDevice(&device));
  MLASERVE_CUDA_ASSERT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int max_k = *std::max_element(c.lk.begin(), c.lk.end());
  auto plan = PlanMlaDecode({batch, heads, qpr, rank, rope, max_k, sms, schedule});
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (schedule == MlaDecodeSchedule::kChunks) {
    EXPECT_GT(plan->num_splits, 1) << "the case should exercise split-KV + combine";
  }
  testing::DeviceLatent d(c);
  const size_t rows = static_cast<size_t>(c.total_q()) * c.num_heads;
  std::vector<uint16_t> out[2];
  std::vector<float> lse[2];
  ASSERT_EQ(d.q.bytes() % sizeof(uint4), 0u);
  testing::DeviceBuffer q_copy(d.q.bytes());
  MLASERVE_CUDA_ASSERT(cudaMemcpy(q_copy.get(), d.q.get(), d.q.bytes(), cudaMemcpyDeviceToDevice));
  for (int run = 0; run < 2; ++run) {
    testing::DeviceBuffer workspace(plan->workspace_bytes);
    MLASERVE_CUDA_ASSERT(cudaMemset(workspace.get(), run == 0 ? 0x00 : 0xff, workspace.bytes()));
    MLASERVE_CUDA_ASSERT(cudaMemset(d.out.get(), run == 0 ? 0xff : 0x7f, d.out.bytes()));
    MLASERVE_CUDA_ASSERT(cudaMemset(d.lse.get(), run == 0 ? 0xff : 0x7f, d.lse.bytes()));
    MlaParams params = d.params;
    if (run == 1) {
      params.inputs_before_wait = true;
      MLASERVE_CUDA_ASSERT(cudaMemset(d.q.get(), 0xff, d.q.bytes()));
      const auto copied = LaunchCopyAfterWait(q_copy.get(), d.q.get(), d.q.bytes());
      ASSERT_TRUE(copied.ok()) << copied;
    }
    const auto st = MlaDecode(params, *plan, workspace.get(), KernelContext{Backend::kCuda, nullptr});
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    out[run] = testing::ToHost<uint16_t>(d.out, rows * c.rank);
    lse[run] = testing::ToHost<float>(d.lse, rows);
  }
  EXPECT_EQ(testing::CountNan(testing::FromBf16(out[0])), 0u);
  EXPECT_TRUE(out[0] == out[1]) << "outputs differ between two runs";
  EXPECT_EQ(std::memcmp(lse[0].data(), lse[1].data(), rows * sizeof(float)), 0) << "LSEs differ";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MlaDecodeDeterminismTest,
    ::testing::Combine(::testing::Values(DeterminismCase{1, 128, 1, 8192, 512}, DeterminismCase{3, 16, 2, 4000, 512},
                                         DeterminismCase{1, 4, 1, 700, 64}),  // fixture widths
                       ::testing::Values(MlaDecodeSchedule::kChunks, MlaDecodeSchedule::kBalanced)));

// The metadata that a decode step's layers share (MlaDecodeBuildMetadata once per batch, then
// every layer's MlaDecode with it): two layers -- their own q and cache, the same block table and
// lengths (the same device arrays) -- run with the prebuilt metadata give, byte for byte, the
// output and LSE of the plain call of that layer (which builds its own schedule or order): same
// kernels, same schedule, same order. The metadata is poisoned (0xff) before its build, the
// workspace and the outputs before each run, differently for the plain runs and the others, so a
// record the build leaves unwritten or an output the call leaves unwritten shows; and a call
// given the metadata leaves the workspace's metadata part (where the plain call builds its own)
// as it was, so it launched no schedule or order kernel of its own. Then layer 0 once more with
// inputs_before_wait, q poisoned and written back by a PDL kernel launched just before the call
// and the metadata rebuilt into a fresh poisoned buffer just before that kernel: the chunk
// kernels read the order before their PDL wait, two launches after its build (api.h); and once
// with old_rows_before_wait, each request's newest cache rows poisoned too and written back by
// the last kernel before the call (the few-rows kernel loads the older pages before its wait).
// (batch, heads, q per request, max context, schedule, pages per split of a forced longest-first
// chunk plan (0: PlanMlaDecode's plan for the device), whether the plan has metadata)
using MetadataCase = std::tuple<int, int, int, int, MlaDecodeSchedule, int, bool>;
class MlaDecodeMetadataTest : public ::testing::TestWithParam<std::tuple<MetadataCase, LatentKernel>> {};

struct DecodeBytes {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  std::vector<uint8_t> workspace_metadata;  // the workspace's metadata part after the call
};

// Where in the workspace the plain call of p under the plan builds its metadata ({offset, bytes};
// no bytes where the call reads none: the mma.sync kernel runs a balanced plan's chunks).
std::pair<size_t, size_t> WorkspaceMetadata(const MlaParams& p, const MlaDecodePlan& plan) {
  if (plan.num_parts > 0 && p.kernel != LatentKernel::kMmaSync) {
    const auto layout = mla_decode_internal::MakeBalancedLayout(p.batch, p.max_seqlen_q, p.num_heads,
                                                                p.kv_lora_rank, plan.num_parts);
    return {layout.metadata, layout.metadata_bytes};
  }
  if (!plan.longest_first) return {0, 0};
  return {MlaDecodeChunkOrderOffset(p.batch, p.max_seqlen_q * p.num_heads, p.kv_lora_rank, plan.num_splits),
          MlaDecodeChunkOrderBytes(p.batch, plan.num_splits)};
}

bool AllBytesAre(const std::vector<uint8_t>& bytes, uint8_t value) {
  return std::all_of(bytes.begin(), bytes.end(), [value](uint8_t b) { return b == value; });
}

// MlaDecode of d under `params` (d's inputs, or another layer's table and lengths) on a workspace
// and outputs filled with `poison` bytes, after just_before() (null: nothing) is queued; the
// output and LSE it wrote, and the workspace's metadata part.
void RunDecode(const testing::DeviceLatent& d, const MlaParams& params, const MlaDecodePlan& plan,
               const void* metadata, int poison, const std::function<absl::Status()>& just_before,
               DecodeBytes* got) {
  testing::DeviceBuffer workspace(plan.workspace_bytes);
  MLASERVE_CUDA_ASSERT(cudaMemset(workspace.get(), poison, workspace.bytes()));
  MLASERVE_CUDA_ASSERT(cudaMemset(d.out.get(), poison, d.out.bytes()));
  MLASERVE_CUDA_ASSERT(cudaMemset(d.lse.get(), poison, d.lse.bytes()));
  if (just_before) {
    const auto queued = just_before();
    ASSERT_TRUE(queued.ok()) << queued;
  }
  const auto st = MlaDecode(params, plan, workspace.get(), KernelContext{Backend::kCuda, nullptr}, nullptr, metadata);
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  got->out = testing::ToHost<uint16_t>(d.out, d.out.bytes() / sizeof(uint16_t));
  got->lse = testing::ToHost<float>(d.lse, d.lse.bytes() / sizeof(float));
  const auto [at, bytes] = WorkspaceMetadata(params, plan);
  ASSERT_LE(at + bytes, workspace.bytes());
  got->workspace_metadata.resize(bytes);
  MLASERVE_CUDA_ASSERT(cudaMemcpy(got->workspace_metadata.data(), workspace.as<uint8_t>() + at, bytes,
                                  cudaMemcpyDeviceToHost));
}

// A call given the metadata (on a workspace poisoned with 0x7f) against the plain call.
void ExpectSameBytes(const DecodeBytes& got, const DecodeBytes& want, const char* what) {
  EXPECT_TRUE(got.out == want.out) << what << ": outputs differ from the plain call's";
  ASSERT_EQ(got.lse.size(), want.lse.size());
  EXPECT_EQ(std::memcmp(got.lse.data(), want.lse.data(), want.lse.size() * sizeof(float)), 0)
      << what << ": LSEs differ from the plain call's";
  EXPECT_TRUE(AllBytesAre(got.workspace_metadata, 0x7f)) << what << ": the call built metadata in the workspace";
}

TEST_P(MlaDecodeMetadataTest, LayersSharingItMatchThePlainCallBitwise) {
  const auto [batch, heads, qpr, max_ctx, schedule, pages_per_split, has_metadata] = std::get<0>(GetParam());
  const LatentKernel kernel = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const std::vector<int> lq(batch, qpr), prefix = RaggedPrefixes(batch, qpr, max_ctx, rng);
  const auto c0 = testing::MakeLatentBatch(lq, prefix, heads, 512, 64, seed);
  auto c1 = c0;  // layer 1: its own q and cache over the same pages
  c1.q = testing::RandomVector(c0.q.size(), seed + 3);
  c1.cache = testing::RandomVector(c0.cache.size(), seed + 4);
  testing::DeviceLatent d[2] = {testing::DeviceLatent(c0), testing::DeviceLatent(c1)};
  if (kernel != LatentKernel::kMmaSync && !LatentWgmmaApplies(d[0].params)) {
    GTEST_SKIP() << "no sm_90a kernel for this device";
  }
  MlaParams params[2] = {d[0].params, d[1].params};
  for (MlaParams& p : params) {
    p.kernel = kernel;
    p.block_table = d[0].params.block_table;
    p.cu_seqlens_q = d[0].params.cu_seqlens_q;
    p.seqlens_k = d[0].params.seqlens_k;
  }
  MlaDecodePlan plan;
  if (pages_per_split == 0) {
    int device = 0, sms = 0;
    MLASERVE_CUDA_ASSERT(cudaGetDevice(&device));
    MLASERVE_CUDA_ASSERT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    auto planned = PlanMlaDecode({batch, heads, qpr, 512, 64, max_ctx, sms, schedule});
    ASSERT_TRUE(planned.ok()) << planned.status();
    plan = *planned;
  } else {
    // As MlaDecodeChunkTest builds its longest-first plans, with the order's metadata size.
    plan.num_splits = (PagesFor(max_ctx) + pages_per_split - 1) / pages_per_split;
    plan.chunk_tokens = pages_per_split * kPageSize;
    plan.longest_first = true;
    plan.workspace_bytes = MlaDecodeChunkWorkspaceBytes(batch, heads * qpr, 512, plan.num_splits, true);
    plan.metadata_bytes = MlaDecodeChunkOrderBytes(batch, plan.num_splits);
  }
  ASSERT_EQ(plan.metadata_bytes > 0, has_metadata)
      << "num_parts=" << plan.num_parts << " longest_first=" << plan.longest_first;
  const KernelContext cuda{Backend::kCuda, nullptr};

  DecodeBytes plain[2], shared[2], early;
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_NO_FATAL_FAILURE(RunDecode(d[layer], params[layer], plan, nullptr, 0xff, nullptr, &plain[layer]));
    EXPECT_EQ(testing::CountNan(testing::FromBf16(plain[layer].out)), 0u) << "layer " << layer;
    if (!plain[layer].workspace_metadata.empty()) {
      EXPECT_FALSE(AllBytesAre(plain[layer].workspace_metadata, 0xff)) << "the plain call built no metadata there";
    }
  }
  testing::DeviceBuffer metadata(plan.metadata_bytes);
  MLASERVE_CUDA_ASSERT(cudaMemset(metadata.get(), 0xff, metadata.bytes()));
  const auto built = MlaDecodeBuildMetadata(params[0], plan, metadata.get(), cuda);
  ASSERT_TRUE(built.ok()) << built;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  if (kernel == LatentKernel::kMmaSync && plan.num_parts > 0) {
    // The mma.sync kernel runs the balanced plan's chunks in grid order: nothing to build.
    EXPECT_TRUE(AllBytesAre(testing::ToHost<uint8_t>(metadata, metadata.bytes()), 0xff))
        << "the build wrote metadata that the call does not read";
  }
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_NO_FATAL_FAILURE(RunDecode(d[layer], params[layer], plan, metadata.get(), 0x7f, nullptr, &shared[layer]));
    ExpectSameBytes(shared[layer], plain[layer], layer == 0 ? "layer 0" : "layer 1");
  }

  testing::DeviceBuffer q_copy(d[0].q.bytes()), fresh(plan.metadata_bytes);
  ASSERT_EQ(d[0].q.bytes() % sizeof(uint4), 0u);
  MLASERVE_CUDA_ASSERT(cudaMemcpy(q_copy.get(), d[0].q.get(), d[0].q.bytes(), cudaMemcpyDeviceToDevice));
  MLASERVE_CUDA_ASSERT(cudaMemset(d[0].q.get(), 0xff, d[0].q.bytes()));
  MLASERVE_CUDA_ASSERT(cudaMemset(fresh.get(), 0xff, fresh.bytes()));
  MlaParams before_wait = params[0];
  before_wait.inputs_before_wait = true;
  const auto build_then_write_q = [&]() -> absl::Status {
    RETURN_IF_ERROR(MlaDecodeBuildMetadata(before_wait, plan, fresh.get(), cuda));
    return LaunchCopyAfterWait(q_copy.get(), d[0].q.get(), d[0].q.bytes());
  };
  ASSERT_NO_FATAL_FAILURE(RunDecode(d[0], before_wait, plan, fresh.get(), 0x7f, build_then_write_q, &early));
  ExpectSameBytes(early, plain[0], "layer 0, inputs before the wait");

  // old_rows_before_wait: q and each request's newest lq cache rows poisoned, written back by
  // PDL kernels launched just before the call (the rows by the last one), the metadata built
  // before them; the older rows as they were.
  std::vector<int64_t> new_rows;
  for (int b = 0; b < batch; ++b) {
    for (int pos = c0.lk[b] - c0.lq[b]; pos < c0.lk[b]; ++pos) new_rows.push_back(c0.layout.Slot(b, pos));
  }
  const int row_bytes = c0.width() * static_cast<int>(sizeof(uint16_t));
  ASSERT_EQ(row_bytes % sizeof(uint4), 0u);
  testing::DeviceBuffer cache_copy(d[0].cache.bytes()), fresh_rows(plan.metadata_bytes);
  auto d_rows = testing::ToDevice(new_rows);
  MLASERVE_CUDA_ASSERT(cudaMemcpy(cache_copy.get(), d[0].cache.get(), d[0].cache.bytes(), cudaMemcpyDeviceToDevice));
  for (const int64_t r : new_rows) {
    MLASERVE_CUDA_ASSERT(cudaMemset(d[0].cache.as<uint8_t>() + r * row_bytes, 0xff, row_bytes));
  }
  MLASERVE_CUDA_ASSERT(cudaMemset(d[0].q.get(), 0xff, d[0].q.bytes()));
  MLASERVE_CUDA_ASSERT(cudaMemset(fresh_rows.get(), 0xff, fresh_rows.bytes()));
  MlaParams old_rows = params[0];
  old_rows.old_rows_before_wait = true;
  const auto build_then_write_q_and_rows = [&]() -> absl::Status {
    RETURN_IF_ERROR(MlaDecodeBuildMetadata(old_rows, plan, fresh_rows.get(), cuda));
    RETURN_IF_ERROR(LaunchCopyAfterWait(q_copy.get(), d[0].q.get(), d[0].q.bytes()));
    return LaunchCopyRowsAfterWait(cache_copy.get(), d[0].cache.get(), d_rows.as<int64_t>(),
                                   static_cast<int>(new_rows.size()), row_bytes);
  };
  DecodeBytes early_rows;
  ASSERT_NO_FATAL_FAILURE(RunDecode(d[0], old_rows, plan, fresh_rows.get(), 0x7f, build_then_write_q_and_rows,
                                    &early_rows));
  ExpectSameBytes(early_rows, plain[0], "layer 0, the older rows before the wait");
}

INSTANTIATE_TEST_SUITE_P(
    Layers, MlaDecodeMetadataTest,
    ::testing::Combine(
        ::testing::Values(
            // the balanced schedule: 16 heads (the few-rows kernel under kWgmma), 128 heads
            MetadataCase{37, 16, 1, 3000, MlaDecodeSchedule::kBalanced, 0, true},
            MetadataCase{150, 16, 1, 1000, MlaDecodeSchedule::kBalanced, 0, true},
            MetadataCase{37, 128, 2, 1500, MlaDecodeSchedule::kBalanced, 0, true},
            MetadataCase{150, 128, 1, 1000, MlaDecodeSchedule::kBalanced, 0, true},
            // chunks longest first: more CTAs than SMs in the device's plan, and a forced split
            MetadataCase{150, 16, 1, 2000, MlaDecodeSchedule::kChunks, 0, true},
            MetadataCase{80, 128, 2, 1500, MlaDecodeSchedule::kChunks, 3, true},
            // one request: one wave of chunks, no metadata
            MetadataCase{1, 16, 1, 5000, MlaDecodeSchedule::kChunks, 0, false},
            // 16 rows of two query tokens (the few-rows kernel under kWgmma): request 0's two
            // newest rows straddle two pages (the producer waits before the first of them)
            MetadataCase{2, 8, 2, 2497, MlaDecodeSchedule::kChunks, 0, false},
            MetadataCase{1, 128, 2, 3000, MlaDecodeSchedule::kChunks, 0, false}),
        ::testing::Values(LatentKernel::kMmaSync, LatentKernel::kWgmma, LatentKernel::kWgmma64)));

// The chunk length picked on the device from the batch's lengths (MlaDecodePlan::chunk_pick_sms,
// chunk_pick.h), for the SM count in the case (a model's input, not the device's): the order
// kernel's pick against a host reference of the same model (a serial list schedule with a
// priority queue and a sort, not the kernel's warp reductions), in half the longest request's
// pages to all of them; the values against the CPU reference with the CTAs cutting the keys
// where the pick says, on NaN-poisoned workspaces and outputs; the call given the prebuilt
// metadata bitwise equal to the call that builds its own. (batch, heads, q per request, mean
// context, lengths +-25% of it or uniform in [1, 2 x mean], SMs of the plan)
using PickCase = std::tuple<int, int, int, int, bool, int>;
class MlaDecodeChunkPickTest : public ::testing::TestWithParam<std::tuple<PickCase, LatentKernel>> {};

// The model's time for chunks of `chunk` pages (chunk_pick.h), and its pick.
double HostPickCost(const std::vector<int>& pages, int chunk, int sms, int row_blocks) {
  namespace m = mla_decode_internal;
  std::vector<int64_t> load(sms, 0);
  int64_t units = 0;
  for (const int p : pages)
    for (int r = 0; r < row_blocks; ++r) load[units++] = m::PickChunkCost(std::min(p, chunk));
  std::vector<int> tails;
  for (const int p : pages)
    if (p > chunk) tails.push_back(p - chunk);
  std::sort(tails.rbegin(), tails.rend());
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free_at(load.begin(), load.end());
  for (const int t : tails)
    for (int r = 0; r < row_blocks; ++r) {
      const int64_t at = free_at.top();
      free_at.pop();
      free_at.push(at + m::PickChunkCost(t));
    }
  load.clear();
  for (; !free_at.empty(); free_at.pop()) load.push_back(free_at.top());
  std::sort(load.rbegin(), load.rend());
  const int busy = std::max(1, static_cast<int>(static_cast<float>(sms) / m::kPickLoneSpeedup));
  const int64_t v = load[busy - 1];
  int64_t sum = 0, excess = 0;
  for (const int64_t l : load) {
    sum += l;
    excess += std::max<int64_t>(l - v, 0);
  }
  double t = static_cast<double>(sum - excess) / sms + static_cast<double>(load[0] - v) / m::kPickLoneSpeedup;
  if (!tails.empty()) t += m::kPickCombineFixedPages + m::kPickCombinePages * static_cast<double>(tails.size() * row_blocks);
  return t;
}

TEST_P(MlaDecodeChunkPickTest, PicksTheModelsLengthAndMatchesCpuReference) {
  namespace m = mla_decode_internal;
  const auto [batch, heads, qpr, mean_ctx, narrow, sms] = std::get<0>(GetParam());
  const LatentKernel kernel = std::get<1>(GetParam());
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  std::vector<int> lq(batch, qpr), prefix(batch);
  for (auto& x : prefix) {
    const int lk = narrow ? mean_ctx * 3 / 4 + static_cast<int>(rng() % (mean_ctx / 2 + 1))
                          : 1 + static_cast<int>(rng() % (2 * mean_ctx));
    x = std::max(lk, qpr) - qpr;
  }
  const ReferencedBatch ref = MakeReferencedBatch(lq, prefix, heads, 512, 64, seed);
  const testing::LatentBatch& c = ref.c;
  testing::DeviceLatent d(c);
  if (kernel != LatentKernel::kMmaSync && !LatentWgmmaApplies(d.params)) {
    GTEST_SKIP() << "no sm_90a kernel for this device";
  }
  d.params.kernel = kernel;
  const int row_blocks = (heads * qpr + 63) / 64;
  ASSERT_LE(batch * row_blocks, sms) << "the case breaks the pick's condition";
  std::vector<int> pages(batch);
  for (int b = 0; b < batch; ++b) pages[b] = PagesFor(c.lk[b]);
  const int longest = *std::max_element(pages.begin(), pages.end());
  // The plan as PlanMlaDecode makes a picking one, for a width of the longest context.
  MlaDecodePlan plan;
  plan.num_splits = 2;
  plan.chunk_tokens = (longest + 1) / 2 * kPageSize;
  plan.longest_first = true;
  plan.chunk_pick_sms = sms;
  plan.workspace_bytes = MlaDecodeChunkWorkspaceBytes(batch, heads * qpr, 512, 2, true);
  plan.metadata_bytes = MlaDecodeChunkOrderBytes(batch, 2);

  testing::DeviceBuffer metadata(plan.metadata_bytes);
  MLASERVE_CUDA_ASSERT(cudaMemset(metadata.get(), 0xff, metadata.bytes()));
  const auto built = MlaDecodeBuildMetadata(d.params, plan, metadata.get(), KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(built.ok()) << built;
  const auto words = testing::ToHost<int32_t>(metadata, metadata.bytes() / sizeof(int32_t));
  const int picked = words[MlaDecodeChunkPickOffset(batch, 2) / sizeof(int32_t)];
  ASSERT_GE(picked, (longest + 1) / 2);
  ASSERT_LE(picked, longest);
  const m::PickCandidates cands = m::PickCandidatesFor(longest);
  EXPECT_EQ((longest - picked) % cands.step, 0) << "not a candidate: step " << cands.step;
  double best = -1;
  int best_pages = 0;
  for (int k = 0; k < cands.count; ++k) {
    const double t = HostPickCost(pages, longest - k * cands.step, sms, row_blocks);
    if (best < 0 || t < best) {
      best = t;
      best_pages = longest - k * cands.step;
    }
  }
  // Float rounding may order near-equal candidates differently; the pick costs what the best does.
  EXPECT_LE(HostPickCost(pages, picked, sms, row_blocks), best * (1 + 1e-5))
      << "picked " << picked << " pages, the host model's pick " << best_pages;

  DecodeBytes plain, given;
  RunDecode(d, d.params, plan, nullptr, 0xff, nullptr, &plain);
  testing::ExpectLatentMatches(c, d, ref.want, ref.want_lse);
  RunDecode(d, d.params, plan, metadata.get(), 0x7f, nullptr, &given);
  ExpectSameBytes(given, plain, "the prebuilt pick");
}

INSTANTIATE_TEST_SUITE_P(
    Lengths, MlaDecodeChunkPickTest,
    ::testing::Combine(::testing::Values(PickCase{64, 128, 1, 4096, true, 132}, PickCase{50, 128, 1, 2000, false, 132},
                                         PickCase{20, 128, 2, 3000, true, 132}, PickCase{34, 64, 1, 1500, false, 60},
                                         PickCase{10, 128, 1, 700, true, 30}, PickCase{12, 96, 1, 5000, false, 24}),
                       ::testing::Values(LatentKernel::kMmaSync, LatentKernel::kWgmma, LatentKernel::kWgmma64)));

}  // namespace
}  // namespace mlaserve::kernels
