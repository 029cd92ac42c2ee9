// The whole tool: RunBenchmark in-process and the mlaserve-bench binary, against the fake
// Generation server; the table, the JSON summary, the JSONL records and the exit codes.
#include "bench/serving/bench_app.h"

#include <unistd.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/serving/bench_options.h"
#include "bench/serving/dataset.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_run.h"
#include "tests/bench/fake_generation_server.h"

namespace mlaserve::bench {
namespace {

using ::testing::HasSubstr;
using testing::FakeBehaviour;
using testing::FakeGenerationServer;
using testing::IndexOfRequestId;
using testing::Captured;
using testing::ReadAll;
using testing::RunCaptured;
using testing::SmallRun;
using testing::TempPath;

TEST(BenchAppTest, WritesTableSummaryAndRecordsThatAgreeWithTheServer) {
  FakeGenerationServer server(FakeBehaviour{});
  BenchOptions o = SmallRun(server.address());
  o.output_json = TempPath("summary.json");
  o.output_jsonl = TempPath("records.jsonl");
  Captured c = RunCaptured(o);
  ASSERT_EQ(c.exit_code, kExitOk) << c.err;
  EXPECT_THAT(c.out, HasSubstr("Successful requests:"));
  EXPECT_THAT(c.out, HasSubstr("fake-model"));
  EXPECT_THAT(c.out, HasSubstr("Mean TTFT (ms):"));
  EXPECT_THAT(c.out, HasSubstr("P99 ITL (ms):"));
  EXPECT_THAT(c.out, HasSubstr("Total cached prompt tokens:"));
  EXPECT_THAT(c.out, HasSubstr("Prefix cache hit rate (%):"));
  EXPECT_THAT(c.out, ::testing::Not(HasSubstr("Shared prefix")));
  EXPECT_EQ(server.seen().size(), 8u);  // 2 warmup + 6 timed

  std::ifstream summary_file(o.output_json);
  nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["completed"], 6);
  EXPECT_EQ(summary["failed"], 0);
  EXPECT_EQ(summary["total_input_tokens"], 6 * 16);
  EXPECT_EQ(summary["total_output_tokens"], 6 * 5);
  EXPECT_EQ(summary["total_cached_prompt_tokens"], 0);  // this server reports none
  EXPECT_EQ(summary["prefix_cache_hit_rate"], 0.0);
  EXPECT_EQ(summary["shared_prefix_groups"], 0);
  EXPECT_EQ(summary["warmup_requests"], 2);
  EXPECT_TRUE(summary["request_rate"].is_null());  // inf
  EXPECT_GT(summary["mean_ttft_ms"].get<double>(), 0);
  EXPECT_LE(summary["mean_ttft_ms"].get<double>(), summary["mean_e2e_latency_ms"].get<double>());
  EXPECT_LE(summary["peak_in_flight"].get<int>(), 2);
  EXPECT_TRUE(summary["errors"].empty());

