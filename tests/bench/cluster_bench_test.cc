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
#include <httplib.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <gmock/gmock.h>

#include "absl/strings/str_cat.h"
#include "common/testing/test_pki.h"
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

TEST_F(ClusterBenchTest, PenaltiesAndLogprobsOnHalfTheRequests) {
  BenchOptions b = Options("knobs");
  b.temperature = 1.0f;
  b.top_p = 0.9f;
  b.frequency_penalty = 0.5f;
  b.logprobs = 3;
  b.knobs_fraction = 0.5;
  const int code = RunBenchmark(b, stdout, stderr);
  ASSERT_EQ(code, kExitOk) << "router log:\n" << cluster_->router().LogTail();
  nlohmann::json s = ReadJson(b.output_json);
  EXPECT_EQ(s["completed"], 6);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_EQ(s["sampling"]["logprobs"], 3);
  EXPECT_TRUE(cluster_->WaitAllPagesFree(absl::Seconds(15)).ok());
}

// Conversations against the real workers' prefix caches: every turn succeeds with counts
// that agree, and later turns (each repeating the previous prompt and answer, 120+ tokens, so
// at least one whole 64-token page) find some of their prompt cached.
TEST_F(ClusterBenchTest, MultiTurnConversationsReuseTheirEarlierTurns) {
  BenchOptions b = Options("multi_turn");
  b.random_input_len = 120;
  b.random_output_len = 20;
  b.random_range_ratio = 1.0;
  b.multi_turn_conversations = 2;
  b.multi_turn_turns = 3;
  b.multi_turn_message_len = 10;
  b.num_prompts = 6;
  b.max_concurrency = 2;
  const int code = RunBenchmark(b, stdout, stderr);
  ASSERT_EQ(code, kExitOk) << "router log:\n" << cluster_->router().LogTail();
  nlohmann::json s = ReadJson(b.output_json);
  EXPECT_EQ(s["completed"], 6);
  EXPECT_EQ(s["total_input_tokens"], 2 * (120 + 150 + 180));
  EXPECT_EQ(s["total_output_tokens"], 6 * 20);
  EXPECT_EQ(s["later_turns_input_tokens"], 2 * (150 + 180));
  EXPECT_GT(s["later_turns_cached_prompt_tokens"].get<int>(), 0);
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

// The same cluster with mutual TLS between its processes (the test PKI's node certificate on
// every one), API keys on the router's public APIs, its OpenAI HTTP API on (https) and its
// metrics on HTTPS (--metrics-tls): mlaserve-bench must run over TLS on both backends, and
// fail at once, naming the CA, when told to trust one that did not sign the router.
class TlsClusterBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kModel) + "/model.safetensors")) {
      GTEST_SKIP() << kModel << " is missing (run tools/make_fixtures.py)";
    }
    std::string templ = ::testing::TempDir() + "/bench-tls-cluster-XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    auto pki = common::testing::WriteTestPki(dir_);
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
    key_file_ = dir_ + "/api.key";
    std::ofstream(key_file_) << kApiKey << "\n";

    mlaserve::testing::ClusterOptions o;
    o.model_dir = kModel;
    o.security_flags = {"--tls-cert", pki_.node_cert, "--tls-key", pki_.node_key,
                        "--tls-ca", pki_.ca, "--tls-server-name",
                        common::testing::TestPki::kServerName, "--metrics-tls"};
    o.client_tls = {.insecure = false, .cert_file = pki_.node_cert, .key_file = pki_.node_key,
                    .ca_file = pki_.ca, .server_name = common::testing::TestPki::kServerName};
    o.admin_token = "admin-token-0123456789abcdef";
    o.extra_router_flags = {"--api-key-file", key_file_, "--http-port", "0", "--metrics-port", "0"};
    auto cluster = mlaserve::testing::Cluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    auto http = cluster_->router().WaitForLine("http listening on ", absl::Seconds(10));
    ASSERT_TRUE(http.ok()) << http.status();
    http_address_ = *http;
  }
  void TearDown() override {
    cluster_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  BenchOptions Options(const std::string& server, const std::string& name) const {
    BenchOptions b;
    b.server = server;
    b.num_prompts = 6;
    b.random_input_len = 48;
    b.random_output_len = 8;
    b.max_concurrency = 3;
    b.warmup_requests = 1;
    b.request_timeout_s = 120;
    b.progress = ProgressMode::kOff;
    b.tls.ca_file = pki_.ca;
    b.tls.server_name = common::testing::TestPki::kServerName;
    b.api_key_file = key_file_;
    b.output_json = dir_ + "/" + name + ".json";
    return b;
  }

  // The router's /metrics URL, from its log ("metrics on https://HOST:PORT/metrics").
  std::string MetricsUrl() const {
    std::ifstream log(cluster_->router().log_path());
    const std::string marker = "metrics on ";
    for (std::string line; std::getline(log, line);) {
      const size_t at = line.find(marker);
      if (at != std::string::npos) return line.substr(at + marker.size());
    }
    return "";
  }

  static constexpr char kApiKey[] = "bench-api-key-0123456789";
  std::string dir_;
  common::testing::TestPki pki_;
  std::string key_file_;
  std::unique_ptr<mlaserve::testing::Cluster> cluster_;
  std::string http_address_;
};

