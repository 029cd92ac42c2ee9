// mlaserve-run: generate from a DeepSeek checkpoint in one process, no server.
//
//   mlaserve-run --model DIR --prompt "Hello" --max-new-tokens 16
//   mlaserve-run --model DIR --prompt-ids 1,2,3 --ignore-eos --dump-logits out.json
//   mlaserve-run --model DIR --prompt "Hello" --response-format json_object
//   mlaserve-run --model DIR --prompt "Hello" --response-format json_schema
//                --response-schema '{"type": "array", "items": {"type": "integer"}}'
//
// Prefill runs in chunks of --chunk-size tokens (0 = one chunk), then one decode step per
// token over the paged cache; sampling is greedy unless --temperature > 0 (--response-format
// json_object: under JSON mode's constraint, model/constraint; with --response-format-after,
// only the text after that marker, e.g. a reasoning model's "</think>"). Prints the generated
// text (or ids with --print-ids, or when the checkpoint has no tokenizer.json / tiktoken.model)
// to stdout; log lines (config warnings, progress) go to stderr, so stdout stays parseable.
// --dump-logits writes {"last_prompt_logits": [...], "generated_ids": [...]}.
// --tp-size N shards the model over N ranks as a worker does (docs/parallel.md; GPUs 0..N-1 on
// CUDA, threads and an in-process collective on the CPU), with --attention-parallel,
// --moe-parallel and --moe-dispatch; under data attention the one request runs on rank 0.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/request_limits.h"
#include "common/status.h"
#include "kernels/mha_prefill/api.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"
#include "model/tokenizer/detokenizer.h"
#include "model/engine.h"
#include "model/parallel_layout.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace mlaserve::model {
namespace {

struct RunOptions {
  std::string model_dir;
  std::optional<std::string> prompt;
  std::string prompt_ids;
  int max_new_tokens = 32;
  SamplingOptions sampling;
  bool seed_given = false;
  bool ignore_eos = false;
  std::string response_format = "text";  // --response-format: text, json_object, json_schema
  std::string response_schema;           // --response-schema: JSON text or a file
  AttentionPath attention = AttentionPath::kAuto;
  int chunk_size = 0;
  std::string backend = "auto";  // --backend: auto, cpu or cuda
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: auto, bf16 or fp8
  std::string mha_provider = "auto";    // --mha-provider: auto, ours or cudnn
  int num_kv_pages = 0;  // 0: just enough for the request
  int tp_size = 1;
  std::string attention_parallel = "tensor";
  std::string moe_parallel = "expert";
  std::string moe_dispatch = "gather";
  std::string dump_logits;
  bool print_ids = false;
};

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("--prompt-ids: '", part, "' is not an integer"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt-ids: no ids given");
  return ids;
}

absl::Status WriteDump(const std::string& path, const std::vector<float>& logits,
                       const std::vector<int32_t>& generated) {
  nlohmann::json j;
  j["last_prompt_logits"] = logits;
  j["generated_ids"] = generated;
  std::ofstream out(path);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write --dump-logits file ", path));
  out << j.dump() << "\n";
  return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("writing ", path, " failed"));
}

