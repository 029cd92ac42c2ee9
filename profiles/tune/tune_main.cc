// mlaserve-tune: measures a GPU profile for one attention shape on this GPU and writes
// <out-dir>/<GPU name>_<shape>.json; --validate scores a profile on held-out batches and
// prints a table in the manner of SGLang PR 9551 (threshold, MHA wins above / below, hit rate).
//
//   mlaserve-tune --heads 128 --out-dir profiles                  # DeepSeek-V3, 1 GPU per 128 heads
//   mlaserve-tune --heads 16 --validate                           # tune, then validate
//   mlaserve-tune --heads 16 --validate-only profiles/X.json      # validate an existing file
//   mlaserve-tune --benchmark-policies profiles/X.json[,Y.json]   # policy benchmark (mixed load)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "profiles/cost_model.h"
#include "profiles/gpu_profile.h"
#include "profiles/policy_bench.h"
#include "profiles/tune/tuner.h"

namespace mlaserve::profiles::tune {
namespace {

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a non-negative integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

// --mha-providers: "auto" | "ours" | "ours,cudnn" (or "cudnn": ours is always timed).
absl::StatusOr<MhaPrefillProvider> ParseTimedProviders(const std::string& text) {
  if (text == "auto") return MhaPrefillProvider::kAuto;
  if (text == "ours") return MhaPrefillProvider::kOurs;
  if (text == "ours,cudnn" || text == "cudnn,ours" || text == "cudnn") {
    return MhaPrefillProvider::kCudnn;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--mha-providers: '", text, "' is not one of auto, ours, ours,cudnn"));
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "mlaserve-tune: %s\n", s.ToString().c_str());
  return 1;
}

// --benchmark-policies: one timer for the profiles' common shape, the same batches for all.
int BenchmarkMain(int device, const std::string& list, const PolicyBenchOptions& bench,
                  TimerLimits limits, const std::string& out_path) {
  std::vector<std::pair<std::string, GpuProfile>> profiles;
  AttentionShape shape;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const std::string path(part);
    auto p = LoadProfile(path);
    if (!p.ok()) return Fail(p.status());
    if (profiles.empty()) {
      shape = p->shape;
    } else if (!(p->shape == shape)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--benchmark-policies: ", path, " has shape ", p->shape.Key(), ", the first profile ",
          shape.Key(), "; compare profiles of one shape")));
    }
    profiles.push_back({path, *std::move(p)});
  }
  if (profiles.empty()) return Fail(absl::InvalidArgumentError("--benchmark-policies is empty"));
  const MixedWorkloadOptions& w = bench.workload;
  if (w.max_batch < 1 || w.max_prefix < 0 || w.max_extend < 1 || w.max_batch_tokens < 1) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--bench-max-batch/prefix/extend/tokens: ", w.max_batch, "/", w.max_prefix, "/",
        w.max_extend, "/", w.max_batch_tokens, " must be >= 1/0/1/1")));
  }
  limits.max_batch = std::max(limits.max_batch, w.max_batch);
  limits.max_sum_prefix = int64_t{w.max_batch} * w.max_prefix;
  limits.max_sum_extend =
      std::max<int64_t>(std::min(int64_t{w.max_batch} * w.max_extend, w.max_batch_tokens), 1);
  auto timer = PathTimer::Create(device, shape, limits);
  if (!timer.ok()) return Fail(timer.status());
  auto facts = (*timer)->MeasureDevice();
  if (!facts.ok()) return Fail(facts.status());
  // cuDNN cells run (and are charged) as ours where this timer does not time cuDNN.
  const std::vector<MhaPrefillProvider> timed = (*timer)->mha_providers();
  PolicyOptions policy_options;
  policy_options.cudnn_available =
      std::find(timed.begin(), timed.end(), MhaPrefillProvider::kCudnn) != timed.end();
  std::vector<TunedPolicy> tuned;
  for (auto& [path, profile] : profiles) {
    auto policy = AttentionPathPolicy::Create(profile, path, {}, policy_options);
    if (!policy.ok()) return Fail(policy.status());
    tuned.push_back({std::filesystem::path(path).filename().string(), std::move(*policy)});
  }
  auto r = RunPolicyBenchmark(
      [&](const std::vector<SequenceShape>& batch) { return (*timer)->Time(batch); }, tuned, bench);
  if (!r.ok()) return Fail(r.status());
  const std::string text =
      absl::StrCat("policy benchmark on ", facts->name, ", shape ", shape.Key(), ", timer reps ",
                   limits.reps, " (median) after ", limits.warmup, " warmup; MHA prefill on ours",
                   policy_options.cudnn_available == true ? " and cuDNN" : "", " (cuDNN: ",
                   (*timer)->cudnn_note(), ")\n", r->table);
  std::printf("%s", text.c_str());
  if (!out_path.empty()) std::ofstream(out_path) << text;
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"mlaserve-tune: measure MHA/MLA prefill thresholds and device facts on this GPU"};
  AttentionShape shape{128, 128, 64, 128, 512, "bf16"};
  int device = 0;
  std::string out_dir = "profiles", prefix_edges = "0,256,1024,2048,4096,8192";
  std::string extend_edges = "0,512,1024,2048,4096,8192", batches = "1,2,3,4,5,6,7,8";
  std::string validate_only, validate_out, validate_batches, bench_profiles, bench_out;
  std::string mha_providers = "auto";
  TuneOptions t;
  ValidationOptions v;
  TimerLimits limits;
  PolicyBenchOptions bench;
  bool validate = false, no_progress = false;
  app.add_option("--heads", shape.heads, "query heads per GPU (num_attention_heads / TP)");
  app.add_option("--qk-nope-dim", shape.qk_nope_head_dim);
  app.add_option("--qk-rope-dim", shape.qk_rope_head_dim);
  app.add_option("--v-dim", shape.v_head_dim);
  app.add_option("--kv-lora-rank", shape.kv_lora_rank);
  app.add_option("--dtype", shape.dtype, "bf16 (the only dtype timed so far)");
  app.add_option("--device", device);
  app.add_option("--out-dir", out_dir, "where the profile JSON is written");
  app.add_option("--max-batch", t.grid.max_batch, "batch buckets 1..N (N holds larger batches)");
  app.add_option("--prefix-edges", prefix_edges, "Σprefix bucket edges, first 0");
  app.add_option("--extend-edges", extend_edges, "Σextend bucket edges, first 0");
  app.add_option("--batches", batches, "batch buckets to measure; others copy the nearest");
  app.add_option("--samples", t.samples, "random batches per cell");
  t.split_samples = 6;
  app.add_option("--split-samples", t.split_samples,
                 "split samples per fresh-prompt cell (prefix bucket 0) for its split threshold; "
                 "0: none")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--reps", limits.reps, "timed runs per path per batch (median)");
  app.add_option("--warmup", limits.warmup, "untimed runs first");
  app.add_option("--prefix-chunk", limits.prefix_chunk_tokens, "MHA prefix chunk (tokens)");
  app.add_option("--mha-providers", mha_providers,
                 "MHA-prefill providers to time: auto (ours, and cuDNN where it runs), ours, or "
                 "ours,cudnn (fail when cuDNN cannot run)");
  app.add_option("--budget-s", t.budget_s, "stop measuring cells after this many seconds");
  app.add_option("--seed", t.seed);
  app.add_flag("--validate", validate, "after tuning, validate on held-out batches");
  app.add_option("--validate-only", validate_only, "validate this profile file; no tuning");
  app.add_option("--validate-samples", v.samples_per_family, "held-out batches per batch bucket");
  app.add_option("--validate-budget-s", v.budget_s, "stop validating after this many seconds");
  app.add_option("--validate-out", validate_out, "also write the validation table here");
  app.add_option("--validate-batches", validate_batches,
                 "validate only these batch buckets (default: all)");
  app.add_option("--benchmark-policies", bench_profiles,
                 "comma-separated profiles (same shape): time a mixed workload under always-MLA, "
                 "SGLang's fixed rule and each profile's policy; no tuning");
  app.add_option("--bench-batches", bench.batches, "mixed-workload batches to draw");
  app.add_option("--bench-budget-s", bench.budget_s, "stop the benchmark after this long");
  app.add_option("--bench-seed", bench.workload.seed);
  app.add_option("--bench-max-batch", bench.workload.max_batch, "batch size 1..N");
  app.add_option("--bench-max-prefix", bench.workload.max_prefix, "per-sequence prefix 0..N");
  app.add_option("--bench-max-extend", bench.workload.max_extend, "per-sequence extend 1..N");
  app.add_option("--bench-max-tokens", bench.workload.max_batch_tokens,
                 "chunked-prefill token budget of a batch (Σextend)");
  app.add_option("--bench-fresh-fraction", bench.workload.fresh_fraction,
                 "probability that a request is a fresh prompt (prefix 0); above 0 the batch "
                 "lists prefixed requests first and batches that can split are timed split too")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--bench-out", bench_out, "also write the benchmark table here");
  app.add_flag("--no-progress", no_progress);
  CLI11_PARSE(app, argc, argv);
  t.progress = v.progress = bench.progress = !no_progress;
  auto providers = ParseTimedProviders(mha_providers);
  if (!providers.ok()) return Fail(providers.status());
  limits.mha_providers = *providers;
  if (!validate_batches.empty()) {
    auto vb = ParseList("validate-batches", validate_batches);
    if (!vb.ok()) return Fail(vb.status());
    for (int64_t b : *vb) v.batch_buckets.push_back(static_cast<int>(b));
  }
  if (!bench_profiles.empty()) {
    return BenchmarkMain(device, bench_profiles, bench, limits, bench_out);
  }

  GpuProfile existing;
  if (!validate_only.empty()) {
    auto p = LoadProfile(validate_only);
    if (!p.ok()) return Fail(p.status());
    existing = *p;
    shape = existing.shape;
    t.grid = existing.mha_mla;
  } else {
    auto pe = ParseList("prefix-edges", prefix_edges);
    auto ee = ParseList("extend-edges", extend_edges);
    auto bs = ParseList("batches", batches);
    if (!pe.ok()) return Fail(pe.status());
    if (!ee.ok()) return Fail(ee.status());
    if (!bs.ok()) return Fail(bs.status());
    t.grid.prefix_edges = *pe;
    t.grid.extend_edges = *ee;
    for (int64_t b : *bs) {
      if (b < 1 || b > t.grid.max_batch) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("--batches: ", b, " is outside [1, --max-batch ", t.grid.max_batch, "]")));
      }
      t.batches.push_back(static_cast<int>(b));
    }
    if (t.samples < 2) return Fail(absl::InvalidArgumentError("--samples must be >= 2"));
  }
  limits.max_sum_prefix = std::max(t.grid.prefix_edges.back() + t.grid.prefix_edges.back() / 2,
                                   kSplitLeadMaxSequences * kSplitLeadMaxPrefix);
  limits.max_sum_extend = std::max<int64_t>(
      {t.grid.extend_edges.back() + t.grid.extend_edges.back() / 2, 8192, 4 * t.grid.max_batch});
  // A split sample's whole batch: the lead's extends on top of the fresh prompts'.
  if (t.split_samples > 0) limits.max_sum_extend += kSplitLeadMaxSequences * kSplitLeadMaxExtend;
  limits.max_batch = std::max(2 * t.grid.max_batch, t.decode_batch);
  limits.decode_batch = t.decode_batch;
  limits.decode_context = t.decode_context;

  auto timer = PathTimer::Create(device, shape, limits);
  if (!timer.ok()) return Fail(timer.status());
  if (validate_only.empty()) {
    auto p = TuneProfile(**timer, shape, t);
    if (!p.ok()) return Fail(p.status());
    std::filesystem::create_directories(out_dir);
    const std::string path = (std::filesystem::path(out_dir) /
                              ProfileFileName(p->device.name, shape)).string();
    if (absl::Status s = SaveProfile(*p, path); !s.ok()) return Fail(s);
    std::printf("wrote %s\n", path.c_str());
    existing = *p;
  }
  if (validate || !validate_only.empty()) {
    auto r = ValidateOnDevice(**timer, existing, v);
    if (!r.ok()) return Fail(r.status());
    std::printf("validation of %s %s (%s):\n%s", existing.device.name.c_str(),
                shape.Key().c_str(), existing.origin.c_str(), r->table.c_str());
    if (!validate_out.empty()) std::ofstream(validate_out) << r->table;
  }
  return 0;
}

}  // namespace
}  // namespace mlaserve::profiles::tune

int main(int argc, char** argv) { return mlaserve::profiles::tune::Main(argc, argv); }
