// The DeepSeek engine on the CUDA backend (bf16 weights and activations) against the Hugging
// Face fixtures (tests/fixtures/models/*/expected.json, computed in f32): logits within bf16
// tolerance, and greedy tokens equal wherever the reference's top-2 margin is clear of that
// tolerance. Runs on a GPU machine (ctest label gpu); V3.2 is refused on CUDA (no indexer /
// sparse kernels yet) and that refusal is asserted.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/engine.h"
#include "model/engine_test_util.h"

namespace mlaserve::model {
namespace {

using testing::ChunkedPrefill;
using testing::LoadReference;
using testing::Reference;
using testing::RelError;
using testing::SeqPages;

// max|got - want| / max|want| after a few bf16 layers of a tiny random model.
constexpr double kBf16Tolerance = 4e-2;
// A greedy token must match when the reference's top-2 gap exceeds this fraction of max|logit|.
constexpr double kClearMargin = 0.1;

std::string Fixture(const std::string& name) { return std::string(testing::kFixtureRoot) + "/" + name; }

std::unique_ptr<Engine> MakeCudaEngine(const std::string& dir) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend = kernels::Backend::kCuda;
  o.num_kv_pages = 64;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 8;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << dir << ": " << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// Top-2 gap of `row` relative to max |row|.
double RelMargin(const std::vector<float>& row) {
  std::vector<float> s = row;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  double scale = 0;
  for (float v : row) scale = std::max(scale, static_cast<double>(std::abs(v)));
  return scale > 0 ? (s[0] - s[1]) / scale : 0;
}

class EngineCudaTest : public ::testing::TestWithParam<std::tuple<const char*, AttentionPath>> {};

TEST_P(EngineCudaTest, MatchesReference) {
  const auto [name, path] = GetParam();
  const std::string dir = Fixture(name);
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  auto engine = MakeCudaEngine(dir);
  ASSERT_NE(engine, nullptr);
  int checked_tokens = 0;
  for (const auto& p : ref.prompts) {
    SCOPED_TRACE(p.name);
    const int n = static_cast<int>(p.ids.size());
    SeqPages pages(engine->kv_pool(), n + static_cast<int>(p.greedy_tokens.size()) + 1);
    // Prefill in chunks of 37 (so the MLA path also runs with a cached prefix); compare every
    // reference position that ends a chunk.
    const int chunk = path == AttentionPath::kMla ? 37 : n;
    auto got = ChunkedPrefill(*engine, p.ids, pages.pages(), chunk, path);
    ASSERT_FALSE(got.empty());
    int compared = 0;
    for (size_t j = 0; j < p.logits_positions.size(); ++j) {
      auto it = got.find(p.logits_positions[j]);
      if (it == got.end()) continue;
      EXPECT_LE(RelError(it->second, p.logits[j]), kBf16Tolerance) << "position " << it->first;
      ++compared;
    }
    EXPECT_GT(compared, 0);
    // Greedy decode: greedy_tokens[0] is the argmax at the last prompt position; feeding
    // greedy_tokens[s] gives decode_logits[s], whose argmax is greedy_tokens[s + 1].
    auto check_token = [&](const std::vector<float>& got_row, const std::vector<float>& want_row,
                           size_t s) {
      if (s >= p.greedy_tokens.size() || RelMargin(want_row) <= kClearMargin) return;
      EXPECT_EQ(testing::Argmax(got_row), p.greedy_tokens[s]) << "greedy step " << s;
      ++checked_tokens;
    };
    if (p.logits_positions.back() == n - 1) check_token(got.rbegin()->second, p.logits.back(), 0);
    for (size_t s = 0; s < p.decode_logits.size(); ++s) {
      SequenceChunk c;
      c.tokens = std::span<const int32_t>(&p.greedy_tokens[s], 1);
      c.start_pos = n + static_cast<int>(s);
      c.pages = pages.pages();
      auto r = engine->Forward({&c, 1}, AttentionPath::kMla);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_LE(RelError(r->logits, p.decode_logits[s]), kBf16Tolerance) << "decode step " << s;
      check_token(r->logits, p.decode_logits[s], s + 1);
    }
  }
  EXPECT_GT(checked_tokens, 0) << "no greedy token had a clear margin";
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, EngineCudaTest,
    ::testing::Combine(::testing::Values("deepseek_v2", "deepseek_v2_glg", "deepseek_v3"),
                       ::testing::Values(AttentionPath::kMha, AttentionPath::kMla)));

TEST(EngineCudaRefusalTest, V32NeedsKernelsThatHaveNoCudaVersion) {
  EngineOptions o;
  o.model_dir = Fixture("deepseek_v32");
  o.backend = kernels::Backend::kCuda;
  auto e = Engine::Create(o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
}

}  // namespace
}  // namespace mlaserve::model
