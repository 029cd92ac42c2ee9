// moe experts CUDA backend (bf16): the dispatcher of the routed experts (moe_cuda.h describes
// the stages and the three product paths): the path and tile choice, the workspace carving,
// and the stages in order.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels {
namespace {

using moe_cuda::ExpertsStage;

char* Carve(char*& cursor, size_t bytes) {
  constexpr size_t kAlign = 256;
  char* at = cursor;
  cursor += (bytes + kAlign - 1) / kAlign * kAlign;
  return at;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Mean rows per expert: what decides between the paths (a decode batch of T tokens gives each
// expert about T * top_k / E rows).
double MeanRowsPerExpert(const MoeExpertsParams& p) {
  return static_cast<double>(p.num_tokens) * p.top_k / p.num_experts;
}

// kAuto's stream cut in rows an expert: kMoeStreamMaxRowsPerExpert, or
// MLASERVE_MOE_STREAM_MAX_ROWS=R (0-32, the stream kernels' widest pass) in the environment, read
// once: engine-level timing of another cut without a rebuild (the 20-row cut measured slower on
// the engine's 192-token prefill and faster on its 192-row decode step, H200, 2026-12-01).
// Anything unparsable or out of range is ignored.
double StreamMaxRowsPerExpert() {
  static const int rows = EnvIntInRange("MLASERVE_MOE_STREAM_MAX_ROWS", 0, 32, kMoeStreamMaxRowsPerExpert);
  return rows;
}

// The path kAuto takes, from mlaserve-moe-bench's sweep on H100 (docs/BENCHMARKS.md, "MoE
// experts"): the stream kernels while experts have few rows (they read each touched expert's
// weights once; at 12 rows per expert they still beat the grouped GEMMs), the Hopper grouped
// GEMM beyond, the portable tiled GEMM off Hopper.
// The stream kernels apply any activation in their gate_up pass (SiLU compiled in, the others
// through one switch an output), so the choice does not depend on it.
MoeExpertsPath ChoosePath(const MoeExpertsParams& p) {
  if (p.path != MoeExpertsPath::kAuto) return p.path;
  if (p.num_tokens <= kMoeStreamMaxTokens || MeanRowsPerExpert(p) <= StreamMaxRowsPerExpert()) {
    return MoeExpertsPath::kStream;
  }
  return moe_cuda::Sm90Available() ? MoeExpertsPath::kSm90 : MoeExpertsPath::kTiled;
}

// Tile configurations of the kSm90 products (moe_gemm_sm90.cuh), from mlaserve-moe-bench's
// sweeps (docs/BENCHMARKS.md, "MoE experts"). On the H200 (2026-12-01, V2-Lite 2048-16384 and V3
// 2048-16384 tokens): gate_up + SiLU on ping-pong 64 x 256 up to 511 rows an expert (V3 8192
// tokens, 256 rows: 7.04 ms against 7.51 for the 128 x 256 cooperative tile; V2-Lite 3072 / 4096,
// 288 / 384 rows: 2-5% faster), the cooperative 128 x 256 tile from 512 (V3 16384: 13.12 against
// 13.74 ms; V2-Lite 8192, 768 rows: 0.935 against 0.985); the down product on ping-pong 64 x 256
// with the register-stored epilogue (variant 8) above the weight-bound sizes and below 1024 rows
// (1-5% ahead of the cooperative tile from 256 to 768 rows, V3 16384 6.78 against 7.12 ms, and
// even with ping-pong's other epilogue below), the cooperative tile from 1024 (V2-Lite 16384,
// 1536 rows: 0.934-0.978 against 0.975). Ping-pong 64 x 128 per product where that spreads the
// weight-bound sizes over the SMs better (WeightBoundVariant; H200, 2026-11-30). The H100's
// sweep of 2026-11-25 had put the cooperative tile at 256 rows; on the H100 of 2026-12-05
// (LeanDram below) V2-Lite takes the cooperative tile for both products from 289 rows.
using moe_cuda::Sm90Choice;

// MLASERVE_MOE_SM90_VARIANTS="G[,D]" in the environment forces kAuto's kSm90 variants for the
// gate_up (G) and down (D, default G) products: engine-level timing of a configuration
// without rebuilding. Read once; anything unparsable or out of range is ignored.
Sm90Choice ForcedSm90Variants() {
  static const Sm90Choice forced = [] {
    Sm90Choice c{-1, -1};
    const char* v = std::getenv("MLASERVE_MOE_SM90_VARIANTS");
    if (v == nullptr) return c;
    int g = -1, d = -1;
    const int n = std::sscanf(v, "%d,%d", &g, &d);
    if (n >= 1 && g >= 0 && g < moe_cuda::kSm90Variants) c.gate_up = g;
    c.down = n == 2 && d >= 0 && d < moe_cuda::kSm90Variants ? d : c.gate_up;
    return c;
  }();
  return forced;
}

// The share of a round-robin persistent kernel's time its CTAs are busy, for `tiles` tiles of
// equal time over `ctas` CTAs: the last round's CTAs take one tile more than the others.
double RoundRobinBalance(double tiles, int ctas) {
  const double per_cta = tiles / ctas;
  return per_cta / std::ceil(per_cta);
}

// Weight-bound sizes (at most 64 rows an expert on average: about one 64-row tile each): the
// time is the weights' reads, spread over the SMs tile by tile. Where the 64 x 256 tiles of a
// product are too few to spread evenly (V2-Lite gate_up: 64 experts x 11 = 704 tiles, 5.33 a
// CTA on 132 SMs, 89% busy), ping-pong 64 x 128 (variant 13, twice the tiles: 97%) reads them
// 2.5-3.4% faster (H200, 256-640 tokens; even at 704, 66 rows); where both spread well
// (V2-Lite down, V3) or experts have more rows, 64 x 256 is faster (docs/BENCHMARKS.md,
// sixteenth session).
constexpr double kSmallTileRows = 64;
constexpr double kBalanceGain = 0.05;
int WeightBoundVariant(const MoeExpertsParams& p, int n, int sms) {
  constexpr int kWide = 3, kNarrow = 13;
  if (MeanRowsPerExpert(p) > kSmallTileRows) return kWide;
  sms = std::max(1, sms);
  const double wide = static_cast<double>(p.num_experts) * ((n + 255) / 256);
  const double narrow = static_cast<double>(p.num_experts) * ((n + 127) / 128);
  return RoundRobinBalance(narrow, sms) >= RoundRobinBalance(wide, sms) + kBalanceGain ? kNarrow : kWide;
}

// Our ping-pong 64 x 256 kernel (variant 14: one TMA descriptor per operand, no rewrite when a
// CTA's next tile is another expert's) for both products where the tiles' main loops are short
// (hidden <= 4096: V2-Lite's gate_up K of 2048, down K of 1408) and experts have 65-288 rows:
// against CUTLASS's ping-pong pair (variants 3 + SiLU and 8), V2-Lite 768-1536 tokens 2.3-4.5%
// faster end to end, 2048 (192 rows) 0-3%, 2560-3072 even; at 3584 (336 rows) 1.6% slower and
// 4096-5120 even (H200, fifty-second and fifty-third sessions). At V3's hidden of 7168 it is even
// at 128 rows and 2-7% slower at 96 (fifty-second session). On the H100 it is the fastest
// measured at 2048-3072 tokens too (sixty-second session).
constexpr double kOwnPingPongMaxRows = 288;
constexpr int kOwnPingPongMaxHidden = 4096;

// A GPU with less DRAM bandwidth per unit of compute (the H100 against the H200): from 224 rows
// an expert, past our ping-pong kernel's rows where it runs, the cooperative 128 x 256 tile
// (variant 1, SiLU fused) for both products. It reads each expert's weights once per 128 rows
// instead of once per 64, which the H100's 3.35 TB/s feels and the H200's does not. H100 V2-Lite,
// end to end (mlaserve-moe-bench, 2026-12-05): 3584 tokens (336 rows) 0.769 ms against 0.881 for
// the ping-pong pair (v3 + SiLU, v8), 4096 0.868 against 0.990, 5120 1.021 against 1.225, 6144
// 1.255 against 1.341 (v1 + SiLU, v8), 8192 1.586 against 1.672. H100 V3 (hidden 7168, 2026-12-06):
// 7168 tokens (224 rows) 10.57 ms against 11.34 for the pair, 8192 (256 rows) 12.75 against
// 13.84-14.01; 6144 (192 rows) 10.25 against 10.19, even; 4096 (128 rows) 9.64 against 9.07,
// where the pair stays.
constexpr double kLeanDramCooperativeRows = 224;

// The workspace, carved in MoeExpertsWorkspaceBytes' order (moe.cc) plus the CUDA parts.
struct ExpertsWorkspace {
  int32_t* sorted;
  int32_t* offsets;
  __nv_bfloat16* xg;  // x rows in expert order (kSm90)
  __nv_bfloat16* hs;  // gate_up output [A, 2*inter] or activations [A, inter]
  __nv_bfloat16* ys;  // down output [A, hidden] (bf16 rows in the CPU layout's f32 part)
  int32_t* tile_offsets;
  int32_t* position;
  int32_t* active;
  void* sm90_args;
  void* sm90_ws;
  int32_t* chunk_counts;
};

ExpertsWorkspace CarveWorkspace(const MoeExpertsParams& p) {
  const size_t a = static_cast<size_t>(p.num_tokens) * p.top_k;
  const size_t H = p.hidden, I = p.inter, E1 = p.num_experts + 1;
  char* cursor = static_cast<char*>(p.workspace);
  ExpertsWorkspace w;
  w.sorted = reinterpret_cast<int32_t*>(Carve(cursor, a * sizeof(int32_t)));
  w.offsets = reinterpret_cast<int32_t*>(Carve(cursor, E1 * sizeof(int32_t)));
  w.xg = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, a * H * 2));
  w.hs = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, a * 2 * I * 2));
  w.ys = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, a * H * sizeof(float)));
  w.tile_offsets = reinterpret_cast<int32_t*>(Carve(cursor, E1 * sizeof(int32_t)));
  w.position = reinterpret_cast<int32_t*>(Carve(cursor, a * sizeof(int32_t)));
  w.active = reinterpret_cast<int32_t*>(Carve(cursor, E1 * sizeof(int32_t)));
  w.sm90_args = Carve(cursor, moe_cuda::Sm90ArgsBlockBytes(p.num_experts));
  w.sm90_ws = Carve(cursor, moe_cuda::Sm90WorkspaceBytes(p.num_experts));
  w.chunk_counts = reinterpret_cast<int32_t*>(
      Carve(cursor, moe_cuda::PermuteScratchBytes(static_cast<int>(a), p.num_experts)));
  return w;
}

