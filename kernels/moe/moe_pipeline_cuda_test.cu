// The routed experts' CUDA stages on their own: the multi-block routing permutation against a
// host stable counting sort and against the one-block baseline (exact: offsets, row-tile
// offsets, active experts, sorted ids, positions, gathered x rows), its two forms of the x-row
// copy against each other (bitwise), the gate_up weight preparation (exact), out-of-range
// expert ids, CUDA graph capture (bitwise equal to direct launches), and the stream kernels'
// early slot -> expert map against the permutation's active list.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_active_slot.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_testing.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::Routing;

constexpr int kTiledRows = moe_cuda::kTiledRows;

// What the permutation must produce, from a stable counting sort on the host.
struct HostPermutation {
  std::vector<int32_t> offsets, tile_offsets, active, sorted, position;
};

HostPermutation PermuteOnHost(const std::vector<int32_t>& ids, int E) {
  HostPermutation h;
  std::vector<int32_t> count(E, 0);
  for (int32_t e : ids) {
    if (e >= 0 && e < E) ++count[e];
  }
  h.offsets.assign(E + 1, 0);
  h.tile_offsets.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) {
    h.offsets[e + 1] = h.offsets[e] + count[e];
    h.tile_offsets[e + 1] = h.tile_offsets[e] + (count[e] + kTiledRows - 1) / kTiledRows;
    if (count[e] > 0) h.active.push_back(e);
  }
  h.sorted.assign(h.offsets[E], -1);
  h.position.assign(ids.size(), -1);
  std::vector<int32_t> fill(h.offsets.begin(), h.offsets.end() - 1);
  for (size_t a = 0; a < ids.size(); ++a) {
    const int32_t e = ids[a];
    if (e < 0 || e >= E) continue;
    h.sorted[fill[e]] = static_cast<int32_t>(a);
    h.position[a] = fill[e]++;
  }
  return h;
}

// Device buffers of one permutation call.
struct PermuteBuffers {
  testing::DeviceBuffer sorted, offsets, tile_offsets, position, active, counts, xg;
  moe_cuda::PermuteArgs args;

  PermuteBuffers(const testing::DeviceBuffer& ids, const testing::DeviceBuffer& x, int A, int E, int k, int H,
                 bool gather)
      : sorted(A * sizeof(int32_t)),
        offsets((E + 1) * sizeof(int32_t)),
        tile_offsets((E + 1) * sizeof(int32_t)),
        position(A * sizeof(int32_t)),
        active((E + 1) * sizeof(int32_t)),
        counts(std::max<size_t>(1, moe_cuda::PermuteScratchBytes(A, E))),
        xg(gather ? static_cast<size_t>(A) * H * 2 : 0) {
    for (const auto* b : {&sorted, &offsets, &tile_offsets, &position, &active, &counts, &xg}) {
      if (b->bytes() > 0) cudaMemset(b->get(), 0xcd, b->bytes());  // poison
    }
    args = moe_cuda::PermuteArgs{ids.as<int32_t>(), A, E, k,
                                 static_cast<const __nv_bfloat16*>(x.get()), H,
                                 gather ? xg.as<__nv_bfloat16>() : nullptr,
                                 sorted.as<int32_t>(), offsets.as<int32_t>(), tile_offsets.as<int32_t>(),
                                 position.as<int32_t>(), active.as<int32_t>(), counts.as<int32_t>()};
  }
};

// Equal vectors, or a failure naming how many entries differ and the first one (the vectors
// run to 512k entries: gtest's own printing would drown the log).
void ExpectSame(const char* what, const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  if (got == want) return;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  ADD_FAILURE() << what << ": " << bad << " of " << want.size() << " entries differ (sizes " << got.size() << "/"
                << want.size() << "); first at " << first << ": got " << (first < got.size() ? got[first] : -2)
                << ", want " << want[first];
}

