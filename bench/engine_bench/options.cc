// Reads mlaserve-engine-bench's flags (CLI11) into EngineBenchOptions and refuses the
// combinations the runs cannot time, before anything touches a GPU.
#include "bench/engine_bench/options.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "common/request_limits.h"
#include "kernels/common/page.h"

namespace mlaserve::engine_bench {

using mlaserve::kernels::PagesFor;

std::optional<int> ParseEngineBenchOptions(int argc, char** argv, EngineBenchOptions* out) {
  EngineBenchOptions& o = *out;
  CLI::App app{"mlaserve-engine-bench: prefill and decode speed of the engine on one GPU or "
               "sharded over several"};
  app.add_option("--model", o.model, "model directory")->required();
  app.add_option("--mha-provider", o.mha_provider,
                 "auto|ours|cudnn|prefer-cudnn: MHA-prefill attention")
      ->check(CLI::IsMember({"auto", "ours", "cudnn"}))->capture_default_str();
  app.add_option("--prefill-lens", o.prefill_lens, "prompt lengths timed")->capture_default_str();
  app.add_option("--decode-batches", o.batches, "decode batch sizes")->capture_default_str();
  app.add_option("--decode-context", o.context, "tokens in each sequence before decode")
      ->capture_default_str();
  app.add_option("--runs", o.runs, "prefill repetitions (median)")->capture_default_str();
  app.add_option("--decode-steps", o.steps, "timed decode steps with graphs (median)")
      ->capture_default_str();
  app.add_option("--eager-steps", o.eager_steps, "timed decode steps without graphs (0 = skip)")
      ->capture_default_str();
  app.add_option("--sampled-steps", o.sampled_steps,
                 "timed decode steps with graphs and sampling inside Forward (0 = skip)")
      ->capture_default_str();
  app.add_option("--masked-steps", o.masked_steps,
                 "timed decode steps with graphs, sampling and an allowed-token mask on every row, "
                 "drawn on the device and (alternated) by the host baseline: logits copied back and "
                 "drawn on the host (0 = skip)")
      ->capture_default_str();
  app.add_option("--knob-steps", o.knob_steps,
                 "timed decode steps with graphs where every row has frequency_penalty 0.5, a "
                 "logit_bias entry and logprobs 5, drawn on the device and (alternated) by the host "
                 "baseline: logits copied back and drawn on the host (0 = skip)")
      ->capture_default_str();
  app.add_option("--mixed-prompts", o.mixed_prompts,
                 "decode steps with local prefill: for each N, N prompts of --mixed-prompt-len "
                 "tokens after --mixed-decode-rows decode rows at --decode-context, in one Forward, "
                 "timed against the prompts alone and the rows' step alone (empty = skip)");
  app.add_option("--mixed-prompt-len", o.mixed_len, "tokens of each prompt in a mixed step")
      ->capture_default_str();
  app.add_option("--mixed-decode-rows", o.mixed_rows, "decode rows of a mixed step")
      ->capture_default_str();
  app.add_option("--chunk-mixed", o.chunk_mixed,
                 "the prefill worker's step: for each N, a prompt's later chunk of --chunk-len "
                 "tokens after --chunk-prefix cached ones then N fresh prompts of "
                 "--mixed-prompt-len tokens, in one Forward asked kMla, kMha and kSplit, timed "
                 "against its halves (empty = skip)");
  app.add_option("--chunk-prefix", o.chunk_prefix, "cached tokens before the chunk")
      ->capture_default_str();
  app.add_option("--chunk-len", o.chunk_len, "tokens of the later chunk")->capture_default_str();
  app.add_option("--prompt-logprobs-lens", o.prompt_logprobs_lens,
                 "prompt logprobs: for each L, the prefill of an L-token prompt with every position "
                 "scored (vLLM's prompt_logprobs) against the same prefill unscored, alternated in "
                 "each of --runs rounds, and the difference against the scoring's floor (empty or "
                 "0 = skip)");
  app.add_option("--prompt-logprobs-top", o.prompt_logprobs_top,
                 "with --prompt-logprobs-lens: the alternatives a scored position returns, as "
                 "vLLM's prompt_logprobs=N (0 = the prompt token's own logprob and rank only); "
                 "several values are timed in turn in the same rounds")
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warm, "untimed decode steps first (capture)")
      ->capture_default_str();
  app.add_option("--max-batch-tokens", o.max_batch_tokens, "engine workspace planning")
      ->capture_default_str();
  app.add_option("--num-kv-pages", o.num_pages, "KV pool pages (0 = what the runs need)");
  app.add_option("--device", o.device, "CUDA device (the first rank's with --tp-size > 1)")
      ->capture_default_str();
  app.add_option("--tp-size", o.tp_size, "ranks to shard the model over, as a worker's --tp-size "
                 "(GPUs --device .. --device + N - 1)")->capture_default_str();
  app.add_option("--attention-parallel", o.attention_parallel, "with --tp-size > 1: tensor or data")
      ->capture_default_str();
  app.add_option("--moe-parallel", o.moe_parallel, "with --tp-size > 1: expert or tensor")
      ->capture_default_str();
  app.add_option("--moe-dispatch", o.moe_dispatch,
                 "with --moe-parallel expert: gather or all-to-all")->capture_default_str();
  app.add_option("--seed", o.seed, "token id seed")->capture_default_str();
  app.add_option("--output-json", o.output_json, "write the results as JSON");
  app.add_flag("--timeline", o.trace_timeline,
               "after the timed runs, trace one more prefill Forward per --prefill-lens and one "
               "more decode step with graphs per --decode-batches with CUPTI and print where the "
               "GPU idles in each (needs a build with CUPTI)");
  app.add_option("--timeline-sequence", o.sequence_count,
                 "with --timeline: also list this many device launches one by one, in start order, "
                 "with their exclusive times (one layer's kernels, say)")
      ->capture_default_str();
  app.add_option("--timeline-sequence-from", o.sequence_first,
                 "with --timeline-sequence: the first launch listed (0-based, in start order)")
      ->capture_default_str();
  app.add_flag("--moe-block-trace", o.moe_block_trace,
               "after each decode batch, print where the last step's one-token MoE launches' blocks "
               "ran (router, gate_up, down: SM, start, PDL wait and end of every block; "
               "kernels/moe/block_trace.h); needs --eager-steps 0 --sampled-steps 0 and one GPU");
  try {  // CLI11_PARSE, in a function that returns the exit code
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  absl::StatusOr<mlaserve::model::ParallelOptions> parallel = mlaserve::model::ParseParallelFlags(
      o.tp_size, o.attention_parallel, o.moe_parallel, o.moe_dispatch);
  if (!parallel.ok()) {
    std::fprintf(stderr, "mlaserve-engine-bench: %s\n", parallel.status().message().data());
    return 2;
  }
  o.parallel = *parallel;
  if (o.trace_timeline && o.tp_size > 1) {
    std::fprintf(stderr, "mlaserve-engine-bench: --timeline traces one GPU; --tp-size is %d\n",
                 o.tp_size);
    return 2;
  }

  if (o.moe_block_trace && (o.tp_size > 1 || o.eager_steps != 0 || o.sampled_steps != 0)) {
    std::fprintf(stderr, "mlaserve-engine-bench: --moe-block-trace reads the last graph replay of one GPU: it "
                 "needs --tp-size 1, --eager-steps 0 and --sampled-steps 0 (got %d, %d, %d)\n",
                 o.tp_size, o.eager_steps, o.sampled_steps);
    return 2;
  }

  o.max_batch = std::max(*std::max_element(o.batches.begin(), o.batches.end()),
                         o.mixed_prompts.empty() ? 0 : o.mixed_rows);
  const int max_prefill = *std::max_element(o.prefill_lens.begin(), o.prefill_lens.end());
  if (max_prefill > o.max_batch_tokens) {
    std::fprintf(stderr, "--prefill-lens %d exceeds --max-batch-tokens %d\n", max_prefill,
                 o.max_batch_tokens);
    return 2;
  }
  o.max_mixed = o.mixed_prompts.empty()
                    ? 0
                    : *std::max_element(o.mixed_prompts.begin(), o.mixed_prompts.end());
  if (!o.mixed_prompts.empty()) {
    if (*std::min_element(o.mixed_prompts.begin(), o.mixed_prompts.end()) < 1 || o.mixed_len < 1 ||
        o.mixed_rows < 1 || o.tp_size > 1) {
      std::fprintf(stderr, "mlaserve-engine-bench: --mixed-prompts needs prompts >= 1, "
                   "--mixed-prompt-len >= 1, --mixed-decode-rows >= 1 and one GPU (got %d, %d, %d, "
                   "--tp-size %d)\n",
                   *std::min_element(o.mixed_prompts.begin(), o.mixed_prompts.end()), o.mixed_len,
                   o.mixed_rows, o.tp_size);
      return 2;
    }
    if (o.max_mixed * o.mixed_len + o.mixed_rows > o.max_batch_tokens) {
      std::fprintf(stderr, "mlaserve-engine-bench: a mixed step of %d prompts of %d tokens and %d "
                   "rows exceeds --max-batch-tokens %d\n", o.max_mixed, o.mixed_len, o.mixed_rows,
                   o.max_batch_tokens);
      return 2;
    }
  }
  o.max_chunk_mixed =
      o.chunk_mixed.empty() ? 0 : *std::max_element(o.chunk_mixed.begin(), o.chunk_mixed.end());
  if (!o.chunk_mixed.empty()) {
    const int least = *std::min_element(o.chunk_mixed.begin(), o.chunk_mixed.end());
    if (least < 1 || o.mixed_len < 2 || o.chunk_prefix < 1 || o.chunk_len < 1 || o.tp_size > 1 ||
        o.chunk_len + o.max_chunk_mixed * o.mixed_len > o.max_batch_tokens) {
      std::fprintf(stderr, "mlaserve-engine-bench: --chunk-mixed needs prompts >= 1 (got %d), "
                   "--mixed-prompt-len >= 2 (%d), --chunk-prefix >= 1 (%d), --chunk-len >= 1 "
                   "(%d), one GPU (--tp-size %d), and the chunk and %d prompts within "
                   "--max-batch-tokens %d\n", least, o.mixed_len, o.chunk_prefix, o.chunk_len,
                   o.tp_size, o.max_chunk_mixed, o.max_batch_tokens);
      return 2;
    }
  }
  // --prompt-logprobs-lens: 0 is "skip", as an empty list (a script's default can pass it).
  std::erase(o.prompt_logprobs_lens, 0);
  const int max_prompt_logprobs =
      o.prompt_logprobs_lens.empty()
          ? 0
          : *std::max_element(o.prompt_logprobs_lens.begin(), o.prompt_logprobs_lens.end());
  if (!o.prompt_logprobs_lens.empty()) {
    const int shortest =
        *std::min_element(o.prompt_logprobs_lens.begin(), o.prompt_logprobs_lens.end());
    const auto [least_top, most_top] =
        std::minmax_element(o.prompt_logprobs_top.begin(), o.prompt_logprobs_top.end());
    if (shortest < 2 || max_prompt_logprobs > o.max_batch_tokens || o.prompt_logprobs_top.empty() ||
        *least_top < 0 || *most_top > mlaserve::common::kMaxTopLogprobs || o.runs < 1) {
      std::fprintf(stderr, "mlaserve-engine-bench: --prompt-logprobs-lens needs lengths in [2, "
                   "--max-batch-tokens %d] (got %d to %d; a one-token prompt has no position to "
                   "score), --prompt-logprobs-top values in [0, %d] (got %s) and --runs >= 1 (got "
                   "%d)\n",
                   o.max_batch_tokens, shortest, max_prompt_logprobs,
                   mlaserve::common::kMaxTopLogprobs,
                   o.prompt_logprobs_top.empty()
                       ? "none"
                       : absl::StrFormat("%d to %d", *least_top, *most_top).c_str(),
                   o.runs);
      return 2;
    }
  }
  if (o.num_pages == 0) {
    // As Decode's `total`: every decode step of a sequence, the untimed ones included.
    const int decode_tokens = o.context + o.warm + o.steps + o.eager_steps + o.sampled_steps +
                              2 * o.masked_steps + 2 * o.knob_steps + 6;
    const int mixed_pages = o.mixed_prompts.empty()
                                ? 0
                                : o.mixed_rows * PagesFor(o.context + 5 * (o.runs + 1) + 1) +
                                      o.max_mixed * PagesFor(o.mixed_len);
    const int chunk_pages = o.chunk_mixed.empty() ? 0
                                                  : PagesFor(o.chunk_prefix + o.chunk_len) +
                                                        o.max_chunk_mixed * PagesFor(o.mixed_len);
    o.num_pages = std::max({o.max_batch * PagesFor(decode_tokens), PagesFor(max_prefill),
                            mixed_pages, chunk_pages, PagesFor(max_prompt_logprobs)}) + 8;
  }
  return std::nullopt;
}

}  // namespace mlaserve::engine_bench