  std::ifstream records_file(o.output_jsonl);
  std::string line;
  int lines = 0;
  while (std::getline(records_file, line)) {
    nlohmann::json r = nlohmann::json::parse(line);
    EXPECT_EQ(r["index"], lines);
    EXPECT_EQ(r["input_len"], 16);
    EXPECT_EQ(r["cached_prompt_tokens"], 0);
    EXPECT_EQ(r["output_len"], 5);
    EXPECT_EQ(r["itl_s"].size(), 4u);
    EXPECT_EQ(r["status"], "OK");
    EXPECT_EQ(r["status_code"], 0);
    EXPECT_EQ(r["error"], "");
    EXPECT_LE(r["ttft_s"].get<double>(), r["e2e_s"].get<double>());
    ++lines;
  }
  EXPECT_EQ(lines, 6);
}

TEST(BenchAppTest, FailedRequestsAreReportedByCodeAndExitWithOne) {
  FakeBehaviour behaviour;
  behaviour.fail_if = [](const v1::GenerateRequest& request) {
    return IndexOfRequestId(request.request_id()) % 2 == 0 &&
                   request.request_id().find("warmup") == std::string::npos
               ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no free KV pages")
               : grpc::Status::OK;
  };
  FakeGenerationServer server(behaviour);
  BenchOptions o = SmallRun(server.address());
  o.output_json = TempPath("summary.json");
  Captured c = RunCaptured(o);
  EXPECT_EQ(c.exit_code, kExitRequestsFailed) << c.err;
  EXPECT_THAT(c.out, HasSubstr("RESOURCE_EXHAUSTED (code 8)"));
  EXPECT_THAT(c.out, HasSubstr("no free KV pages"));
  std::ifstream summary_file(o.output_json);
  nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["completed"], 3);
  EXPECT_EQ(summary["failed"], 3);
  EXPECT_EQ(summary["errors"]["RESOURCE_EXHAUSTED"]["count"], 3);
  EXPECT_EQ(summary["errors"]["RESOURCE_EXHAUSTED"]["status_code"], 8);
}

TEST(BenchAppTest, SameSeedSendsTheSameDataset) {
  FakeGenerationServer server(FakeBehaviour{});
  BenchOptions o = SmallRun(server.address());
  o.warmup_requests = 0;
  o.random_range_ratio = 0.1;
  o.seed = 42;
  ASSERT_EQ(RunCaptured(o).exit_code, kExitOk);
  ASSERT_EQ(RunCaptured(o).exit_code, kExitOk);
  std::vector<testing::SeenRequest> seen = server.seen();
  ASSERT_EQ(seen.size(), 12u);
  std::vector<int> first(6, -1), second(6, -1);
  std::string first_run_prefix = seen[0].request_id.substr(0, seen[0].request_id.rfind('-'));
  for (const testing::SeenRequest& s : seen) {
    const bool in_first = s.request_id.rfind(first_run_prefix, 0) == 0;
    (in_first ? first : second)[IndexOfRequestId(s.request_id)] =
        s.prompt_tokens * 1000 + s.max_new_tokens;
  }
  EXPECT_EQ(first, second);
  EXPECT_NE(std::count(first.begin(), first.end(), first[0]), 6);  // lengths do vary
}

// Interleaved groups against a server with a prefix cache of 64-token pages: every request
// after its group's first finds the group's 128-token prefix cached, and the table, the
// summary and the records say so. One request at a time, so the cache's contents at each
// arrival are fixed.
TEST(BenchAppTest, SharedPrefixRunReportsTheServersCachedTokens) {
  FakeGenerationServer server(FakeBehaviour{.prefix_cache_page_size = 64});
  BenchOptions o = SmallRun(server.address());
  o.max_concurrency = 1;
  o.shared_prefix_groups = 2;
  o.shared_prefix_len = 128;
  o.output_json = TempPath("summary.json");
  o.output_jsonl = TempPath("records.jsonl");
  Captured c = RunCaptured(o);
  ASSERT_EQ(c.exit_code, kExitOk) << c.err;
  EXPECT_THAT(c.out, HasSubstr("Shared prefix (groups x tokens):"));
  EXPECT_THAT(c.out, HasSubstr("2 x 128"));
  EXPECT_THAT(c.out, ::testing::ContainsRegex("Total cached prompt tokens: +512\n"));
  EXPECT_THAT(c.out, ::testing::ContainsRegex("Prefix cache hit rate \\(%\\): +59\\.26\n"));

  // The server saw the groups interleaved, each prompt the prefix and 16 tokens of its own.
  const std::vector<testing::SeenRequest> seen = server.seen();
  ASSERT_EQ(seen.size(), 8u);
  for (const testing::SeenRequest& s : seen) {
    SCOPED_TRACE(s.request_id);
    EXPECT_EQ(s.prompt_tokens, 128 + 16);  // warmup prompts are as long, sharing nothing
    const bool warmup = s.request_id.find("warmup") != std::string::npos;
    const int index = IndexOfRequestId(s.request_id);
    // The warmup primes no prefix: requests 0 and 1 are their groups' first.
    EXPECT_EQ(s.cached_prompt_tokens, !warmup && index >= 2 ? 128 : 0);
  }

  std::ifstream summary_file(o.output_json);
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["shared_prefix_groups"], 2);
  EXPECT_EQ(summary["shared_prefix_len"], 128);
  EXPECT_EQ(summary["total_input_tokens"], 6 * 144);
  EXPECT_EQ(summary["total_cached_prompt_tokens"], 4 * 128);
  EXPECT_DOUBLE_EQ(summary["prefix_cache_hit_rate"].get<double>(), 512.0 / 864.0);

  std::ifstream records_file(o.output_jsonl);
  std::string line;
  std::vector<int> cached;
  while (std::getline(records_file, line)) {
    cached.push_back(nlohmann::json::parse(line)["cached_prompt_tokens"].get<int>());
  }
  EXPECT_EQ(cached, (std::vector<int>{0, 0, 128, 128, 128, 128}));
}

