// mla_decode: the host-side plan (split-KV sizing) and the dispatcher.
#include "kernels/mla_decode/api.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/dram_class.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/param_check.h"
#include "kernels/mla_decode/balanced_schedule.h"
#include "kernels/mla_decode/chunk_pick.h"
#include "kernels/mla_prefill/latent_tiling.h"
#include "kernels/mla_prefill/mla_check.h"

namespace mlaserve::kernels {
namespace {

// More splits than this only grow the combine's reads (and the workspace).
constexpr int kMaxSplits = 64;
// The longest chunk MLASERVE_MLA_PAGES_PER_SPLIT may force (64k keys).
constexpr int kMaxForcedPagesPerSplit = 1024;
// The plan's cost model, in units of one CTA's time per cache page (~1.75 us on an H100 at batch
// 1-8), fitted to the mla_decode_small table (docs/BENCHMARKS.md, 2026-11-25, last run): of the
// chunk plans measured there for b 1-8, h 16 / 128, s_k 512-8k, it picks one 3% slower than the
// fastest on average, 12% at worst.
// Fixed cost of one CTA (Q tile load, prologue, the first pages' latency, the output write).
constexpr double kCtaOverheadPages = 2;
// A CTA's pages cost by pairs in the 64-row Hopper kernel (its two warpgroups compute two pages'
// scores at once), one by one in the few-rows kernel (requests of up to kLatentFewRowsMax rows).
inline int CtaPageCost(int pages, int64_t rows) {
  return rows <= mla_internal::kLatentFewRowsMax ? pages : (pages + 1) / 2 * 2;
}
// The combine kernel (launched with PDL: its fixed part is hidden): per split the latency of
// its loop over the pieces, and the partials' bytes (written by the attention kernel, read by
// the combine) over the SMs.
constexpr double kCombinePagesPerSplit = 0.05;
constexpr double kCombinePartialWeight = 2;
// The balanced schedule's combine and its segment starts (its schedule kernel runs once per
// decode step: MlaDecodeBuildMetadata); measured slower than the best chunk plan at every batch
// of 1-8 and at uniform lengths of batch 64. 14 while every call built its own schedule; 10 since
// (H200, 2026-11-29, ninth session: b 64 x 16 heads, 4k +-25%: balanced 0.087 ms, chunks 0.090).
constexpr int kBalancedOverheadPages = 10;
// With several 64-row blocks per request (128 heads) a balanced part's page costs more than a
// chunk CTA's: ~25% on the H100 (b 64/128, 4k-8k, 2026-11-25); ~10-14% on the H200 since the
// steady page pairs (2026-11-30: b 64 8k / 16k balanced 0.291 / 0.524 ms against chunks 0.306 /
// 0.589, b 64 4k 0.178 against 0.167, b 128 4k-16k chunks ahead by 3-11%), which 1.15 ordered
// right; 1.10 since parts are charged for their cuts (2026-12-01: the same choices on the bench's
// own lengths, pinned by a test; 1.08-1.13 keep them); 1.04 since the combine loads its partials
// evict-first (2026-12-01, twenty-sixth session): at b 64, 4k the balanced schedule then led the
// chunks in three calls (493 / 488, 491 / 480, 489 / 475 TFLOP/s), and 1.03-1.05 take it there
// while b 128 keeps the chunks at 4k-16k (by 12% / 4% of their cost at 4k / 16k).
constexpr double kBalancedRowBlocksFactor = 1.04;
// The same on a lean-DRAM GPU (kernels/common/dram_class.h). On the H100 (2026-12-06, sixty-seventh
// session, kernel bench lengths, TFLOP/s balanced / chunks, one call): b 64 4k 447.5 / 477.4 (the
// chunks 6% ahead, and even with FlashMLA's 476.5), 8k 520.1 / 524.2, 16k 577.4 / 539.7; b 128
// chunks ahead by 4-11%. A balanced part's extra segments write and read f32 partials, which cost
// more where DRAM is lean. The model's even points at b 64 are 1.06 (4k), 1.14 (8k), 1.21 (16k):
// 1.10 gives 4k to the chunks and keeps 8k (even there) and 16k balanced.
constexpr double kLeanDramBalancedRowBlocksFactor = 1.10;
// From 4 row blocks a request (s_q 2 at 128 heads) the balanced schedule's four CTAs of a part read
// each page together (one L2 fill for four), and it measured ahead of the chunks from 8k keys on at
// b 128 and at 16k at b 64 (H200, 2026-12-01, two calls, kernel bench lengths, TFLOP/s balanced /
// chunks: b 128 8k 677 / 656 and 673 / 653, b 128 16k 645 / 632 and 660 / 634, b 64 16k 692 / 661
// and 687 / 660; b 64 8k 656 / 660 and 655 / 661; at 4k the chunks, 607 / 573 at b 64): 0.98 takes
// it where it led and leaves b 64 8k and 4k to the chunks.
constexpr double kBalancedManyRowBlocksFactor = 0.98;
constexpr int64_t kManyRowBlocks = 4;

// Partial outputs (kv_lora_rank floats) and partial LSEs per (row, split); none without a split.
size_t ChunkPartialBytes(int batch, int rows_per_request, int kv_lora_rank, int num_splits) {
  if (num_splits <= 1) return 0;
  return static_cast<size_t>(batch) * rows_per_request * num_splits * (static_cast<size_t>(kv_lora_rank) + 1) *
         sizeof(float);
}

}  // namespace

size_t MlaDecodeChunkOrderOffset(int batch, int rows_per_request, int kv_lora_rank, int num_splits) {
  return (ChunkPartialBytes(batch, rows_per_request, kv_lora_rank, num_splits) + 255) / 256 * 256;
}

size_t MlaDecodeChunkPickOffset(int batch, int num_splits) {
  return (static_cast<size_t>(batch) * std::max(num_splits, 1) * sizeof(int32_t) + 15) / 16 * 16;
}

size_t MlaDecodeChunkOrderBytes(int batch, int num_splits) {
  return MlaDecodeChunkPickOffset(batch, num_splits) + mla_decode_internal::kPickHeaderBytes;
}

size_t MlaDecodeChunkWorkspaceBytes(int batch, int rows_per_request, int kv_lora_rank, int num_splits,
                                    bool longest_first) {
  if (!longest_first) return ChunkPartialBytes(batch, rows_per_request, kv_lora_rank, num_splits);
  return MlaDecodeChunkOrderOffset(batch, rows_per_request, kv_lora_rank, num_splits) +
         MlaDecodeChunkOrderBytes(batch, num_splits);
}

absl::StatusOr<MlaDecodePlan> PlanMlaDecode(const MlaDecodeShape& s) {
  RETURN_IF_ERROR(RequireNonNegative("batch", s.batch));
  RETURN_IF_ERROR(RequirePositive("num_heads", s.num_heads));
  if (s.q_per_request != 1 && s.q_per_request != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("mla_decode: q_per_request=", s.q_per_request, " must be 1 or 2"));
  }
  RETURN_IF_ERROR(RequirePositive("kv_lora_rank", s.kv_lora_rank));
  RETURN_IF_ERROR(RequireNonNegative("rope_dim", s.rope_dim));
  RETURN_IF_ERROR(RequireNonNegative("max_seqlen_k", s.max_seqlen_k));
  RETURN_IF_ERROR(RequireNonNegative("total_seqlen_k", s.total_seqlen_k));
  RETURN_IF_ERROR(RequireNonNegative("num_sms", s.num_sms));
  if (!std::isfinite(s.dram_bytes_per_sm_clock) || s.dram_bytes_per_sm_clock < 0) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: dram_bytes_per_sm_clock=", s.dram_bytes_per_sm_clock,
                                                   " must be finite and >= 0 (0: not known)"));
  }
  MlaDecodePlan plan;
  // CPU (num_sms = 0): one pass over the whole context, no workspace.
  if (s.num_sms == 0 || s.batch == 0 || s.max_seqlen_k == 0) return plan;
  // CTAs per split, as the CUDA kernel tiles rows (mla_prefill/latent_tiling.h). Pick the split
  // count with the least estimated time: waves of CTAs times what each CTA costs (its pages, by
  // pairs, plus a fixed cost), plus the combine, so that small batches spread over many SMs in
  // short splits (a batch-1 decode step is latency-bound) without a nearly empty last wave. Ties
  // go to fewer splits (less combine work).
  const int64_t rows = static_cast<int64_t>(s.num_heads) * s.q_per_request;
  const int64_t rows_per_cta = mla_internal::LatentRowsPerCta(rows);
  const int64_t row_blocks = (rows + rows_per_cta - 1) / rows_per_cta;
  const int64_t units = static_cast<int64_t>(s.batch) * row_blocks;
  const int pages = PagesFor(s.max_seqlen_k);  // the plan covers this many (a decode graph: its width)
  // The timing uses the total where the caller gives it: a request's pages about the mean (up to
  // +25%), the longest at least half of max_seqlen_k (a decode graph plans for its width, at most
  // twice the longest context it runs; one long request among short ones still looks long).
  const double mean_pages = s.total_seqlen_k > 0 ? static_cast<double>(s.total_seqlen_k) / s.batch / kPageSize : pages;
  const int est_pages =
      s.total_seqlen_k > 0 ? std::clamp(static_cast<int>(std::ceil(1.25 * mean_pages)), (pages + 1) / 2, pages) : pages;
  // One split's partial rows (f32, written and read once) in page-tile units.
  const double partial_pages = static_cast<double>(std::min(rows, rows_per_cta)) * s.kv_lora_rank * 8 /
                               (static_cast<double>(kPageSize) * (s.kv_lora_rank + s.rope_dim) * 2);
  const int max_splits = std::clamp(pages, 1, kMaxSplits);
  int best_pages_per_split = pages;
  double best_cost = -1;
  for (int want = 1; want <= max_splits; ++want) {
    const int pages_per_split = (pages + want - 1) / want;
    // The chunks that hold keys (the rest return at once) and the CTAs that walk them.
    const int splits = (std::min(est_pages, pages) + pages_per_split - 1) / pages_per_split;
    const int64_t ctas = units * splits;
    const int64_t waves = (ctas + s.num_sms - 1) / s.num_sms;
    // One wave lasts as long as its longest CTA; over several, short CTAs make room for the next
    // wave's, so a CTA costs about the mean.
    const double cta_pages = waves == 1 ? std::min(pages_per_split, est_pages)
                                        : std::min<double>(pages_per_split, std::ceil(mean_pages));
    double cost = static_cast<double>(waves) * (CtaPageCost(static_cast<int>(cta_pages), rows) + kCtaOverheadPages);
    if (splits > 1) {
      cost += kCombinePagesPerSplit * splits + kCombinePartialWeight * static_cast<double>(ctas) * partial_pages / s.num_sms;
    }
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best_pages_per_split = pages_per_split;
    }
  }
  // The Hopper kernel's balanced schedule (used where that kernel runs, MlaDecodeCuda), where
  // its estimate beats the chunks': every part about total / parts pages (each request at the
  // longest context unless the caller gave the total) plus its own kernels. Measured on an H100
  // (docs/BENCHMARKS.md) it wins with mixed lengths and long contexts at 16 heads, and loses at
  // batch 1-8 and with more than one 64-row block per request at uniform lengths.
  const int parts = mla_decode_internal::BalancedParts(s.num_sms, rows);
  const int64_t total_pages = s.total_seqlen_k > 0
                                  ? (s.total_seqlen_k + s.batch * static_cast<int64_t>(kPageSize - 1)) / kPageSize
                                  : s.batch * static_cast<int64_t>(pages);
  const int piece_cost = mla_decode_internal::PieceCostFor(rows <= mla_internal::kLatentFewRowsMax);
  const double part_pages = std::max<int64_t>((total_pages + s.batch * int64_t{piece_cost} + parts - 1) / parts,
                                              mla_decode_internal::MinPartCost(piece_cost));
  const double row_blocks_factor = row_blocks >= kManyRowBlocks ? kBalancedManyRowBlocksFactor
                                   : row_blocks == 1              ? 1.0
                                   : IsLeanDram(s.dram_bytes_per_sm_clock) ? kLeanDramBalancedRowBlocksFactor
                                                                            : kBalancedRowBlocksFactor;
  const double balanced_cost = part_pages * row_blocks_factor + kBalancedOverheadPages;
  // MLASERVE_MLA_PAGES_PER_SPLIT=N (1-1024; read per plan, A/B timing of the cost model): the
  // chunks' length forced, where the chunks run (also lengths that are no even cut of the longest
  // request, as the kernel bench times them).
  const int forced = EnvIntInRange("MLASERVE_MLA_PAGES_PER_SPLIT", 0, kMaxForcedPagesPerSplit, 0);
  // The chunk length picked on the device from the batch's lengths (chunk_pick.h) where the 64-row
  // Hopper kernel's CTAs of one chunk a request (more than kLatentFewRowsMax rows a request) fill
  // more than 7/8 of the SMs but no more than all of them. Measured there on the H100 (2026-12-07,
  // b 64 x 128 heads, 4k / 8k / 16k): +5.1% / +3.0% / +0.5% against kAuto's plan without it (one
  // chunk a request at 4k, the balanced schedule at 8k-16k); at b 40 / 48 x 128 heads (80 / 96 of 132 SMs)
  // 3% behind / even with the balanced schedule, so not there. kAuto takes it on a lean-DRAM GPU.
  // MLASERVE_MLA_CHUNK_PICK=0 turns it off, =1 on also elsewhere (read per plan: A/B timing).
  const bool pick_fits = s.schedule != MlaDecodeSchedule::kBalanced && forced == 0 &&
                         rows > mla_internal::kLatentFewRowsMax && units <= s.num_sms &&
                         8 * units > 7 * int64_t{s.num_sms} && s.num_sms <= mla_decode_internal::kPickMaxSms &&
                         pages >= 2;
  const int pick_switch = EnvIntInRange("MLASERVE_MLA_CHUNK_PICK", 0, 1, -1);
  const bool pick = pick_fits && (pick_switch == 1 || (pick_switch == -1 && s.schedule == MlaDecodeSchedule::kAuto &&
                                                       IsLeanDram(s.dram_bytes_per_sm_clock)));
  const bool balanced = !pick && (s.schedule == MlaDecodeSchedule::kBalanced ||
                                  (s.schedule == MlaDecodeSchedule::kAuto && balanced_cost < best_cost));
  if (balanced) {
    plan.num_parts = parts;
    // The longest request (and its piece cost) over the parts' pages, plus the part it starts in.
    plan.max_pieces =
        static_cast<int>(std::ceil((pages + piece_cost) / part_pages)) + 1;
    const auto layout =
        mla_decode_internal::MakeBalancedLayout(s.batch, s.q_per_request, s.num_heads, s.kv_lora_rank, parts);
    plan.workspace_bytes = layout.bytes;
    plan.metadata_bytes = layout.metadata_bytes;
  }
  if (forced > 0 && !balanced) best_pages_per_split = std::min(forced, pages);
  if (pick) {
    // Two chunks a request at most: the grid's, and the cut used where no order is built.
    best_pages_per_split = (pages + 1) / 2;
    plan.chunk_pick_sms = s.num_sms;
  }
  if (best_pages_per_split < pages) {
    plan.chunk_tokens = best_pages_per_split * kPageSize;
    plan.num_splits = (pages + best_pages_per_split - 1) / best_pages_per_split;
  }
  // Longest first where the chunk CTAs take more than one wave (the cost model above already
  // counts a CTA of a later wave at the mean: what this order gets close to).
  const int64_t chunks = static_cast<int64_t>(s.batch) * plan.num_splits;
  plan.longest_first = !balanced && units * plan.num_splits > s.num_sms && chunks <= kMlaDecodeMaxOrderedChunks;
  plan.workspace_bytes =
      std::max(plan.workspace_bytes, MlaDecodeChunkWorkspaceBytes(s.batch, static_cast<int>(rows), s.kv_lora_rank,
                                                                  plan.num_splits, plan.longest_first));
  if (plan.longest_first) plan.metadata_bytes = MlaDecodeChunkOrderBytes(s.batch, plan.num_splits);
  return plan;
}

