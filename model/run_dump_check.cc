// Test helper for the mlaserve-run ctest: checks a --dump-logits file against a fixture's
// expected.json (HF reference).
//   run_dump_check ids EXPECTED.json I          prints prompt I's input ids, comma separated
//   run_dump_check check DUMP.json EXPECTED.json I
//       exit 0 when generated_ids equal prompt I's greedy tokens and last_prompt_logits are
//       within 1e-4 (max-abs relative) of the logits at its last position.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace {

bool Read(const char* path, nlohmann::json* j) {
  std::ifstream in(path);
  *j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!in.good() && j->is_discarded()) {
    std::cerr << "cannot read JSON from " << path << "\n";
    return false;
  }
  return !j->is_discarded();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  nlohmann::json expected, dump;
  if (mode == "ids" && argc == 4) {
    if (!Read(argv[2], &expected)) return 1;
    const auto& ids = expected["prompts"][std::atoi(argv[3])]["input_ids"];
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i].get<int>();
    std::cout << "\n";
    return 0;
  }
  if (mode != "check" || argc != 5) {
    std::cerr << "usage: run_dump_check ids EXPECTED I | check DUMP EXPECTED I\n";
    return 2;
  }
  if (!Read(argv[2], &dump) || !Read(argv[3], &expected)) return 1;
  const auto& prompt = expected["prompts"][std::atoi(argv[4])];
  const auto want_ids = prompt["greedy"]["tokens"].get<std::vector<int>>();
  const auto got_ids = dump["generated_ids"].get<std::vector<int>>();
  const auto want = prompt["logits"].back().get<std::vector<double>>();
  const auto got = dump["last_prompt_logits"].get<std::vector<double>>();
  int rc = 0;
  if (got_ids != want_ids) {
    std::cerr << "generated_ids differ from the reference greedy tokens\n";
    rc = 1;
  }
  if (got.size() != want.size()) {
    std::cerr << "last_prompt_logits has " << got.size() << " values, expected " << want.size() << "\n";
    return 1;
  }
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  const double rel = diff / std::max(scale, 1e-30);
  std::cout << "last prompt logits: max-abs relative error " << rel << "\n";
  if (!(rel <= 1e-4)) {
    std::cerr << "relative error " << rel << " exceeds 1e-4\n";
    rc = 1;
  }
  return rc;
}
