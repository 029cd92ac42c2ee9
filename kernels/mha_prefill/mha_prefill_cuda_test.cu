// mha_prefill CUDA, our kernels (provider kOurs): the mma.sync kernel and the Hopper wgmma
// kernel (all its schedules: eight, with qk 128 the same eight with the staged output, and the
// default with its persistent CTAs' items in the flat order instead of longest first, dealt by
// round instead of by ticket, and without a work counter), each against the CPU
// reference (MhaPrefillCpu on the same bf16-rounded inputs), outputs poisoned before every run.
// Fixed cases: causal and not, with and without a key prefix, rows without keys, GQA, padded
// strides, loose max_seqlen bounds, 140 sequences, the DeepSeek dims (192/128) with 16 and 128 heads, 128/128,
// small fixture dims (mma.sync only), long sequences (8k); then random ragged batches; then the
// split K on the Hopper kernel; then the staged output's bytes against the direct stores'; and
// calls given no lse (out only).
// The cuDNN provider's tests are in mha_prefill_cudnn_test.cu.
#include <cuda_runtime.h>

#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mha_prefill/mha_prefill_cuda_case.h"
#include "kernels/mha_prefill/mha_prefill_sm90.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::MhaCase;
using testing::MhaProblem;

// The wgmma kernel's eight schedules: ping-pong or not, paired query tiles or not, persistent
// CTAs or one CTA per work item; all direct output stores.
std::vector<mha_sm90::Schedule> DirectSchedules() {
  std::vector<mha_sm90::Schedule> all;
  for (const bool pingpong : {false, true}) {
    for (const bool paired : {false, true}) {
      for (const bool persistent : {false, true}) all.push_back({pingpong, paired, persistent, false});
    }
  }
  return all;
}

// The schedules to test for these head dims: the eight, and with qk 128 each again with the
// staged output, and with the lookahead, staged and direct. qk 192 has no staged output (the launcher writes directly): one such run
// checks that fallback. The persistent ones take their items longest first and by ticket (the
// default); the default schedule runs once more in the flat order (by ticket), once dealt by
// round, and once both; and each of those four on 3 CTAs, so that small cases too hand out many
// tickets (and deal many rounds); and with the lazy rescale flipped (the eager one for qk 128,
// the lazy one for qk 192), on every SM and on 3 CTAs.
std::vector<mha_sm90::Schedule> AllSchedules(int head_dim_qk) {
  std::vector<mha_sm90::Schedule> all = DirectSchedules();
  for (const int ctas : {0, 3}) {
    for (const bool longest_first : {false, true}) {
      for (const bool tickets : {false, true}) {
        mha_sm90::Schedule s = mha_sm90::DefaultSchedule(head_dim_qk);
        s.longest_first = longest_first;
        s.tickets = tickets;
        s.ctas = ctas;
        if (!(longest_first && tickets && ctas == 0)) all.push_back(s);
      }
    }
  }
  mha_sm90::Schedule other_rescale = mha_sm90::DefaultSchedule(head_dim_qk);
  other_rescale.lazy_rescale = !other_rescale.lazy_rescale;
  all.push_back(other_rescale);
  other_rescale.ctas = 3;
  all.push_back(other_rescale);
  // The lookahead flipped (off for qk 128; asked for qk 192, where the launcher turns it off), on
  // every SM and on 3 CTAs (many tiles a CTA: the next tile often another item's, by ticket).
  mha_sm90::Schedule other_lookahead = mha_sm90::DefaultSchedule(head_dim_qk);
  other_lookahead.lookahead = !other_lookahead.lookahead;
  all.push_back(other_lookahead);
  other_lookahead.ctas = 3;
  all.push_back(other_lookahead);
  if (head_dim_qk == 128) {
    for (mha_sm90::Schedule s : DirectSchedules()) {
      s.staged_out = true;
      all.push_back(s);
      // The lookahead with each of the eight, staged and direct.
      s.lookahead = true;
      all.push_back(s);
      s.staged_out = false;
      all.push_back(s);
    }
  } else {
    mha_sm90::Schedule s = mha_sm90::DefaultSchedule(head_dim_qk);
    s.staged_out = true;
    all.push_back(s);
  }
  return all;
}

