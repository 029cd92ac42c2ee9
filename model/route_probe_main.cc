// mlaserve-route-probe: for each token sequence, one prefill on the chosen backend, and what
// the engine computed: the next-token logits' top entries and every MoE layer's router logits
// for every position (model/deepseek_engine_probe.h). tools/device/routing_probe.py compares them with
// Hugging Face's routing (issue 14's CUDA-only divergence).
//
//   mlaserve-route-probe --model DIR --backend cuda --sequences seqs.json --out probe.json
//
// seqs.json: {"sequences": [[ids...], ...]}. probe.json: {"backend", "path", "sequences": [
//   {"ids": [...], "path_used": "mha"|"mla", "top": [[id, logit] x 8],
//    "router": {"<layer>": [[num_experts logits] per position]},
//    "experts": {"<layer>": [[sorted expert ids the backend routed to] per position]}}]}.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/deepseek_engine.h"
#include "model/deepseek_engine_probe.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

constexpr int kTopEntries = 8;

absl::Status Run(const std::string& model_dir, const std::string& backend, const std::string& path_name,
                 const std::string& sequences_file, const std::string& out_file) {
  std::ifstream in(sequences_file);
  if (!in) return absl::NotFoundError(absl::StrCat("--sequences: cannot open ", sequences_file));
  const nlohmann::json seqs = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (seqs.is_discarded() || !seqs.contains("sequences") || !seqs["sequences"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(sequences_file, ": expected {\"sequences\": [[ids...], ...]}"));
  }
  AttentionPath path = AttentionPath::kAuto;
  if (path_name == "mha") path = AttentionPath::kMha;
  if (path_name == "mla") path = AttentionPath::kMla;
  size_t longest = 1;
  for (const auto& s : seqs["sequences"]) longest = std::max(longest, s.size());
  EngineOptions eo;
  eo.model_dir = model_dir;
  eo.backend = backend == "cuda" ? kernels::Backend::kCuda : kernels::Backend::kCpu;
  eo.num_kv_pages = static_cast<int>(kernels::PagesFor(longest)) + 2;
  eo.max_batch_tokens = static_cast<int>(std::max<size_t>(longest, 64));
  ASSIGN_OR_RETURN(std::unique_ptr<DeepseekEngine> engine, DeepseekEngine::Create(eo));
  engine->set_decode_graphs(false);
  DeepseekEngineProbe probe(*engine);

  nlohmann::json out = {{"backend", backend}, {"path", path_name}, {"model", model_dir}};
  out["sequences"] = nlohmann::json::array();
  for (const auto& s : seqs["sequences"]) {
    const std::vector<int32_t> ids = s.get<std::vector<int32_t>>();
    if (ids.empty()) return absl::InvalidArgumentError("--sequences: an empty sequence");
    ASSIGN_OR_RETURN(std::vector<int32_t> pages,
                     engine->kv_pool().Allocate(static_cast<int>(kernels::PagesFor(ids.size()))));
    SequenceChunk chunk;
    chunk.tokens = ids;
    chunk.pages = pages;
    absl::StatusOr<ForwardResult> r = engine->Forward({&chunk, 1}, path);
    absl::StatusOr<std::vector<DeepseekEngineProbe::RouterRows>> router =
        r.ok() ? probe.RouterLogits({&chunk, 1}, path) : r.status();
    engine->kv_pool().Free(pages);
    RETURN_IF_ERROR(r.status());
    RETURN_IF_ERROR(router.status());
    std::vector<int> order(r->logits.size());
    std::iota(order.begin(), order.end(), 0);
    const int top = std::min<int>(kTopEntries, static_cast<int>(order.size()));
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [&](int a, int b) { return r->logits[a] > r->logits[b] || (r->logits[a] == r->logits[b] && a < b); });
    nlohmann::json entry = {{"ids", ids}, {"path_used", r->path_used == AttentionPath::kMha ? "mha" : "mla"}};
    entry["top"] = nlohmann::json::array();
    for (int i = 0; i < top; ++i) entry["top"].push_back({order[i], r->logits[order[i]]});
    nlohmann::json layers = nlohmann::json::object(), experts = nlohmann::json::object();
    for (const auto& rows : *router) {
      nlohmann::json chosen = nlohmann::json::array();
      for (int t = 0; t < rows.num_tokens; ++t) {
        std::vector<int32_t> ids(rows.experts.begin() + static_cast<size_t>(t) * rows.top_k,
                                 rows.experts.begin() + static_cast<size_t>(t + 1) * rows.top_k);
        std::sort(ids.begin(), ids.end());
        chosen.push_back(ids);
      }
      experts[std::to_string(rows.layer)] = std::move(chosen);
      nlohmann::json per_pos = nlohmann::json::array();
      for (int t = 0; t < rows.num_tokens; ++t) {
        per_pos.push_back(std::vector<float>(rows.logits.begin() + static_cast<size_t>(t) * rows.num_experts,
                                             rows.logits.begin() + static_cast<size_t>(t + 1) * rows.num_experts));
      }
      layers[std::to_string(rows.layer)] = std::move(per_pos);
    }
    entry["router"] = std::move(layers);
    entry["experts"] = std::move(experts);
    out["sequences"].push_back(std::move(entry));
  }
  std::ofstream f(out_file);
  if (!f) return absl::NotFoundError(absl::StrCat("--out: cannot write ", out_file));
  f << out.dump() << "\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace mlaserve::model

int main(int argc, char** argv) {
  CLI::App app{"mlaserve-route-probe: next-token logits and router logits per position, per backend"};
  std::string model_dir, backend = "cpu", path = "auto", sequences, out;
  app.add_option("--model", model_dir, "model directory")->required();
  app.add_option("--backend", backend, "cpu|cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--path", path, "auto|mha|mla (attention form asked of the engine)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "mha", "mla"}));
  app.add_option("--sequences", sequences, "JSON {\"sequences\": [[ids...], ...]}")->required();
  app.add_option("--out", out, "output JSON")->required();
  CLI11_PARSE(app, argc, argv);
  const absl::Status st = mlaserve::model::Run(model_dir, backend, path, sequences, out);
  if (!st.ok()) {
    std::cerr << "mlaserve-route-probe: " << st << "\n";
    return 1;
  }
  return 0;
}
