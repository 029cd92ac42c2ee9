// mlaserve-bench against a real local CPU cluster (router + prefill + decode processes on the
// fixture checkpoint, started by the integration harness): a short run must succeed with
// token counts that agree with the server, and a run cut by --max-duration-s must leave the
// cluster with every KV page free.
//
// Built as a skipping test, with the reason, when the serving binaries are not part of the
// build (MLASERVE_BENCH_CLUSTER is then undefined).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "bench/serving/bench_app.h"
#include "nlohmann/json.hpp"

#ifdef MLASERVE_BENCH_CLUSTER
#include "tests/integration/cluster.h"
#endif

namespace mlaserve::bench {
namespace {

constexpr char kModel[] = "tests/fixtures/models/deepseek_v2";

#ifdef MLASERVE_BENCH_CLUSTER

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class ClusterBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kModel) + "/model.safetensors")) {
      GTEST_SKIP() << kModel << " is missing (run tools/make_fixtures.py)";
    }
    mlaserve::testing::ClusterOptions o;
    o.model_dir = kModel;
    auto cluster = mlaserve::testing::Cluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  BenchOptions Options(const std::string& name) {
    BenchOptions b;
    b.server = cluster_->router_address();
    b.num_prompts = 6;
    b.random_input_len = 48;
    b.random_output_len = 8;
    b.random_range_ratio = 0.5;
    b.max_concurrency = 3;
    b.warmup_requests = 1;
    b.request_timeout_s = 120;
    b.progress = ProgressMode::kOff;
    b.output_json = cluster_->dir() + "/" + name + ".json";
    b.output_jsonl = cluster_->dir() + "/" + name + ".jsonl";
    return b;
  }

  std::unique_ptr<mlaserve::testing::Cluster> cluster_;
};

TEST_F(ClusterBenchTest, ShortRunSucceedsAndCountsAgree) {
  BenchOptions b = Options("short");
  const int code = RunBenchmark(b, stdout, stderr);
  ASSERT_EQ(code, kExitOk) << "router log:\n" << cluster_->router().LogTail();
  nlohmann::json s = ReadJson(b.output_json);
  EXPECT_EQ(s["completed"], 6);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_EQ(s["model"], "deepseek_v2");
  std::ifstream records(b.output_jsonl);
  std::string line;
  int64_t requested = 0, output = 0, input = 0;
  while (std::getline(records, line)) {
    nlohmann::json r = nlohmann::json::parse(line);
    requested += r["requested_output_len"].get<int>();
    output += r["output_len"].get<int>();
    input += r["input_len"].get<int>();
    EXPECT_EQ(r["itl_s"].size(), r["output_len"].get<size_t>() - 1);
    EXPECT_GT(r["ttft_s"].get<double>(), 0);
  }
  EXPECT_EQ(output, requested);  // ignore_eos: every output reaches its length
  EXPECT_EQ(s["total_output_tokens"], output);
  EXPECT_EQ(s["total_input_tokens"], input);
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(15)).ok());
}

TEST_F(ClusterBenchTest, RunCutByTheTimeBoundLeavesNoPagesBehind) {
  BenchOptions b = Options("bounded");
  // 48 requests of 460 tokens, 3 at a time: ~22k tokens, seconds of work on the CPU backend
  // (the fixture decodes a few thousand tokens/s), cut at 0.25 s.
  b.num_prompts = 48;
  b.random_output_len = 460;  // 48 + 460 fits the fixture's context of 512
  b.random_range_ratio = 1.0;
  b.warmup_requests = 0;
  b.max_duration_s = 0.25;
  const int code = RunBenchmark(b, stdout, stderr);
  EXPECT_EQ(code, kExitOk) << "router log:\n" << cluster_->router().LogTail();
  nlohmann::json s = ReadJson(b.output_json);
  EXPECT_TRUE(s["time_bound_hit"].get<bool>());
  EXPECT_GE(s["cancelled_at_bound"].get<int>(), 1);
  EXPECT_EQ(s["completed"].get<int>() + s["cancelled_at_bound"].get<int>() +
                s["not_started"].get<int>(),
            48);
  absl::Status freed = cluster_->WaitAllPagesFree(absl::Seconds(15));
  EXPECT_TRUE(freed.ok()) << freed << "\ndecode log:\n" << cluster_->decode().LogTail();
}

#else

TEST(ClusterBenchTest, SkippedWithoutServingBinaries) {
  GTEST_SKIP() << "mlaserve-router, mlaserve-prefill, mlaserve-decode, mlaserve-run or "
                  "mlaservectl is not part of this build (CMake found no such target), so "
                  "the benchmark cannot be run against a local cluster here";
}

#endif

}  // namespace
}  // namespace mlaserve::bench
