// mlaserve-model-bench: how fast the DeepSeek runtime runs a checkpoint on the CPU backend.
//
// Prefills a --prompt-len token prompt (fixed pseudo-random ids) in one Forward, then runs
// --decode-steps greedy decode steps over the paged cache; repeats --runs times and prints the
// median of each figure. Decode steps read the cache and never recompute it, so the time per
// step grows only by attention's linear term in the context length: the bench also times
// decode steps after prompts of several lengths to show that (a recomputing decode would
// scale like a prefill of the whole context).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "kernels/common/page.h"
#include "model/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
using mlaserve::model::AttentionPath;
using mlaserve::model::Engine;
using mlaserve::model::SequenceChunk;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct RunTimes {
  double prefill_ms = 0;
  std::vector<double> step_ms;  // one per decode step
};

// Prefill `prompt`, then `steps` greedy decode steps. Aborts the process on an engine error
// (a benchmark has nothing sensible to report then).
RunTimes RunOnce(Engine& engine, const std::vector<int32_t>& prompt, int steps,
                 AttentionPath path) {
  const int total = static_cast<int>(prompt.size()) + steps;
  auto pages = engine.kv_pool().Allocate(mlaserve::kernels::PagesFor(total));
  if (!pages.ok()) {
    std::fprintf(stderr, "%s\n", pages.status().ToString().c_str());
    std::exit(1);
  }
  RunTimes t;
  SequenceChunk c{prompt, 0, *pages, true};
  auto start = Clock::now();
  auto r = engine.Forward({&c, 1}, path);
  t.prefill_ms = Ms(Clock::now() - start);
  if (!r.ok()) {
    std::fprintf(stderr, "prefill: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<float> logits = r->logits;
  std::vector<int32_t> seq = prompt;
  for (int s = 0; s < steps; ++s) {
    seq.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                       logits.begin()));
    SequenceChunk d{std::span<const int32_t>(&seq.back(), 1), static_cast<int>(seq.size()) - 1,
                    *pages, true};
    start = Clock::now();
    auto dr = engine.Forward({&d, 1});
    t.step_ms.push_back(Ms(Clock::now() - start));
    if (!dr.ok()) {
      std::fprintf(stderr, "decode: %s\n", dr.status().ToString().c_str());
      std::exit(1);
    }
    logits = dr->logits;
  }
  engine.kv_pool().Free(*pages);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "tests/fixtures/models/deepseek_v32";
  int prompt_len = 256, decode_steps = 32, runs = 5;
  std::string path_name = "auto";
  CLI::App app{"mlaserve-model-bench: CPU prefill/decode speed of the DeepSeek runtime"};
  app.add_option("--model", model, "model directory")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prompt tokens")->capture_default_str();
  app.add_option("--decode-steps", decode_steps, "decode steps")->capture_default_str();
  app.add_option("--runs", runs, "repetitions (median reported)")->capture_default_str();
  app.add_option("--attention", path_name, "prefill form")
      ->check(CLI::IsMember({"auto", "mha", "mla"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const AttentionPath path = path_name == "mha"   ? AttentionPath::kMha
                             : path_name == "mla" ? AttentionPath::kMla
                                                  : AttentionPath::kAuto;

  mlaserve::model::EngineOptions o;
  o.model_dir = model;
  o.num_kv_pages = 64;
  o.max_batch_tokens = std::max(2 * prompt_len, 1);
  auto engine = Engine::Create(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  const auto& cfg = (*engine)->config();
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int32_t> dist(2, cfg.vocab_size - 1);
  auto make_prompt = [&](int n) {
    std::vector<int32_t> p(n);
    for (auto& id : p) id = dist(rng);
    return p;
  };
  const std::vector<int32_t> prompt = make_prompt(prompt_len);
  RunOnce(**engine, prompt, 2, path);  // warm-up (page faults, thread pools)

  // Decode figures use the median over every step of every run: a single step is short, so
  // one scheduling hiccup would dominate a per-run sum on a shared machine.
  std::vector<double> prefill, all_steps, step_first, step_last;
  const int edge = std::max(1, decode_steps / 4);
  for (int r = 0; r < runs; ++r) {
    RunTimes t = RunOnce(**engine, prompt, decode_steps, path);
    prefill.push_back(t.prefill_ms);
    all_steps.insert(all_steps.end(), t.step_ms.begin(), t.step_ms.end());
    step_first.push_back(Median({t.step_ms.begin(), t.step_ms.begin() + edge}));
    step_last.push_back(Median({t.step_ms.end() - edge, t.step_ms.end()}));
  }
  const double p_ms = Median(prefill), d_ms = Median(all_steps) * decode_steps;
  std::printf("model %s (%s, %d layers, hidden %d, %d heads), %d runs, median\n", model.c_str(),
              cfg.model_type_name.c_str(), cfg.num_hidden_layers, cfg.hidden_size,
              cfg.num_attention_heads, runs);
  std::printf("| phase   | tokens | time (ms) | tokens/s | ms/token |\n");
  std::printf("|---------|-------:|----------:|---------:|---------:|\n");
  std::printf("| prefill | %6d | %9.2f | %8.0f | %8.3f |\n", prompt_len, p_ms,
              1000.0 * prompt_len / p_ms, p_ms / prompt_len);
  std::printf("| decode  | %6d | %9.2f | %8.0f | %8.3f |\n", decode_steps, d_ms,
              1000.0 * decode_steps / d_ms, d_ms / decode_steps);
  std::printf("decode step: first %d steps %.3f ms, last %d steps %.3f ms (ratio %.2f)\n", edge,
              Median(step_first), edge, Median(step_last),
              Median(step_last) / Median(step_first));

  // Decode step time against context length: flat but for attention's linear term.
  std::printf("| context | ms/decode step | prefill of the context (ms) |\n");
  std::printf("|--------:|---------------:|----------------------------:|\n");
  for (int ctx : {32, prompt_len, std::min(2 * prompt_len, cfg.max_position_embeddings - 16)}) {
    if (ctx > o.max_batch_tokens) break;
    const std::vector<int32_t> p = make_prompt(ctx);
    std::vector<double> steps, pre;
    for (int r = 0; r < runs; ++r) {
      RunTimes t = RunOnce(**engine, p, 8, path);
      pre.push_back(t.prefill_ms);
      steps.push_back(Median(t.step_ms));
    }
    std::printf("| %7d | %14.3f | %27.2f |\n", ctx, Median(steps), Median(pre));
  }
  return 0;
}
