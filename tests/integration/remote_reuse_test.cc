// Remote prefill reuse end to end (docs/kvtransfer.md, "Pages the decode worker already
// holds"): router, prefill and decode processes on the CPU backend, every prompt prefilled on
// the prefill worker (local-prefill threshold 0). A conversation's second turn is prefilled
// remotely again, but its decode worker keeps the pages of the first turn it holds (prompt and
// answer), so only the rest is shipped. Its tokens equal those of a cluster with
// --remote-prefill-reuse=false and mlaserve-run's; the workers' metrics show the pages kept
// and the bytes not sent; every KV page is free at the end.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

constexpr absl::Duration kRequestTimeout = absl::Seconds(60);
constexpr absl::Duration kFreeTimeout = absl::Seconds(15);

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(2 + (i * 37 + salt * 11) % 250);
  return ids;
}

v1::GenerateRequest GreedyRequest(const std::vector<int32_t>& prompt, int max_new_tokens) {
  v1::GenerateRequest r;
  for (int32_t id : prompt) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  r.mutable_sampling()->set_temperature(0.0f);
  return r;
}

// The value of the series `series` (name and labels, as rendered) on `process`'s /metrics
// (its log names the port); -1 when it cannot be read.
double Metric(const ServerProcess& process, const std::string& series) {
  std::smatch m;
  const std::string log = process.LogTail(1 << 20);
  if (!std::regex_search(log, m, std::regex("metrics on http://[^:]+:([0-9]+)/metrics"))) {
    return -1;
  }
  httplib::Client client("127.0.0.1", std::stoi(m[1]));
  httplib::Result r = client.Get("/metrics");
  if (!r) return -1;
  const std::string line = "\n" + series + " ";
  const size_t at = r->body.find(line);
  if (at == std::string::npos) return -1;
  const size_t from = at + line.size();
  double v = -1;
  if (!absl::SimpleAtod(r->body.substr(from, r->body.find('\n', from) - from), &v)) return -1;
  return v;
}

constexpr char kReused[] = "mlaserve_decode_kv_pages_reused_total";
constexpr char kSkipped[] = "mlaserve_kv_transfer_skipped_bytes_total";
constexpr char kReceived[] = "mlaserve_kv_transfer_bytes_total{direction=\"received\"}";
constexpr char kRouterReused[] = "mlaserve_router_decode_reused_tokens_total";

struct Conversation {
  std::vector<int32_t> first, second;    // the turns' prompts
  std::vector<int32_t> answer1, answer2;
  v1::GenerateComplete complete2;
};

// A fixture model and the decode worker's parallel layout (docs/parallel.md): one rank, two
// tensor-attention ranks (the cache replicated on both: the kept pages must be on both, the
// received ones reach both), or two data-attention ranks (a cache per rank: the turn must go to
// the rank that holds the earlier one).
struct Setup {
  const char* model;
  std::vector<std::string> decode_layout;
};

class RemoteReuseClusterTest : public ::testing::TestWithParam<Setup> {
 protected:
  void SetUp() override {
    const std::filesystem::path model =
        std::filesystem::path("tests/fixtures/models") / GetParam().model;
    if (!std::filesystem::exists(model / "model.safetensors")) {
      GTEST_SKIP() << "no fixture model at " << model;
    }
    model_ = model.string();
  }

  absl::StatusOr<std::unique_ptr<Cluster>> Start(bool reuse) {
    ClusterOptions o;
    o.model_dir = model_;
    o.local_prefill_threshold = 0;  // every prompt to the prefill worker
    o.worker_metrics = true;
    o.extra_decode_flags = GetParam().decode_layout;
    o.extra_router_flags = {"--metrics-port", "0",
                            absl::StrCat("--remote-prefill-reuse=", reuse ? "true" : "false")};
    return Cluster::Start(o);
  }

