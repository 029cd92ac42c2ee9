// AttentionPathPolicy: the rules in the header, in one place.
#include "profiles/attention_path_policy.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/sparse_fwd/api.h"
#include "spdlog/spdlog.h"

namespace mlaserve::profiles {
namespace {

constexpr double kMaxThresholdScale = 1e6;

// Whether cuDNN can run here: the option, else the kernels' answer (which also says why not).
bool CudnnAvailable(const PolicyOptions& options, std::string* why_not) {
  if (options.cudnn_available.has_value()) {
    if (!*options.cudnn_available) *why_not = "cuDNN unavailable in this process";
    return *options.cudnn_available;
  }
  const absl::StatusOr<std::string> version = kernels::MhaPrefillCudnnVersion();
  if (!version.ok()) *why_not = std::string(version.status().message());
  return version.ok();
}

int CudnnCells(const MhaMlaTable& t) {
  int n = 0;
  for (const MhaMlaCell& c : t.cells) n += c.mha_provider == MhaPrefillProvider::kCudnn;
  return n;
}

}  // namespace

const char* PrefillPathName(PrefillPath p) {
  switch (p) {
    case PrefillPath::kMha: return "mha";
    case PrefillPath::kMla: return "mla";
    case PrefillPath::kSparseFwd: return "sparse_fwd";
    case PrefillPath::kSplit: return "split";
  }
  return "?";
}

absl::StatusOr<std::optional<PrefillPath>> ParsePrefillPath(const std::string& name) {
  if (name == "auto" || name.empty()) return std::optional<PrefillPath>();
  if (name == "mha") return std::optional(PrefillPath::kMha);
  if (name == "mla") return std::optional(PrefillPath::kMla);
  if (name == "sparse_fwd" || name == "sparse-fwd") return std::optional(PrefillPath::kSparseFwd);
  return absl::InvalidArgumentError(absl::StrCat(
      "attention path '", name, "' is not one of auto, mha, mla, sparse_fwd"));
}

const char* ChoiceReasonName(ChoiceReason r) {
  switch (r) {
    case ChoiceReason::kTable: return "table";
    case ChoiceReason::kTableNearest: return "table_nearest";
    case ChoiceReason::kNoCell: return "no_cell";
    case ChoiceReason::kForced: return "forced";
    case ChoiceReason::kSparseCap: return "sparse_cap";
    case ChoiceReason::kSparseTable: return "sparse_table";
    case ChoiceReason::kEmpty: return "empty";
    case ChoiceReason::kSplitLead: return "split_lead";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<AttentionPathPolicy>> AttentionPathPolicy::Create(
    GpuProfile profile, std::string source, const ModelAttentionTraits& model,
    const PolicyOptions& options) {
  if (!std::isfinite(options.threshold_scale) || options.threshold_scale <= 0.0 ||
      options.threshold_scale > kMaxThresholdScale) {
    return absl::InvalidArgumentError(absl::StrCat("threshold scale ", options.threshold_scale,
                                                   " is outside (0, ", kMaxThresholdScale, "]"));
  }
  if (options.force == PrefillPath::kSparseFwd && !model.has_indexer) {
    return absl::InvalidArgumentError(
        "attention path sparse_fwd was forced, but the model has no DSA indexer "
        "(only DeepSeek-V3.2 models can use it)");
  }
  if (options.force == PrefillPath::kSplit) {
    return absl::InvalidArgumentError(
        "attention path split cannot be forced: it is the policy's choice for a batch of "
        "prefixed chunks followed by fresh prompts (force mla or mha, or leave it auto)");
  }
  if (model.has_indexer && model.index_topk <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("index_topk ", model.index_topk, " must be > 0 for a DSA model"));
  }
  RETURN_IF_ERROR(ValidateProfile(profile));
  // A cell tuned on cuDNN where cuDNN cannot load runs on ours (what the engine's fallback
  // would do anyway): one line now rather than an error or a line per batch.
  bool cudnn_cells_on_ours = false;
  if (const int cells = CudnnCells(profile.mha_mla); cells > 0) {
    std::string why_not;
    if (!CudnnAvailable(options, &why_not)) {
      cudnn_cells_on_ours = true;
      spdlog::warn("attention path policy ({}): {} of {} MHA/MLA cells were tuned with cuDNN's MHA "
                   "prefill, which this process cannot run ({}); they run the MHA form on ours",
                   source, cells, profile.mha_mla.cells.size(), why_not);
    }
  }
  return std::unique_ptr<AttentionPathPolicy>(new AttentionPathPolicy(
      std::move(profile), std::move(source), model, options, cudnn_cells_on_ours));
}

AttentionPathPolicy::AttentionPathPolicy(GpuProfile profile, std::string source,
                                         ModelAttentionTraits model, PolicyOptions options,
                                         bool cudnn_cells_on_ours)
    : profile_(std::move(profile)),
      source_(std::move(source)),
      model_(model),
      options_(options),
      cudnn_cells_on_ours_(cudnn_cells_on_ours) {
  sparse_cap_ = profile_.device.smem_optin_bytes > 0
                    ? kernels::SparseDecodeMaxRows(profile_.device.smem_optin_bytes)
                    : profile_.sparse.decode_max_rows;
}

int64_t AttentionPathPolicy::Scaled(int64_t threshold) const {
  if (threshold == kNeverMha || options_.threshold_scale == 1.0) return threshold;
  const double v = static_cast<double>(threshold) * options_.threshold_scale;
  return v >= 9.0e18 ? INT64_MAX : static_cast<int64_t>(std::llround(v));
}

MhaPrefillProvider AttentionPathPolicy::CellProvider(const MhaMlaCell* cell) const {
  if (cell == nullptr) return MhaPrefillProvider::kAuto;
  if (cell->mha_provider == MhaPrefillProvider::kCudnn && cudnn_cells_on_ours_) {
    return MhaPrefillProvider::kOurs;
  }
  return cell->mha_provider;
}

MhaPrefillProvider AttentionPathPolicy::MhaProviderFor(const BatchStats& st) const {
  return CellProvider(profile_.mha_mla.Find(st.batch, st.sum_prefix, st.sum_extend));
}

PathChoice AttentionPathPolicy::ChooseDense(const BatchStats& st) const {
  PathChoice c;
  c.stats = st;
  bool exact = false;
  // A forced MHA still runs on the provider its cell found faster.
  const MhaMlaCell* cell = profile_.mha_mla.Find(st.batch, st.sum_prefix, st.sum_extend, &exact);
  if (options_.force.has_value()) {  // kSparseFwd only for DSA models (checked in Create)
    c.path = *options_.force;
    c.reason = ChoiceReason::kForced;
  } else if (cell == nullptr) {
    c.path = st.sum_prefix == 0 ? PrefillPath::kMha : PrefillPath::kMla;
    c.reason = ChoiceReason::kNoCell;
  } else {
    c.se_threshold = Scaled(cell->se_threshold);
    c.path = PathAt(c.se_threshold, st.se);
    c.reason = exact ? ChoiceReason::kTable : ChoiceReason::kTableNearest;
  }
  if (c.path == PrefillPath::kMha) c.mha_provider = CellProvider(cell);
  return c;
}

PrefillPath AttentionPathPolicy::PathAt(int64_t threshold, int64_t se) {
  return threshold != kNeverMha && se >= threshold ? PrefillPath::kMha : PrefillPath::kMla;
}

int SplitPoint(std::span<const SequenceShape> batch) {
  const int n = static_cast<int>(batch.size());
  int lead = 0;
  while (lead < n && !IsFreshPrompt(batch[lead])) ++lead;
  if (lead == 0 || lead == n) return 0;
  for (int i = lead; i < n; ++i) {
    if (!IsFreshPrompt(batch[i])) return 0;
  }
  return lead;
}

PathChoice AttentionPathPolicy::ChooseFreshAfterLatent(const BatchStats& st,
                                                       bool* by_split_threshold) const {
  *by_split_threshold = false;
  bool exact = false;
  const MhaMlaCell* cell = profile_.mha_mla.Find(st.batch, st.sum_prefix, st.sum_extend, &exact);
  if (cell == nullptr || !cell->split_se_threshold.has_value()) return ChooseDense(st);
  *by_split_threshold = true;
  PathChoice c;
  c.stats = st;
  c.reason = exact ? ChoiceReason::kTable : ChoiceReason::kTableNearest;
  c.se_threshold = Scaled(*cell->split_se_threshold);
  c.path = PathAt(c.se_threshold, st.se);
  if (c.path == PrefillPath::kMha) c.mha_provider = CellProvider(cell);
  return c;
}

PathChoice AttentionPathPolicy::ChooseSplit(std::span<const SequenceShape> batch, int lead,
                                            PathChoice whole) const {
  // Not forced here (Choose), so each part's choice is the table's (or no cell's). The fresh
  // part after a latent lead asks its cell's split threshold where there is one: that one was
  // fitted on the split against the whole batch in latent form.
  const PathChoice lead_choice = ChooseDense(ComputeBatchStats(batch.first(lead)));
  bool fresh_by_split_threshold = false;
  const BatchStats fresh_stats = ComputeBatchStats(batch.subspan(lead));
  const PathChoice fresh_choice =
      lead_choice.path == PrefillPath::kMla
          ? ChooseFreshAfterLatent(fresh_stats, &fresh_by_split_threshold)
          : ChooseDense(fresh_stats);
  if (lead_choice.path == PrefillPath::kMha && fresh_choice.path == PrefillPath::kMla) {
    return whole;  // no form runs the lead in MHA and the prompts latent: one path, as it was
  }
  SplitParts parts;
  parts.lead = lead;
  parts.lead_stats = lead_choice.stats;
  parts.lead_reason = lead_choice.reason;
  parts.lead_threshold = lead_choice.se_threshold;
  parts.lead_path = lead_choice.path;
  parts.fresh_stats = fresh_choice.stats;
  parts.fresh_reason = fresh_choice.reason;
  parts.fresh_threshold = fresh_choice.se_threshold;
  parts.fresh_path = fresh_choice.path;
  parts.fresh_by_split_threshold = fresh_by_split_threshold;
  const PrefillPath path = lead_choice.path == fresh_choice.path ? lead_choice.path
                                                                 : PrefillPath::kSplit;
  if (path == whole.path) return whole;  // both parts agree with the whole batch: as it was
  whole.reason = ChoiceReason::kSplitLead;
  whole.path = path;
  // Both parts MHA: the whole batch's cell's provider; the split's fresh part runs on the
  // engine's default.
  whole.mha_provider =
      path == PrefillPath::kMha ? MhaProviderFor(whole.stats) : MhaPrefillProvider::kAuto;
  whole.split = parts;
  return whole;
}

PathChoice AttentionPathPolicy::ChooseSparse(const BatchStats& st) const {
  PathChoice c;
  c.stats = st;
  if (sparse_cap_ > 0 && st.sum_extend > sparse_cap_) {
    c.path = PrefillPath::kSparseFwd;
    c.reason = ChoiceReason::kSparseCap;
    return c;
  }
  if (options_.force == PrefillPath::kMla || options_.force == PrefillPath::kSparseFwd) {
    c.path = *options_.force;
    c.reason = ChoiceReason::kForced;
    return c;
  }
  c.path = st.sum_extend >= profile_.sparse.sparse_fwd_min_rows ? PrefillPath::kSparseFwd
                                                                : PrefillPath::kMla;
  c.reason = ChoiceReason::kSparseTable;
  return c;
}

PathChoice AttentionPathPolicy::Choose(std::span<const SequenceShape> batch) {
  const BatchStats st = ComputeBatchStats(batch);
  PathChoice c;
  if (st.batch == 0) {
    c.stats = st;
    c.path = PrefillPath::kMla;
    c.reason = ChoiceReason::kEmpty;
  } else if (model_.has_indexer && st.max_seq_len > model_.index_topk) {
    c = ChooseSparse(st);
  } else {
    c = ChooseDense(st);
    // The split rule: dense models only (a DSA model's batches keep their rules), an unforced
    // choice over [prefixed or single-token | fresh prompts].
    if (options_.split_fresh_prompts && !options_.force.has_value() && !model_.has_indexer) {
      if (const int lead = SplitPoint(batch); lead > 0) c = ChooseSplit(batch, lead, c);
    }
  }
  path_counts_[static_cast<int>(c.path)].fetch_add(1, std::memory_order_relaxed);
  reason_counts_[static_cast<int>(c.reason)].fetch_add(1, std::memory_order_relaxed);
  if (c.path == PrefillPath::kMha) {
    mha_provider_counts_[static_cast<int>(c.mha_provider)].fetch_add(1, std::memory_order_relaxed);
  }
  if (spdlog::should_log(spdlog::level::debug)) spdlog::debug("attention path: {}", Describe(c));
  return c;
}

namespace {

// "table: bs=1 prefix=4096 extend=512 se=2359296 < threshold=3000000"
std::string DescribeStats(PrefillPath path, ChoiceReason reason, const BatchStats& s,
                          int64_t threshold) {
  std::string out = absl::StrCat(ChoiceReasonName(reason), ": bs=", s.batch,
                                 " prefix=", s.sum_prefix, " extend=", s.sum_extend, " se=", s.se);
  if (reason == ChoiceReason::kTable || reason == ChoiceReason::kTableNearest) {
    if (threshold == kNeverMha) {
      absl::StrAppend(&out, " threshold=never");
    } else {
      absl::StrAppend(&out, path == PrefillPath::kMha ? " >= " : " < ", "threshold=", threshold);
    }
  }
  return out;
}

}  // namespace

std::string AttentionPathPolicy::Describe(const PathChoice& c) {
  const auto parts = [](const SplitParts& p) {
    return absl::StrCat(
        "lead: ", DescribeStats(p.lead_path, p.lead_reason, p.lead_stats, p.lead_threshold),
        "; fresh: ", p.fresh_by_split_threshold ? "split " : "",
        DescribeStats(p.fresh_path, p.fresh_reason, p.fresh_stats, p.fresh_threshold));
  };
  if (c.path == PrefillPath::kSplit && c.split.has_value()) {
    return absl::StrCat("mla|mha split (", parts(*c.split), ")");
  }
  std::string out = absl::StrCat(PrefillPathName(c.path), " (",
                                 DescribeStats(c.path, c.reason, c.stats, c.se_threshold));
  if (c.split.has_value()) absl::StrAppend(&out, "; ", parts(*c.split));  // both parts agreed
  if (c.path == PrefillPath::kMha && c.mha_provider != MhaPrefillProvider::kAuto) {
    absl::StrAppend(&out, " provider=", kernels::MhaPrefillProviderName(c.mha_provider));
  }
  absl::StrAppend(&out, ")");
  return out;
}

}  // namespace mlaserve::profiles
