// mlaserve-bench's multi-turn workload end to end against the fake Generation server: the
// flags (and their refusals), the table's and summary's per-turn rows, the records, and the
// binary's flags.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/serving/bench_app.h"
#include "bench/serving/bench_options.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_run.h"
#include "tests/bench/fake_generation_server.h"

namespace mlaserve::bench {
namespace {

using ::testing::HasSubstr;
using testing::FakeBehaviour;
using testing::FakeGenerationServer;
using testing::IndexOfRequestId;
using testing::TempPath;
using testing::SeenRequest;

BenchOptions MultiTurnRun(const std::string& server) {
  BenchOptions o = testing::SmallRun(server);
  o.random_input_len = 100;
  o.random_output_len = 29;
  o.multi_turn_conversations = 2;
  o.multi_turn_turns = 3;
  o.multi_turn_message_len = 35;
  o.max_concurrency = 1;
  return o;
}

// Against a page cache (64 tokens) that keeps answers, one conversation at a time: turn 1
// (100 tokens) finds nothing; its 100 + 29 - 1 = 128 computed positions are two pages, which
// turn 2 (164 tokens) finds; turn 2 leaves 164 + 28 = 192 (three pages) for turn 3 (228).
TEST(MultiTurnBenchTest, TableSummaryAndRecordsSplitTheTurns) {
  FakeGenerationServer server(
      FakeBehaviour{.prefix_cache_page_size = 64, .prefix_cache_keeps_answers = true});
  BenchOptions o = MultiTurnRun(server.address());
  o.output_json = TempPath("summary.json");
  o.output_jsonl = TempPath("records.jsonl");
  const testing::Captured run = testing::RunCaptured(o);
  const std::string& table = run.out;
  ASSERT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_THAT(table, ::testing::ContainsRegex("Conversations x turns: +2 x 3\n"));
  EXPECT_THAT(table, ::testing::ContainsRegex("New message per turn \\(tokens\\): +35\n"));
  EXPECT_THAT(table, HasSubstr("Conversation rate (conv/s):"));
  EXPECT_THAT(table, ::testing::ContainsRegex("Requests in the dataset: +6\n"));
  EXPECT_THAT(table, HasSubstr("Mean TTFT turn 1 (ms):"));
  EXPECT_THAT(table, HasSubstr("Median TTFT turn 1 (ms):"));
  EXPECT_THAT(table, HasSubstr("Mean TTFT later turns (ms):"));
  EXPECT_THAT(table, HasSubstr("Median TTFT later turns (ms):"));
  EXPECT_THAT(table, ::testing::ContainsRegex("Total cached prompt tokens: +640\n"));
  EXPECT_THAT(table, ::testing::ContainsRegex("Prefix cache hit rate \\(%\\): +65\\.04\n"));
  EXPECT_THAT(table, ::testing::ContainsRegex("Later turns' cached prompt tokens: +640\n"));
  EXPECT_THAT(table,
              ::testing::ContainsRegex("Later turns' prefix cache hit rate \\(%\\): +81\\.63\n"));

  std::vector<int> cached_by_index(6, -1);
  for (const SeenRequest& s : server.seen()) {
    if (s.request_id.find("warmup") != std::string::npos) {
      EXPECT_EQ(s.prompt_tokens, 100);
      EXPECT_EQ(s.cached_prompt_tokens, 0);
      continue;
    }
    cached_by_index[IndexOfRequestId(s.request_id)] = s.cached_prompt_tokens;
  }
  EXPECT_EQ(cached_by_index, (std::vector<int>{0, 128, 192, 0, 128, 192}));

  std::ifstream summary_file(o.output_json);
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["multi_turn_turns"], 3);
  EXPECT_EQ(summary["multi_turn_conversations"], 2);
  EXPECT_EQ(summary["multi_turn_message_len"], 35);
  EXPECT_EQ(summary["num_prompts"], 6);
  EXPECT_EQ(summary["completed"], 6);
  EXPECT_EQ(summary["total_input_tokens"], 2 * (100 + 164 + 228));
  EXPECT_EQ(summary["total_cached_prompt_tokens"], 640);
  EXPECT_EQ(summary["later_turns_input_tokens"], 2 * (164 + 228));
  EXPECT_EQ(summary["later_turns_cached_prompt_tokens"], 640);
  EXPECT_DOUBLE_EQ(summary["later_turns_prefix_cache_hit_rate"].get<double>(), 640.0 / 784.0);
  EXPECT_EQ(summary["not_sent_after_failure"], 0);
  for (const char* key : {"mean_ttft_turn1_ms", "median_ttft_turn1_ms", "p99_ttft_turn1_ms",
                          "mean_ttft_later_turns_ms", "median_ttft_later_turns_ms"}) {
    EXPECT_GT(summary[key].get<double>(), 0) << key;
  }

  std::ifstream records_file(o.output_jsonl);
  std::string line;
  std::vector<std::pair<int, int>> turns;
  while (std::getline(records_file, line)) {
    const nlohmann::json r = nlohmann::json::parse(line);
    turns.emplace_back(r["conversation"].get<int>(), r["turn"].get<int>());
  }
  EXPECT_EQ(turns, (std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {0, 3}, {1, 1}, {1, 2},
                                                     {1, 3}}));
}

