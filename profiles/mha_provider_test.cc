// The MHA-prefill provider in GPU profiles (format version 2): JSON, validation naming the file
// and field, version 1 profiles, the policy's per-cell provider, the fallback to ours where
// cuDNN cannot load, and what the engine is asked to run.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "profiles/attention_path_policy.h"
#include "profiles/engine_path.h"
#include "profiles/gpu_profile.h"
#include "profiles/testing/test_profiles.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace mlaserve::profiles {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
constexpr MhaPrefillProvider kAuto = MhaPrefillProvider::kAuto;
constexpr MhaPrefillProvider kOurs = MhaPrefillProvider::kOurs;
constexpr MhaPrefillProvider kCudnn = MhaPrefillProvider::kCudnn;

nlohmann::json MixedDoc() {
  return nlohmann::json::parse(ProfileToJson(testing::MixedProviderProfile()));
}

// A version 1 document, as the tuner wrote them before providers were recorded.
nlohmann::json Version1Doc() {
  nlohmann::json d = nlohmann::json::parse(ProfileToJson(testing::SmallProfile()));
  d["version"] = 1;
  d["mha_mla"].erase("mha_providers");
  d["mha_mla"].erase("cudnn_version");
  for (auto& c : d["mha_mla"]["cells"]) c.erase("mha_provider");
  return d;
}

// Edits one field of `doc` and expects INVALID_ARGUMENT naming `field` (and `what`, if given).
void ExpectRefused(nlohmann::json doc, const std::function<void(nlohmann::json&)>& edit,
                   const std::string& field, const std::string& what = "") {
  edit(doc);
  auto p = ProfileFromJson(doc.dump());
  ASSERT_FALSE(p.ok()) << "accepted a profile with a bad " << field;
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(field));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(what));
}

TEST(MhaProviderJson, MixedProvidersRoundTrip) {
  const GpuProfile p = testing::MixedProviderProfile();
  const nlohmann::json doc = nlohmann::json::parse(ProfileToJson(p));
  EXPECT_EQ(doc["version"], 2);
  EXPECT_EQ(doc["mha_mla"]["mha_providers"], nlohmann::json({"ours", "cudnn"}));
  EXPECT_EQ(doc["mha_mla"]["cells"][0]["mha_provider"], "ours");
  EXPECT_EQ(doc["mha_mla"]["cells"][1]["mha_provider"], "cudnn");
  auto back = ProfileFromJson(doc.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(back->mha_mla.mha_providers, ElementsAre(kOurs, kCudnn));
  EXPECT_EQ(back->mha_mla.cudnn_version, "cuDNN 9.13.0");
  ASSERT_EQ(back->mha_mla.cells.size(), p.mha_mla.cells.size());
  int cudnn = 0;
  for (size_t i = 0; i < p.mha_mla.cells.size(); ++i) {
    EXPECT_EQ(back->mha_mla.cells[i].mha_provider, p.mha_mla.cells[i].mha_provider) << i;
    EXPECT_EQ(back->mha_mla.cells[i].mha_cudnn_us, p.mha_mla.cells[i].mha_cudnn_us) << i;
    cudnn += back->mha_mla.cells[i].mha_provider == kCudnn;
  }
  EXPECT_GT(cudnn, 0);
  EXPECT_LT(cudnn, static_cast<int>(p.mha_mla.cells.size()));
}

TEST(MhaProviderJson, Version1LoadsWithProviderAuto) {
  auto p = ProfileFromJson(Version1Doc().dump());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->mha_mla.mha_providers.empty());
  for (const MhaMlaCell& c : p->mha_mla.cells) {
    EXPECT_EQ(c.mha_provider, kAuto);
    EXPECT_FALSE(c.mha_ours_us.has_value());
  }
  // Saved again, it is a version 2 profile that still names no provider.
  const nlohmann::json again = nlohmann::json::parse(ProfileToJson(*p));
  EXPECT_EQ(again["version"], 2);
  EXPECT_EQ(again["mha_mla"]["cells"][0]["mha_provider"], "auto");
  EXPECT_TRUE(ProfileFromJson(again.dump()).ok());
}