// Runs every kernel of ours that takes the problem, poisoning the outputs before each, and
// compares each with the reference. The wgmma kernel runs with its default schedule through
// MhaPrefill and with the others (AllSchedules) through its launcher. Says on stdout where wgmma
// does not apply (other head dims, or not a Hopper GPU with an sm_90a build).
void RunOurKernels(MhaProblem& problem) {
  const KernelContext ctx{Backend::kCuda, nullptr};
  {
    SCOPED_TRACE("kernel=mma.sync");
    problem.Poison();
    const auto st = MhaPrefill(problem.device(MhaPrefillProvider::kOurs, MhaPrefillKernel::kMmaSync), ctx);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference();
  }
  const MhaPrefillParams wgmma = problem.device(MhaPrefillProvider::kOurs, MhaPrefillKernel::kWgmma);
  if (!MhaPrefillWgmmaApplies(wgmma)) {
    const std::string why = mha_sm90::Refusal(wgmma);
    std::cout << "[ wgmma n/a ] " << (why.empty() ? "no sm_90a kernel for this build and device" : why) << "\n";
    return;
  }
  {
    SCOPED_TRACE("kernel=wgmma");
    std::cout << "[ run ] wgmma " << mha_sm90::ScheduleName(mha_sm90::DefaultSchedule(wgmma.head_dim_qk))
              << std::endl;
    problem.Poison();
    const auto st = MhaPrefill(wgmma, ctx);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference();
  }
  {
    SCOPED_TRACE("kernel=wgmma, no work counter");
    std::cout << "[ run ] wgmma without a work counter" << std::endl;
    MhaPrefillParams dealt = wgmma;
    dealt.work_counter = nullptr;
    problem.Poison();
    const auto st = MhaPrefill(dealt, ctx);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference();
  }
  const mha_sm90::Schedule usual = mha_sm90::DefaultSchedule(wgmma.head_dim_qk);
  for (const mha_sm90::Schedule& schedule : AllSchedules(wgmma.head_dim_qk)) {
    if (schedule == usual) continue;  // ran above
    SCOPED_TRACE("kernel=wgmma, schedule " + mha_sm90::ScheduleName(schedule));
    std::cout << "[ run ] wgmma " << mha_sm90::ScheduleName(schedule) << std::endl;  // names a hang
    problem.Poison();
    const auto st = mha_sm90::Launch(wgmma, schedule, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference();
  }
}

// 140 sequences of 1-300 queries: more than the longest-first order ranks (the flat order, by
// ticket), and more work items than CTAs.
std::vector<int> ManySequences() {
  std::vector<int> lq(140);
  for (int i = 0; i < 140; ++i) lq[i] = 1 + (i * 37) % 300;
  return lq;
}

const std::vector<MhaCase>& Cases() {
  static const auto* cases = new std::vector<MhaCase>{
      {16, 16, 192, 128, {1, 17, 128, 129, 300}, 0},
      {16, 16, 192, 128, {5, 200, 64}, 300},          // chunk after a prefix
      {128, 128, 192, 128, {1, 77, 256}, 100},
      {16, 16, 192, 128, {8192}, 0},                  // one long sequence
      {16, 16, 192, 128, {3000, 1, 5000}, 0},
      {16, 4, 24, 16, {1, 50, 200}, 40},              // GQA, tiny fixture dims
      {16, 16, 64, 32, {33, 130}, 0},
      {4, 4, 128, 128, {100, 257}, 10},
      {4, 2, 256, 256, {70, 190}, 0},
      {2, 2, 40, 48, {9, 150}, 20},
      {6, 6, 32, 24, {1, 50, 260}, 30},               // deepseek_v2_odd as stored (model/mla_dims.h)
      {16, 16, 128, 128, {64, 300, 7, 1000}, 200},
      {128, 128, 128, 128, {513, 40}, 0},
      {16, 16, 192, 128, {40, 90, 3, 200}, 50, /*keyless=*/true},  // rows and sequences without keys
      {16, 16, 128, 128, {120, 1, 66}, 0, /*keyless=*/true},
      {16, 4, 192, 128, {1, 50, 200}, 40},            // GQA on the DeepSeek dims
      {16, 2, 128, 128, {129, 255, 256}, 128},        // GQA, tile-edge lengths
      {1, 1, 192, 128, {128, 256, 1}, 128},           // one head
      {16, 16, 192, 128, {100, 300}, 60, false, /*bound_slack=*/77},  // loose max_seqlen bounds
      {8, 8, 192, 128, ManySequences(), 20},
  };
  return *cases;
}

// (case index, causal). One CPU reference per case serves every kernel (it is the slow part).
class MhaPrefillCudaTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MhaPrefillCudaTest, OurKernelsMatchCpuReference) {
  const auto [index, causal] = GetParam();
  const MhaCase& c = Cases()[index];
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << c.heads << "/" << c.kv_heads
                                    << " dqk=" << c.dqk << " dv=" << c.dv << " causal=" << causal);
  MhaProblem problem(c, causal, seed);
  RunOurKernels(problem);
}