void ExpectPermutation(const PermuteBuffers& d, const HostPermutation& h, const std::vector<uint16_t>& x,
                       int A, int E, int k, int H, const char* which) {
  SCOPED_TRACE(which);
  const int rows = h.offsets[E];
  ExpectSame("offsets", testing::ToHost<int32_t>(d.offsets, E + 1), h.offsets);
  ExpectSame("tile_offsets", testing::ToHost<int32_t>(d.tile_offsets, E + 1), h.tile_offsets);
  const auto active = testing::ToHost<int32_t>(d.active, E + 1);
  EXPECT_EQ(active[E], static_cast<int32_t>(h.active.size()));
  ExpectSame("active", std::vector<int32_t>(active.begin(), active.begin() + h.active.size()), h.active);
  ExpectSame("sorted", testing::ToHost<int32_t>(d.sorted, rows), h.sorted);
  ExpectSame("position", testing::ToHost<int32_t>(d.position, A), h.position);
  if (d.xg.bytes() == 0) return;
  const auto xg = testing::ToHost<uint16_t>(d.xg, static_cast<size_t>(rows) * H);
  int64_t bad_rows = 0;
  for (int r = 0; r < rows; ++r) {
    const int t = h.sorted[r] / k;
    bad_rows += !std::equal(xg.begin() + static_cast<int64_t>(r) * H, xg.begin() + static_cast<int64_t>(r + 1) * H,
                            x.begin() + static_cast<int64_t>(t) * H);
  }
  EXPECT_EQ(bad_rows, 0) << "gathered x rows that differ from x[sorted[r] / top_k]";
}

// (tokens, experts, top_k, hidden, routing, invalid ids per 1000)
using PermuteCase = std::tuple<int, int, int, int, Routing, int>;

// A case's random inputs: the routed ids (invalid_per_mille of them outside [0, E): no row,
// position -1), random x rows, the host's stable sort of the ids, and both on the device.
struct PermuteInputs {
  std::vector<int32_t> ids;
  std::vector<uint16_t> x;
  HostPermutation want;
  testing::DeviceBuffer d_ids, d_x;

  PermuteInputs(const PermuteCase& c, uint64_t seed) {
    const auto [T, E, k, H, routing, invalid_per_mille] = c;
    ids = testing::MakeRouting(T, E, k, routing, seed);
    std::mt19937_64 rng(seed + 1);
    for (auto& e : ids) {
      if (static_cast<int>(rng() % 1000) < invalid_per_mille) e = rng() % 2 == 0 ? -1 : E + static_cast<int>(rng() % 3);
    }
    x.resize(static_cast<size_t>(T) * H);
    for (auto& v : x) v = static_cast<uint16_t>(rng());
    want = PermuteOnHost(ids, E);
    d_ids = testing::ToDevice(ids);
    d_x = testing::ToDevice(x);
  }
};

class MoePermuteCudaTest : public ::testing::TestWithParam<PermuteCase> {};