// The split threshold of fresh-prompt cells (version 2, optional): written only where set,
// read back, and refused in a version 1 document, in a cell with a prefix, below -1, with
// counts that do not add up, or as counts alone.
TEST(SplitThresholdJson, RoundTripAndRefusals) {
  GpuProfile p = testing::MixedProviderProfile();
  size_t fresh = p.mha_mla.cells.size(), prefixed = p.mha_mla.cells.size();
  for (size_t i = 0; i < p.mha_mla.cells.size(); ++i) {
    if (p.mha_mla.cells[i].prefix == 0 && fresh == p.mha_mla.cells.size()) fresh = i;
    if (p.mha_mla.cells[i].prefix != 0 && prefixed == p.mha_mla.cells.size()) prefixed = i;
  }
  ASSERT_LT(fresh, p.mha_mla.cells.size());
  ASSERT_LT(prefixed, p.mha_mla.cells.size());
  p.mha_mla.cells[fresh].split_se_threshold = 123456;
  p.mha_mla.cells[fresh].split_samples = 6;
  p.mha_mla.cells[fresh].split_wins = 4;
  const nlohmann::json doc = nlohmann::json::parse(ProfileToJson(p));
  EXPECT_EQ(doc["mha_mla"]["cells"][fresh]["split_se_threshold"], 123456);
  EXPECT_EQ(doc["mha_mla"]["cells"][fresh]["split_wins"], 4);
  EXPECT_FALSE(doc["mha_mla"]["cells"][prefixed].contains("split_se_threshold"));
  auto back = ProfileFromJson(doc.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->mha_mla.cells[fresh].split_se_threshold, 123456);
  EXPECT_EQ(back->mha_mla.cells[fresh].split_samples, 6);
  EXPECT_EQ(back->mha_mla.cells[fresh].split_wins, 4);
  EXPECT_FALSE(back->mha_mla.cells[prefixed].split_se_threshold.has_value());

  const std::string f = absl::StrCat("mha_mla.cells[", fresh, "]");
  const std::string g = absl::StrCat("mha_mla.cells[", prefixed, "]");
  ExpectRefused(doc, [&](auto& d) { d["mha_mla"]["cells"][prefixed]["split_se_threshold"] = 5; },
                g + ".split_se_threshold", "only the fresh prompts' bucket");
  ExpectRefused(doc, [&](auto& d) { d["mha_mla"]["cells"][fresh]["split_se_threshold"] = -2; },
                f + ".split_se_threshold", "-2 is negative");
  ExpectRefused(doc, [&](auto& d) { d["mha_mla"]["cells"][fresh]["split_se_threshold"] = "x"; },
                f + ".split_se_threshold", "expected an integer");
  ExpectRefused(doc, [&](auto& d) { d["mha_mla"]["cells"][fresh]["split_wins"] = 7; }, f,
                "split_wins 7 is not within [0, split_samples 6]");
  ExpectRefused(doc, [&](auto& d) { d["mha_mla"]["cells"][fresh].erase("split_se_threshold"); },
                f + ".split_samples", "without split_se_threshold");
  ExpectRefused(Version1Doc(),
                [](auto& d) { d["mha_mla"]["cells"][0]["split_se_threshold"] = 0; },
                "mha_mla.cells[0].split_se_threshold", "version 2 field");
}

// The profiles in the repository load, whichever version they are.
TEST(MhaProviderJson, CommittedProfilesLoad) {
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator("profiles")) {
    if (entry.path().extension() != ".json") continue;
    auto p = LoadProfile(entry.path().string());
    EXPECT_TRUE(p.ok()) << p.status();
    ++loaded;
  }
  EXPECT_GE(loaded, 4);
}

TEST(MhaProviderJson, Version1WithVersion2FieldsIsRefused) {
  ExpectRefused(Version1Doc(), [](auto& d) { d["mha_mla"]["cells"][0]["mha_provider"] = "ours"; },
                "mha_mla.cells[0].mha_provider", "version 2 field");
  ExpectRefused(Version1Doc(), [](auto& d) { d["mha_mla"]["mha_providers"] = {"ours"}; },
                "mha_mla.mha_providers", "version 2 field");
  ExpectRefused(Version1Doc(), [](auto& d) { d["mha_mla"]["cells"][4]["mha_cudnn_us"] = 3.0; },
                "mha_mla.cells[4].mha_cudnn_us", "version 2 field");
}

