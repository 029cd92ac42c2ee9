// AttentionPathPolicy: per prefill batch, which attention form to run.
//
//   Choose(batch) -> kMha | kMla | kSplit | kSparseFwd
//
// Dense models (V2, V3): the profile's MHA/MLA table — MHA when se = Σ seq_len·extend_len
// is at least the cell's threshold (times the configured scale), MLA below.
//   Split rule: a batch that is, in its order, k >= 1 leading sequences with a cached prefix or
//   a single token followed by >= 1 fresh prompts (prefix 0, extend >= 2), not forced, is
//   chosen part by part, each part by its own statistics and cell: the lead MLA and the fresh
//   prompts MHA -> kSplit (the leading part in latent form, the fresh prompts in MHA form on the
//   engine's default provider: model::AttentionPath::kSplit); both MLA -> kMla; both MHA ->
//   kMha (its provider the whole batch's cell's); the lead MHA and the fresh prompts MLA -> the
//   whole batch's own choice (no form runs that way round). One path for the whole batch would
//   charge long fresh prompts the latent form (~3.4x their MHA form's attention FLOPs), or the
//   lead the decompression of its prefix because the fresh prompts' extend^2 weighs in se.
//   PolicyOptions::split_fresh_prompts = false turns the rule off.
// DSA models (V3.2, index_topk = k), in this order:
//   1. every sequence has seq_len <= k: the indexer would select every key, so attention is
//      dense and exact -> the MHA/MLA table as for dense models (SGLang PR 12788's MHA path
//      for short sequences). Dense attention does not use the sparse scheduler, so the
//      shared-memory cap below does not apply to it.
//   2. query rows (Σextend) > the decode-style sparse kernel's cap -> kSparseFwd (its
//      scheduler needs 4·(5·rows+1) bytes of shared memory; the cap comes from the device's
//      opt-in shared memory, SGLang PR 25502).
//   3. rows >= the profile's sparse_fwd_min_rows -> kSparseFwd, else kMla (the decode-style
//      sparse kernel over the indexer's top-k).
// Overrides (PolicyOptions): force a path — only where it computes the same function, so a
// forced kMha/kMla on a DSA batch with long sequences still goes sparse, and a forced kMla
// never exceeds the cap; scale every se threshold.
// MHA provider: a kMha choice carries the provider of the batch's cell (the faster of ours and
// cuDNN where the profile was tuned on both; kAuto where the profile records none, so the
// engine's --mha-provider decides). A profile tuned with cuDNN on a process that cannot load it
// runs those cells on ours: Create logs one warning, and the choices say kOurs.
//
// Thread-safe: Choose may be called from any thread; the counters are atomic.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "profiles/batch_shape.h"
#include "profiles/gpu_profile.h"

namespace mlaserve::profiles {

// kSplit: the leading chunks in latent form, the trailing fresh prompts in MHA form (the split
// rule above; never forced).
enum class PrefillPath : uint8_t { kMha, kMla, kSparseFwd, kSplit };
inline constexpr int kNumPrefillPaths = 4;
const char* PrefillPathName(PrefillPath p);  // "mha", "mla", "sparse_fwd", "split"
// "auto" gives nullopt; unknown names (and "split", which is the policy's choice, not a path
// to force) are INVALID_ARGUMENT naming the value.
absl::StatusOr<std::optional<PrefillPath>> ParsePrefillPath(const std::string& name);

// Why a path was chosen (for the debug line and metrics labels).
enum class ChoiceReason : uint8_t {
  kTable,           // the cell's threshold
  kTableNearest,    // the nearest measured cell (the batch's own cell was not measured)
  kNoCell,          // no cell for the batch bucket: MHA without prefix, MLA with
  kForced,          // PolicyOptions::force
  kSparseCap,       // DSA: rows above the decode-style kernel's cap
  kSparseTable,     // DSA: rows vs sparse_fwd_min_rows
  kEmpty,           // empty batch: kMla, nothing runs
  kSplitLead,       // split rule: the two parts' own choices decided (the name: the lead's
                    // own choice is the one that tells kSplit from one form)
};
inline constexpr int kNumChoiceReasons = 8;
const char* ChoiceReasonName(ChoiceReason r);

struct PolicyOptions {
  std::optional<PrefillPath> force;  // nullopt = auto
  double threshold_scale = 1.0;      // every se threshold is multiplied by this; (0, 1e6]
  // Whether this process can run cuDNN's MHA prefill; nullopt asks
  // kernels::MhaPrefillCudnnVersion() at Create (tests and tools set it).
  std::optional<bool> cudnn_available;
  // The split rule (header comment); false: one path for the whole batch, as before.
  bool split_fresh_prompts = true;
};

// What the policy needs to know about the model.
struct ModelAttentionTraits {
  bool has_indexer = false;  // DSA (V3.2)
  int index_topk = 0;        // > 0 when has_indexer
};

// A batch [lead | fresh] under the split rule: its leading part's own choice, and its fresh
// prompts.
struct SplitParts {
  int lead = 0;              // chunks [0, lead) have a prefix or one token; the rest are fresh
  BatchStats lead_stats;
  ChoiceReason lead_reason = ChoiceReason::kTable;  // kTable, kTableNearest or kNoCell
  int64_t lead_threshold = kNeverMha;              // the lead's scaled threshold (table reasons)
  PrefillPath lead_path = PrefillPath::kMla;
  // The fresh prompts' own choice, by their own statistics and cell: after a latent lead, the
  // cell's split threshold where it has one (MhaMlaCell::split_se_threshold), else its own.
  BatchStats fresh_stats;  // fresh_stats.batch prompts, fresh_stats.sum_extend tokens
  ChoiceReason fresh_reason = ChoiceReason::kTable;
  int64_t fresh_threshold = kNeverMha;
  PrefillPath fresh_path = PrefillPath::kMha;
  bool fresh_by_split_threshold = false;  // fresh_threshold is the cell's split threshold
};

struct PathChoice {
  PrefillPath path = PrefillPath::kMla;
  ChoiceReason reason = ChoiceReason::kTable;
  BatchStats stats;                  // the whole batch's
  int64_t se_threshold = kNeverMha;  // the whole batch's scaled threshold used (table reasons)
  // For kMha: who computes it (the cell's provider; kAuto = the engine's --mha-provider).
  // kAuto for the other paths.
  MhaPrefillProvider mha_provider = MhaPrefillProvider::kAuto;
  // Where reason is kSplitLead: the two parts.
  std::optional<SplitParts> split;
};

// Where `batch` is, in its order, k >= 1 sequences with a prefix or one token followed by
// >= 1 fresh prompts (prefix 0, extend >= 2): k. Else 0 (no fresh prompt, no lead, or a
// leading-kind sequence after a fresh one).
int SplitPoint(std::span<const SequenceShape> batch);

class AttentionPathPolicy {
 public:
  // INVALID_ARGUMENT naming the option: threshold_scale not finite or outside (0, 1e6];
  // force = kSparseFwd on a model without an indexer; has_indexer with index_topk <= 0.
  static absl::StatusOr<std::unique_ptr<AttentionPathPolicy>> Create(
      GpuProfile profile, std::string source, const ModelAttentionTraits& model,
      const PolicyOptions& options = {});