  // Two turns: 100 prompt tokens answered with 40 (139 positions computed on the decode
  // worker: its pages 0 and 1 stay cached there, page 1 holding answer tokens the decode
  // worker computed itself), then the prompt, the answer and 30 more tokens (170: 3 pages).
  void Converse(Cluster& cluster, Conversation* c) {
    c->first = Prompt(100, 3);
    GenerateResult r1 =
        RunGenerate(cluster.generation(), GreedyRequest(c->first, 40), kRequestTimeout);
    ASSERT_TRUE(r1.status.ok()) << r1.status.error_message() << "\nrouter log:\n"
                                << cluster.router().LogTail();
    ASSERT_TRUE(r1.complete.has_value());
    EXPECT_FALSE(r1.complete->local_prefill());
    ASSERT_EQ(r1.ids.size(), 40u);
    c->answer1 = r1.ids;
    ASSERT_TRUE(cluster.WaitAllPagesFree(kFreeTimeout).ok());

    c->second = c->first;
    c->second.insert(c->second.end(), r1.ids.begin(), r1.ids.end());
    for (int32_t id : Prompt(30, 5)) c->second.push_back(id);
    GenerateResult r2 =
        RunGenerate(cluster.generation(), GreedyRequest(c->second, 16), kRequestTimeout);
    ASSERT_TRUE(r2.status.ok()) << r2.status.error_message() << "\ndecode log:\n"
                                << cluster.decode().LogTail();
    ASSERT_TRUE(r2.complete.has_value());
    EXPECT_FALSE(r2.complete->local_prefill());
    c->answer2 = r2.ids;
    c->complete2 = *r2.complete;
    EXPECT_TRUE(cluster.WaitAllPagesFree(kFreeTimeout).ok());
  }

  std::string model_;
};

TEST_P(RemoteReuseClusterTest, TheSecondTurnShipsOnlyWhatTheDecodeWorkerLacks) {
  Conversation on, off;
  {
    auto cluster = Start(/*reuse=*/true);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    ASSERT_NO_FATAL_FAILURE(Converse(**cluster, &on));
    Cluster& c = **cluster;
    // The first turn kept 2 pages (128 of the second prompt's 170 tokens) on the decode worker.
    EXPECT_EQ(Metric(c.decode(), kReused), 2);
    EXPECT_EQ(Metric(c.router(), kRouterReused), 128);
    // Pages shipped: 2 (the first prompt) + 1 (the second's last); 2 not sent.
    const double received = Metric(c.decode(), kReceived);
    const double skipped = Metric(c.prefill(), kSkipped);
    ASSERT_GT(received, 0);
    EXPECT_EQ(skipped * 3, received * 2) << "received " << received << ", skipped " << skipped;
  }
  {
    auto cluster = Start(/*reuse=*/false);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    ASSERT_NO_FATAL_FAILURE(Converse(**cluster, &off));
    Cluster& c = **cluster;
    EXPECT_EQ(Metric(c.decode(), kReused), 0);
    EXPECT_EQ(Metric(c.prefill(), kSkipped), 0);
    EXPECT_EQ(Metric(c.router(), kRouterReused), 0);
  }
  EXPECT_EQ(on.answer1, off.answer1);
  EXPECT_EQ(on.answer2, off.answer2);
  // The prefill worker's own prefix cache is unchanged: it held the first prompt's whole page.
  EXPECT_EQ(on.complete2.cached_prompt_tokens(), off.complete2.cached_prompt_tokens());
  // And both are mlaserve-run's (the single-process reference).
  auto ref1 = ReferenceTokens(model_, on.first, 40, 0.0f, std::nullopt);
  ASSERT_TRUE(ref1.ok()) << ref1.status();
  EXPECT_EQ(on.answer1, *ref1);
  auto ref2 = ReferenceTokens(model_, on.second, 16, 0.0f, std::nullopt);
  ASSERT_TRUE(ref2.ok()) << ref2.status();
  EXPECT_EQ(on.answer2, *ref2);
}

// deepseek_v32: the DSA indexer keys travel with the latent cache, and are reused with it.
INSTANTIATE_TEST_SUITE_P(
    Fixtures, RemoteReuseClusterTest,
    ::testing::Values(
        Setup{"deepseek_v2", {}}, Setup{"deepseek_v32", {}},
        Setup{"deepseek_v2",
              {"--tp-size", "2", "--attention-parallel", "tensor", "--moe-parallel", "expert"}},
        Setup{"deepseek_v2",
              {"--tp-size", "2", "--attention-parallel", "data", "--moe-parallel", "expert"}}),
    [](const ::testing::TestParamInfo<Setup>& info) {
      std::string name = info.param.model;
      if (!info.param.decode_layout.empty()) {
        absl::StrAppend(&name, "_decode_tp2_", info.param.decode_layout[3]);
      }
      return name;
    });

}  // namespace
}  // namespace mlaserve::testing