TEST(MhaProviderJson, BadValuesAreRefusedNamingTheField) {
  const nlohmann::json doc = MixedDoc();
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["cells"][2]["mha_provider"] = "fast"; },
                "mha_mla.cells[2].mha_provider", "'fast' is not one of auto, ours, cudnn");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["cells"][2]["mha_provider"] = 1; },
                "mha_mla.cells[2].mha_provider", "expected a string");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["cells"][2].erase("mha_provider"); },
                "mha_mla.cells[2].mha_provider", "is missing");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["cells"][3]["mha_cudnn_us"] = -1.5; },
                "mha_mla.cells[3].mha_cudnn_us", "must be finite and >= 0");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["cells"][3]["mha_ours_us"] = "slow"; },
                "mha_mla.cells[3].mha_ours_us", "expected a number");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"].erase("mha_providers"); },
                "mha_mla.mha_providers", "is missing");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["mha_providers"] = "ours"; },
                "mha_mla.mha_providers", "expected an array");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["mha_providers"] = {"ours", 7}; },
                "mha_mla.mha_providers[1]", "expected a string");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["mha_providers"] = {"ours", "auto"}; },
                "mha_mla.mha_providers[1]", "auto is not a provider the tuner times");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["mha_providers"] = {"cudnn", "cudnn"}; },
                "mha_mla.mha_providers[1]", "listed twice");
  // A cell naming a provider the table says was not timed.
  ExpectRefused(doc,
                [](auto& d) {
                  d["mha_mla"]["mha_providers"] = {"ours"};
                  for (auto& c : d["mha_mla"]["cells"]) c.erase("mha_cudnn_us");
                },
                "mha_mla.cells[1].mha_provider", "cudnn is not one of mha_mla.mha_providers [ours]");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["mha_providers"] = {"ours"}; },
                "mha_mla.cells[0].mha_cudnn_us", "does not list");
  ExpectRefused(doc, [](auto& d) { d["mha_mla"]["mha_providers"] = nlohmann::json::array(); },
                "mha_mla.cells[0].mha_provider", "mha_mla.mha_providers is empty");
  ExpectRefused(doc, [](auto& d) { d["version"] = 3; }, "version", "reads 1 to 2");
}

TEST(MhaProviderJson, NonFiniteTimesAreRefused) {
  GpuProfile p = testing::MixedProviderProfile();
  p.mha_mla.cells[5].mha_ours_us = std::numeric_limits<double>::infinity();
  const absl::Status s = ValidateProfile(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("mha_mla.cells[5].mha_ours_us"));
}

TEST(MhaProviderJson, LoadProfileNamesTheFileAndTheField) {
  nlohmann::json d = MixedDoc();
  d["mha_mla"]["cells"][6]["mha_provider"] = "flash";
  const fs::path path = fs::path(::testing::TempDir()) /
                        ("mha_provider_bad_profile_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << d.dump(1);
  auto p = LoadProfile(path.string());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(path.string()));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("mha_mla.cells[6].mha_provider"));
  fs::remove(path);
}