namespace mla_decode_internal {

bool RunsBalancedSchedule(const MlaParams& p, const MlaDecodePlan& plan) {
  return plan.num_parts > 0 && p.kernel != LatentKernel::kMmaSync && LatentWgmmaApplies(p);
}

int PieceCostPages(bool few_rows) {
  const char* v = std::getenv("MLASERVE_MLA_PIECE_COST");
  const int n = v != nullptr ? std::atoi(v) : 0;
  return n >= 1 && n <= 16 ? n : PieceCostFor(few_rows);
}

}  // namespace mla_decode_internal

namespace {

// MlaValueProjection's contract (api.h), checked before any launch.
absl::Status CheckValueProjection(const MlaParams& p, const MlaDecodePlan& plan, const MlaValueProjection& v,
                                  const KernelContext& ctx) {
  if (ctx.backend != Backend::kCuda) {
    return absl::InvalidArgumentError(
        absl::StrCat("mla_decode: value_proj is applied by the CUDA combine only (backend=", BackendName(ctx.backend),
                     "); run the per-head W_UV GEMM after MlaDecode (MlaDecodeTakesValueProjection says false there)"));
  }
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("mla_decode: value_proj needs bf16 (dtype=", DTypeName(p.dtype), ")"));
  }
  if (!mla_decode_internal::CombinesEveryRow(p, plan)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: value_proj needs a plan with a combine for every row, and plan.num_splits=", plan.num_splits,
        " (plan.num_parts=", plan.num_parts, ", a balanced schedule only where the Hopper kernel runs: kernel=",
        static_cast<int>(p.kernel), ") has the attention kernel write the output; run the per-head W_UV GEMM"));
  }
  RETURN_IF_ERROR(RequireNonNull("value_proj.w", v.w));
  RETURN_IF_ERROR(RequireNonNull("value_proj.out", v.out));
  RETURN_IF_ERROR(RequirePositive("value_proj.v_dim", v.v_dim));
  if (reinterpret_cast<uintptr_t>(v.w) % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mla_decode: value_proj.w=", absl::Hex(reinterpret_cast<uintptr_t>(v.w)), " is not 16-byte aligned"));
  }
  if (v.row_stride < p.kv_lora_rank || v.row_stride % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: value_proj.row_stride=", v.row_stride,
                                                   " must be a multiple of 8 and at least kv_lora_rank=",
                                                   p.kv_lora_rank));
  }
  if (v.head_stride < 0 || v.head_stride % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: value_proj.head_stride=", v.head_stride,
                                                   " must be a non-negative multiple of 8"));
  }
  if (v.out_head_stride < v.v_dim) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: value_proj.out_head_stride=", v.out_head_stride,
                                                   " is less than value_proj.v_dim=", v.v_dim));
  }
  if (v.out_token_stride < static_cast<int64_t>(p.num_heads) * v.out_head_stride) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: value_proj.out_token_stride=", v.out_token_stride, " is less than num_heads=", p.num_heads,
        " x value_proj.out_head_stride=", v.out_head_stride, " (a token's outputs would overlap the next's)"));
  }
  return absl::OkStatus();
}

}  // namespace