absl::Status Run(const RunOptions& o) {
  if (o.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-new-tokens is ", o.max_new_tokens, "; it must be >= 0"));
  }
  if (o.chunk_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--chunk-size is ", o.chunk_size, "; it must be >= 0"));
  }
  RETURN_IF_ERROR(common::ValidateSamplingValues(o.sampling));  // this process's edge
  if ((o.response_format == "json_schema") != !o.response_schema.empty()) {
    return absl::InvalidArgumentError(
        "--response-schema is needed with --response-format json_schema, and only there");
  }
  SamplingOptions sampling = o.sampling;
  std::shared_ptr<const JsonSchema> schema;
  if (!o.response_schema.empty()) {
    ASSIGN_OR_RETURN(sampling.json_schema, SchemaFromFlag(o.response_schema));
    ASSIGN_OR_RETURN(schema, JsonSchema::Compile(sampling.json_schema, sampling.json_schema_strict));
  }
  RETURN_IF_ERROR(common::ValidateResponseFormat(sampling, o.ignore_eos));
  ASSIGN_OR_RETURN(const ParallelOptions parallel,
                   ParseParallelFlags(o.tp_size, o.attention_parallel, o.moe_parallel,
                                      o.moe_dispatch));

  std::unique_ptr<Tokenizer> tokenizer;
  const std::filesystem::path dir(o.model_dir);
  if (std::filesystem::exists(dir / "tokenizer.json") ||
      std::filesystem::exists(dir / "tiktoken.model")) {
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::FromModelDir(o.model_dir));
  }
  std::vector<int32_t> prompt;
  if (o.prompt.has_value()) {
    if (tokenizer == nullptr) {
      return absl::NotFoundError(absl::StrCat("--prompt needs tokenizer.json or tiktoken.model in ",
                                              o.model_dir, "; use --prompt-ids"));
    }
    ASSIGN_OR_RETURN(prompt, tokenizer->Encode(*o.prompt, /*add_special_tokens=*/true));
  } else {
    ASSIGN_OR_RETURN(prompt, ParseIds(o.prompt_ids));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (sampling.constrained() && tokenizer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--response-format ", o.response_format,
        " needs tokenizer.json or tiktoken.model in the model directory ", o.model_dir));
  }

  const int total = static_cast<int>(prompt.size()) + o.max_new_tokens;
  const int pages_needed = kernels::PagesFor(total);
  EngineOptions eo;
  eo.model_dir = o.model_dir;
  // One page more than the request needs: a CUDA engine keeps one pool page for the padded
  // rows of its decode graphs (docs/cuda_engine.md), so an exact-size pool would be one short.
  eo.num_kv_pages = o.num_kv_pages > 0 ? o.num_kv_pages : pages_needed + 1;
  eo.max_batch_tokens = std::max<int>(o.chunk_size > 0 ? o.chunk_size : prompt.size(), 1);
  eo.max_batch_seqs = 1;
  eo.attention = o.attention;
  eo.parallel = parallel;
  ASSIGN_OR_RETURN(eo.kv_cache_dtype, ParseKvCacheDtype(o.kv_cache_dtype));
  ASSIGN_OR_RETURN(eo.mha_provider, kernels::ParseMhaPrefillProvider(o.mha_provider));
  absl::StatusOr<std::unique_ptr<Engine>> created =
      CreateEngineForBackend(eo, o.backend, [](const absl::Status& why) {
        if (absl::IsFailedPrecondition(why)) return;  // a CPU-only build: nothing to say
        std::cerr << "mlaserve-run: CUDA backend unavailable (" << why.message()
                  << "); using the CPU backend\n";
      });
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, std::move(created));
  const ModelConfig& config = engine->config();
  if (total > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt.size(), " tokens) + --max-new-tokens ", o.max_new_tokens,
        " exceeds this model's ", config.max_position_embeddings, " positions"));
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> pages, engine->kv_pool().Allocate(pages_needed));

  // Prefill, chunk by chunk; only the last chunk's last row yields logits.
  const int n = static_cast<int>(prompt.size());
  const int chunk = o.chunk_size > 0 ? o.chunk_size : n;
  std::vector<float> logits;
  for (int begin = 0; begin < n; begin += chunk) {
    const int len = std::min(chunk, n - begin);
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(prompt).subspan(begin, len);
    c.start_pos = begin;
    c.pages = pages;
    c.want_logits = begin + len == n;
    ASSIGN_OR_RETURN(ForwardResult r, engine->Forward({&c, 1}, o.attention));
    if (c.want_logits) logits = std::move(r.logits);
  }
  const std::vector<float> last_prompt_logits = logits;

  std::vector<int32_t> eos = config.eos_token_ids;
  if (eos.empty() && tokenizer != nullptr && tokenizer->eos_id()) eos.push_back(*tokenizer->eos_id());
  if (!o.seed_given) sampling.seed = RandomSeed();
  std::optional<JsonConstraint> json;
  if (sampling.constrained()) {
    ASSIGN_OR_RETURN(auto vocab,
                     ConstraintVocabulary::FromTokenizer(*tokenizer, config.vocab_size, eos));
    json.emplace(std::move(vocab), sampling.json_after, schema);
  }
  Sampler sampler;
  std::vector<int32_t> history = prompt;
  std::vector<int32_t> generated;
  std::optional<IncrementalDetokenizer> detok;
  const bool print_text = tokenizer != nullptr && !o.print_ids;
  if (print_text) detok.emplace(*tokenizer, /*skip_special_tokens=*/true);
  for (int step = 0; step < o.max_new_tokens; ++step) {
    SampleRow row{sampling, static_cast<uint64_t>(step), history, {}};
    if (json.has_value()) row.allowed = json->AllowedTokens();
    ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                     sampler.Sample(logits, config.vocab_size, {&row, 1}));
    const int32_t id = ids[0];
    if (json.has_value()) RETURN_IF_ERROR(json->Advance(id));
    generated.push_back(id);
    history.push_back(id);
    if (print_text) {
      ASSIGN_OR_RETURN(std::string piece, detok->Add(id));
      std::cout << piece << std::flush;
    }
    const bool stop = !o.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end();
    if (stop || step + 1 == o.max_new_tokens) break;
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(&history.back(), 1);
    c.start_pos = static_cast<int>(history.size()) - 1;
    c.pages = pages;
    ASSIGN_OR_RETURN(ForwardResult r, engine->Forward({&c, 1}, o.attention));
    logits = std::move(r.logits);
  }
  if (print_text) {
    std::cout << detok->Flush() << "\n";
  } else {
    for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? " " : "") << generated[i];
    std::cout << "\n";
  }
  engine->kv_pool().Free(pages);
  if (!o.dump_logits.empty()) RETURN_IF_ERROR(WriteDump(o.dump_logits, last_prompt_logits, generated));
  return absl::OkStatus();
}

}  // namespace
}  // namespace mlaserve::model