TEST_P(MoePermuteCudaTest, MatchesAStableHostSortAndTheBaseline) {
  const auto [T, E, k, H, routing, invalid_per_mille] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " routing=" << testing::RoutingName(routing));
  const int A = T * k;
  const PermuteInputs in(GetParam(), seed);
  const auto& [ids, x, want, d_ids, d_x] = in;
  for (const bool gather : {true, false}) {
    SCOPED_TRACE(gather ? "with the x gather" : "without the x gather");
    PermuteBuffers cur(d_ids, d_x, A, E, k, H, gather);
    ASSERT_TRUE(moe_cuda::LaunchPermute(cur.args, nullptr).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    ExpectPermutation(cur, want, x, A, E, k, H, "multi-block permutation");
  }
  if (E <= moe_cuda::kMaxExperts) {
    PermuteBuffers base(d_ids, d_x, A, E, k, H, true);
    ASSERT_TRUE(moe_cuda::LaunchBaselineSort(base.args, nullptr).ok());
    ASSERT_TRUE(moe_cuda::LaunchBaselineGather(base.args, nullptr).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    ExpectPermutation(base, want, x, A, E, k, H, "baseline sort + gather");
  }
}

// One chunk (up to 2048 assignments: 2, 1800, 2046, exactly 2048) and several (2049: a
// one-assignment tail chunk; 32768 with a 2056-wide row cut in 64-byte slices; 64k tokens at
// top-8 = 256 chunks); E from 2 to 1024 (whose shared memory passes 48 KiB); top_k 1..16;
// hot experts, ragged counts with idle experts, and ids outside [0, E).
INSTANTIATE_TEST_SUITE_P(
    Shapes, MoePermuteCudaTest,
    ::testing::Values(PermuteCase{1, 8, 2, 64, Routing::kUniform, 0},
                      PermuteCase{300, 64, 6, 136, Routing::kUniform, 0},
                      PermuteCase{341, 64, 6, 64, Routing::kHot, 0},
                      PermuteCase{1024, 2, 2, 64, Routing::kUniform, 0},
                      PermuteCase{683, 3, 3, 64, Routing::kRagged, 20},
                      PermuteCase{4096, 256, 8, 2056, Routing::kRagged, 0},
                      PermuteCase{65536, 256, 8, 64, Routing::kUniform, 5},
                      PermuteCase{65536, 64, 6, 8, Routing::kHot, 0},
                      PermuteCase{20000, 1024, 8, 32, Routing::kRagged, 0},
                      PermuteCase{1500, 1024, 1, 8, Routing::kUniform, 10},
                      PermuteCase{3000, 32, 16, 48, Routing::kUniform, 0},
                      PermuteCase{100, 16, 16, 16, Routing::kHot, 0}));

// The x-row copy of the multi-chunk permutation in its two forms (PermuteRowCopy): kApart (a
// ranking launch per chunk that scans the counts itself, then LaunchGatherRows) and kInScatter
// (the column-sliced copy inside the scatter, MLASERVE_MOE_SCATTER_SPLIT=0). Both write the
// host sort's permutation, and the same bytes everywhere: xg, sorted and position whole,
// poison included (rows and entries no assignment reaches are left alone by both), and the
// offsets, row-tile offsets and active list. kApart reports its copy as a stage of its own.
class RecordingObserver : public moe_cuda::ExpertsStageObserver {
 public:
  void AfterStage(moe_cuda::ExpertsStage stage, cudaStream_t) override { stages.push_back(stage); }
  std::vector<moe_cuda::ExpertsStage> stages;
};

class MoePermuteRowCopyCudaTest : public ::testing::TestWithParam<PermuteCase> {};

TEST_P(MoePermuteRowCopyCudaTest, TheApartCopyEqualsTheInScatterCopyBitwise) {
  const auto [T, E, k, H, routing, invalid_per_mille] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " routing=" << testing::RoutingName(routing));
  const int A = T * k;
  const PermuteInputs in(GetParam(), seed);
  const auto& [ids, x, want, d_ids, d_x] = in;
  PermuteBuffers apart(d_ids, d_x, A, E, k, H, true), in_scatter(d_ids, d_x, A, E, k, H, true);
  apart.args.row_copy = moe_cuda::PermuteRowCopy::kApart;
  in_scatter.args.row_copy = moe_cuda::PermuteRowCopy::kInScatter;
  ASSERT_TRUE(moe_cuda::PermuteCopiesRowsApart(apart.args)) << "the case must span several chunks";
  ASSERT_FALSE(moe_cuda::PermuteCopiesRowsApart(in_scatter.args));
  RecordingObserver apart_stages, in_scatter_stages;
  ASSERT_TRUE(moe_cuda::LaunchPermute(apart.args, nullptr, &apart_stages).ok());
  ASSERT_TRUE(moe_cuda::LaunchPermute(in_scatter.args, nullptr, &in_scatter_stages).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  using moe_cuda::ExpertsStage;
  EXPECT_EQ(apart_stages.stages, (std::vector<ExpertsStage>{ExpertsStage::kPermute, ExpertsStage::kGather}));
  EXPECT_EQ(in_scatter_stages.stages, std::vector<ExpertsStage>{ExpertsStage::kPermute});
  ExpectPermutation(apart, want, x, A, E, k, H, "kApart");
  ExpectPermutation(in_scatter, want, x, A, E, k, H, "kInScatter");
  ExpectSame("sorted, whole buffer", testing::ToHost<int32_t>(apart.sorted, A),
             testing::ToHost<int32_t>(in_scatter.sorted, A));
  ExpectSame("position", testing::ToHost<int32_t>(apart.position, A), testing::ToHost<int32_t>(in_scatter.position, A));
  ExpectSame("offsets", testing::ToHost<int32_t>(apart.offsets, E + 1),
             testing::ToHost<int32_t>(in_scatter.offsets, E + 1));
  ExpectSame("tile_offsets", testing::ToHost<int32_t>(apart.tile_offsets, E + 1),
             testing::ToHost<int32_t>(in_scatter.tile_offsets, E + 1));
  ExpectSame("active, whole buffer", testing::ToHost<int32_t>(apart.active, E + 1),
             testing::ToHost<int32_t>(in_scatter.active, E + 1));
  const size_t xg_values = static_cast<size_t>(A) * H;
  EXPECT_TRUE(testing::ToHost<uint16_t>(apart.xg, xg_values) == testing::ToHost<uint16_t>(in_scatter.xg, xg_values))
      << "xg differs between the two forms (whole buffer, unwritten rows included)";
}

// Every case spans several chunks of 2048 assignments: V2-Lite's prefill of 4096 tokens (12
// full chunks, 256-vector rows); 2049 assignments (a one-assignment tail chunk) with 9-vector
// rows (not a multiple of the 4-vector slices nor of a warp) and ids outside [0, E); 16 chunks
// of ragged routing (idle experts) with 257-vector rows (a second, one-vector pass of a warp);
// 1024 experts (the ranking's shared memory past 48 KiB), mostly idle (hot), one-vector rows,
// a ragged tail chunk; a fifth of the ids outside [0, E); 256 chunks (each ranking block sums
// 256 chunks' counts).
INSTANTIATE_TEST_SUITE_P(
    Shapes, MoePermuteRowCopyCudaTest,
    ::testing::Values(PermuteCase{4096, 64, 6, 2048, Routing::kUniform, 0},
                      PermuteCase{683, 3, 3, 72, Routing::kRagged, 20},
                      PermuteCase{4096, 256, 8, 2056, Routing::kRagged, 30},
                      PermuteCase{3000, 1024, 8, 8, Routing::kHot, 5},
                      PermuteCase{700, 16, 4, 128, Routing::kUniform, 200},
                      PermuteCase{65536, 256, 8, 64, Routing::kUniform, 5}));

// MoePrepareExpertWeights: exactly the host interleave, in one staging batch and in several
// (experts of 128 MiB: two per 256 MiB batch); the device's own choice is kInterleaved8 on
// Hopper and kStacked (untouched) elsewhere.
using PrepareCase = std::tuple<int, int, int>;  // experts, hidden, inter
class MoePrepareCudaTest : public ::testing::TestWithParam<PrepareCase> {};

TEST_P(MoePrepareCudaTest, InterleavesExactlyAsTheHostDoes) {
  const auto [E, H, I] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> stacked(static_cast<size_t>(E) * 2 * I * H);
  for (auto& v : stacked) v = static_cast<uint16_t>(rng());
  const auto want = testing::InterleaveGateUp(stacked, E, I, H);
  for (const bool automatic : {false, true}) {
    SCOPED_TRACE(automatic ? "layout chosen by the device" : "layout=interleaved8");
    auto d = testing::ToDevice(stacked);
    MoePrepareParams p;
    p.num_experts = E; p.hidden = H; p.inter = I; p.gate_up = d.get();
    if (!automatic) p.layout = MoeGateUpLayout::kInterleaved8;
    const auto layout = MoePrepareExpertWeights(p, KernelContext{Backend::kCuda, nullptr});
    ASSERT_TRUE(layout.ok()) << layout.status();
    const bool interleave = !automatic || moe_cuda::Sm90Available();
    EXPECT_EQ(*layout, interleave ? MoeGateUpLayout::kInterleaved8 : MoeGateUpLayout::kStacked);
    EXPECT_TRUE(testing::ToHost<uint16_t>(d, stacked.size()) == (interleave ? want : stacked));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoePrepareCudaTest,
                         ::testing::Values(PrepareCase{1, 8, 8}, PrepareCase{9, 72, 40},
                                           PrepareCase{64, 2048, 1408}, PrepareCase{3, 16384, 2048}));

TEST(MoePrepareCudaValidationTest, RefusesWhatTheLayoutCannotHold) {
  testing::DeviceBuffer d(2 * 12 * 64 * 2);
  MoePrepareParams p;
  p.num_experts = 1; p.hidden = 64; p.inter = 12; p.gate_up = d.get();
  p.layout = MoeGateUpLayout::kInterleaved8;
  const auto st = MoePrepareExpertWeights(p, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("inter=12"), std::string::npos) << st.status();
  p.layout.reset();  // the device's choice: stacked, since inter % 8 != 0
  const auto chosen = MoePrepareExpertWeights(p, KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(*chosen, MoeGateUpLayout::kStacked);
}

// Shared inputs of the experts-level tests below.
struct ExpertsInputs {
  int T, H, I, E, k;
  testing::DeviceBuffer x, gate_up, down, weights;
  std::vector<float> host_weights;

  ExpertsInputs(int T_, int H_, int I_, int E_, int k_, uint64_t seed)
      : T(T_), H(H_), I(I_), E(E_), k(k_),
        x(testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(T) * H, seed))),
        gate_up(testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(E) * 2 * I * H, seed + 1, -0.1f, 0.1f))),
        down(testing::ToDeviceBf16(testing::RandomVector(static_cast<size_t>(E) * H * I, seed + 2, -0.1f, 0.1f))),
        host_weights(testing::RandomVector(static_cast<size_t>(T) * k, seed + 3, 0.1f, 1.0f)) {
    weights = testing::ToDevice(host_weights);
  }

  MoeExpertsParams Params(const testing::DeviceBuffer& ids, const testing::DeviceBuffer& w) const {
    MoeExpertsParams p;
    p.dtype = DType::kBF16;
    p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
    p.x = x.get(); p.gate_up = gate_up.get(); p.down = down.get();
    p.topk_ids = ids.as<int32_t>(); p.topk_weights = w.as<float>();
    return p;
  }
};