absl::Status CheckCudaParams(const MoeExpertsParams& p) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  if (p.hidden % 8 != 0 || p.inter % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: hidden=", p.hidden, " and inter=",
                                                   p.inter, " must be multiples of 8 on CUDA (16-byte rows)"));
  }
  if (p.num_experts > moe_cuda::kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: num_experts=", p.num_experts,
                                                   " exceeds the CUDA backend's ", moe_cuda::kMaxExperts));
  }
  if (!Aligned16(p.x) || !Aligned16(p.gate_up) || !Aligned16(p.down) || !Aligned16(p.workspace) ||
      !Aligned16(p.out)) {
    return absl::InvalidArgumentError("moe_experts: x, gate_up, down, out and workspace must be 16-byte aligned on CUDA");
  }
  return absl::OkStatus();
}

}  // namespace

namespace moe_cuda {

namespace {

size_t NoBytes(int) { return 0; }  // variants 12 and 14 need no argument block or workspace

struct Sm90Entry {
  absl::Status (*launch)(const Sm90GroupedArgs&, cudaStream_t);
  size_t (*workspace_bytes)(int);
  size_t (*args_block_bytes)(int);
};
#define MLASERVE_SM90_ENTRY(N) {LaunchSm90GroupedV##N, Sm90WorkspaceBytesV##N, Sm90ArgsBlockBytesV##N}
#define MLASERVE_SM90_DIRECT_ENTRY(N) \
  {LaunchSm90GroupedDirectV##N, Sm90WorkspaceBytesDirectV##N, Sm90ArgsBlockBytesDirectV##N}
#define MLASERVE_SM90_SILU_ENTRY(N) \
  {LaunchSm90GroupedSiluMulV##N, Sm90WorkspaceBytesSiluMulV##N, Sm90ArgsBlockBytesSiluMulV##N}
// moe_cuda.h's numbering: 0-6 TMA-store configurations, 7-11 direct-store ones, 12 ours
// (cooperative), 13 configuration 7 direct-store, 14 ours (ping-pong).
constexpr Sm90Entry kSm90[kSm90Variants] = {
    MLASERVE_SM90_ENTRY(0), MLASERVE_SM90_ENTRY(1), MLASERVE_SM90_ENTRY(2), MLASERVE_SM90_ENTRY(3),
    MLASERVE_SM90_ENTRY(4), MLASERVE_SM90_ENTRY(5), MLASERVE_SM90_ENTRY(6),
    MLASERVE_SM90_DIRECT_ENTRY(1), MLASERVE_SM90_DIRECT_ENTRY(3), MLASERVE_SM90_DIRECT_ENTRY(4),
    MLASERVE_SM90_DIRECT_ENTRY(5), MLASERVE_SM90_DIRECT_ENTRY(6),
    {LaunchSm90GroupedOwnV12, NoBytes, NoBytes}, MLASERVE_SM90_DIRECT_ENTRY(7),
    {LaunchSm90GroupedOwnV14, NoBytes, NoBytes}};
// Fused SiLU epilogues: configurations 0 and 2 (128 x 128 cooperative, 128 x 256 in clusters
// along M) measured slower than the others unfused, so they have none.
constexpr Sm90Entry kSm90SiluMul[kSm90Variants] = {
    {}, MLASERVE_SM90_SILU_ENTRY(1), {}, MLASERVE_SM90_SILU_ENTRY(3),
    MLASERVE_SM90_SILU_ENTRY(4), MLASERVE_SM90_SILU_ENTRY(5), MLASERVE_SM90_SILU_ENTRY(6),
    MLASERVE_SM90_SILU_ENTRY(1), MLASERVE_SM90_SILU_ENTRY(3), MLASERVE_SM90_SILU_ENTRY(4),
    MLASERVE_SM90_SILU_ENTRY(5), MLASERVE_SM90_SILU_ENTRY(6),
    {LaunchSm90GroupedOwnSiluMulV12, NoBytes, NoBytes}, MLASERVE_SM90_SILU_ENTRY(7),
    {LaunchSm90GroupedOwnSiluMulV14, NoBytes, NoBytes}};
#undef MLASERVE_SM90_ENTRY
#undef MLASERVE_SM90_DIRECT_ENTRY
#undef MLASERVE_SM90_SILU_ENTRY

constexpr const char* kSm90Names[kSm90Variants] = {
    "coop128x128",     "coop128x256",     "coop128x256c2m",     "pp64x256",
    "pp128x128",       "coop128x256c2n",  "pp128x128c2n",       "coop128x256/reg",
    "pp64x256/reg",    "pp128x128/reg",   "coop128x256c2n/reg", "pp128x128c2n/reg",
    "ours128x256",     "pp64x128/reg",    "ours-pp64x256"};

absl::Status BadVariant(int variant) {
  return absl::InvalidArgumentError(absl::StrCat("moe_experts: sm90_variant=", variant,
                                                 " is outside [0, ", kSm90Variants, ")"));
}

}  // namespace

absl::Status LaunchSm90Grouped(int variant, const Sm90GroupedArgs& g, cudaStream_t s) {
  if (variant < 0 || variant >= kSm90Variants) return BadVariant(variant);
  return kSm90[variant].launch(g, s);
}

const char* Sm90VariantName(int variant) {
  return variant >= 0 && variant < kSm90Variants ? kSm90Names[variant] : "?";
}

bool Sm90HasFusedSiluMul(int variant) {
  return variant >= 0 && variant < kSm90Variants && kSm90SiluMul[variant].launch != nullptr;
}

absl::Status LaunchSm90GroupedSiluMul(int variant, const Sm90GroupedArgs& g, cudaStream_t s) {
  if (!Sm90HasFusedSiluMul(variant)) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe_experts: sm90_variant=", variant, " has no fused SiLU epilogue"));
  }
  return kSm90SiluMul[variant].launch(g, s);
}

size_t Sm90ArgsBlockBytes(int e) {
  size_t bytes = 0;
  for (const Sm90Entry* table : {kSm90, kSm90SiluMul}) {
    for (int v = 0; v < kSm90Variants; ++v) {
      if (table[v].launch != nullptr) bytes = std::max(bytes, table[v].args_block_bytes(e));
    }
  }
  return bytes;
}

size_t Sm90WorkspaceBytes(int e) {
  size_t bytes = 0;
  for (const Sm90Entry* table : {kSm90, kSm90SiluMul}) {
    for (int v = 0; v < kSm90Variants; ++v) {
      if (table[v].launch != nullptr) bytes = std::max(bytes, table[v].workspace_bytes(e));
    }
  }
  return bytes;
}

const char* ExpertsStageName(ExpertsStage stage) {
  switch (stage) {
    case ExpertsStage::kPermute: return "permute";
    case ExpertsStage::kGather: return "gather";
    case ExpertsStage::kGateUp: return "gate_up";
    case ExpertsStage::kSiluMul: return "silu_mul";
    case ExpertsStage::kDown: return "down";
    case ExpertsStage::kCombine: return "combine";
  }
  return "?";
}

Sm90Device CurrentSm90Device() {
  return {cuda::CurrentDeviceSmCount(), cuda::CurrentDeviceDramBytesPerSmClock()};
}

Sm90Choice ChooseSm90Variants(const MoeExpertsParams& p, const Sm90Device& device) {
  constexpr int kCooperative = 1, kPingPongRegisterStore = 8;
  constexpr double kLargeTileRows = 512, kLargeTileDownRows = 1024;
  const double rows = MeanRowsPerExpert(p);
  if (rows > kSmallTileRows && rows <= kOwnPingPongMaxRows && p.hidden <= kOwnPingPongMaxHidden) {
    return {kSm90OwnPingPongVariant, kSm90OwnPingPongVariant};
  }
  if (rows >= kLeanDramCooperativeRows && IsLeanDram(device.dram_bytes_per_sm_clock)) {
    return {kCooperative, kCooperative};
  }
  const int gate_up = rows >= kLargeTileRows ? kCooperative : WeightBoundVariant(p, 2 * p.inter, device.sms);
  const int down = rows >= kLargeTileDownRows ? kCooperative
                   : rows > kSmallTileRows    ? kPingPongRegisterStore
                                              : WeightBoundVariant(p, p.hidden, device.sms);
  return {gate_up, down};
}

ExpertsPlan PlanExperts(const MoeExpertsParams& p) {
  ExpertsPlan plan{ChoosePath(p), -1, -1, false};
  if (plan.path == MoeExpertsPath::kSm90) {
    Sm90Choice auto_choice = ForcedSm90Variants();
    if (auto_choice.gate_up < 0) auto_choice = ChooseSm90Variants(p, CurrentSm90Device());
    plan.gate_up_variant = p.sm90_variant >= 0 ? p.sm90_variant : auto_choice.gate_up;
    plan.down_variant = p.sm90_variant >= 0 ? p.sm90_variant : auto_choice.down;
    plan.fused_silu = p.act == Activation::kSilu && p.gate_up_layout == MoeGateUpLayout::kInterleaved8 &&
                      !p.baseline.silu && Sm90HasFusedSiluMul(plan.gate_up_variant);
  }
  return plan;
}

absl::Status RunExperts(const MoeExpertsParams& p, cudaStream_t s, ExpertsStageObserver* observer) {
  RETURN_IF_ERROR(CheckCudaParams(p));
  const ExpertsPlan plan = PlanExperts(p);
  if (plan.path == MoeExpertsPath::kSm90 && !Sm90Available()) {
    return absl::InvalidArgumentError("moe_experts: path=sm90 needs a Hopper (sm_90) GPU");
  }
  auto done = [&](ExpertsStage stage) {
    if (observer != nullptr) observer->AfterStage(stage, s);
  };
  const int num_assign = p.num_tokens * p.top_k;
  const int H = p.hidden, I = p.inter, E = p.num_experts;
  const bool interleaved = p.gate_up_layout == MoeGateUpLayout::kInterleaved8;
  const ExpertsWorkspace w = CarveWorkspace(p);
  // The decode path, whole (moe_stream.cu: routing + permutation, products, combine).
  if (plan.path == MoeExpertsPath::kStream) {
    return RunStreamExperts(p, {w.sorted, w.offsets, w.tile_offsets, w.position, w.active,
                                w.chunk_counts, w.hs, w.ys}, s, observer);
  }
  if (p.shared.inter != 0) {
    return absl::InvalidArgumentError(
        "moe_experts: shared experts are folded on the stream path only (MoeExpertsFoldsSharedAndNorm); "
        "the grouped paths take their output as the addend (MoeExpertsFoldsAddendAndNorm)");
  }
  if ((p.addend != nullptr || p.norm.residual != nullptr) && !MoeExpertsCudaFoldsAddendAndNorm(p)) {
    return absl::InvalidArgumentError(
        "moe_experts: an addend or the norm epilogue asked where MoeExpertsFoldsAddendAndNorm is false");
  }
  const auto* x = static_cast<const __nv_bfloat16*>(p.x);
  const auto* gate_up = static_cast<const __nv_bfloat16*>(p.gate_up);
  const auto* down = static_cast<const __nv_bfloat16*>(p.down);

  // 1. Permutation; x rows gathered into expert order for the TMA-fed kSm90 products (the
  // other paths gather inside their loads).
  const bool gather = plan.path == MoeExpertsPath::kSm90;
  PermuteArgs pa{p.topk_ids, num_assign, E, p.top_k, x, H, gather ? w.xg : nullptr,
                 w.sorted, w.offsets, w.tile_offsets, w.position, w.active, w.chunk_counts};
  pa.routing = p.routing;  // routed first, when asked
  if (p.baseline.permute) {
    RETURN_IF_ERROR(LaunchBaselineSort(pa, s));
    done(ExpertsStage::kPermute);
    if (gather) {
      RETURN_IF_ERROR(LaunchBaselineGather(pa, s));
      done(ExpertsStage::kGather);
    }
  } else {
    RETURN_IF_ERROR(LaunchPermute(pa, s, observer));  // kPermute, and kGather if the copy is apart
  }

  // 2-3. The products.
  switch (plan.path) {
    case MoeExpertsPath::kStream:  // RunStreamExperts, above
      return absl::InternalError("moe_experts: the stream path runs in RunStreamExperts");
    case MoeExpertsPath::kSm90: {
      // Fused: hs holds [A, inter] activations; unfused: [A, 2*inter] products, act(gate) * up
      // compacted into each row's first inter columns.
      const int64_t act_ld = plan.fused_silu ? I : 2 * I;
      Sm90GroupedArgs up{w.xg, H, gate_up, w.hs, act_ld, 2 * I, H, E, w.offsets, w.sm90_args, w.sm90_ws};
      up.a_rows = num_assign;
      if (plan.fused_silu) {
        RETURN_IF_ERROR(LaunchSm90GroupedSiluMul(plan.gate_up_variant, up, s));
        done(ExpertsStage::kGateUp);
      } else {
        RETURN_IF_ERROR(LaunchSm90Grouped(plan.gate_up_variant, up, s));
        done(ExpertsStage::kGateUp);
        RETURN_IF_ERROR(LaunchActMul(p.act, w.hs, w.offsets, E, I, num_assign, interleaved, s));
        done(ExpertsStage::kSiluMul);
      }
      Sm90GroupedArgs dn{w.hs, act_ld, down, w.ys, H, H, I, E, w.offsets, w.sm90_args, w.sm90_ws};
      dn.a_rows = num_assign;
      RETURN_IF_ERROR(LaunchSm90Grouped(plan.down_variant, dn, s));
      done(ExpertsStage::kDown);
      break;
    }
    case MoeExpertsPath::kTiled:
    case MoeExpertsPath::kAuto: {
      const int max_tiles = (num_assign + kTiledRows - 1) / kTiledRows + std::min(E, num_assign);
      GroupedGemmArgs up{};
      up.a = x;
      up.lda = H;
      up.sorted = w.sorted;
      up.top_k = p.top_k;
      up.w = gate_up;
      up.w_expert_stride = int64_t{2} * I * H;
      up.n = 2 * I;
      up.k = H;
      up.c = w.hs;
      up.ldc = 2 * I;
      up.offsets = w.offsets;
      up.tile_offsets = w.tile_offsets;
      up.num_experts = E;
      RETURN_IF_ERROR(LaunchTiledGemm(up, max_tiles, s));
      done(ExpertsStage::kGateUp);
      RETURN_IF_ERROR(LaunchActMul(p.act, w.hs, w.offsets, E, I, num_assign, interleaved, s));
      done(ExpertsStage::kSiluMul);
      GroupedGemmArgs dn = up;
      dn.a = w.hs;
      dn.lda = 2 * I;
      dn.sorted = nullptr;
      dn.w = down;
      dn.w_expert_stride = int64_t{H} * I;
      dn.n = H;
      dn.k = I;
      dn.c = w.ys;
      dn.ldc = H;
      RETURN_IF_ERROR(LaunchTiledGemm(dn, max_tiles, s));
      done(ExpertsStage::kDown);
      break;
    }
  }

  // 4. Combine in token order (plus the addend), into out or into the residual + norm.
  CombineArgs ca{w.ys, w.position, p.topk_weights, static_cast<__nv_bfloat16*>(p.out),
                 p.num_tokens, p.top_k, H};
  ca.addend = static_cast<const __nv_bfloat16*>(p.addend);
  ca.residual = static_cast<__nv_bfloat16*>(p.norm.residual);
  ca.norm_weight = static_cast<const __nv_bfloat16*>(p.norm.weight);
  ca.norm_y = static_cast<__nv_bfloat16*>(p.norm.y);
  ca.norm_eps = p.norm.eps;
  ca.norm_dim = p.norm.real_dim > 0 ? p.norm.real_dim : p.hidden;
  ca.early_loads_kernel = false;  // many waves of token blocks (moe_cuda.h)
  RETURN_IF_ERROR(p.baseline.combine ? LaunchBaselineCombine(ca, s) : LaunchCombine(ca, s));
  done(ExpertsStage::kCombine);
  return absl::OkStatus();
}

}  // namespace moe_cuda

size_t MoeExpertsCudaWorkspaceBytes(const MoeExpertsParams& p) {
  constexpr size_t kAlign = 256;
  auto align = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  const int num_assign = p.num_tokens * p.top_k;
  return align((static_cast<size_t>(p.num_experts) + 1) * sizeof(int32_t)) +
         align(moe_cuda::Sm90ArgsBlockBytes(p.num_experts)) +
         align(moe_cuda::Sm90WorkspaceBytes(p.num_experts)) +
         align(moe_cuda::PermuteScratchBytes(num_assign, p.num_experts));
}

namespace {

// MLASERVE_MOE_PREFILL_FOLD=0 in the environment: the grouped paths take no addend and no norm
// epilogue (MoeExpertsFoldsAddendAndNorm false; callers then add the shared experts into out
// and run the RmsNorm apart), for timing comparisons in one build. Read once.
bool PrefillFoldDisabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_MOE_PREFILL_FOLD");
  return disabled;
}

}  // namespace

bool MoeExpertsCudaFoldsAddendAndNorm(const MoeExpertsParams& p) {
  if (PrefillFoldDisabled()) return false;
  if (p.addend != nullptr && !Aligned16(p.addend)) return false;
  if (p.norm.residual != nullptr &&
      !(Aligned16(p.norm.residual) && Aligned16(p.norm.weight) && Aligned16(p.norm.y))) {
    return false;
  }
  return p.dtype == DType::kBF16 && p.num_tokens > 0 && p.top_k > 0 && p.inter > 0 && p.inter % 8 == 0 &&
         p.hidden % 8 == 0 && p.hidden <= moe_cuda::kCombineNormMaxHidden && p.shared.inter == 0 &&
         !p.baseline.combine && moe_cuda::PlanExperts(p).path != MoeExpertsPath::kStream;
}

absl::Status MoeExpertsCuda(const MoeExpertsParams& p, void* stream) {
  return moe_cuda::RunExperts(p, static_cast<cudaStream_t>(stream), nullptr);
}

}  // namespace mlaserve::kernels