TEST(BenchAppTest, SharedPrefixFlagsAreRefusedByNameAndValue) {
  struct Case {
    std::function<void(BenchOptions&)> edit;
    std::string message;
  };
  const Case cases[] = {
      {[](BenchOptions& o) { o.shared_prefix_len = 64; },
       "--shared-prefix-groups 0: must be >= 1 with --shared-prefix-len 64"},
      {[](BenchOptions& o) { o.shared_prefix_groups = 4; },
       "--shared-prefix-len 0: must be >= 1 with --shared-prefix-groups 4"},
      {[](BenchOptions& o) {
         o.shared_prefix_groups = 2;
         o.shared_prefix_len = -1;
       },
       "--shared-prefix-len -1: must be >= 0"},
      {[](BenchOptions& o) {
         o.shared_prefix_groups = -3;
         o.shared_prefix_len = 8;
       },
       "--shared-prefix-groups -3: must be >= 0"},
      {[](BenchOptions& o) {
         o.shared_prefix_groups = 7;  // SmallRun has 6 prompts
         o.shared_prefix_len = 8;
       },
       "--shared-prefix-groups 7: more groups than --num-prompts 6"},
      {[](BenchOptions& o) {
         o.dataset = DatasetKind::kPromptsFile;
         o.prompts_file = "prompts.jsonl";
         o.shared_prefix_groups = 2;
         o.shared_prefix_len = 8;
       },
       "only --dataset random has a shared-prefix workload"},
  };
  for (const Case& k : cases) {
    BenchOptions o = SmallRun("127.0.0.1:1");
    k.edit(o);
    const absl::Status status = Validate(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << k.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(k.message));
  }
  BenchOptions fine = SmallRun("127.0.0.1:1");
  fine.shared_prefix_groups = 6;
  fine.shared_prefix_len = 1;
  EXPECT_TRUE(Validate(fine).ok());
}

TEST(BenchAppTest, SharedPrefixLongerThanTheContextIsRefusedBeforeSending) {
  FakeGenerationServer server(FakeBehaviour{.max_context_length = 64});
  BenchOptions o = SmallRun(server.address());
  o.shared_prefix_groups = 2;
  o.shared_prefix_len = 48;  // 48 + 16 + 5 = 69 > 64
  Captured c = RunCaptured(o);
  EXPECT_EQ(c.exit_code, kExitCannotRun);
  EXPECT_THAT(c.err, HasSubstr("shared-prefix-len 48 + random-input-len 16 + "
                               "random-output-len 5 = 69 tokens; this model's context is 64"));
  EXPECT_TRUE(server.seen().empty());
}