// Runs `p` on `stream` into a fresh poisoned output; returns its bf16 bits.
std::vector<uint16_t> RunExperts(MoeExpertsParams p, cudaStream_t stream) {
  auto d_out = testing::PoisonedBf16(static_cast<size_t>(p.num_tokens) * p.hidden);
  testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(p));
  p.out = d_out.get(); p.workspace = d_ws.get(); p.workspace_bytes = d_ws.bytes();
  const absl::Status st = MoeExperts(p, KernelContext{Backend::kCuda, stream});
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return testing::ToHost<uint16_t>(d_out, static_cast<size_t>(p.num_tokens) * p.hidden);
}

std::vector<MoeExpertsPath> EveryPath() {
  std::vector<MoeExpertsPath> paths = {MoeExpertsPath::kStream, MoeExpertsPath::kTiled};
  if (moe_cuda::Sm90Available()) paths.push_back(MoeExpertsPath::kSm90);
  return paths;
}

// An id outside [0, E) contributes nothing (another rank's expert, api.h; the CPU backend skips
// it too): the output equals, bit for bit, a run where that slot names a valid expert with
// weight 0 (each row of the products depends only on its own input row, and
// adding 0 * y leaves the f32 sum unchanged).
TEST(MoeExpertsCudaEdgeTest, OutOfRangeIdsContributeNothing) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const int T : {5, 700}) {  // one chunk of the permutation, and three
    ExpertsInputs in(T, 128, 64, 16, 4, seed + T);
    std::vector<int32_t> ids = testing::MakeRouting(T, in.E, in.k, Routing::kUniform, seed);
    std::vector<int32_t> valid = ids;
    std::vector<float> zeroed = in.host_weights;
    std::mt19937_64 rng(seed);
    for (size_t a = 0; a < ids.size(); a += 1 + rng() % 5) {
      ids[a] = a % 2 == 0 ? -1 : in.E;
      zeroed[a] = 0.0f;
    }
    auto d_ids = testing::ToDevice(ids), d_valid = testing::ToDevice(valid), d_zeroed = testing::ToDevice(zeroed);
    for (const MoeExpertsPath path : EveryPath()) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " path=" << static_cast<int>(path));
      MoeExpertsParams p = in.Params(d_ids, in.weights);
      p.path = path;
      MoeExpertsParams q = in.Params(d_valid, d_zeroed);
      q.path = path;
      EXPECT_TRUE(RunExperts(p, nullptr) == RunExperts(q, nullptr));
    }
  }
}

