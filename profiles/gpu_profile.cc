// GpuProfile: bucket lookup, validation, names.
#include "profiles/gpu_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace mlaserve::profiles {
namespace {

int LastEdgeAtOrBelow(const std::vector<int64_t>& edges, int64_t value) {
  auto it = std::upper_bound(edges.begin(), edges.end(), value);
  return it == edges.begin() ? 0 : static_cast<int>(it - edges.begin()) - 1;
}

int IndexOf(const std::vector<int64_t>& edges, int64_t value) {
  auto it = std::lower_bound(edges.begin(), edges.end(), value);
  return it != edges.end() && *it == value ? static_cast<int>(it - edges.begin()) : -1;
}

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("profile field ", field, ": ", what));
}

absl::Status CheckEdges(const std::string& field, const std::vector<int64_t>& edges) {
  if (edges.empty()) return Invalid(field, "is empty; it needs at least the edge 0");
  if (edges[0] != 0) return Invalid(absl::StrCat(field, "[0]"), absl::StrCat(edges[0], " must be 0"));
  for (size_t i = 1; i < edges.size(); ++i) {
    if (edges[i] <= edges[i - 1]) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat(edges[i], " is not greater than the previous edge ",
                                  edges[i - 1]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFinitePositive(const std::string& field, double v, bool allow_zero) {
  if (!std::isfinite(v) || v < 0.0 || (!allow_zero && v == 0.0)) {
    return Invalid(field, absl::StrCat(v, allow_zero ? " must be finite and >= 0"
                                                    : " must be finite and > 0"));
  }
  return absl::OkStatus();
}

std::string ProviderList(const std::vector<MhaPrefillProvider>& providers) {
  std::string out = "[";
  for (size_t i = 0; i < providers.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", kernels::MhaPrefillProviderName(providers[i]));
  }
  return out + "]";
}

bool Timed(const MhaMlaTable& t, MhaPrefillProvider p) {
  return std::find(t.mha_providers.begin(), t.mha_providers.end(), p) != t.mha_providers.end();
}

absl::Status CheckTimedProviders(const MhaMlaTable& t) {
  for (size_t i = 0; i < t.mha_providers.size(); ++i) {
    const MhaPrefillProvider p = t.mha_providers[i];
    const std::string f = absl::StrCat("mha_mla.mha_providers[", i, "]");
    if (p != MhaPrefillProvider::kOurs && p != MhaPrefillProvider::kCudnn) {
      return Invalid(f, absl::StrCat(kernels::MhaPrefillProviderName(p),
                                     " is not a provider the tuner times (ours, cudnn)"));
    }
    if (std::find(t.mha_providers.begin(), t.mha_providers.begin() + i, p) !=
        t.mha_providers.begin() + i) {
      return Invalid(f, absl::StrCat(kernels::MhaPrefillProviderName(p), " is listed twice"));
    }
  }
  return absl::OkStatus();
}

// The cell's provider against the providers the table says were timed.
absl::Status CheckCellProvider(const MhaMlaTable& t, const MhaMlaCell& c, const std::string& f) {
  const char* name = kernels::MhaPrefillProviderName(c.mha_provider);
  if (t.mha_providers.empty() && c.mha_provider != MhaPrefillProvider::kAuto) {
    return Invalid(f + ".mha_provider",
                   absl::StrCat(name, ", but mha_mla.mha_providers is empty (a table that names "
                                      "providers per cell lists the ones it timed)"));
  }
  if (!t.mha_providers.empty() && !Timed(t, c.mha_provider)) {
    return Invalid(f + ".mha_provider",
                   absl::StrCat(name, " is not one of mha_mla.mha_providers ",
                                ProviderList(t.mha_providers), " (the providers timed)"));
  }
  for (auto [key, provider, us] :
       {std::tuple{".mha_ours_us", MhaPrefillProvider::kOurs, c.mha_ours_us},
        {".mha_cudnn_us", MhaPrefillProvider::kCudnn, c.mha_cudnn_us}}) {
    if (!us.has_value()) continue;
    if (!std::isfinite(*us) || *us < 0.0) {
      return Invalid(f + key, absl::StrCat(*us, " must be finite and >= 0"));
    }
    if (!Timed(t, provider)) {
      return Invalid(f + key, absl::StrCat("a time for ", kernels::MhaPrefillProviderName(provider),
                                           ", which mha_mla.mha_providers ",
                                           ProviderList(t.mha_providers), " does not list"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTable(const MhaMlaTable& t) {
  if (t.max_batch < 1 || t.max_batch > 1024) {
    return Invalid("mha_mla.max_batch", absl::StrCat(t.max_batch, " is outside [1, 1024]"));
  }
  RETURN_IF_ERROR(CheckEdges("mha_mla.prefix_edges", t.prefix_edges));
  RETURN_IF_ERROR(CheckEdges("mha_mla.extend_edges", t.extend_edges));
  RETURN_IF_ERROR(CheckTimedProviders(t));
  std::set<std::tuple<int, int64_t, int64_t>> seen;
  for (size_t i = 0; i < t.cells.size(); ++i) {
    const MhaMlaCell& c = t.cells[i];
    const std::string f = absl::StrCat("mha_mla.cells[", i, "]");
    if (c.batch < 1 || c.batch > t.max_batch) {
      return Invalid(f + ".batch",
                     absl::StrCat(c.batch, " is outside [1, max_batch ", t.max_batch, "]"));
    }
    if (IndexOf(t.prefix_edges, c.prefix) < 0) {
      return Invalid(f + ".prefix", absl::StrCat(c.prefix, " is not one of prefix_edges"));
    }
    if (IndexOf(t.extend_edges, c.extend) < 0) {
      return Invalid(f + ".extend", absl::StrCat(c.extend, " is not one of extend_edges"));
    }
    if (c.se_threshold < kNeverMha) {
      return Invalid(f + ".se_threshold",
                     absl::StrCat(c.se_threshold, " is negative (-1 means 'never MHA')"));
    }
    if (c.samples < 0 || c.above_total < 0 || c.below_total < 0 || c.above_mha_wins < 0 ||
        c.below_mha_wins < 0 || c.above_mha_wins > c.above_total ||
        c.below_mha_wins > c.below_total) {
      return Invalid(f, "sample counts are negative or wins exceed their totals");
    }
    RETURN_IF_ERROR(CheckCellProvider(t, c, f));
    if (c.split_se_threshold.has_value()) {
      if (c.prefix != 0) {
        return Invalid(f + ".split_se_threshold",
                       absl::StrCat("is given in a cell of Σprefix bucket ", c.prefix,
                                    "; only the fresh prompts' bucket (prefix 0) has one"));
      }
      if (*c.split_se_threshold < kNeverMha) {
        return Invalid(f + ".split_se_threshold",
                       absl::StrCat(*c.split_se_threshold, " is negative (-1 means 'never split')"));
      }
      if (c.split_samples < 0 || c.split_wins < 0 || c.split_wins > c.split_samples) {
        return Invalid(f, absl::StrCat("split_wins ", c.split_wins, " is not within [0, split_samples ",
                                       c.split_samples, "]"));
      }
    }
    if (!seen.insert({c.batch, c.prefix, c.extend}).second) {
      return Invalid(f, absl::StrCat("duplicates the cell (batch ", c.batch, ", prefix ", c.prefix,
                                     ", extend ", c.extend, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string AttentionShape::Key() const {
  return absl::StrCat("h", heads, "_n", qk_nope_head_dim, "_r", qk_rope_head_dim, "_v",
                      v_head_dim, "_l", kv_lora_rank, "_", dtype);
}

int MhaMlaTable::BatchBucket(int batch_size) const {
  return std::clamp(batch_size, 1, max_batch);
}
int MhaMlaTable::PrefixBucket(int64_t sum_prefix) const {
  return LastEdgeAtOrBelow(prefix_edges, sum_prefix);
}
int MhaMlaTable::ExtendBucket(int64_t sum_extend) const {
  return LastEdgeAtOrBelow(extend_edges, sum_extend);
}

const MhaMlaCell* MhaMlaTable::Find(int batch_size, int64_t sum_prefix, int64_t sum_extend,
                                    bool* exact) const {
  const int b = BatchBucket(batch_size);
  const int pi = PrefixBucket(sum_prefix);
  const int ei = ExtendBucket(sum_extend);
  const MhaMlaCell* best = nullptr;
  int best_dist = std::numeric_limits<int>::max();
  int64_t best_sum = 0;
  for (const MhaMlaCell& c : cells) {
    if (c.batch != b) continue;
    const int cp = IndexOf(prefix_edges, c.prefix);
    const int ce = IndexOf(extend_edges, c.extend);
    const int dist = std::abs(cp - pi) + std::abs(ce - ei);
    const int64_t sum = c.prefix + c.extend;
    if (dist < best_dist || (dist == best_dist && sum < best_sum)) {
      best = &c;
      best_dist = dist;
      best_sum = sum;
    }
  }
  if (exact != nullptr) *exact = best != nullptr && best_dist == 0;
  return best;
}

double PrefillEstimate::Micros(int64_t tokens) const {
  const double l = static_cast<double>(std::max<int64_t>(tokens, 0));
  return l * (attn_us_per_token + dense_us_per_token) + l * l * attn_us_per_token_sq;
}

double PrefillEstimate::FinishMicros(int64_t queued_tokens, int64_t prompt_tokens) const {
  const double q = static_cast<double>(std::max<int64_t>(queued_tokens, 0));
  return q * (attn_us_per_token + dense_us_per_token) + Micros(prompt_tokens);
}

absl::Status ValidateProfile(const GpuProfile& p) {
  if (p.device.name.empty()) return Invalid("device.name", "is empty");
  if (p.device.sm_count < 0) {
    return Invalid("device.sm_count", absl::StrCat(p.device.sm_count, " is negative"));
  }
  if (p.device.smem_optin_bytes < 0 || p.device.smem_optin_bytes > (int64_t{1} << 30)) {
    return Invalid("device.smem_optin_bytes",
                   absl::StrCat(p.device.smem_optin_bytes, " is outside [0, 1 GiB]"));
  }
  RETURN_IF_ERROR(CheckFinitePositive("device.copy_gbs", p.device.copy_gbs, true));
  RETURN_IF_ERROR(CheckFinitePositive("device.matrix_tflops", p.device.matrix_tflops, true));
  const AttentionShape& s = p.shape;
  for (auto [field, v] : {std::pair{"shape.heads", s.heads},
                          {"shape.qk_nope_head_dim", s.qk_nope_head_dim},
                          {"shape.qk_rope_head_dim", s.qk_rope_head_dim},
                          {"shape.v_head_dim", s.v_head_dim},
                          {"shape.kv_lora_rank", s.kv_lora_rank}}) {
    if (v <= 0 || v > 65536) return Invalid(field, absl::StrCat(v, " is outside [1, 65536]"));
  }
  if (s.dtype != "bf16" && s.dtype != "fp8") {
    return Invalid("shape.dtype", absl::StrCat("'", s.dtype, "' is not bf16 or fp8"));
  }
  if (p.origin != "measured" && p.origin != "cost-model") {
    return Invalid("origin", absl::StrCat("'", p.origin, "' is not measured or cost-model"));
  }
  RETURN_IF_ERROR(ValidateTable(p.mha_mla));
  if (p.sparse.decode_max_rows < 0) {
    return Invalid("sparse.decode_max_rows", absl::StrCat(p.sparse.decode_max_rows, " is negative"));
  }
  if (p.sparse.sparse_fwd_min_rows < 1) {
    return Invalid("sparse.sparse_fwd_min_rows",
                   absl::StrCat(p.sparse.sparse_fwd_min_rows, " must be >= 1"));
  }
  for (size_t i = 0; i < p.decode_splits.size(); ++i) {
    const DecodeSplit& d = p.decode_splits[i];
    const std::string f = absl::StrCat("decode_splits[", i, "]");
    if (d.batch < 1) return Invalid(f + ".batch", absl::StrCat(d.batch, " must be >= 1"));
    if (d.max_seqlen_k < 1) {
      return Invalid(f + ".max_seqlen_k", absl::StrCat(d.max_seqlen_k, " must be >= 1"));
    }
    if (d.num_splits < 1) {
      return Invalid(f + ".num_splits", absl::StrCat(d.num_splits, " must be >= 1"));
    }
    if (d.chunk_tokens < 0) {
      return Invalid(f + ".chunk_tokens", absl::StrCat(d.chunk_tokens, " is negative"));
    }
  }
  if (p.chunk_size < 1 || p.chunk_size > (1 << 20)) {
    return Invalid("chunk_size", absl::StrCat(p.chunk_size, " is outside [1, 1048576]"));
  }
  if (p.local_prefill_threshold < 0) {
    return Invalid("local_prefill_threshold",
                   absl::StrCat(p.local_prefill_threshold, " is negative (0 means never local)"));
  }
  RETURN_IF_ERROR(CheckFinitePositive("prefill_estimate.attn_us_per_token",
                                      p.prefill_estimate.attn_us_per_token, true));
  RETURN_IF_ERROR(CheckFinitePositive("prefill_estimate.attn_us_per_token_sq",
                                      p.prefill_estimate.attn_us_per_token_sq, true));
  RETURN_IF_ERROR(CheckFinitePositive("prefill_estimate.dense_us_per_token",
                                      p.prefill_estimate.dense_us_per_token, true));
  return absl::OkStatus();
}

std::optional<MhaPrefillProvider> MhaProviderFromName(const std::string& name) {
  for (auto p : {MhaPrefillProvider::kAuto, MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn}) {
    if (name == kernels::MhaPrefillProviderName(p)) return p;
  }
  return std::nullopt;
}

std::string SanitizeDeviceName(const std::string& name) {
  std::string out;
  bool pending_sep = false;
  for (char ch : name) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
    if (!keep) {
      pending_sep = !out.empty();
      continue;
    }
    if (pending_sep) out.push_back('_');
    pending_sep = false;
    out.push_back(ch);
  }
  return out.empty() ? "unknown" : out;
}

std::string ProfileFileName(const std::string& device_name, const AttentionShape& shape) {
  return absl::StrCat(SanitizeDeviceName(device_name), "_", shape.Key(), ".json");
}

}  // namespace mlaserve::profiles
