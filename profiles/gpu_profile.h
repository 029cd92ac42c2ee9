// GpuProfile: what one GPU model measured for one attention shape, as the prefill worker's
// AttentionPathPolicy, the decode worker (local-prefill threshold) and the router read it.
//
// A profile is written by `mlaserve-tune` on that GPU (profiles/<GPU name>_<shape>.json), or
// built at start from device facts by the cost model (cost_model.h) when no file matches.
// Everything in it is plain data: the policy and the router do the deciding.
//
// The MHA/MLA table follows SGLang PR 9551's observation: for a fixed batch size, Σprefix and
// Σextend, whether the decompressed MHA path beats the absorbed MLA path is decided well by
// one threshold on se = Σ_b seq_len_b · extend_len_b (seq_len = prefix + extend): MHA when
// se >= threshold, MLA below. Cells are keyed by (batch bucket, Σprefix bucket, Σextend
// bucket); a bucket is named by its lower edge and covers [edge, next edge).
//
// The MHA form has more than one provider on CUDA (kernels/mha_prefill/api.h: our kernel, and
// cuDNN's SDPA where libcudnn loads). The tuner times the MHA form on each provider it can run,
// keeps per cell the one under whose fitted threshold the cell's batches take the least time,
// and records it with the threshold (format version 2). The policy hands it to the engine per
// batch. Version 1 profiles did not record a provider: their cells read as kAuto, i.e. the
// engine's own --mha-provider decides, as it did before version 2.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/mha_prefill/api.h"

namespace mlaserve::profiles {

// Facts about the device, queried (name, SMs, shared memory) or measured (bandwidth, rate).
struct DeviceFacts {
  std::string name;                // cudaDeviceProp::name, or "cpu"
  std::string compute_capability;  // "9.0"; empty on the CPU
  int sm_count = 0;
  int64_t smem_optin_bytes = 0;    // cudaDevAttrMaxSharedMemoryPerBlockOptin (232448 on H100)
  double copy_gbs = 0.0;           // device-to-device copy, read + write bytes per second / 1e9
  double matrix_tflops = 0.0;      // dense bf16 GEMM rate, TFLOP/s
};

// The attention shape a profile was measured for: one tensor-parallel rank's share.
struct AttentionShape {
  int heads = 0;             // query heads on this GPU (num_attention_heads / tp)
  int qk_nope_head_dim = 0;  // 128
  int qk_rope_head_dim = 0;  // 64
  int v_head_dim = 0;        // 128
  int kv_lora_rank = 0;      // 512
  std::string dtype = "bf16";  // activations and latent cache: "bf16" or "fp8"

  bool operator==(const AttentionShape&) const = default;
  // "h128_n128_r64_v128_l512_bf16": the file-name part and the lookup key.
  std::string Key() const;
};

// se threshold meaning "MHA never wins in this cell".
inline constexpr int64_t kNeverMha = -1;

// Who computes the MHA form of a cell. kOurs and kCudnn are what the tuner measured; kAuto means
// "not recorded" (version 1 profiles, the cost model): the engine's --mha-provider decides.
using kernels::MhaPrefillProvider;

struct MhaMlaCell {
  int batch = 1;          // batch bucket: 1 .. max_batch (the last also holds larger batches)
  int64_t prefix = 0;     // lower edge of the Σprefix bucket (one of prefix_edges)
  int64_t extend = 0;     // lower edge of the Σextend bucket (one of extend_edges)
  int64_t se_threshold = 0;  // MHA when se >= this; kNeverMha = always MLA
  // The MHA provider the threshold was fitted against: the faster one in this cell (kOurs or
  // kCudnn, one of MhaMlaTable::mha_providers), or kAuto where none was recorded.
  MhaPrefillProvider mha_provider = MhaPrefillProvider::kAuto;
  // Mean MHA-form time of the cell's samples on each provider timed (informational).
  std::optional<double> mha_ours_us, mha_cudnn_us;
  // Fit statistics as in PR 9551's table (informational): of the samples with se >= threshold,
  // how many had MHA no slower than MLA; the same for se < threshold.
  int samples = 0;
  int above_mha_wins = 0, above_total = 0;
  int below_mha_wins = 0, below_total = 0;
  // Cells of the first Σprefix bucket (prefix 0) may also say when fresh prompts of this cell's
  // size should run in MHA form *after a lead in latent form* (the split, PrefillPath::kSplit)
  // rather than in latent form with it: split when the fresh part's se >= this; kNeverMha =
  // never. Fitted by the tuner on the split's time (the lead on the latent path plus the fresh
  // part on MHA, each timed alone) against the whole batch on the latent path, so it prices the
  // split's second attention pass, which the cell's own threshold (the fresh part alone, MHA
  // against MLA) does not. Absent: the split asks the cell's own threshold. (Version 2,
  // optional.) split_samples / split_wins: the samples it was fitted on, and in how many the
  // split was no slower (informational).
  std::optional<int64_t> split_se_threshold;
  int split_samples = 0, split_wins = 0;
};

struct MhaMlaTable {
  int max_batch = 8;                  // batch sizes above this use the max_batch bucket
  std::vector<int64_t> prefix_edges;  // strictly increasing, first 0
  std::vector<int64_t> extend_edges;  // strictly increasing, first 0
  std::vector<MhaMlaCell> cells;      // at most one per (batch, prefix, extend)
  // The MHA providers the tuner timed (kOurs, and kCudnn where it loaded); empty when the
  // profile records none (version 1, cost model). Every cell's provider is one of them.
  std::vector<MhaPrefillProvider> mha_providers;
  std::string cudnn_version;  // "cuDNN 9.13.0" when kCudnn was timed (informational)

