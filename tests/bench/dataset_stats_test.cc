// Datasets, arrival schedule and summary statistics (no server involved).
#include <unistd.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>

#include "bench/serving/dataset.h"
#include "bench/serving/progress.h"
#include "bench/serving/stats.h"

namespace mlaserve::bench {
namespace {

VocabInfo SmallVocab() {
  VocabInfo v;
  v.vocab_size = 50;
  v.max_context_length = 512;
  v.excluded_ids = {0, 1, 49};
  return v;
}

TEST(RandomDatasetTest, LengthsInRangeIdsValidAndSpecialIdsAbsent) {
  RandomDatasetOptions o{.num_prompts = 200, .input_len = 40, .output_len = 20,
                         .range_ratio = 0.5, .seed = 3};
  auto specs = MakeRandomDataset(o, SmallVocab());
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 200u);
  int min_in = 1 << 30, max_in = 0, min_out = 1 << 30, max_out = 0;
  for (int i = 0; i < 200; ++i) {
    const RequestSpec& s = (*specs)[i];
    EXPECT_EQ(s.index, i);
    EXPECT_FALSE(s.use_text);
    ASSERT_EQ(static_cast<int>(s.prompt_token_ids.size()), s.input_len);
    for (int32_t id : s.prompt_token_ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 50);
      ASSERT_NE(id, 0);
      ASSERT_NE(id, 1);
      ASSERT_NE(id, 49);
    }
    min_in = std::min(min_in, s.input_len);
    max_in = std::max(max_in, s.input_len);
    min_out = std::min(min_out, s.output_len);
    max_out = std::max(max_out, s.output_len);
  }
  EXPECT_GE(min_in, 20);
  EXPECT_LE(max_in, 40);
  EXPECT_GE(min_out, 10);
  EXPECT_LE(max_out, 20);
  EXPECT_LT(min_in, max_in);  // 200 uniform draws from 21 values cover more than one
}

TEST(RandomDatasetTest, SameSeedSameDatasetOtherSeedDifferent) {
  RandomDatasetOptions o{.num_prompts = 20, .input_len = 30, .output_len = 8,
                         .range_ratio = 0.2, .seed = 11};
  auto a = MakeRandomDataset(o, SmallVocab());
  auto b = MakeRandomDataset(o, SmallVocab());
  o.seed = 12;
  auto c = MakeRandomDataset(o, SmallVocab());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool all_same_as_c = true;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ((*a)[i].prompt_token_ids, (*b)[i].prompt_token_ids);
    EXPECT_EQ((*a)[i].output_len, (*b)[i].output_len);
    all_same_as_c &= (*a)[i].prompt_token_ids == (*c)[i].prompt_token_ids;
  }
  EXPECT_FALSE(all_same_as_c);
}

TEST(RandomDatasetTest, FixedLengthsWithRatioOne) {
  RandomDatasetOptions o{.num_prompts = 5, .input_len = 7, .output_len = 3,
                         .range_ratio = 1.0, .seed = 1};
  auto specs = MakeRandomDataset(o, SmallVocab());
  ASSERT_TRUE(specs.ok());
  for (const RequestSpec& s : *specs) {
    EXPECT_EQ(s.input_len, 7);
    EXPECT_EQ(s.output_len, 3);
  }
}