bool MlaDecodeTakesValueProjection(const MlaParams& p, const MlaDecodePlan& plan, const KernelContext& ctx) {
#if MLASERVE_KERNEL_HAS_CUDA
  // The combine's grid holds max_seqlen_q tokens of every request. The switch is read once per
  // process (the A/B benches set it per process), not on every decode layer's call.
  static const bool fused_uv_off = EnvSwitchedOff("MLASERVE_MLA_FUSED_UV");
  const int64_t tokens = static_cast<int64_t>(p.batch) * p.max_seqlen_q;
  return ctx.backend == Backend::kCuda && p.dtype == DType::kBF16 && tokens > 0 && tokens <= kMlaFusedValueMaxTokens &&
         mla_decode_internal::CombinesEveryRow(p, plan) && !fused_uv_off;
#else
  (void)p;
  (void)plan;
  (void)ctx;
  return false;
#endif
}

absl::Status MlaDecodeBuildMetadata(const MlaParams& p, const MlaDecodePlan& plan, void* metadata,
                                    const KernelContext& ctx) {
  RETURN_IF_ERROR(RequirePositive("plan.num_splits", plan.num_splits));
  if (ctx.backend == Backend::kCpu || plan.metadata_bytes == 0 || p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("metadata", metadata));
  if (reinterpret_cast<uintptr_t>(metadata) % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: metadata=",
                                                   absl::Hex(reinterpret_cast<uintptr_t>(metadata)),
                                                   " is not 16-byte aligned"));
  }
  RETURN_IF_ERROR(RequireNonNull("seqlens_k", p.seqlens_k));
  RETURN_IF_ERROR(RequireNonNull("cu_seqlens_q", p.cu_seqlens_q));
  RETURN_IF_ERROR(RequireNonNull("block_table", p.block_table));
  RETURN_IF_ERROR(RequirePositive("max_pages_per_seq", p.max_pages_per_seq));
  MLASERVE_DISPATCH("mla_decode", ctx, absl::OkStatus(), MlaDecodeBuildMetadataCuda(p, plan, metadata, ctx.stream));
}