  // Bucket indices of a batch: batch sizes are clamped to [1, max_batch]; sums pick the last
  // edge <= sum. The table must have been validated.
  int BatchBucket(int batch_size) const;
  int PrefixBucket(int64_t sum_prefix) const;
  int ExtendBucket(int64_t sum_extend) const;
  // The cell for the batch, or the nearest measured one in the same batch bucket (fewest
  // bucket steps in Σprefix + Σextend, ties to the smaller sums), or nullptr when the batch
  // bucket has no cells at all. *exact says whether the cell is the batch's own.
  const MhaMlaCell* Find(int batch_size, int64_t sum_prefix, int64_t sum_extend,
                         bool* exact = nullptr) const;
};

// DeepSeek Sparse Attention (V3.2) prefill: the decode-style sparse kernel's scheduler needs
// 4·(5·rows + 1) bytes of shared memory, so it holds at most decode_max_rows query rows
// (kernels::SparseDecodeMaxRows of the device's opt-in shared memory); above that sparse-fwd
// is the only choice. Below, sparse-fwd is used from sparse_fwd_min_rows rows on (measured
// where both kernels exist; otherwise decode_max_rows + 1, i.e. only when forced).
struct SparseSettings {
  int decode_max_rows = 0;
  int sparse_fwd_min_rows = 0;
  bool measured = false;
};

// One decode-kernel split plan (kernels::PlanMlaDecode) recorded for operators and for
// checking that the GPU's plan did not change since tuning.
struct DecodeSplit {
  int batch = 0;
  int max_seqlen_k = 0;
  int num_splits = 1;
  int chunk_tokens = 0;
};

// Relative prefill-time estimate the router uses to choose among unlike prefill workers:
// t(L) = L·(attn_us_per_token + dense_us_per_token) + L²·attn_us_per_token_sq  (one layer's
// attention plus a reference dense GEMM per token; only ratios between workers matter).
struct PrefillEstimate {
  double attn_us_per_token = 0.0;
  double attn_us_per_token_sq = 0.0;
  double dense_us_per_token = 0.0;

  // Microseconds for one prompt of `tokens` tokens (>= 0).
  double Micros(int64_t tokens) const;
  // Until a new prompt of `prompt_tokens` would be done behind `queued_tokens` already queued
  // (the queue counted per token, as chunked prefill interleaves it): how the router compares
  // unlike prefill workers.
  double FinishMicros(int64_t queued_tokens, int64_t prompt_tokens) const;
};

struct GpuProfile {
  // Written: version 2 (per-cell MHA provider). Read: versions 1 and 2.
  static constexpr int kFormatVersion = 2;
  static constexpr int kOldestReadableVersion = 1;

  DeviceFacts device;
  AttentionShape shape;
  // "measured" (mlaserve-tune) or "cost-model" (estimated from device facts).
  std::string origin = "measured";
  std::string created;  // ISO 8601 UTC, informational
  MhaMlaTable mha_mla;
  SparseSettings sparse;
  std::vector<DecodeSplit> decode_splits;
  int chunk_size = 8192;              // prefill chunk size in tokens
  int local_prefill_threshold = 0;    // decode workers prefill prompts <= this locally; 0 = never
  PrefillEstimate prefill_estimate;
};

// INVALID_ARGUMENT naming the first offending field ("mha_mla.cells[3].batch: 9 is outside
// [1, max_batch 8]"). A profile that passes is safe for the policy to use.
absl::Status ValidateProfile(const GpuProfile& p);

// JSON (format: docs/profiles.md). Parse errors and invalid values name the field; LoadProfile's
// errors also name the file. Version 1 documents load with every cell's provider kAuto.
std::string ProfileToJson(const GpuProfile& p);
absl::StatusOr<GpuProfile> ProfileFromJson(const std::string& text);

absl::Status SaveProfile(const GpuProfile& p, const std::string& path);
absl::StatusOr<GpuProfile> LoadProfile(const std::string& path);

// "auto" | "ours" | "cudnn" as the profile writes them; nullopt for anything else.
std::optional<MhaPrefillProvider> MhaProviderFromName(const std::string& name);

// "NVIDIA H100 80GB HBM3" -> "NVIDIA_H100_80GB_HBM3" (letters, digits, '-', '.' kept; runs of
// anything else become one '_').
std::string SanitizeDeviceName(const std::string& name);
// <sanitized device name>_<shape key>.json
std::string ProfileFileName(const std::string& device_name, const AttentionShape& shape);

}  // namespace mlaserve::profiles