TEST(RandomDatasetTest, RejectsPromptsLongerThanTheContextNamingTheValues) {
  RandomDatasetOptions o{.num_prompts = 1, .input_len = 500, .output_len = 13, .seed = 1};
  auto specs = MakeRandomDataset(o, SmallVocab());
  ASSERT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(specs.status().message().find("513"), std::string::npos) << specs.status();
  EXPECT_NE(specs.status().message().find("512"), std::string::npos) << specs.status();
  o.input_len = 0;
  EXPECT_EQ(MakeRandomDataset(o, SmallVocab()).status().code(),
            absl::StatusCode::kInvalidArgument);
  VocabInfo only_special{.vocab_size = 2, .max_context_length = 0, .excluded_ids = {0, 1}};
  o.input_len = 1;
  EXPECT_EQ(MakeRandomDataset(o, only_special).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Length of the common prefix of two prompts.
size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

TEST(SharedPrefixDatasetTest, GroupsShareExactlyTheirPrefixFollowedByTheRequestsOwnPart) {
  VocabInfo vocab{.vocab_size = 1000, .max_context_length = 4096, .excluded_ids = {0, 1}};
  RandomDatasetOptions plain{.num_prompts = 12, .input_len = 30, .output_len = 8,
                             .range_ratio = 0.5, .seed = 9};
  RandomDatasetOptions shared = plain;
  shared.shared_prefix_groups = 3;
  shared.shared_prefix_len = 64;
  auto without = MakeRandomDataset(plain, vocab);
  auto with = MakeRandomDataset(shared, vocab);
  ASSERT_TRUE(without.ok() && with.ok()) << with.status();
  ASSERT_EQ(with->size(), 12u);
  for (int i = 0; i < 12; ++i) {
    SCOPED_TRACE(i);
    const RequestSpec& s = (*with)[i];
    const RequestSpec& p = (*without)[i];
    EXPECT_EQ(s.index, i);
    EXPECT_FALSE(s.use_text);
    // The prefix, then exactly the prompt the same seed gives without one; same output.
    ASSERT_EQ(s.input_len, 64 + p.input_len);
    ASSERT_EQ(static_cast<int>(s.prompt_token_ids.size()), s.input_len);
    EXPECT_TRUE(std::equal(p.prompt_token_ids.begin(), p.prompt_token_ids.end(),
                           s.prompt_token_ids.begin() + 64));
    EXPECT_EQ(s.output_len, p.output_len);
    EXPECT_GE(p.input_len, 15);
    EXPECT_LE(p.input_len, 30);
    for (int32_t id : s.prompt_token_ids) {
      ASSERT_GT(id, 1);  // the excluded ids stay out of the prefix too
      ASSERT_LT(id, 1000);
    }
    for (int j = 0; j < i; ++j) {
      const size_t common = CommonPrefix(s.prompt_token_ids, (*with)[j].prompt_token_ids);
      if (i % 3 == j % 3) {
        // Interleaved groups: i and j share the whole prefix, and (this seed's own parts
        // differ at their first token) nothing beyond it.
        EXPECT_EQ(common, 64u) << "with " << j;
      } else {
        EXPECT_LT(common, 64u) << "with " << j;  // another group's prefix
      }
    }
  }
}

TEST(SharedPrefixDatasetTest, DeterministicUnderTheSeed) {
  VocabInfo vocab{.vocab_size = 1000, .max_context_length = 4096, .excluded_ids = {0}};
  RandomDatasetOptions o{.num_prompts = 8, .input_len = 10, .output_len = 4, .range_ratio = 0.3,
                         .seed = 4, .shared_prefix_groups = 2, .shared_prefix_len = 70};
  auto a = MakeRandomDataset(o, vocab);
  auto b = MakeRandomDataset(o, vocab);
  o.seed = 5;
  auto c = MakeRandomDataset(o, vocab);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ((*a)[i].prompt_token_ids, (*b)[i].prompt_token_ids);
    EXPECT_EQ((*a)[i].output_len, (*b)[i].output_len);
    // Another seed, other prefixes.
    EXPECT_LT(CommonPrefix((*a)[i].prompt_token_ids, (*c)[i].prompt_token_ids), 70u);
  }
  // The warmup's seed gives other prompts.
  EXPECT_NE(WarmupSeed(4), 4u);
  o.seed = WarmupSeed(4);
  o.shared_prefix_groups = 0;
  o.shared_prefix_len = 0;
  RandomDatasetOptions timed = o;
  timed.seed = 4;
  auto warm = MakeRandomDataset(o, vocab);
  auto plain = MakeRandomDataset(timed, vocab);
  ASSERT_TRUE(warm.ok() && plain.ok());
  EXPECT_NE((*warm)[0].prompt_token_ids, (*plain)[0].prompt_token_ids);
}

TEST(SharedPrefixDatasetTest, InconsistentOrTooLongPrefixesAreRefusedNamingTheValues) {
  struct Case {
    int groups, len, input_len;
    std::vector<std::string> message;
  };
  const Case cases[] = {
      {0, 64, 10, {"shared-prefix-groups 0", "shared-prefix-len 64"}},
      {3, 0, 10, {"shared-prefix-len 0", "shared-prefix-groups 3"}},
      {1, -5, 10, {"shared-prefix-len -5"}},
      {-2, 8, 10, {"shared-prefix-groups -2"}},
      // 480 + 30 + 13 = 523 > SmallVocab's context of 512.
      {2, 480, 30, {"shared-prefix-len 480", "random-input-len 30", "523", "context is 512"}},
      // Not wrapped around in int arithmetic.
      {2, 2147483000, 1000, {"shared-prefix-len 2147483000", "2147484013"}},
  };
  for (const Case& k : cases) {
    RandomDatasetOptions o{.num_prompts = 4, .input_len = k.input_len, .output_len = 13,
                           .seed = 1, .shared_prefix_groups = k.groups,
                           .shared_prefix_len = k.len};
    const absl::Status status = MakeRandomDataset(o, SmallVocab()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << k.groups << " " << k.len;
    for (const std::string& part : k.message) {
      EXPECT_NE(status.message().find(part), std::string::npos) << status << " lacks " << part;
    }
  }
  // 480 + 19 + 13 fits exactly.
  RandomDatasetOptions fits{.num_prompts = 4, .input_len = 19, .output_len = 13, .seed = 1,
                            .shared_prefix_groups = 2, .shared_prefix_len = 480};
  EXPECT_TRUE(MakeRandomDataset(fits, SmallVocab()).ok());
}

class PromptsFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& content) {
    // Unique to this test and process (another run on this machine writes its own).
    const std::string path = ::testing::TempDir() + "/prompts_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                             "_" + std::to_string(::getpid()) + ".jsonl";
    std::ofstream(path) << content;
    return path;
  }
};

