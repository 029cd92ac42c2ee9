#include "profiles/policy_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mlaserve::profiles {
namespace {

// "-38.2% (1.62x)": time saved relative to `base` and the speedup; "-" for the base itself.
std::string Gain(double base_us, double us) {
  if (base_us <= 0 || us <= 0) return "-";
  return absl::StrFormat("%+.1f%% (%.2fx)", 100.0 * (us - base_us) / base_us, base_us / us);
}

}  // namespace

std::vector<SequenceShape> DrawMixedBatch(std::mt19937_64& rng, const MixedWorkloadOptions& o) {
  const int b = std::uniform_int_distribution<int>(1, std::max(o.max_batch, 1))(rng);
  std::uniform_int_distribution<int64_t> prefix(0, std::max<int64_t>(o.max_prefix, 0));
  std::uniform_int_distribution<int64_t> extend(1, std::max<int64_t>(o.max_extend, 1));
  const int64_t budget = std::max<int64_t>(o.max_batch_tokens, 1);
  std::vector<SequenceShape> batch;
  int64_t tokens = 0;
  for (int i = 0; i < b; ++i) {
    SequenceShape s;
    s.prefix = prefix(rng);
    s.extend = extend(rng);  // drawn for every request, so later draws do not depend on the cut
    if (tokens >= budget) continue;
    s.extend = std::min(s.extend, budget - tokens);
    tokens += s.extend;
    batch.push_back(s);
  }
  return batch;
}

PrefillPath FixedRulePath(const BatchStats& stats) {
  return stats.sum_prefix == 0 || stats.sum_prefix >= kSglangChunkedPrefixThreshold
             ? PrefillPath::kMha
             : PrefillPath::kMla;
}

absl::StatusOr<PolicyBenchReport> RunPolicyBenchmark(const BatchTimer& time_batch,
                                                     const std::vector<TunedPolicy>& tuned,
                                                     const PolicyBenchOptions& o) {
  if (o.batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batches: ", o.batches, " is not >= 1"));
  }
  for (const TunedPolicy& t : tuned) {
    if (t.policy == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tuned policy '", t.label, "' is null"));
    }
  }
  PolicyBenchReport r;
  r.rows.push_back({"always MLA"});
  r.rows.push_back({"fixed rule (SGLang: MHA if sum prefix = 0 or >= 8192)"});
  for (const TunedPolicy& t : tuned) r.rows.push_back({absl::StrCat("tuned: ", t.label)});
  r.rows.push_back({"best path per batch (lower bound)"});
  // kSparseFwd never comes from a dense policy; it counts as the absorbed path it runs as.
  auto add = [](PolicyRow& row, PrefillPath p, MhaPrefillProvider provider, const BatchTimes& s) {
    const bool mha = p == PrefillPath::kMha;
    row.total_us += mha ? s.MhaUs(provider) : s.mla_us;
    ++(mha ? row.mha : row.mla);
    // kAuto and kCudnn run on cuDNN where it was timed (BatchTimes::MhaUs).
    row.mha_cudnn += mha && provider != MhaPrefillProvider::kOurs && s.mha_cudnn_us.has_value();
  };

  std::mt19937_64 rng(o.workload.seed);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.batches; ++i) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.budget_s > 0 && elapsed > o.budget_s) break;
    const std::vector<SequenceShape> batch = DrawMixedBatch(rng, o.workload);
    absl::StatusOr<BatchTimes> s = time_batch(batch);
    if (!s.ok()) return s.status();
    const BatchStats st = ComputeBatchStats(batch);
    constexpr MhaPrefillProvider kAuto = MhaPrefillProvider::kAuto;
    size_t k = 0;
    add(r.rows[k++], PrefillPath::kMla, kAuto, *s);
    add(r.rows[k++], FixedRulePath(st), kAuto, *s);
    for (const TunedPolicy& t : tuned) {
      const PathChoice c = t.policy->Choose(batch);
      add(r.rows[k++], c.path, c.mha_provider, *s);
    }
    const MhaPrefillProvider faster =
        s->MhaUs(MhaPrefillProvider::kCudnn) < s->mha_ours_us ? MhaPrefillProvider::kCudnn
                                                              : MhaPrefillProvider::kOurs;
    add(r.rows[k++], s->MhaUs(faster) <= s->mla_us ? PrefillPath::kMha : PrefillPath::kMla, faster,
        *s);
    ++r.batches;
    if (o.progress) {
      std::fprintf(stderr, "\rpolicy benchmark: %d batches, %.0f s", r.batches, elapsed);
    }
  }
  if (o.progress) std::fprintf(stderr, "\n");
  if (r.batches == 0) return absl::DeadlineExceededError("budget ended before the first batch");

  const MixedWorkloadOptions& w = o.workload;
  std::string& out = r.table;
  absl::StrAppendFormat(&out,
                        "mixed workload: %d batches (batch size 1..%d; per request prefix "
                        "0..%d, extend 1..%d; at most %d tokens a batch; seed %d)\n",
                        r.batches, w.max_batch, w.max_prefix, w.max_extend, w.max_batch_tokens,
                        w.seed);
  absl::StrAppendFormat(&out, "%-60s %12s %5s %5s %5s  %-18s %s\n", "policy", "total ms", "MHA",
                        "cuDNN", "MLA", "vs always MLA", "vs fixed rule");
  const double always_mla = r.rows[0].total_us, fixed = r.rows[1].total_us;
  for (const PolicyRow& row : r.rows) {
    absl::StrAppendFormat(&out, "%-60s %12.1f %5d %5d %5d  %-18s %s\n", row.name,
                          row.total_us / 1000.0, row.mha, row.mha_cudnn, row.mla,
                          Gain(always_mla, row.total_us), Gain(fixed, row.total_us));
  }
  out += "(attention prefill time only: every path timed once per batch, MHA on each provider; "
         "each policy charged the path and provider it picks (cuDNN: of its MHA batches, those on "
         "cuDNN); gains are time change and speedup)\n";
  return r;
}

}  // namespace mlaserve::profiles