// Output of `command` (stderr included) and its exit code.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"", -1};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::string BenchCommand(const BenchOptions& b, const std::string& backend,
                         int connect_timeout_s = 10) {
  return absl::StrCat(MLASERVE_BENCH_BIN, " --backend ", backend, " --server ", b.server,
                      " --tls-ca ", b.tls.ca_file, " --tls-server-name ", b.tls.server_name,
                      " --api-key-file ", b.api_key_file, " --num-prompts ", b.num_prompts,
                      " --random-input-len ", b.random_input_len, " --random-output-len ",
                      b.random_output_len, " --max-concurrency ", b.max_concurrency,
                      " --connect-timeout-s ", connect_timeout_s,
                      " --progress off --output-json ", b.output_json);
}

TEST_F(TlsClusterBenchTest, BothBackendsRunOverTlsWithTheApiKey) {
  // gRPC, through the binary: the flags as a user types them.
  const BenchOptions grpc = Options(cluster_->router_address(), "grpc");
  auto [grpc_output, grpc_code] = RunCommand(BenchCommand(grpc, "grpc"));
  ASSERT_EQ(grpc_code, kExitOk) << grpc_output << "\nrouter log:\n" << cluster_->router().LogTail();
  nlohmann::json g = ReadJson(grpc.output_json);
  EXPECT_EQ(g["completed"], 6);
  EXPECT_EQ(g["failed"], 0);
  EXPECT_EQ(g["total_output_tokens"], 6 * 8);

  // The OpenAI HTTP API over https, in process.
  BenchOptions http = Options(http_address_, "openai");
  http.backend = Backend::kOpenAi;
  // With the sampler's other knobs: the streamed chunks carry logprobs, the counts stay.
  http.temperature = 1.0f;
  http.top_p = 0.9f;
  http.frequency_penalty = 0.5f;
  http.presence_penalty = 0.25f;
  http.logprobs = 2;
  ASSERT_EQ(RunBenchmark(http, stdout, stderr), kExitOk)
      << "router log:\n" << cluster_->router().LogTail();
  nlohmann::json h = ReadJson(http.output_json);
  EXPECT_EQ(h["completed"], 6);
  EXPECT_EQ(h["failed"], 0);
  EXPECT_EQ(h["total_output_tokens"], 6 * 8);

  // The router counted both runs (and their warmups); its metrics come over HTTPS to a client
  // that trusts the cluster CA.
  const std::string url = MetricsUrl();
  ASSERT_EQ(url.rfind("https://127.0.0.1:", 0), 0u) << "metrics line: '" << url << "'";
  const std::string port = url.substr(std::string("https://127.0.0.1:").size(),
                                      url.size() - std::string("https://127.0.0.1:").size() -
                                          std::string("/metrics").size());
  httplib::SSLClient scraper("127.0.0.1", std::stoi(port));
  scraper.set_ca_cert_path(pki_.ca.c_str());
  scraper.enable_server_certificate_verification(true);
  scraper.set_connection_timeout(5);
  scraper.set_read_timeout(5);
  httplib::Result metrics = scraper.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, ::testing::HasSubstr("mlaserve_router_requests_total 14\n"));
  absl::Status freed = cluster_->WaitAllPagesFree(absl::Seconds(15));
  EXPECT_TRUE(freed.ok()) << freed;
}

TEST_F(TlsClusterBenchTest, ACaThatDidNotSignTheRouterExitsTwoNamingIt) {
  BenchOptions grpc = Options(cluster_->router_address(), "rogue-grpc");
  grpc.tls.ca_file = pki_.rogue_ca;
  // gRPC keeps retrying a failed handshake until the connect timeout; then says why.
  auto [grpc_output, grpc_code] = RunCommand(BenchCommand(grpc, "grpc", /*connect_timeout_s=*/1));
  EXPECT_EQ(grpc_code, kExitCannotRun) << grpc_output;
  EXPECT_THAT(grpc_output, ::testing::HasSubstr("--tls-ca " + pki_.rogue_ca));
  EXPECT_THAT(grpc_output, ::testing::HasSubstr("certificate verify failed"));

  BenchOptions http = Options(http_address_, "rogue-openai");
  http.tls.ca_file = pki_.rogue_ca;
  auto [http_output, http_code] = RunCommand(BenchCommand(http, "openai", 1));
  EXPECT_EQ(http_code, kExitCannotRun) << http_output;
  EXPECT_THAT(http_output, ::testing::HasSubstr("GET /v1/models on https://"));
  EXPECT_THAT(http_output, ::testing::HasSubstr("unable to get local issuer certificate"));
  EXPECT_THAT(http_output, ::testing::HasSubstr("--tls-ca " + pki_.rogue_ca));
  EXPECT_FALSE(std::filesystem::exists(grpc.output_json));  // nothing was run
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
