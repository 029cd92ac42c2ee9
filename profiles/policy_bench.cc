#include "profiles/policy_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

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
  const bool fresh_some = o.fresh_fraction > 0;
  std::bernoulli_distribution fresh(std::clamp(o.fresh_fraction, 0.0, 1.0));
  std::vector<SequenceShape> batch;
  int64_t tokens = 0;
  for (int i = 0; i < b; ++i) {
    SequenceShape s;
    s.prefix = prefix(rng);
    s.extend = extend(rng);  // drawn for every request, so later draws do not depend on the cut
    // Drawn only with a fraction, so the default workload's draws stay as they were.
    if (fresh_some && fresh(rng)) s.prefix = 0;
    if (tokens >= budget) continue;
    s.extend = std::min(s.extend, budget - tokens);
    tokens += s.extend;
    batch.push_back(s);
  }
  // The budget went in drawing order; the batch runs prefixed requests first (PrefillScheduler).
  if (fresh_some) {
    std::stable_partition(batch.begin(), batch.end(),
                          [](const SequenceShape& q) { return !IsFreshPrompt(q); });
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
  const double ff = o.workload.fresh_fraction;
  if (!(ff >= 0.0 && ff <= 1.0)) {  // NaN too
    return absl::InvalidArgumentError(
        absl::StrCat("fresh fraction: ", ff, " is not a probability in [0, 1]"));
  }
  // Per profile the policy as given and the same without the split rule.
  std::vector<std::shared_ptr<AttentionPathPolicy>> policies;
  PolicyBenchReport r;
  r.rows.push_back({"always MLA"});
  r.rows.push_back({"fixed rule (SGLang: MHA if sum prefix = 0 or >= 8192)"});
  for (const TunedPolicy& t : tuned) {
    if (t.policy == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tuned policy '", t.label, "' is null"));
    }
    PolicyOptions no_split = t.policy->options();
    no_split.split_fresh_prompts = false;
    auto off = AttentionPathPolicy::Create(t.policy->profile(), t.policy->source(),
                                           t.policy->model(), no_split);
    if (!off.ok()) return off.status();
    policies.push_back(t.policy);
    policies.push_back(*std::move(off));
    r.rows.push_back({absl::StrCat("tuned: ", t.label)});
    r.rows.push_back({absl::StrCat("tuned, no split: ", t.label)});
  }
  r.rows.push_back({"best path per batch (lower bound)"});
  // kSparseFwd never comes from a dense policy; it counts as the absorbed path it runs as.
  // kSplit comes only for a batch that can split, whose split time is then known.
  auto add = [](PolicyRow& row, PrefillPath p, MhaPrefillProvider provider, const BatchTimes& s,
                std::optional<double> split_us) {
    if (p == PrefillPath::kSplit && split_us.has_value()) {
      row.total_us += *split_us;
      ++row.split;
      return;
    }
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
    // The split: the leading part in latent form plus the fresh prompts in MHA form on the
    // engine's default provider, each part timed alone.
    std::optional<double> split_us;
    if (const int lead = SplitPoint(batch); lead > 0) {
      const std::vector<SequenceShape> lead_part(batch.begin(), batch.begin() + lead);
      const std::vector<SequenceShape> fresh_part(batch.begin() + lead, batch.end());
      absl::StatusOr<BatchTimes> a = time_batch(lead_part);
      if (!a.ok()) return a.status();
      absl::StatusOr<BatchTimes> f = time_batch(fresh_part);
      if (!f.ok()) return f.status();
      split_us = a->mla_us + f->MhaUs(kAuto);
      ++r.splittable;
    }
    size_t k = 0;
    add(r.rows[k++], PrefillPath::kMla, kAuto, *s, split_us);
    add(r.rows[k++], FixedRulePath(st), kAuto, *s, split_us);
    for (const auto& policy : policies) {
      const PathChoice c = policy->Choose(batch);
      add(r.rows[k++], c.path, c.mha_provider, *s, split_us);
    }
    const MhaPrefillProvider faster =
        s->MhaUs(MhaPrefillProvider::kCudnn) < s->mha_ours_us ? MhaPrefillProvider::kCudnn
                                                              : MhaPrefillProvider::kOurs;
    const double best_whole = std::min(s->MhaUs(faster), s->mla_us);
    if (split_us.has_value() && *split_us < best_whole) {
      add(r.rows[k++], PrefillPath::kSplit, kAuto, *s, split_us);
    } else {
      add(r.rows[k++], s->MhaUs(faster) <= s->mla_us ? PrefillPath::kMha : PrefillPath::kMla,
          faster, *s, split_us);
    }
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
  if (w.fresh_fraction > 0) {
    absl::StrAppendFormat(&out,
                          "fresh prompts: each request prefix 0 with probability %.2f, listed "
                          "after the prefixed ones; %d of %d batches can split\n",
                          w.fresh_fraction, r.splittable, r.batches);
  }
  absl::StrAppendFormat(&out, "%-60s %12s %5s %5s %5s %5s  %-18s %s\n", "policy", "total ms",
                        "MHA", "cuDNN", "MLA", "split", "vs always MLA", "vs fixed rule");
  const double always_mla = r.rows[0].total_us, fixed = r.rows[1].total_us;
  for (const PolicyRow& row : r.rows) {
    absl::StrAppendFormat(&out, "%-60s %12.1f %5d %5d %5d %5d  %-18s %s\n", row.name,
                          row.total_us / 1000.0, row.mha, row.mha_cudnn, row.mla, row.split,
                          Gain(always_mla, row.total_us), Gain(fixed, row.total_us));
  }
  out += "(attention prefill time only: every path timed once per batch, MHA on each provider; "
         "each policy charged the path and provider it picks (cuDNN: of its MHA batches, those on "
         "cuDNN; split: the leading part on MLA plus the fresh prompts on MHA, each part timed "
         "alone); gains are time change and speedup)\n";
  return r;
}

}  // namespace mlaserve::profiles