TEST(BenchAppTest, PenaltiesAndLogprobsGoToTheSeededShareOfRequests) {
  FakeGenerationServer server(FakeBehaviour{});
  BenchOptions o = SmallRun(server.address());
  o.num_prompts = 40;
  o.warmup_requests = 0;
  o.max_concurrency = 8;
  o.temperature = 1.0f;
  o.top_p = 0.9f;
  o.presence_penalty = 0.25f;
  o.frequency_penalty = 0.5f;
  o.logprobs = 3;
  o.knobs_fraction = 0.5;
  o.seed = 7;
  o.output_json = TempPath("summary.json");
  Captured c = RunCaptured(o);
  ASSERT_EQ(c.exit_code, kExitOk) << c.err;
  EXPECT_THAT(c.out, HasSubstr("temperature 1, top_p 0.9, presence_penalty 0.25, "
                               "frequency_penalty 0.5, logprobs 3 (50% of requests)"));
  const std::vector<testing::SeenRequest> seen = server.seen();
  ASSERT_EQ(seen.size(), 40u);
  int with = 0;
  for (const testing::SeenRequest& s : seen) {
    const int index = IndexOfRequestId(s.request_id);
    SCOPED_TRACE(s.request_id);
    EXPECT_FLOAT_EQ(s.sampling.temperature(), 1.0f);
    EXPECT_FLOAT_EQ(s.sampling.top_p(), 0.9f);  // every request
    const bool knobs = SendsKnobs(7, index, 0.5);
    EXPECT_EQ(s.sampling.has_frequency_penalty(), knobs);
    EXPECT_EQ(s.sampling.has_presence_penalty(), knobs);
    EXPECT_EQ(s.sampling.has_logprobs(), knobs);
    if (knobs) {
      ++with;
      EXPECT_FLOAT_EQ(s.sampling.frequency_penalty(), 0.5f);
      EXPECT_FLOAT_EQ(s.sampling.presence_penalty(), 0.25f);
      EXPECT_EQ(s.sampling.logprobs(), 3);
    }
  }
  EXPECT_GT(with, 8);  // about half of 40 (the draw is fixed by the seed)
  EXPECT_LT(with, 32);
  std::ifstream summary_file(o.output_json);
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["sampling"]["frequency_penalty"], 0.5);
  EXPECT_EQ(summary["sampling"]["logprobs"], 3);
  EXPECT_EQ(summary["sampling"]["knobs_fraction"], 0.5);
  EXPECT_TRUE(SmallRun("x").top_p == std::nullopt);
}

TEST(BenchAppTest, SendsKnobsIsAllOrNoneAtTheEnds) {
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(SendsKnobs(3, i, 1.0));
    EXPECT_FALSE(SendsKnobs(3, i, 0.0));
  }
}

TEST(BenchAppTest, OutOfRangeSamplingFlagsAreRefusedByName) {
  BenchOptions o = SmallRun("127.0.0.1:1");
  o.knobs_fraction = 1.5;
  EXPECT_THAT(std::string(Validate(o).message()), HasSubstr("knobs-fraction"));
  o = SmallRun("127.0.0.1:1");
  o.frequency_penalty = 3.0f;
  EXPECT_THAT(std::string(Validate(o).message()), HasSubstr("frequency-penalty"));
  o = SmallRun("127.0.0.1:1");
  o.top_p = 0.0f;
  EXPECT_THAT(std::string(Validate(o).message()), HasSubstr("top-p"));
  o = SmallRun("127.0.0.1:1");
  o.logprobs = 21;
  EXPECT_THAT(std::string(Validate(o).message()), HasSubstr("logprobs"));
}

TEST(BenchAppTest, UnreachableServerExitsTwoNamingTheAddress) {
  BenchOptions o = SmallRun("127.0.0.1:1");
  o.connect_timeout_s = 0.5;
  Captured c = RunCaptured(o);
  EXPECT_EQ(c.exit_code, kExitCannotRun);
  EXPECT_THAT(c.err, HasSubstr("127.0.0.1:1"));
}

