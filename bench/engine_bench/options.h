// mlaserve-engine-bench's flags as one typed struct, read and checked once (options.cc); what each
// flag times is in engine_bench.cc's top comment and in --help.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/parallel_layout.h"

namespace mlaserve::engine_bench {

struct EngineBenchOptions {
  std::string model, output_json;
  std::vector<int> prefill_lens = {1024, 4096}, batches = {1, 32, 128};
  int runs = 5, context = 1024, warm = 3, steps = 32, eager_steps = 8, sampled_steps = 16, device = 0;
  int masked_steps = 0, knob_steps = 0;
  int max_batch_tokens = 8192, num_pages = 0;
  uint64_t seed = 1;
  bool trace_timeline = false, moe_block_trace = false;
  int sequence_first = 0, sequence_count = 0;
  std::string mha_provider = "auto";
  std::vector<int> mixed_prompts;
  int mixed_len = 1024, mixed_rows = 56;
  std::vector<int> chunk_mixed;
  int chunk_prefix = 6144, chunk_len = 2048;
  std::vector<int> prompt_logprobs_lens, prompt_logprobs_top = {5};
  int tp_size = 1;
  std::string attention_parallel = "tensor", moe_parallel = "expert", moe_dispatch = "gather";

  // Set by ParseEngineBenchOptions from the flags above.
  model::ParallelOptions parallel;  // --tp-size and the layout flags
  int max_batch = 0;        // the largest decode batch, or the mixed steps' rows if more
  int max_mixed = 0;        // the most --mixed-prompts (0: none)
  int max_chunk_mixed = 0;  // the most --chunk-mixed prompts (0: none)
};

// Reads argv into `o` and checks the flags together; --num-kv-pages 0 becomes what the runs need
// and 0s leave --prompt-logprobs-lens. Returns the exit code where main should stop: 0 after
// --help, CLI11's code for a flag it rejects, 2 for a combination the bench refuses (the message
// printed on stderr); nullopt to run.
std::optional<int> ParseEngineBenchOptions(int argc, char** argv, EngineBenchOptions* o);

}  // namespace mlaserve::engine_bench