absl::Status MlaDecode(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                       const KernelContext& ctx, const MlaValueProjection* value_proj, const void* metadata) {
  RETURN_IF_ERROR(mla_internal::CheckMlaShape(
      {"mla_decode", p.batch, p.num_heads, p.kv_lora_rank, p.rope_dim, p.q, p.q_token_stride,
       p.q_head_stride, p.kv_cache, p.num_pages, p.block_table, p.max_pages_per_seq,
       p.cu_seqlens_q, p.seqlens_k, p.out, p.softmax_scale}));
  RETURN_IF_ERROR(RequirePositive("plan.num_splits", plan.num_splits));
  if (plan.num_splits > 1) {
    RETURN_IF_ERROR(RequirePositive("plan.chunk_tokens", plan.chunk_tokens));
    if (plan.chunk_tokens % kPageSize != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mla_decode: plan.chunk_tokens=", plan.chunk_tokens, " is not a multiple of ", kPageSize));
    }
  }
  if (plan.workspace_bytes > 0) RETURN_IF_ERROR(RequireNonNull("workspace", workspace));
  if (value_proj != nullptr) RETURN_IF_ERROR(CheckValueProjection(p, plan, *value_proj, ctx));
  if (p.batch == 0) return absl::OkStatus();
  if (metadata != nullptr && reinterpret_cast<uintptr_t>(metadata) % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: metadata=",
                                                   absl::Hex(reinterpret_cast<uintptr_t>(metadata)),
                                                   " is not 16-byte aligned"));
  }
  // The CPU backend needs no split: it computes every row in one pass.
  MLASERVE_DISPATCH("mla_decode", ctx, MlaDecodeCpu(p),
                    MlaDecodeCuda(p, plan, workspace, ctx.stream, value_proj, metadata));
}

}  // namespace mlaserve::kernels