TEST(MultiTurnBenchTest, FlagsAreRefusedByNameAndValue) {
  struct Case {
    std::function<void(BenchOptions&)> edit;
    std::string message;
  };
  const Case cases[] = {
      {[](BenchOptions& o) { o.multi_turn_turns = -1; },
       "--multi-turn-turns -1: must be >= 0 (0 or 1 = off)"},
      {[](BenchOptions& o) { o.multi_turn_conversations = 0; },
       "--multi-turn-conversations 0: must be >= 1 with --multi-turn-turns 3"},
      {[](BenchOptions& o) { o.multi_turn_message_len = 0; },
       "--multi-turn-message-len 0: must be >= 1 with --multi-turn-turns 3"},
      {[](BenchOptions& o) { o.num_prompts = 7; },
       "--num-prompts 7: with --multi-turn-conversations 2 x --multi-turn-turns 3 the run "
       "sends 6 requests; leave --num-prompts out or give 6"},
      {[](BenchOptions& o) { o.backend = Backend::kOpenAi; },
       "--multi-turn-turns 3: needs --backend grpc"},
      {[](BenchOptions& o) {
         o.dataset = DatasetKind::kPromptsFile;
         o.prompts_file = "prompts.jsonl";
       },
       "--multi-turn-turns 3: only --dataset random has a multi-turn workload"},
      {[](BenchOptions& o) {
         o.shared_prefix_groups = 3;
         o.shared_prefix_len = 64;
       },
       "--shared-prefix-groups 3: more groups than --multi-turn-conversations 2"},
      {[](BenchOptions& o) {
         o.multi_turn_turns = 1;
         o.num_prompts = 6;
       },
       "--multi-turn-conversations 2: needs --multi-turn-turns >= 2 (it is 1)"},
      {[](BenchOptions& o) {
         o.multi_turn_turns = 0;
         o.multi_turn_conversations = 0;
       },
       "--multi-turn-message-len 35: needs --multi-turn-turns >= 2 (it is 0)"},
      {[](BenchOptions& o) {
         o.multi_turn_conversations = 1 << 20;
         o.multi_turn_turns = 1 << 12;
       },
       "--multi-turn-conversations 1048576 x --multi-turn-turns 4096 = 4294967296 requests"},
  };
  for (const Case& k : cases) {
    BenchOptions o = MultiTurnRun("127.0.0.1:1");
    k.edit(o);
    const absl::Status status = Validate(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << k.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(k.message));
  }
  EXPECT_TRUE(Validate(MultiTurnRun("127.0.0.1:1")).ok());
  BenchOptions with_prefix = MultiTurnRun("127.0.0.1:1");
  with_prefix.shared_prefix_groups = 2;
  with_prefix.shared_prefix_len = 64;
  EXPECT_TRUE(Validate(with_prefix).ok());
  BenchOptions off = MultiTurnRun("127.0.0.1:1");
  off.multi_turn_turns = 1;  // 1 = off, as 0
  off.multi_turn_conversations = 0;
  off.multi_turn_message_len = 0;
  EXPECT_TRUE(Validate(off).ok());
}

TEST(MultiTurnBenchTest, ConversationsLongerThanTheContextAreRefusedBeforeSending) {
  FakeGenerationServer server(FakeBehaviour{.max_context_length = 300});
  BenchOptions o = MultiTurnRun(server.address());  // 100 + 2 x (29 + 35) + 29 = 257 fits
  o.multi_turn_turns = 4;                           // 321 does not
  o.num_prompts = 8;
  const testing::Captured run = testing::RunCaptured(o);
  EXPECT_EQ(run.exit_code, kExitCannotRun);
  EXPECT_THAT(run.err, HasSubstr("multi-turn-turns 4: the last turn's prompt can reach "
                                 "292 tokens"));
  EXPECT_TRUE(server.seen().empty());
}

#ifdef MLASERVE_BENCH_BIN
std::string RunBinary(const std::string& args, int* exit_code) {
  const std::string command = std::string(MLASERVE_BENCH_BIN) + " " + args + " 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  if (pipe == nullptr) return output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

TEST(MultiTurnBinaryTest, FlagsReachTheOptionsAndNumPromptsIsConversationsTimesTurns) {
  FakeGenerationServer server(FakeBehaviour{});
  const std::string summary_path = TempPath("summary.json");
  int code = -1;
  std::string output = RunBinary(
      "--server " + server.address() + " --multi-turn-conversations 3 --multi-turn-turns 2"
      " --multi-turn-message-len 5 --random-input-len 8 --random-output-len 3"
      " --max-concurrency 2 --warmup-requests 0 --progress off --output-json " + summary_path,
      &code);
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, ::testing::ContainsRegex("Conversations x turns: +3 x 2\n"));
  std::ifstream summary_file(summary_path);
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["num_prompts"], 6);
  EXPECT_EQ(summary["completed"], 6);
  EXPECT_EQ(server.seen().size(), 6u);

  output = RunBinary("--server 127.0.0.1:1 --backend openai --multi-turn-conversations 3"
                     " --multi-turn-turns 2 --multi-turn-message-len 5", &code);
  EXPECT_EQ(code, kExitCannotRun);
  EXPECT_THAT(output, HasSubstr("--multi-turn-turns 2: needs --backend grpc"));
  output = RunBinary("--server 127.0.0.1:1 --num-prompts 5 --multi-turn-conversations 3"
                     " --multi-turn-turns 2 --multi-turn-message-len 5", &code);
  EXPECT_EQ(code, kExitCannotRun);
  EXPECT_THAT(output, HasSubstr("--num-prompts 5: with --multi-turn-conversations 3"));
}
#endif

}  // namespace
}  // namespace mlaserve::bench