TEST_F(PromptsFileTest, ReadsTextAndOutputLenSkippingBlankLines) {
  const std::string path =
      Write("{\"text\": \"hello\", \"output_len\": 4}\n\n{\"text\": \"w\\u00f6rld\", "
            "\"output_len\": 9, \"extra\": 1}\n");
  auto specs = LoadPromptsFile(path, 0);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_TRUE((*specs)[0].use_text);
  EXPECT_EQ((*specs)[0].prompt_text, "hello");
  EXPECT_EQ((*specs)[0].output_len, 4);
  EXPECT_EQ((*specs)[1].prompt_text, "w\xc3\xb6rld");
  EXPECT_EQ((*specs)[1].output_len, 9);
  EXPECT_EQ((*specs)[1].index, 1);
  EXPECT_EQ(LoadPromptsFile(path, 1)->size(), 1u);

  std::vector<RequestSpec> cycled = CycleToCount(*specs, 5);
  ASSERT_EQ(cycled.size(), 5u);
  EXPECT_EQ(cycled[4].prompt_text, "hello");
  EXPECT_EQ(cycled[4].index, 4);
}

TEST_F(PromptsFileTest, ErrorsNameTheFileAndLine) {
  const std::string path = Write("{\"text\": \"a\", \"output_len\": 2}\n{\"text\": \"b\"}\n");
  auto specs = LoadPromptsFile(path, 0);
  ASSERT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(specs.status().message().find(path + ":2:"), std::string::npos) << specs.status();
  EXPECT_NE(specs.status().message().find("output_len"), std::string::npos);

  EXPECT_EQ(LoadPromptsFile(Write("not json\n"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadPromptsFile(Write("{\"text\": \"\", \"output_len\": 1}\n"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadPromptsFile(Write("{\"text\": \"a\", \"output_len\": 0}\n"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadPromptsFile(Write("\n"), 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadPromptsFile(path + ".missing", 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(ArrivalsTest, PoissonScheduleIsReproducibleBySeedWithTheRightMean) {
  const int n = 20000;
  const double rate = 40.0;
  std::vector<double> a = PoissonArrivalOffsets(n, rate, 5);
  std::vector<double> b = PoissonArrivalOffsets(n, rate, 5);
  std::vector<double> c = PoissonArrivalOffsets(n, rate, 6);
  ASSERT_EQ(a.size(), static_cast<size_t>(n));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a[0], 0.0);
  std::vector<double> gaps;
  for (int i = 1; i < n; ++i) {
    ASSERT_GE(a[i], a[i - 1]);
    gaps.push_back(a[i] - a[i - 1]);
  }
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= gaps.size();
  // Exponential(rate): mean 1/rate and standard deviation 1/rate. With 20000 gaps the
  // sample mean's standard error is 0.7 %, so 5 % is > 7 sigma.
  EXPECT_NEAR(mean, 1 / rate, 0.05 / rate);
  EXPECT_NEAR(std::sqrt(var), 1 / rate, 0.05 / rate);
}

TEST(ArrivalsTest, InfiniteRateSendsEverythingAtZero) {
  std::vector<double> a = PoissonArrivalOffsets(4, INFINITY, 1);
  EXPECT_EQ(a, std::vector<double>(4, 0.0));
}

TEST(StatsTest, PercentilesInterpolateLikeNumpy) {
  std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  Distribution d = Describe({4, 1, 3, 2});
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.median, 2.5);
  EXPECT_DOUBLE_EQ(d.max, 4);
  EXPECT_EQ(Describe({}).count, 0);
}

TEST(StatsTest, SummarizeCountsOutcomesAndUsesOnlySuccessesForLatency) {
  LoadResult result;
  result.duration_s = 2.0;
  result.not_started = 1;
  RequestRecord ok1{.index = 0, .input_len = 10, .output_len = 3, .ttft_s = 0.1,
                    .itl_s = {0.02, 0.04}, .e2e_s = 0.2};
  RequestRecord ok2{.index = 1, .input_len = 20, .output_len = 1, .ttft_s = 0.3,
                    .itl_s = {}, .e2e_s = 0.3};
  RequestRecord bad{.index = 2, .input_len = 5, .output_len = 2, .ttft_s = 9, .e2e_s = 9,
                    .status_code = 14, .outcome = Outcome::kFailed,
                    .error_class = "UNAVAILABLE", .error = "gone"};
  RequestRecord bad2 = bad;
  bad2.error = "gone again";
  RequestRecord cut{.index = 4, .ttft_s = 9, .e2e_s = 9, .status_code = 1,
                    .outcome = Outcome::kCancelledAtBound};
  result.records = {ok1, ok2, bad, bad2, cut};
  BenchSummary s = Summarize(result, 6);
  EXPECT_EQ(s.num_requests, 6);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.cancelled_at_bound, 1);
  EXPECT_EQ(s.not_started, 1);
  EXPECT_EQ(s.total_input_tokens, 30);
  EXPECT_EQ(s.total_output_tokens, 4);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.input_throughput, 15.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 2.0);
  EXPECT_EQ(s.ttft.count, 2);
  EXPECT_DOUBLE_EQ(s.ttft.mean, 0.2);
  EXPECT_EQ(s.itl.count, 2);
  EXPECT_DOUBLE_EQ(s.itl.mean, 0.03);
  EXPECT_EQ(s.tpot.count, 1);  // only requests with >= 2 tokens
  EXPECT_DOUBLE_EQ(s.tpot.mean, 0.03);
  EXPECT_DOUBLE_EQ(s.e2e.max, 0.3);
  ASSERT_EQ(s.failures.size(), 1u);
  EXPECT_EQ(s.failures["UNAVAILABLE"].count, 2);
  EXPECT_EQ(s.failures["UNAVAILABLE"].status_code, 14);
  EXPECT_EQ(s.failures["UNAVAILABLE"].first_error, "gone");
}

TEST(StatsTest, CachedPromptTokensOfSuccessesGiveTheHitRate) {
  LoadResult result;
  result.duration_s = 1.0;
  RequestRecord ok1{.index = 0, .input_len = 200, .cached_prompt_tokens = 128, .output_len = 1,
                    .ttft_s = 0.1, .e2e_s = 0.1};
  RequestRecord ok2{.index = 1, .input_len = 56, .cached_prompt_tokens = 0, .output_len = 1,
                    .ttft_s = 0.1, .e2e_s = 0.1};
  RequestRecord bad{.index = 2, .input_len = 500, .cached_prompt_tokens = 448, .status_code = 14,
                    .outcome = Outcome::kFailed, .error_class = "UNAVAILABLE"};
  result.records = {ok1, ok2, bad};
  BenchSummary s = Summarize(result, 3);
  EXPECT_EQ(s.total_input_tokens, 256);
  EXPECT_EQ(s.total_cached_prompt_tokens, 128);  // the failed request's are not counted
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_rate, 0.5);

  result.records = {ok2};
  EXPECT_EQ(Summarize(result, 1).total_cached_prompt_tokens, 0);
  EXPECT_EQ(Summarize(result, 1).prefix_cache_hit_rate, 0.0);
  result.records = {};
  EXPECT_EQ(Summarize(result, 0).prefix_cache_hit_rate, 0.0);  // no input: 0, not NaN
}

TEST(ProgressTest, LineShowsTheBarAndTheCounts) {
  LoadProgress p{.total = 40, .started = 14, .finished = 10, .failed = 1, .in_flight = 4};
  EXPECT_EQ(FormatProgressLine(p, 8), "[##......] 10/40 done, 4 running, 1 failed");
  p.finished = 40;
  p.in_flight = 0;
  EXPECT_EQ(FormatProgressLine(p, 4), "[####] 40/40 done, 0 running, 1 failed");
}

}  // namespace
}  // namespace mlaserve::bench