// Block b, one warp: every lane's ActiveExpertOfSlot(ids, A, E, slot b) at out[32 b + lane].
__global__ void ActiveExpertOfSlotKernel(const int32_t* ids, int num_assign, int num_experts, int32_t* out) {
  out[blockIdx.x * 32 + threadIdx.x] = moe_cuda::ActiveExpertOfSlot(ids, num_assign, num_experts, blockIdx.x);
}

// The early map of the stream kernels (moe_active_slot.cuh) is the permutation's active list
// (the host stable sort's), slot for slot, on every lane, and -1 past the touched experts: ids
// repeated within and across tokens and ids outside [0, E) (another rank's experts), at 1-4 ids
// a lane, with experts in one 32-bit word up to kMaxExperts (32 words).
TEST(MoeActiveSlotCudaTest, EqualsThePermutationsActiveList) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (const int E : {4, 33, 64, 256, moe_cuda::kMaxExperts}) {
    for (const int A : {1, 6, 31, 32, 33, 96, moe_cuda::kActiveSlotMaxAssign}) {
      std::vector<int32_t> ids(A);
      const int pool = 1 + static_cast<int>(rng() % std::max(1, A / 2));  // repeats: draw from a few experts
      std::vector<int32_t> few(pool);
      for (int32_t& e : few) e = static_cast<int32_t>(rng() % E);
      for (int32_t& e : ids) {
        const uint64_t r = rng() % 8;
        e = r == 0 ? -1 : r == 1 ? E + static_cast<int32_t>(rng() % 3) : r < 5 ? few[rng() % pool]
                                                                                  : static_cast<int32_t>(rng() % E);
      }
      SCOPED_TRACE(::testing::Message() << "E=" << E << " A=" << A);
      const std::vector<int32_t> active = PermuteOnHost(ids, E).active;
      const int slots = std::min(E, A) + 2;  // two past the most there can be
      auto d_ids = testing::ToDevice(ids);
      testing::DeviceBuffer d_out(static_cast<size_t>(slots) * 32 * sizeof(int32_t));
      MLASERVE_CUDA_ASSERT(cudaMemset(d_out.get(), 0x7f, d_out.bytes()));  // poisoned
      ActiveExpertOfSlotKernel<<<slots, 32>>>(d_ids.as<int32_t>(), A, E, d_out.as<int32_t>());
      MLASERVE_CUDA_ASSERT(cudaGetLastError());
      const auto got = testing::ToHost<int32_t>(d_out, static_cast<size_t>(slots) * 32);
      for (int slot = 0; slot < slots; ++slot) {
        const int32_t want = slot < static_cast<int>(active.size()) ? active[slot] : -1;
        for (int lane = 0; lane < 32; ++lane) {
          ASSERT_EQ(got[static_cast<size_t>(slot) * 32 + lane], want) << "slot " << slot << " lane " << lane;
        }
      }
    }
  }
}