TEST(BenchAppTest, PromptsLongerThanTheContextAreRefusedBeforeSending) {
  FakeGenerationServer server(FakeBehaviour{.max_context_length = 64});
  BenchOptions o = SmallRun(server.address());
  o.random_input_len = 60;
  o.random_output_len = 10;
  Captured c = RunCaptured(o);
  EXPECT_EQ(c.exit_code, kExitCannotRun);
  EXPECT_THAT(c.err, HasSubstr("context is 64"));
  EXPECT_TRUE(server.seen().empty());
}

TEST(BenchAppTest, PromptsFileDatasetSendsTextAndCycles) {
  FakeGenerationServer server(FakeBehaviour{});
  const std::string path = TempPath("prompts.jsonl");
  std::ofstream(path) << "{\"text\": \"abc\", \"output_len\": 3}\n"
                         "{\"text\": \"defgh\", \"output_len\": 2}\n";
  BenchOptions o = SmallRun(server.address());
  o.dataset = DatasetKind::kPromptsFile;
  o.prompts_file = path;
  o.num_prompts = 5;
  o.warmup_requests = 0;
  o.output_json = TempPath("summary.json");
  Captured c = RunCaptured(o);
  ASSERT_EQ(c.exit_code, kExitOk) << c.err;
  std::ifstream summary_file(o.output_json);
  nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["completed"], 5);
  // The fake counts a text prompt's bytes as its tokens: 3+5+3+5+3.
  EXPECT_EQ(summary["total_input_tokens"], 19);
  EXPECT_EQ(summary["total_output_tokens"], 3 + 2 + 3 + 2 + 3);
}

#ifdef MLASERVE_BENCH_BIN
// The binary: flags reach the options, and --max-duration-s bounds the wall time of a run
// against a server that would otherwise take ~40 s.
TEST(BenchBinaryTest, RunsBoundedAndPrintsTheTable) {
  FakeGenerationServer server(FakeBehaviour{.token_delay = absl::Milliseconds(20)});
  const std::string summary_path = TempPath("summary.json");
  const std::string command =
      std::string(MLASERVE_BENCH_BIN) + " --server " + server.address() +
      " --num-prompts 20 --random-input-len 8 --random-output-len 2000 --max-concurrency 4"
      " --request-rate 200 --warmup-requests 1 --max-duration-s 0.6 --progress off"
      " --output-json " + summary_path + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  std::FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                          .count();
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_THAT(output, HasSubstr("Cancelled at the time bound:"));
  // Warmup (bounded at 0.6 s) + timed run (0.6 s) + start-up; far below the unbounded ~40 s.
  EXPECT_LT(wall, 10.0) << output;
  std::ifstream summary_file(summary_path);
  nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_TRUE(summary["time_bound_hit"].get<bool>());
  EXPECT_EQ(summary["completed"], 0);
  EXPECT_EQ(summary["failed"], 0);
  EXPECT_GE(summary["cancelled_at_bound"].get<int>(), 1);
  EXPECT_EQ(summary["cancelled_at_bound"].get<int>() + summary["not_started"].get<int>(), 20);
  EXPECT_LE(summary["peak_in_flight"].get<int>(), 4);
}

TEST(BenchBinaryTest, BadFlagValuesExitNonZeroWithAMessage) {
  const std::string command =
      std::string(MLASERVE_BENCH_BIN) + " --server 127.0.0.1:1 --request-rate fast 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[1024];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kExitCannotRun);
  EXPECT_THAT(output, HasSubstr("--request-rate fast"));
}

TEST(BenchBinaryTest, SharedPrefixFlagsReachTheOptions) {
  const std::string command = std::string(MLASERVE_BENCH_BIN) +
                              " --server 127.0.0.1:1 --shared-prefix-len 256 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[1024];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kExitCannotRun);
  EXPECT_THAT(output, HasSubstr("--shared-prefix-groups 0: must be >= 1 with "
                                "--shared-prefix-len 256"));
}
#endif

}  // namespace
}  // namespace mlaserve::bench