  // Pure in its inputs apart from the counters and one spdlog debug line per call.
  PathChoice Choose(std::span<const SequenceShape> batch);

  // The rows above which sparse-fwd is mandatory (the device's cap), 0 when unknown.
  int sparse_cap_rows() const { return sparse_cap_; }
  const GpuProfile& profile() const { return profile_; }
  const std::string& source() const { return source_; }
  const ModelAttentionTraits& model() const { return model_; }
  const PolicyOptions& options() const { return options_; }

  uint64_t count(PrefillPath p) const { return path_counts_[static_cast<int>(p)].load(); }
  uint64_t count(ChoiceReason r) const { return reason_counts_[static_cast<int>(r)].load(); }
  // kMha choices by the provider they carry.
  uint64_t mha_count(MhaPrefillProvider p) const {
    return mha_provider_counts_[static_cast<int>(p)].load();
  }
  // Whether the profile's cuDNN cells run on ours here (cuDNN not loadable; warned at Create).
  bool cudnn_cells_on_ours() const { return cudnn_cells_on_ours_; }
  // The provider a kMha choice for a dense batch with these stats carries: its cell's (the
  // nearest measured one), kOurs for a cuDNN cell when cudnn_cells_on_ours(), kAuto without one.
  MhaPrefillProvider MhaProviderFor(const BatchStats& st) const;

  // "mla (table: bs=3 prefix=2048 extend=1024 se=3145728 < threshold=4194304)"; a kMha
  // choice with a recorded provider ends in " provider=cudnn" or " provider=ours". A split
  // choice: "mla|mha split (lead: table: bs=1 prefix=4096 extend=512 se=... < threshold=...;
  // fresh: table: bs=2 prefix=0 extend=900 se=... >= threshold=...)"; a one-form choice of the
  // split rule: "mha (split_lead: bs=3 ...; lead: table: ...; fresh: table: ...)".
  static std::string Describe(const PathChoice& c);

 private:
  AttentionPathPolicy(GpuProfile profile, std::string source, ModelAttentionTraits model,
                      PolicyOptions options, bool cudnn_cells_on_ours);
  MhaPrefillProvider CellProvider(const MhaMlaCell* cell) const;  // nullptr: kAuto
  // MHA when se >= threshold (a scaled table threshold; kNeverMha: never), else MLA.
  static PrefillPath PathAt(int64_t threshold, int64_t se);
  PathChoice ChooseDense(const BatchStats& st) const;
  // The fresh prompts after a lead in latent form: by their cell's split threshold where the
  // cell has one (*by_split_threshold = true), else ChooseDense.
  PathChoice ChooseFreshAfterLatent(const BatchStats& st, bool* by_split_threshold) const;
  // The split rule over an unforced whole-batch choice `whole`: see the header comment.
  PathChoice ChooseSplit(std::span<const SequenceShape> batch, int lead, PathChoice whole) const;
  PathChoice ChooseSparse(const BatchStats& st) const;
  int64_t Scaled(int64_t threshold) const;

  const GpuProfile profile_;
  const std::string source_;
  const ModelAttentionTraits model_;
  const PolicyOptions options_;
  const bool cudnn_cells_on_ours_;
  int sparse_cap_ = 0;
  std::array<std::atomic<uint64_t>, kNumPrefillPaths> path_counts_{};
  std::array<std::atomic<uint64_t>, kernels::kMhaPrefillProviderCount> mha_provider_counts_{};
  std::array<std::atomic<uint64_t>, kNumChoiceReasons> reason_counts_{};
};

}  // namespace mlaserve::profiles