// A captured call replays to the same bytes as a direct one, for a routing that changes
// between replays (the graph reads the ids at replay time): one chunk and several.
TEST(MoeExpertsCudaEdgeTest, GraphReplaysEqualDirectRuns) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  cudaStream_t stream;
  MLASERVE_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const int T : {9, 1000}) {
    ExpertsInputs in(T, 256, 128, 32, 6, seed + T);
    auto d_ids = testing::ToDevice(testing::MakeRouting(T, in.E, in.k, Routing::kRagged, seed));
    const auto next_ids = testing::MakeRouting(T, in.E, in.k, Routing::kUniform, seed + 1);
    for (const MoeExpertsPath path : EveryPath()) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " path=" << static_cast<int>(path));
      MoeExpertsParams p = in.Params(d_ids, in.weights);
      p.path = path;
      auto d_out = testing::PoisonedBf16(static_cast<size_t>(T) * in.H);
      testing::DeviceBuffer d_ws(MoeExpertsWorkspaceBytes(p));
      p.out = d_out.get(); p.workspace = d_ws.get(); p.workspace_bytes = d_ws.bytes();
      MoeExpertsParams warm = p;  // first calls set kernel attributes outside the capture
      ASSERT_TRUE(MoeExperts(warm, KernelContext{Backend::kCuda, stream}).ok());
      MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      MLASERVE_CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const absl::Status st = MoeExperts(p, KernelContext{Backend::kCuda, stream});
      MLASERVE_CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
      ASSERT_TRUE(st.ok()) << st;
      MLASERVE_CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
      MLASERVE_CUDA_ASSERT(cudaMemcpy(d_ids.get(), next_ids.data(), next_ids.size() * 4, cudaMemcpyHostToDevice));
      MLASERVE_CUDA_ASSERT(cudaGraphLaunch(exec, stream));
      MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
      const auto replayed = testing::ToHost<uint16_t>(d_out, static_cast<size_t>(T) * in.H);
      EXPECT_TRUE(replayed == RunExperts(p, stream));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      // Back to the first routing for the next path.
      const auto first = testing::MakeRouting(T, in.E, in.k, Routing::kRagged, seed);
      MLASERVE_CUDA_ASSERT(cudaMemcpy(d_ids.get(), first.data(), first.size() * 4, cudaMemcpyHostToDevice));
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace mlaserve::kernels
