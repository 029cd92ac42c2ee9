// Engine behaviour beyond the reference logits: ragged batches equal sequential runs, input
// validation, the per-layer callback, the fp8 checkpoint, backend refusal and seeded sampling.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/device_memory.h"
#include "model/engine.h"
#include "model/loader/safetensors.h"
#include "model/loader/safetensors_test_util.h"
#include "model/testing/engine_fixtures.h"
#include "model/mla_dims.h"
#include "model/sampler.h"

namespace mlaserve::model {
namespace {

using testing::MakeEngine;
using testing::Reference;
using testing::RelError;
using testing::SeqPages;

std::string FixtureDir(const std::string& name) {
  return std::string(testing::kFixtureRoot) + "/" + name;
}

class EngineBatchTest : public ::testing::TestWithParam<std::string> {};

// A decode step, a continued prefill chunk and a fresh prompt in one Forward give the same
// logits as running each on its own.
TEST_P(EngineBatchTest, RaggedBatchEqualsSequential) {
  Reference ref;
  ASSERT_TRUE(testing::LoadReference(FixtureDir(GetParam()), &ref));
  ASSERT_GE(ref.prompts.size(), 4u);
  const std::vector<int32_t>& a = ref.prompts[2].ids;  // 64 tokens: [0,40) cached, then [40,64)
  const std::vector<int32_t>& b = ref.prompts[1].ids;  // 7 tokens, fresh
  const std::vector<int32_t>& c = ref.prompts[3].ids;  // 200 tokens cached, then decode 1
  const int32_t c_next = ref.prompts[3].greedy_tokens[0];
  ASSERT_GT(a.size(), 40u);

  auto run = [&](bool together) -> std::vector<std::vector<float>> {
    auto engine = MakeEngine(FixtureDir(GetParam()));
    if (engine == nullptr) return {};
    SeqPages pa(engine->kv_pool(), a.size()), pb(engine->kv_pool(), b.size()),
        pc(engine->kv_pool(), c.size() + 1);
    // Cache the prefixes first (separately).
    SequenceChunk a0{std::span<const int32_t>(a).first(40), 0, pa.pages(), false};
    SequenceChunk c0{c, 0, pc.pages(), false};
    EXPECT_TRUE(engine->Forward({&a0, 1}).ok());
    EXPECT_TRUE(engine->Forward({&c0, 1}).ok());
    std::vector<SequenceChunk> chunks = {
        {std::span<const int32_t>(a).subspan(40), 40, pa.pages(), true},
        {b, 0, pb.pages(), true},
        {std::span<const int32_t>(&c_next, 1), static_cast<int>(c.size()), pc.pages(), true}};
    std::vector<std::vector<float>> rows;
    const int V = engine->config().vocab_size;
    if (together) {
      auto r = engine->Forward(chunks);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return {};
      EXPECT_EQ(r->rows, 3);
      for (int i = 0; i < 3; ++i) rows.emplace_back(r->logits.begin() + i * V, r->logits.begin() + (i + 1) * V);
    } else {
      for (const SequenceChunk& ch : chunks) {
        auto r = engine->Forward({&ch, 1});
        EXPECT_TRUE(r.ok()) << r.status();
        if (!r.ok()) return {};
        rows.push_back(r->logits);
      }
    }
    return rows;
  };
  const auto together = run(true);
  const auto alone = run(false);
  ASSERT_EQ(together.size(), 3u);
  ASSERT_EQ(alone.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_LE(RelError(together[i], alone[i]), 1e-5) << "sequence " << i;
  // And against the reference where it has the position: a ends at 63, b at 6.
  EXPECT_LE(RelError(together[0], ref.prompts[2].logits.back()), 1e-4);
  EXPECT_LE(RelError(together[1], ref.prompts[1].logits.back()), 1e-4);
  EXPECT_LE(RelError(together[2], ref.prompts[3].decode_logits.at(0)), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineBatchTest,
                         ::testing::Values("deepseek_v2", "deepseek_v3", "deepseek_v32"),
                         [](const auto& info) { return info.param; });

TEST(EngineTest, ValidatesInputsNamingTheValue) {
  auto engine = MakeEngine(FixtureDir("deepseek_v3"), /*pages=*/16);
  ASSERT_NE(engine, nullptr);
  const ModelConfig& cfg = engine->config();
  auto pages = engine->kv_pool().Allocate(2);
  ASSERT_TRUE(pages.ok());
  auto expect_invalid = [&](const SequenceChunk& c, const std::string& needle) {
    auto r = engine->Forward({&c, 1});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  const std::vector<int32_t> bad_id = {3, cfg.vocab_size + 5};
  expect_invalid({bad_id, 0, *pages, true}, std::to_string(cfg.vocab_size + 5));
  const std::vector<int32_t> ok = {3, 4, 5};
  const int last = cfg.max_position_embeddings;
  std::vector<int32_t> many_pages(cfg.max_position_embeddings / 64 + 1, (*pages)[0]);
  expect_invalid({ok, last - 1, many_pages, true}, std::to_string(last + 1));  // reaches last+1
  expect_invalid({ok, 126, *pages, true}, "need 3 KV pages");
  const std::vector<int32_t> foreign = {1000};
  expect_invalid({ok, 0, foreign, true}, "1000");
  expect_invalid({std::span<const int32_t>(), 0, *pages, true}, "no tokens");
}

TEST(EngineTest, ThePoolSizedFromMemoryIsTheCpuDefaultOnTheCpu) {
  // num_kv_pages 0 sizes the pool from the GPU's memory (model/kv_pool_sizing.h); the CPU
  // backend measures nothing and gets kDefaultCpuKvPages, which the options then report.
  auto engine = MakeEngine(FixtureDir("deepseek_v3"), /*pages=*/0);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->kv_pool().total_pages(), kDefaultCpuKvPages);
  EngineOptions o;
  o.model_dir = FixtureDir("deepseek_v3");
  o.num_kv_pages = -3;
  absl::StatusOr<std::unique_ptr<Engine>> refused = Engine::Create(o);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("num_kv_pages is -3"), std::string::npos);
}

TEST(EngineTest, LayerCallbackRunsPerLayerAndCanAbort) {
  auto engine = MakeEngine(FixtureDir("deepseek_v2"), 8);
  ASSERT_NE(engine, nullptr);
  auto pages = engine->kv_pool().Allocate(1);
  ASSERT_TRUE(pages.ok());
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  SequenceChunk c{ids, 0, *pages, true};
  std::vector<int> seen;
  auto r = engine->Forward({&c, 1}, AttentionPath::kAuto, [&](int layer) {
    seen.push_back(layer);
    return absl::OkStatus();
  });
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int> want(engine->config().num_hidden_layers);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int>(i);
  EXPECT_EQ(seen, want);
  auto aborted = engine->Forward({&c, 1}, AttentionPath::kAuto, [](int layer) {
    return layer == 1 ? absl::CancelledError("peer went away") : absl::OkStatus();
  });
  EXPECT_EQ(aborted.status().code(), absl::StatusCode::kCancelled);
}

// kMhaOurs / kMhaCudnn are the MHA form on a named provider (on the CPU every provider is the
// reference): the same logits as kMha, reported as kMha.
TEST(EngineTest, MhaOnOursIsTheMhaForm) {
  auto engine = MakeEngine(FixtureDir("deepseek_v2"), 8);
  ASSERT_NE(engine, nullptr);
  auto pages = engine->kv_pool().Allocate(1);
  ASSERT_TRUE(pages.ok());
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  SequenceChunk c{ids, 0, *pages, true};
  auto mha = engine->Forward({&c, 1}, AttentionPath::kMha);
  auto ours = engine->Forward({&c, 1}, AttentionPath::kMhaOurs);
  auto cudnn = engine->Forward({&c, 1}, AttentionPath::kMhaCudnn);
  ASSERT_TRUE(mha.ok() && ours.ok() && cudnn.ok());
  EXPECT_EQ(ours->path_used, AttentionPath::kMha);
  EXPECT_EQ(ours->logits, mha->logits);
  EXPECT_EQ(cudnn->path_used, AttentionPath::kMha);
  EXPECT_EQ(cudnn->logits, mha->logits);
}

// A build without CUDA refuses the CUDA backend clearly (the CUDA engine itself is covered by
// model_engine_cuda_test on a GPU machine).
TEST(EngineTest, CudaBackendNeedsACudaBuild) {
  auto probe = DeviceBuffer::Allocate(kernels::Backend::kCuda, 16);
  if (probe.ok() || probe.status().code() != absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << "this build has CUDA; see model_engine_cuda_test";
  }
  EngineOptions o;
  o.model_dir = FixtureDir("deepseek_v3");
  o.backend = kernels::Backend::kCuda;
  auto e = Engine::Create(o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition);
}

// A checkpoint whose hidden_act is not SiLU is no reason to leave the GPU: the CUDA backend runs
// every activation (model_engine_cuda_test holds the two activation fixtures to HF there). In a
// build without CUDA the CUDA backend is refused as for any model (FAILED_PRECONDITION, not the
// activation), --backend auto falls back for that reason, and the CPU backend runs it.
TEST(EngineTest, NonSiluActivationIsNoReasonToLeaveTheGpu) {
  auto probe = DeviceBuffer::Allocate(kernels::Backend::kCuda, 16);
  if (probe.ok() || probe.status().code() != absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << "this build has CUDA; see model_engine_cuda_test";
  }
  for (const char* name : {"deepseek_v3_gelu", "deepseek_v2_gelu_tanh"}) {
    EngineOptions o;
    o.model_dir = FixtureDir(name);
    o.backend = kernels::Backend::kCuda;
    auto e = Engine::Create(o);
    ASSERT_FALSE(e.ok()) << name;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
    EXPECT_EQ(e.status().message().find("hidden_act"), std::string::npos) << e.status();
    o.backend = kernels::Backend::kCpu;
    EXPECT_TRUE(Engine::Create(o).ok()) << name;
    std::vector<absl::Status> fallbacks;
    auto fell_back = CreateEngineForBackend(o, "auto", [&](const absl::Status& s) { fallbacks.push_back(s); });
    ASSERT_TRUE(fell_back.ok()) << fell_back.status();
    ASSERT_EQ(fallbacks.size(), 1u);
    EXPECT_EQ(fallbacks[0].code(), absl::StatusCode::kFailedPrecondition) << fallbacks[0];
  }
}

// The fp8 block-scaled checkpoint equals its exact dequantized twin, and both stay close to
// the twin's HF reference.
TEST(EngineTest, Fp8CheckpointMatchesDequantizedTwin) {
  // tools/make_fixtures.py keeps the twin in its own folder (deepseek_v3_fp8/); older
  // fixture sets kept it inside deepseek_v3/.
  const std::string root = std::filesystem::exists(FixtureDir("deepseek_v3_fp8/model-fp8"))
                               ? FixtureDir("deepseek_v3_fp8")
                               : FixtureDir("deepseek_v3");
  const std::string fp8 = root + "/model-fp8";
  const std::string twin = root + "/model-fp8-dequant";
  Reference ref;
  ASSERT_TRUE(testing::LoadReference(twin, &ref));
  auto e8 = MakeEngine(fp8);
  auto et = MakeEngine(twin);
  ASSERT_NE(e8, nullptr);
  ASSERT_NE(et, nullptr);
  ASSERT_TRUE(e8->config().fp8_block_weights);
  for (const auto& p : ref.prompts) {
    SeqPages p8(e8->kv_pool(), p.ids.size()), pt(et->kv_pool(), p.ids.size());
    SequenceChunk c8{p.ids, 0, p8.pages(), true}, ct{p.ids, 0, pt.pages(), true};
    auto r8 = e8->Forward({&c8, 1});
    auto rt = et->Forward({&ct, 1});
    ASSERT_TRUE(r8.ok()) << r8.status();
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_LE(RelError(r8->logits, rt->logits), 1e-6) << p.name;
    EXPECT_LE(RelError(r8->logits, p.logits.back()), 1e-4) << p.name;
  }
}

std::vector<int32_t> SampleLoop(Engine& engine, const std::vector<int32_t>& prompt,
                                const SamplingOptions& opts, int steps) {
  SeqPages pages(engine.kv_pool(), prompt.size() + steps);
  SequenceChunk c{prompt, 0, pages.pages(), true};
  auto r = engine.Forward({&c, 1});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  std::vector<float> logits = r->logits;
  std::vector<int32_t> history = prompt, out;
  Sampler sampler;
  for (int s = 0; s < steps; ++s) {
    SampleRow row{opts, static_cast<uint64_t>(s), history};
    auto ids = sampler.Sample(logits, engine.config().vocab_size, {&row, 1});
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (!ids.ok()) return {};
    out.push_back((*ids)[0]);
    history.push_back(out.back());
    SequenceChunk d{std::span<const int32_t>(&history.back(), 1),
                    static_cast<int>(history.size()) - 1, pages.pages(), true};
    auto dr = engine.Forward({&d, 1});
    EXPECT_TRUE(dr.ok()) << dr.status();
    if (!dr.ok()) return {};
    logits = dr->logits;
  }
  return out;
}

TEST(EngineTest, SeededSamplingIsReproducible) {
  auto engine = MakeEngine(FixtureDir("deepseek_v3"));
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = {0, 17, 230, 45, 99, 310, 7};
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_k = 40;
  o.top_p = 0.95f;
  o.repetition_penalty = 1.1f;
  o.seed = 1234;
  const auto first = SampleLoop(*engine, prompt, o, 12);
  const auto second = SampleLoop(*engine, prompt, o, 12);
  ASSERT_EQ(first.size(), 12u);
  EXPECT_EQ(first, second);
  o.seed = 98765;
  EXPECT_NE(SampleLoop(*engine, prompt, o, 12), first);  // 12 draws: a collision is ~impossible
  // Temperature 0 is greedy whatever the seed.
  o.temperature = 0.0f;
  o.repetition_penalty = 1.0f;
  const auto greedy = SampleLoop(*engine, prompt, o, 6);
  o.seed = 5;
  EXPECT_EQ(SampleLoop(*engine, prompt, o, 6), greedy);
}

// Rows that carry their SampleRow come back sampled, with the ids model::Sampler draws from
// the same step's logits; a batch where one row lacks it returns logits only.
TEST(EngineTest, ForwardSamplesRowsThatAskForIt) {
  auto engine = MakeEngine(FixtureDir("deepseek_v3"));
  ASSERT_NE(engine, nullptr);
  Reference ref;
  ASSERT_TRUE(testing::LoadReference(FixtureDir("deepseek_v3"), &ref));
  const std::vector<int32_t>& a = ref.prompts[1].ids;
  const std::vector<int32_t>& b = ref.prompts[2].ids;
  SeqPages pa(engine->kv_pool(), a.size()), pb(engine->kv_pool(), b.size());
  std::vector<SampleRow> rows(2);
  rows[0].options.temperature = 0.0f;  // greedy
  rows[1].options.temperature = 0.8f;
  rows[1].options.top_k = 20;
  rows[1].options.top_p = 0.9f;
  rows[1].options.repetition_penalty = 1.2f;
  rows[1].options.seed = 77;
  rows[1].step = 3;
  rows[1].history = b;
  std::vector<SequenceChunk> chunks = {{a, 0, pa.pages(), true}, {b, 0, pb.pages(), true}};
  auto plain = engine->Forward(chunks);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->token_ids.empty());
  chunks[0].sample = &rows[0];
  chunks[1].sample = &rows[1];
  auto sampled = engine->Forward(chunks);
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  const std::vector<const SampleRow*> ptrs = {&rows[0], &rows[1]};
  auto want = SampleHostLogits(plain->logits, engine->config().vocab_size, ptrs);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(sampled->token_ids, *want);
  chunks[1].sample = nullptr;  // one row without: logits only
  auto mixed = engine->Forward(chunks);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_TRUE(mixed->token_ids.empty());
  EXPECT_EQ(mixed->logits.size(), plain->logits.size());
}

// ForwardInto writes the same result as Forward into the caller's ForwardResult and keeps its
// storage: a step loop allocates no logits after the first step (same or fewer rows).
TEST(EngineTest, ForwardIntoReusesTheResultStorage) {
  auto engine = MakeEngine(FixtureDir("deepseek_v3"));
  ASSERT_NE(engine, nullptr);
  Reference ref;
  ASSERT_TRUE(testing::LoadReference(FixtureDir("deepseek_v3"), &ref));
  const std::vector<int32_t>& a = ref.prompts[1].ids;
  const std::vector<int32_t>& b = ref.prompts[2].ids;
  SeqPages pa(engine->kv_pool(), a.size()), pb(engine->kv_pool(), b.size());
  std::vector<SequenceChunk> chunks = {{a, 0, pa.pages(), true}, {b, 0, pb.pages(), true}};
  auto plain = engine->Forward(chunks);
  ASSERT_TRUE(plain.ok()) << plain.status();

  ForwardResult into;
  into.token_ids = {1, 2, 3};  // stale contents are overwritten
  ASSERT_TRUE(engine->ForwardInto(chunks, AttentionPath::kAuto, nullptr, &into).ok());
  EXPECT_EQ(into.logits, plain->logits);
  EXPECT_TRUE(into.token_ids.empty());
  EXPECT_EQ(into.rows, 2);
  const float* storage = into.logits.data();
  // The same chunks again (their KV rewritten with the same values), then one row only.
  ASSERT_TRUE(engine->ForwardInto(chunks, AttentionPath::kAuto, nullptr, &into).ok());
  EXPECT_EQ(into.logits, plain->logits);
  EXPECT_EQ(into.logits.data(), storage);
  auto one = engine->Forward({&chunks[0], 1});
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(engine->ForwardInto({&chunks[0], 1}, AttentionPath::kAuto, nullptr, &into).ok());
  EXPECT_EQ(into.logits.size(), static_cast<size_t>(engine->config().vocab_size));
  EXPECT_EQ(into.logits, one->logits);
  EXPECT_EQ(into.logits.data(), storage);
  // Sampled rows: ids as Forward draws them.
  SampleRow greedy;
  greedy.options.temperature = 0.0f;
  chunks[0].sample = &greedy;
  chunks[1].sample = &greedy;
  auto sampled = engine->Forward(chunks);
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  ASSERT_TRUE(engine->ForwardInto(chunks, AttentionPath::kAuto, nullptr, &into).ok());
  EXPECT_EQ(into.token_ids, sampled->token_ids);
  EXPECT_EQ(into.token_ids.size(), 2u);
}

// Head dims HF accepts but no CUDA attention kernel takes as they are (deepseek_v2_odd: nope 22,
// rope 6, v 20, kv_lora_rank 36) are stored rounded up to multiples of 8 on every backend, so
// the cache layout is the same for CPU and CUDA workers; the reference test holds the padded
// engine to HF's logits.
TEST(EngineTest, OddHeadDimsAreStoredPaddedToMultiplesOf8) {
  auto engine = MakeEngine(FixtureDir("deepseek_v2_odd"));
  ASSERT_NE(engine, nullptr);
  const ModelConfig& c = engine->config();
  EXPECT_EQ(ModelMlaDims(c), (MlaDims{22, 6, 20, 36}));
  EXPECT_EQ(StoredMlaDims(c), (MlaDims{24, 8, 24, 40}));
  EXPECT_EQ(engine->kv_pool().options().latent_dim, 48);
  // Aligned dims are stored as they are (DeepSeek's own and the other fixtures).
  auto v3 = MakeEngine(FixtureDir("deepseek_v3"));
  ASSERT_NE(v3, nullptr);
  EXPECT_EQ(StoredMlaDims(v3->config()), ModelMlaDims(v3->config()));
  EXPECT_EQ(v3->kv_pool().options().latent_dim, v3->config().latent_dim());
}

// tie_word_embeddings as transformers 5.17 loads it: the LM head is the embedding when the
// checkpoint stores no lm_head.weight (deepseek_v3_knobs), but a stored lm_head.weight that
// differs is used untied. Here a copy of the fixture gets lm_head.weight = 2 x embedding (f32,
// exact), so every logit doubles.
TEST(EngineTest, TiedHeadUsesAStoredLmHeadAsHfDoes) {
  const std::string src = FixtureDir("deepseek_v3_knobs");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("mlaserve_tied_head_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src + "/config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<testing::TestTensor> tensors;
  bool had_lm_head = false;
  for (const std::string& name : (*file)->TensorNames()) {
    auto t = (*file)->Get(name);
    ASSERT_TRUE(t.ok()) << t.status();
    had_lm_head = had_lm_head || name == "lm_head.weight";
    tensors.push_back({name, t->dtype == kernels::DType::kF32 ? "F32" : "BF16", t->shape,
                       std::vector<uint8_t>(t->data, t->data + t->bytes)});
    if (name != "model.embed_tokens.weight") continue;
    ASSERT_EQ(t->dtype, kernels::DType::kBF16);
    std::vector<float> doubled(t->numel());
    for (int64_t i = 0; i < t->numel(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, t->data + 2 * i, 2);
      const uint32_t f32_bits = uint32_t{bits} << 16;
      std::memcpy(&doubled[i], &f32_bits, 4);
      doubled[i] *= 2.0f;
    }
    tensors.push_back({"lm_head.weight", "F32", t->shape, testing::AsBytes(doubled)});
  }
  ASSERT_FALSE(had_lm_head) << "deepseek_v3_knobs should store no lm_head.weight";
  testing::WriteFile(dir / "model.safetensors",
                     testing::SerializeSafetensors(tensors, {{"format", "pt"}}));

  const std::vector<int32_t> ids = {5, 77, 300, 12, 9, 401, 250};
  auto last_logits = [&](const std::string& model_dir) -> std::vector<float> {
    auto engine = MakeEngine(model_dir);
    if (engine == nullptr) return {};
    EXPECT_TRUE(engine->config().tie_word_embeddings);
    SeqPages pages(engine->kv_pool(), ids.size());
    SequenceChunk c{ids, 0, pages.pages(), true};
    auto r = engine->Forward({&c, 1});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->logits : std::vector<float>{};
  };
  const std::vector<float> tied = last_logits(src);
  const std::vector<float> untied = last_logits(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(tied.size(), 512u);
  ASSERT_EQ(untied.size(), tied.size());
  for (size_t i = 0; i < tied.size(); ++i) {
    ASSERT_NEAR(untied[i], 2.0f * tied[i], 1e-5f * (1.0f + std::abs(tied[i]))) << "logit " << i;
  }
}

}  // namespace
}  // namespace mlaserve::model