// Captures what spdlog logs while alive (the default logger, restored after).
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }
  int lines() const {
    const std::string t = out_.str();
    return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

std::unique_ptr<AttentionPathPolicy> Policy(const GpuProfile& p, std::optional<bool> cudnn,
                                            std::optional<PrefillPath> force = std::nullopt) {
  PolicyOptions o;
  o.cudnn_available = cudnn;
  o.force = force;
  auto policy = AttentionPathPolicy::Create(p, "test.json", {}, o);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *std::move(policy) : nullptr;
}

// MixedProviderProfile with every threshold 0 (MHA for every batch with a cell).
GpuProfile AllMha(GpuProfile p) {
  for (MhaMlaCell& c : p.mha_mla.cells) c.se_threshold = 0;
  return p;
}

// Batch 1: cell (1, 0, 512) names cuDNN ((1 + 0 + 1) even); cell (1, 256, 512) names ours.
const std::vector<SequenceShape> kCudnnCellBatch = {{0, 600}};
const std::vector<SequenceShape> kOursCellBatch = {{300, 600}};

TEST(MhaProviderPolicy, MhaChoicesCarryTheCellsProvider) {
  auto policy = Policy(AllMha(testing::MixedProviderProfile()), true);
  const PathChoice a = policy->Choose(kCudnnCellBatch);
  EXPECT_EQ(a.path, PrefillPath::kMha);
  EXPECT_EQ(a.mha_provider, kCudnn);
  EXPECT_THAT(AttentionPathPolicy::Describe(a), HasSubstr(">= threshold=0 provider=cudnn)"));
  const PathChoice b = policy->Choose(kOursCellBatch);
  EXPECT_EQ(b.mha_provider, kOurs);
  EXPECT_THAT(AttentionPathPolicy::Describe(b), HasSubstr("provider=ours)"));
  EXPECT_EQ(policy->mha_count(kCudnn), 1u);
  EXPECT_EQ(policy->mha_count(kOurs), 1u);
  EXPECT_FALSE(policy->cudnn_cells_on_ours());
}

TEST(MhaProviderPolicy, MlaChoicesCarryNoProvider) {
  GpuProfile p = testing::MixedProviderProfile();
  for (MhaMlaCell& c : p.mha_mla.cells) c.se_threshold = kNeverMha;
  auto policy = Policy(p, true);
  const PathChoice c = policy->Choose(kCudnnCellBatch);
  EXPECT_EQ(c.path, PrefillPath::kMla);
  EXPECT_EQ(c.mha_provider, kAuto);
  EXPECT_EQ(ToEngineMhaProvider(c), kAuto);
  EXPECT_EQ(policy->MhaProviderFor(c.stats), kCudnn);  // what MHA would have run on
}

TEST(MhaProviderPolicy, ForcedMhaRunsOnTheCellsProviderAndNoCellOnTheEngineDefault) {
  GpuProfile p = testing::MixedProviderProfile();
  auto forced = Policy(p, true, PrefillPath::kMha);
  EXPECT_EQ(forced->Choose(kCudnnCellBatch).mha_provider, kCudnn);
  EXPECT_EQ(forced->Choose(kOursCellBatch).mha_provider, kOurs);
  std::erase_if(p.mha_mla.cells, [](const MhaMlaCell& c) { return c.batch == 2; });
  auto no_cell = Policy(p, true);
  const PathChoice c = no_cell->Choose(std::vector<SequenceShape>{{0, 100}, {0, 100}});
  EXPECT_EQ(c.reason, ChoiceReason::kNoCell);
  EXPECT_EQ(c.path, PrefillPath::kMha);
  EXPECT_EQ(c.mha_provider, kAuto);
}

TEST(MhaProviderPolicy, Version1ProfileLeavesTheProviderToTheEngine) {
  auto loaded = ProfileFromJson(Version1Doc().dump());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  LogCapture log;
  auto policy = Policy(AllMha(*loaded), false);
  const PathChoice c = policy->Choose(kCudnnCellBatch);
  EXPECT_EQ(c.path, PrefillPath::kMha);
  EXPECT_EQ(c.mha_provider, kAuto);
  EXPECT_EQ(ToEngineMhaProvider(c), kAuto);
  EXPECT_THAT(AttentionPathPolicy::Describe(c), ::testing::Not(HasSubstr("provider")));
  EXPECT_EQ(log.lines(), 0) << log.text();  // no cuDNN cells: nothing to fall back from
}

// cuDNN cannot load here: its cells run on ours, with one warning at Create and none per batch.
TEST(MhaProviderPolicy, CudnnCellsFallBackToOursWithOneLogLine) {
  LogCapture log;
  auto policy = Policy(AllMha(testing::MixedProviderProfile()), false);
  ASSERT_NE(policy, nullptr);
  EXPECT_TRUE(policy->cudnn_cells_on_ours());
  for (int i = 0; i < 5; ++i) {
    const PathChoice c = policy->Choose(kCudnnCellBatch);
    EXPECT_EQ(c.path, PrefillPath::kMha);
    EXPECT_EQ(c.mha_provider, kOurs);
    EXPECT_EQ(ToEngineMhaProvider(c), kOurs);
  }
  EXPECT_EQ(policy->Choose(kOursCellBatch).mha_provider, kOurs);
  EXPECT_EQ(log.lines(), 1) << log.text();
  EXPECT_THAT(log.text(), HasSubstr("test.json"));
  EXPECT_THAT(log.text(), HasSubstr("36 of 72 MHA/MLA cells were tuned with cuDNN"));
  EXPECT_THAT(log.text(), HasSubstr("they run the MHA form on ours"));
}

// Without an override the policy asks the kernels whether cuDNN loads in this process.
TEST(MhaProviderPolicy, AvailabilityComesFromTheKernelsByDefault) {
  const absl::StatusOr<std::string> version = kernels::MhaPrefillCudnnVersion();
  LogCapture log;
  auto policy = Policy(AllMha(testing::MixedProviderProfile()), std::nullopt);
  ASSERT_NE(policy, nullptr);
  EXPECT_EQ(policy->cudnn_cells_on_ours(), !version.ok());
  EXPECT_EQ(policy->Choose(kCudnnCellBatch).mha_provider, version.ok() ? kCudnn : kOurs);
  if (!version.ok()) {
    EXPECT_EQ(log.lines(), 1) << log.text();
    EXPECT_THAT(log.text(), HasSubstr(std::string(version.status().message())));
  } else {
    EXPECT_EQ(log.lines(), 0) << log.text();
  }
}

// What the prefill worker hands the engine: ours only where the profile found ours faster;
// elsewhere kAuto (cuDNN where it can run the call, else ours), never a hard kCudnn.
TEST(MhaProviderEngine, OursWhereTheCellSaysOursElseTheEnginesDefault) {
  PathChoice c;
  c.path = PrefillPath::kMha;
  c.mha_provider = kOurs;
  EXPECT_EQ(ToEngineMhaProvider(c), kOurs);
  c.mha_provider = kCudnn;
  EXPECT_EQ(ToEngineMhaProvider(c), MhaPrefillProvider::kPreferCudnn);
  c.mha_provider = kAuto;
  EXPECT_EQ(ToEngineMhaProvider(c), kAuto);
  c.path = PrefillPath::kMla;
  c.mha_provider = kOurs;  // not a choice the policy makes, but harmless
  EXPECT_EQ(ToEngineMhaProvider(c), kAuto);
  c.path = PrefillPath::kSparseFwd;
  EXPECT_EQ(ToEngineMhaProvider(c), kAuto);
  EXPECT_EQ(ToEnginePath(PrefillPath::kMha), model::AttentionPath::kMha);
}

// The engine path the prefill worker passes to Forward: the provider folded in.
TEST(MhaProviderEngine, EnginePathOfAChoice) {
  PathChoice c;
  c.path = PrefillPath::kMha;
  c.mha_provider = kOurs;
  EXPECT_EQ(ToEnginePath(c), model::AttentionPath::kMhaOurs);
  c.mha_provider = kCudnn;
  EXPECT_EQ(ToEnginePath(c), model::AttentionPath::kMhaCudnn);
  c.mha_provider = kAuto;
  EXPECT_EQ(ToEnginePath(c), model::AttentionPath::kMha);
  c.path = PrefillPath::kMla;
  EXPECT_EQ(ToEnginePath(c), model::AttentionPath::kMla);
  c.path = PrefillPath::kSparseFwd;
  EXPECT_EQ(ToEnginePath(c), model::AttentionPath::kMla);
  // The split: its fresh prompts on the engine's default provider, whatever a cell says.
  c.path = PrefillPath::kSplit;
  c.mha_provider = kOurs;
  EXPECT_EQ(ToEngineMhaProvider(c), kAuto);
  EXPECT_EQ(ToEnginePath(c), model::AttentionPath::kSplit);
  EXPECT_EQ(ToEnginePath(PrefillPath::kSplit), model::AttentionPath::kSplit);
}

// A DSA batch past index_topk goes sparse; no MHA provider is involved.
TEST(MhaProviderPolicy, SparseChoicesCarryNoProvider) {
  PolicyOptions o;
  o.cudnn_available = true;
  auto policy = AttentionPathPolicy::Create(AllMha(testing::MixedProviderProfile()), "dsa",
                                            {true, 2048}, o);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const PathChoice c = (*policy)->Choose(std::vector<SequenceShape>{{4000, 600}});
  EXPECT_NE(c.path, PrefillPath::kMha);
  EXPECT_EQ(c.mha_provider, kAuto);
}

}  // namespace
}  // namespace mlaserve::profiles
