// Test helpers for the DeepSeek engine: the HF reference fixtures (tests/fixtures/models/<name>/
// expected.json, written by tools/make_fixtures.py) and small drivers over Engine::Forward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/engine.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model::testing {

inline const char* kFixtureRoot = "tests/fixtures/models";

struct ReferencePrompt {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<int> logits_positions;
  std::vector<std::vector<float>> logits;  // one row per logits_positions entry
  std::vector<int32_t> greedy_tokens;
  std::vector<std::vector<float>> decode_logits;  // after feeding greedy_tokens[s]
};

struct Reference {
  std::string dir;
  int vocab_size = 0;
  std::vector<ReferencePrompt> prompts;
};

inline std::vector<float> FloatRow(const nlohmann::json& j) {
  std::vector<float> v;
  v.reserve(j.size());
  for (const auto& x : j) v.push_back(x.is_null() ? NAN : x.get<float>());
  return v;
}

// Reads <dir>/expected.json. Fails the test (returns false) when it is missing or malformed.
inline bool LoadReference(const std::string& dir, Reference* ref) {
  std::ifstream in(dir + "/expected.json");
  if (!in) {
    ADD_FAILURE() << "missing " << dir << "/expected.json (tools/make_fixtures.py writes it)";
    return false;
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    ADD_FAILURE() << dir << "/expected.json is not valid JSON";
    return false;
  }
  ref->dir = dir;
  ref->vocab_size = j.at("vocab_size").get<int>();
  for (const auto& p : j.at("prompts")) {
    ReferencePrompt rp;
    rp.name = p.at("name").get<std::string>();
    rp.ids = p.at("input_ids").get<std::vector<int32_t>>();
    rp.logits_positions = p.at("logits_positions").get<std::vector<int>>();
    for (const auto& row : p.at("logits")) rp.logits.push_back(FloatRow(row));
    rp.greedy_tokens = p.at("greedy").at("tokens").get<std::vector<int32_t>>();
    for (const auto& row : p.at("greedy").at("decode_logits")) {
      rp.decode_logits.push_back(FloatRow(row));
    }
    ref->prompts.push_back(std::move(rp));
  }
  return true;
}

// max |got - want| / max |want|: the relative error the fixture tests bound by 1e-4.
inline double RelError(const float* got, const std::vector<float>& want) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}
inline double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size()) return INFINITY;
  return RelError(got.data(), want);
}

inline std::unique_ptr<Engine> MakeEngine(const std::string& dir, int pages = 256) {
  EngineOptions o;
  o.model_dir = dir;
  o.num_kv_pages = pages;
  o.max_batch_tokens = 8192;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << dir << ": " << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

inline int PagesFor(int tokens) { return kernels::PagesFor(tokens); }

// A sequence's pages in a pool, freed when it goes away.
class SeqPages {
 public:
  SeqPages(KvPool& pool, int tokens) : pool_(pool) {
    auto p = pool.Allocate(PagesFor(tokens));
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) pages_ = *std::move(p);
  }
  ~SeqPages() { pool_.Free(pages_); }
  const std::vector<int32_t>& pages() const { return pages_; }

 private:
  KvPool& pool_;
  std::vector<int32_t> pages_;
};

// Prefills `ids` in chunks of `chunk` tokens (one sequence); returns the logits at the last
// position of every chunk, keyed by position.
inline std::map<int, std::vector<float>> ChunkedPrefill(Engine& engine,
                                                        const std::vector<int32_t>& ids,
                                                        const std::vector<int32_t>& pages,
                                                        int chunk, AttentionPath path) {
  std::map<int, std::vector<float>> out;
  const int n = static_cast<int>(ids.size());
  for (int begin = 0; begin < n; begin += chunk) {
    const int len = std::min(chunk, n - begin);
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(ids).subspan(begin, len);
    c.start_pos = begin;
    c.pages = pages;
    auto r = engine.Forward({&c, 1}, path);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out[begin + len - 1] = r->logits;
  }
  return out;
}

// A decode step that carries prompts, as the decode worker runs one with local prefill, over
// prefixes of `p` (every row's logits are at a position the reference recorded): a decode row
// (one token after a cached prefix), a prompt's later chunk (after a cached prefix; with
// `later_chunk` false a second decode row instead, so the leading part is a decode batch), then
// two fresh prompts, in one Forward with `path`. The prefixes are prefilled first (kMla); `path`'s
// Forward may run twice on the same pages (it rewrites the same cache rows). Returns, per row,
// the index into p.logits_positions and the logits; empty when the prompt records fewer than
// two positions past 1 (then there is no such batch to make of it).
struct MixedStepRow {
  size_t position_index = 0;
  std::vector<float> logits;
};
class MixedStep {
 public:
  MixedStep(Engine& engine, const ReferencePrompt& p, bool later_chunk = true) : engine_(engine), p_(p) {
    std::vector<size_t> usable;  // positions with at least two tokens before them
    for (size_t j = 0; j < p.logits_positions.size(); ++j) {
      if (p.logits_positions[j] >= 2) usable.push_back(j);
    }
    if (usable.size() < 2) return;
    // The decode row at the first usable position, the later chunk and the second fresh prompt
    // at the last, the first fresh prompt at a middle one.
    rows_ = {usable.front(), usable.back(), usable[usable.size() / 2], usable.back()};
    const int decode_pos = p.logits_positions[rows_[0]];
    const int chunk_end = p.logits_positions[rows_[1]];  // the chunk's last position
    chunk_start_ = later_chunk ? std::max(1, chunk_end / 2) : chunk_end;
    for (int r = 0; r < 4; ++r) pages_.push_back(std::make_unique<SeqPages>(engine.kv_pool(), p.logits_positions[rows_[r]] + 1));
    for (auto [r, len] : {std::pair{0, decode_pos}, std::pair{1, chunk_start_}}) {
      SequenceChunk c;
      c.tokens = std::span<const int32_t>(p.ids).first(len);
      c.pages = pages_[r]->pages();
      c.want_logits = false;
      auto done = engine.Forward({&c, 1}, AttentionPath::kMla);
      EXPECT_TRUE(done.ok()) << done.status();
    }
  }
  bool usable() const { return rows_.size() == 4; }

  std::vector<MixedStepRow> Run(AttentionPath path) {
    std::vector<MixedStepRow> out;
    if (!usable()) return out;
    const std::span<const int32_t> ids(p_.ids);
    std::vector<SequenceChunk> batch(4);
    const int decode_pos = p_.logits_positions[rows_[0]];
    batch[0].tokens = ids.subspan(decode_pos, 1);
    batch[0].start_pos = decode_pos;
    const int chunk_end = p_.logits_positions[rows_[1]];
    batch[1].tokens = ids.subspan(chunk_start_, chunk_end + 1 - chunk_start_);
    batch[1].start_pos = chunk_start_;
    for (int r : {2, 3}) batch[r].tokens = ids.first(p_.logits_positions[rows_[r]] + 1);
    for (int r = 0; r < 4; ++r) batch[r].pages = pages_[r]->pages();
    auto result = engine_.Forward(batch, path);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return out;
    const size_t V = result->logits.size() / 4;
    for (int r = 0; r < 4; ++r) {
      out.push_back({rows_[r], std::vector<float>(result->logits.begin() + r * V,
                                                  result->logits.begin() + (r + 1) * V)});
    }
    return out;
  }

 private:
  Engine& engine_;
  const ReferencePrompt& p_;
  std::vector<size_t> rows_;
  int chunk_start_ = 1;
  std::vector<std::unique_ptr<SeqPages>> pages_;
};

inline int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace mlaserve::model::testing