INSTANTIATE_TEST_SUITE_P(Sweep, MhaPrefillCudaTest,
                         ::testing::Combine(::testing::Range(0, 20), ::testing::Bool()));

// Random ragged batches on the Hopper kernel's dims: 1..6 sequences of 1..400 queries (a
// quarter of them 1..16), key prefixes up to 300 or none, sometimes sequences and rows without
// keys, GQA or not, causal or not, exact or loose bounds.
class MhaPrefillCudaRagged : public ::testing::TestWithParam<int> {};

TEST_P(MhaPrefillCudaRagged, OurKernelsMatchCpuReference) {
  const uint64_t seed = testing::FreshSeed();
  std::mt19937 rng(seed);
  const auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  constexpr std::pair<int, int> kHeads[] = {{16, 16}, {16, 4}, {8, 8}, {4, 1}};
  const auto [heads, kv_heads] = kHeads[pick(0, 3)];
  MhaCase c{heads, kv_heads, pick(0, 1) == 0 ? 192 : 128, 128, {}, 0};
  c.lq.resize(pick(1, 6));
  for (int& l : c.lq) l = pick(0, 3) == 0 ? pick(1, 16) : pick(1, 400);
  c.max_prefix = pick(0, 2) == 0 ? 0 : pick(1, 300);
  c.keyless = pick(0, 3) == 0;
  c.bound_slack = pick(0, 2) == 0 ? pick(1, 200) : 0;
  const bool causal = pick(0, 3) != 0;
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << heads << "/" << kv_heads
                                    << " dqk=" << c.dqk << " batch=" << c.lq.size() << " max_prefix="
                                    << c.max_prefix << " keyless=" << c.keyless << " slack="
                                    << c.bound_slack << " causal=" << causal);
  MhaProblem problem(c, causal, seed);
  RunOurKernels(problem);
}

INSTANTIATE_TEST_SUITE_P(Random, MhaPrefillCudaRagged, ::testing::Range(0, 16));

// lse = null (api.h: out only; the engine's MHA form asks none where no cached prefix is merged):
// out against the reference and nothing written where an lse would go, on the mma.sync kernel and
// the wgmma kernel's default schedule, with qk 128 also its output stored directly.
class MhaPrefillNoLse : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MhaPrefillNoLse, OurKernelsWriteOutOnly) {
  static const auto* cases = new std::vector<MhaCase>{
      {16, 16, 192, 128, {1, 17, 128, 129, 300}, 0},
      {128, 128, 128, 128, {513, 40}, 0},
      {16, 16, 128, 128, {120, 1, 66}, 0, /*keyless=*/true},
      {16, 16, 192, 128, {5, 200, 64}, 300},  // chunk after a prefix
  };
  const auto [index, causal] = GetParam();
  const MhaCase& c = (*cases)[index];
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << c.heads << " dqk=" << c.dqk
                                    << " causal=" << causal);
  MhaProblem problem(c, causal, seed);
  const KernelContext ctx{Backend::kCuda, nullptr};
  const auto run = [&](const std::string& name, auto&& launch) {
    SCOPED_TRACE(name);
    problem.Poison();
    const absl::Status st = launch();
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference(/*lse_asked=*/false);
  };
  MhaPrefillParams mma = problem.device(MhaPrefillProvider::kOurs, MhaPrefillKernel::kMmaSync);
  mma.lse = nullptr;
  run("kernel=mma.sync", [&] { return MhaPrefill(mma, ctx); });
  MhaPrefillParams wgmma = problem.device(MhaPrefillProvider::kOurs, MhaPrefillKernel::kWgmma);
  wgmma.lse = nullptr;
  if (!MhaPrefillWgmmaApplies(wgmma)) GTEST_SKIP() << "wgmma n/a: " << mha_sm90::Refusal(wgmma);
  run("kernel=wgmma", [&] { return MhaPrefill(wgmma, ctx); });
  mha_sm90::Schedule flipped = mha_sm90::DefaultSchedule(wgmma.head_dim_qk);
  if (flipped.staged_out) {
    flipped.staged_out = false;
    run("kernel=wgmma, " + mha_sm90::ScheduleName(flipped), [&] { return mha_sm90::Launch(wgmma, flipped, nullptr); });
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, MhaPrefillNoLse, ::testing::Combine(::testing::Range(0, 4), ::testing::Bool()));