int main(int argc, char** argv) {
  using mlaserve::model::AttentionPath;
  spdlog::set_default_logger(spdlog::stderr_color_mt("mlaserve-run"));
  mlaserve::model::RunOptions o;
  CLI::App app{"mlaserve-run: generate from a DeepSeek checkpoint (no server)"};
  app.add_option("--model", o.model_dir, "model directory (config.json, *.safetensors)")->required();
  auto* prompt = app.add_option("--prompt", o.prompt,
                                "prompt text (checkpoint's tokenizer.json or tiktoken.model)");
  auto* ids = app.add_option("--prompt-ids", o.prompt_ids, "prompt token ids, comma separated");
  prompt->excludes(ids);
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate")->capture_default_str();
  o.sampling.temperature = 0.0f;  // greedy unless asked otherwise
  app.add_option("--temperature", o.sampling.temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-k", o.sampling.top_k, "0 = off");
  app.add_option("--top-p", o.sampling.top_p, "1 = off");
  app.add_option("--min-p", o.sampling.min_p, "0 = off");
  app.add_option("--repetition-penalty", o.sampling.repetition_penalty, "1 = off");
  auto* seed = app.add_option("--seed", o.sampling.seed, "sampling seed (default: random)");
  app.add_flag("--ignore-eos", o.ignore_eos, "keep generating after EOS");
  app.add_option("--response-format", o.response_format,
                 "text; json_object: the output is one JSON object, then EOS; json_schema: one "
                 "JSON value --response-schema admits, then EOS (both need the checkpoint's "
                 "tokenizer.json or tiktoken.model)")
      ->check(CLI::IsMember({"text", "json_object", "json_schema"}))->capture_default_str();
  app.add_option("--response-schema", o.response_schema,
                 "with --response-format json_schema: the JSON Schema, as JSON text or a file's "
                 "path");
  app.add_flag("--response-schema-strict", o.sampling.json_schema_strict,
               "with json_schema: OpenAI's strict (no properties / items the schema does not "
               "list)");
  app.add_option("--response-format-after", o.sampling.json_after,
                 "with json_object / json_schema: the JSON starts after the first occurrence "
                 "of this text in the output, e.g. \"</think>\" for a reasoning model (before it "
                 "any token but EOS); at most 64 bytes");
  std::string attention = "auto";
  app.add_option("--attention", attention, "prefill attention form")
      ->check(CLI::IsMember({"auto", "mha", "mla"}))->capture_default_str();
  app.add_option("--chunk-size", o.chunk_size, "prefill chunk size in tokens (0 = one chunk)");
  std::string backend = "auto";
  app.add_option("--backend", backend, "auto|cpu|cuda (auto = the GPU when this build and machine have one, else the CPU)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "auto|bf16|fp8: KV cache storage (auto = fp8 for deepseek_v32 on CUDA, else the "
                 "native dtype; fp8 = DeepSeek's 656-byte layout, deepseek_v32 only)")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}))->capture_default_str();
  app.add_option("--mha-provider", o.mha_provider,
                 "auto|ours|cudnn|prefer-cudnn: who computes MHA-prefill attention on CUDA (auto = "
                 "our Hopper kernel from 2048 keys where it applies, else as prefer-cudnn: cuDNN "
                 "where it loads and supports the shape, else our kernel)")
      ->check(CLI::IsMember({"auto", "ours", "cudnn", "prefer-cudnn"}))->capture_default_str();
  app.add_option("--tp-size", o.tp_size,
                 "ranks to shard the model over, as a worker's --tp-size (docs/parallel.md)")
      ->capture_default_str();
  app.add_option("--attention-parallel", o.attention_parallel,
                 "tensor (heads split over the ranks) or data (each rank its own requests; "
                 "this one request runs on rank 0)")
      ->capture_default_str();
  app.add_option("--moe-parallel", o.moe_parallel,
                 "expert (routed experts split over the ranks) or tensor (every expert split)")
      ->capture_default_str();
  app.add_option("--moe-dispatch", o.moe_dispatch,
                 "with --moe-parallel expert: gather or all-to-all")
      ->capture_default_str();
  app.add_option("--num-kv-pages", o.num_kv_pages, "KV pool size (default: what the request needs)");
  app.add_option("--dump-logits", o.dump_logits, "write last prompt logits and generated ids (JSON)");
  app.add_flag("--print-ids", o.print_ids, "print generated ids instead of text");
  CLI11_PARSE(app, argc, argv);
  if (!*prompt && !*ids) {
    std::cerr << "mlaserve-run: give --prompt or --prompt-ids\n";
    return 2;
  }
  o.seed_given = seed->count() > 0;
  o.sampling.json_object = o.response_format == "json_object";
  o.attention = attention == "mha"   ? AttentionPath::kMha
                : attention == "mla" ? AttentionPath::kMla
                                     : AttentionPath::kAuto;
  o.backend = backend;
  absl::Status s = mlaserve::model::Run(o);
  if (!s.ok()) {
    std::cerr << "mlaserve-run: " << s << "\n";
    return 1;
  }
  return 0;
}