// On a Hopper GPU, an sm_90a build runs the wgmma kernel for the DeepSeek shapes (so the sweep
// above cannot pass by skipping it).
TEST(MhaPrefillWgmma, AppliesOnHopperToDeepSeekDims) {
  int device = 0, major = 0, minor = 0;
  MLASERVE_CUDA_ASSERT(cudaGetDevice(&device));
  MLASERVE_CUDA_ASSERT(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MLASERVE_CUDA_ASSERT(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
#if !MLASERVE_HAS_SM90A
  GTEST_SKIP() << "not an sm_90a build";
#endif
  if (major != 9 || minor != 0) GTEST_SKIP() << "device is sm_" << major << minor << ", not sm_90";
  for (const MhaCase& c : {MhaCase{16, 16, 192, 128, {300, 20}, 30}, MhaCase{16, 16, 128, 128, {300, 20}, 30}}) {
    MhaProblem problem(c, /*causal=*/true, 1);
    const MhaPrefillParams p = problem.device(MhaPrefillProvider::kOurs);
    EXPECT_TRUE(MhaPrefillWgmmaApplies(p)) << "dqk=" << c.dqk << ": " << mha_sm90::Refusal(p);
  }
}

// Split K (api.h's k_rope; the engine's MHA form without kv_pack): K's last 64 dims from one
// row per token, the same dims of k NaN (MhaCase::k_rope_dim), on the Hopper kernel with every
// schedule, through MhaPrefill with provider ours and auto; the providers and kernels that do
// not take it refuse it with INVALID_ARGUMENT and enqueue nothing (the outputs stay poisoned).
const std::vector<MhaCase>& SplitCases() {
  static const auto* cases = new std::vector<MhaCase>{
      {16, 16, 192, 128, {1, 17, 128, 129, 300}, 0, false, 0, 64},
      {16, 16, 192, 128, {5, 200, 64}, 300, false, 0, 64},    // chunk after a prefix
      {128, 128, 192, 128, {1, 77, 256}, 100, false, 0, 64},
      {16, 16, 192, 128, {3000, 1, 2100}, 0, false, 0, 64},   // long enough for auto to pick ours
      {16, 4, 192, 128, {1, 50, 200}, 40, false, 0, 64},      // GQA
      {16, 16, 192, 128, {40, 90, 3, 200}, 50, true, 0, 64},  // rows and sequences without keys
      {16, 16, 192, 128, {100, 300}, 60, false, 77, 64},      // loose max_seqlen bounds
      {16, 16, 128, 128, {64, 300, 7, 1000}, 200, false, 0, 64},  // 64 nope + 64 rope
      {1, 1, 192, 128, {128, 256, 1}, 128, false, 0, 64},     // one head
  };
  return *cases;
}

class MhaPrefillSplitK : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MhaPrefillSplitK, HopperKernelMatchesCpuReference) {
  const auto [index, causal] = GetParam();
  const MhaCase& c = SplitCases()[index];
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << c.heads << "/" << c.kv_heads
                                    << " dqk=" << c.dqk << " causal=" << causal << " split K");
  MhaProblem problem(c, causal, seed);
  const KernelContext ctx{Backend::kCuda, nullptr};
  const MhaPrefillParams ours = problem.device(MhaPrefillProvider::kOurs);
  if (!MhaPrefillWgmmaApplies(ours)) {
    const std::string why = mha_sm90::Refusal(ours);
    GTEST_SKIP() << "wgmma n/a: " << (why.empty() ? "no sm_90a kernel for this build and device" : why);
  }
  ASSERT_TRUE(MhaPrefillTakesSplitK(ours, Backend::kCuda));
  {
    SCOPED_TRACE("provider=ours");
    problem.Poison();
    const auto st = MhaPrefill(ours, ctx);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference();
  }
  for (const mha_sm90::Schedule& schedule : AllSchedules(ours.head_dim_qk)) {
    SCOPED_TRACE("schedule " + mha_sm90::ScheduleName(schedule));
    problem.Poison();
    const auto st = mha_sm90::Launch(ours, schedule, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference();
  }
  // kAuto takes it where it prefers ours (long keys), and refuses it elsewhere.
  const MhaPrefillParams autop = problem.device(MhaPrefillProvider::kAuto);
  problem.Poison();
  const auto st = MhaPrefill(autop, ctx);
  if (MhaPrefillAutoPrefersOurs(autop)) {
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    problem.ExpectMatchesReference();
  } else {
    EXPECT_FALSE(MhaPrefillTakesSplitK(autop, Backend::kCuda));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  for (const auto& [provider, kernel] :
       {std::pair{MhaPrefillProvider::kOurs, MhaPrefillKernel::kMmaSync},
        {MhaPrefillProvider::kCudnn, MhaPrefillKernel::kAuto},
        {MhaPrefillProvider::kPreferCudnn, MhaPrefillKernel::kAuto}}) {
    const MhaPrefillParams p = problem.device(provider, kernel);
    EXPECT_FALSE(MhaPrefillTakesSplitK(p, Backend::kCuda));
    const auto refused = MhaPrefill(p, ctx);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_NE(refused.message().find("k_rope_dim=64"), std::string::npos) << refused;
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, MhaPrefillSplitK, ::testing::Combine(::testing::Range(0, 9), ::testing::Bool()));

// The staged output (Schedule::staged_out) writes the bytes of the direct stores and nothing
// else. out gets its own buffer: padded head and token strides, and guard tokens before the
// first sequence and after the last, all poisoned before every run. Each of the eight
// schedules runs with direct stores and then staged; the staged bytes must equal the direct
// ones, every (token, head, dim) must be written, and the padding and the guards must keep the
// poison: in particular the rows past the last sequence, which the tile holding its end reaches
// and TMA must clip (the cases end on a sequence of a length that is not a multiple of 64; the
// rows past the other sequences are the next sequence's, which the reference comparison of the
// sweep above checks). qk 192 takes the direct-store fallback, the same bytes too.
const std::vector<MhaCase>& StagedCases() {
  static const auto* cases = new std::vector<MhaCase>{
      {16, 16, 128, 128, {300, 1, 77}, 40},
      {4, 2, 128, 128, {129, 255, 200}, 0},                         // GQA, tile-edge lengths
      {1, 1, 128, 128, {70, 190}, 30},                              // one head
      {16, 16, 128, 128, {120, 1, 66}, 0, /*keyless=*/true},
      {8, 8, 128, 128, {100, 300}, 60, false, /*bound_slack=*/77},  // loose max_seqlen bounds
      {16, 16, 192, 128, {300, 1, 77}, 40},                         // the fallback
  };
  return *cases;
}

class MhaPrefillStagedOut : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MhaPrefillStagedOut, WritesTheDirectStoresBytesAndNothingElse) {
  const auto [index, causal] = GetParam();
  const MhaCase& c = StagedCases()[index];
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << c.heads << "/" << c.kv_heads
                                    << " dqk=" << c.dqk << " causal=" << causal);
  MhaProblem problem(c, causal, seed);
  MhaPrefillParams p = problem.device(MhaPrefillProvider::kOurs, MhaPrefillKernel::kWgmma);
  if (!MhaPrefillWgmmaApplies(p)) {
    const std::string why = mha_sm90::Refusal(p);
    GTEST_SKIP() << "wgmma n/a: " << (why.empty() ? "no sm_90a kernel for this build and device" : why);
  }
  constexpr int kGuard = 160;  // tokens: more than a query tile reaches past a sequence
  constexpr uint16_t kPoison = 0x7fc1;
  const int tokens = std::accumulate(c.lq.begin(), c.lq.end(), 0);
  const int64_t head_stride = c.dv + 8, token_stride = c.heads * head_stride + 8;
  const size_t n = static_cast<size_t>(kGuard + tokens + kGuard) * token_stride;
  testing::DeviceBuffer out(n * sizeof(uint16_t));
  ASSERT_NE(out.get(), nullptr);
  p.out = out.as<uint16_t>() + kGuard * token_stride;
  p.out_token_stride = token_stride;
  p.out_head_stride = head_stride;
  // Whether element e of the buffer is one of out's (token, head, dim).
  const auto inside = [&](size_t e) {
    const int64_t t = static_cast<int64_t>(e / token_stride) - kGuard, in_token = e % token_stride;
    return t >= 0 && t < tokens && in_token < c.heads * head_stride && in_token % head_stride < c.dv;
  };
  const std::vector<uint16_t> poison(n, kPoison);
  // Runs `schedule` into the poisoned buffer and checks what it wrote where; leaves its bytes.
  const auto run = [&](const mha_sm90::Schedule& schedule, std::vector<uint16_t>& got) {
    MLASERVE_CUDA_ASSERT(cudaMemcpy(out.get(), poison.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    const auto st = mha_sm90::Launch(p, schedule, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    got = testing::ToHost<uint16_t>(out, n);
    size_t unwritten = 0, stray = 0, first_stray = n;
    for (size_t e = 0; e < n; ++e) {
      if (inside(e)) {
        unwritten += got[e] == kPoison;
      } else if (got[e] != kPoison) {
        if (stray++ == 0) first_stray = e;
      }
    }
    EXPECT_EQ(unwritten, 0u);
    EXPECT_EQ(stray, 0u) << "first at token " << static_cast<int64_t>(first_stray / token_stride) - kGuard
                         << " (of " << tokens << "), element " << first_stray % token_stride;
  };
  std::vector<uint16_t> direct, staged;
  for (mha_sm90::Schedule schedule : DirectSchedules()) {
    SCOPED_TRACE("schedule " + mha_sm90::ScheduleName(schedule));
    run(schedule, direct);
    if (HasFatalFailure()) return;
    schedule.staged_out = true;
    run(schedule, staged);
    if (HasFatalFailure()) return;
    size_t differ = 0, first = n;
    for (size_t e = 0; e < n; ++e) {
      if (direct[e] != staged[e] && differ++ == 0) first = e;
    }
    EXPECT_EQ(differ, 0u) << "first at token " << static_cast<int64_t>(first / token_stride) - kGuard
                          << ", element " << first % token_stride;
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, MhaPrefillStagedOut,
                         ::testing::Combine(::testing::Range(0, 6), ::testing::Bool()));

MhaPrefillParams TinyParams(int dqk, int dv) {
  MhaPrefillParams p;
  p.dtype = DType::kBF16; p.batch = 1; p.num_heads = 1; p.num_kv_heads = 1;
  p.head_dim_qk = dqk; p.head_dim_v = dv; p.max_seqlen_q = 1; p.max_seqlen_k = 1;
  static uint16_t dummy[64] __attribute__((aligned(16)));
  static int32_t cu[2] = {0, 1};
  p.q = p.k = p.v = dummy; p.out = dummy;
  p.q_token_stride = p.k_token_stride = p.v_token_stride = p.out_token_stride = 32;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = 32;
  p.cu_seqlens_q = p.cu_seqlens_k = cu;
  p.provider = MhaPrefillProvider::kOurs;
  return p;
}

TEST(MhaPrefillCudaValidation, NamesUnsupportedHeadDim) {
  const auto st = MhaPrefill(TinyParams(20, 16), KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head_dim_qk=20"), std::string::npos) << st.message();
}

// Forcing the wgmma kernel where it does not apply names why; kAuto runs mma.sync instead.
TEST(MhaPrefillCudaValidation, ForcedWgmmaNamesWhyItDoesNotApply) {
  MhaPrefillParams p = TinyParams(24, 16);
  p.kernel = MhaPrefillKernel::kWgmma;
  const auto st = MhaPrefill(p, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("kernel=wgmma"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("24/16"), std::string::npos) << st.message();
  EXPECT_FALSE(MhaPrefillWgmmaApplies(p));
}

}  // namespace
}  // namespace mlaserve::kernels
