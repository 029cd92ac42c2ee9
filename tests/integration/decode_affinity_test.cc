// The router's decode affinity end to end (docs/serving.md, "Prefix affinity", "Decode
// workers"): a router, a prefill worker and two decode worker processes on the CPU backend. A
// conversation's first turn is served by the decode worker that a ranking by load alone would
// not pick for its second; the second turn still goes there and prefills itself from that
// worker's prefix cache.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

constexpr absl::Duration kRequestTimeout = absl::Seconds(60);
constexpr absl::Duration kFreeTimeout = absl::Seconds(15);
constexpr absl::Duration kAdminTimeout = absl::Seconds(5);
// Prompts up to this many tokens the decode workers prefill themselves.
constexpr int kLocalPrefillThreshold = 120;

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

class DecodeAffinityClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path model = "tests/fixtures/models/deepseek_v2";
    if (!std::filesystem::exists(model / "model.safetensors")) {
      GTEST_SKIP() << "no fixture model at " << model;
    }
    model_ = model.string();
  }

  // Two decode workers (and one prefill worker) with `router_flags`.
  absl::StatusOr<std::unique_ptr<Cluster>> Start(std::vector<std::string> router_flags) {
    ClusterOptions o;
    o.model_dir = model_;
    o.decode_workers = 2;
    o.local_prefill_threshold = kLocalPrefillThreshold;
    o.extra_router_flags = std::move(router_flags);
    return Cluster::Start(o);
  }

  // The decode workers' ids, sorted: the first wins a tie on load (routing_policy.h).
  static absl::StatusOr<std::vector<std::string>> DecodeIds(Cluster& cluster) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kAdminTimeout));
    v1::ListWorkersRequest request;
    request.set_role(v1::WORKER_ROLE_DECODE);
    v1::ListWorkersResponse response;
    if (grpc::Status s = cluster.admin().ListWorkers(&context, request, &response); !s.ok()) {
      return absl::UnavailableError(s.error_message());
    }
    std::vector<std::string> ids;
    for (const v1::WorkerStatus& w : response.workers()) ids.push_back(w.id());
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  static absl::Status SetDraining(Cluster& cluster, const std::string& id, bool draining) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kAdminTimeout));
    v1::WorkerStatus status;
    grpc::Status s;
    if (draining) {
      v1::DrainWorkerRequest request;
      request.set_id(id);
      s = cluster.admin().DrainWorker(&context, request, &status);
    } else {
      v1::UndrainWorkerRequest request;
      request.set_id(id);
      s = cluster.admin().UndrainWorker(&context, request, &status);
    }
    return s.ok() ? absl::OkStatus() : absl::UnavailableError(s.error_message());
  }

  // A conversation of two turns. The first (100 tokens, prefilled locally) goes to the decode
  // worker that loses a tie on load, the other one being drained meanwhile; then both are idle
  // with every page free (cached pages count as free), so by load alone the second turn (the
  // first's prompt and answer and 20 more tokens: 136, past the threshold unless 64 of them are
  // found cached) would go to the other one. Returns the second turn's completion.
  void RunConversation(Cluster& cluster, v1::GenerateComplete* second) {
    absl::StatusOr<std::vector<std::string>> ids = DecodeIds(cluster);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(ids->size(), 2u);
    ASSERT_TRUE(SetDraining(cluster, ids->front(), true).ok());
    const std::vector<int32_t> first = Prompt(100, 3);
    GenerateResult r1 = RunGenerate(cluster.generation(), GreedyRequest(first, 16), kRequestTimeout);
    ASSERT_TRUE(r1.status.ok()) << r1.status.error_message() << "\nrouter log:\n"
                                << cluster.router().LogTail();
    ASSERT_TRUE(r1.complete.has_value());
    EXPECT_TRUE(r1.complete->local_prefill());
    ASSERT_EQ(r1.ids.size(), 16u);
    ASSERT_TRUE(SetDraining(cluster, ids->front(), false).ok());
    ASSERT_TRUE(cluster.WaitAllPagesFree(kFreeTimeout).ok());

    std::vector<int32_t> next = first;
    next.insert(next.end(), r1.ids.begin(), r1.ids.end());
    for (int32_t id : Prompt(20, 5)) next.push_back(id);
    GenerateResult r2 = RunGenerate(cluster.generation(), GreedyRequest(next, 8), kRequestTimeout);
    ASSERT_TRUE(r2.status.ok()) << r2.status.error_message() << "\nrouter log:\n"
                                << cluster.router().LogTail();
    ASSERT_TRUE(r2.complete.has_value());
    *second = *r2.complete;
  }

  std::string model_;
};

TEST_F(DecodeAffinityClusterTest, TheSecondTurnGoesToTheWorkerThatServedTheFirst) {
  auto cluster = Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::GenerateComplete second;
  ASSERT_NO_FATAL_FAILURE(RunConversation(**cluster, &second));
  // The first whole page of what the first turn computed (115 positions) is cached there, and
  // the other 72 tokens are under the threshold: prefilled on that worker.
  EXPECT_TRUE(second.local_prefill());
  EXPECT_EQ(second.cached_prompt_tokens(), 64);
  EXPECT_TRUE((*cluster)->WaitAllPagesFree(kFreeTimeout).ok());
}

TEST_F(DecodeAffinityClusterTest, WithoutDecodeAffinityTheSecondTurnGoesByLoad) {
  auto cluster = Start({"--decode-affinity=false"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::GenerateComplete second;
  ASSERT_NO_FATAL_FAILURE(RunConversation(**cluster, &second));
  // The tie goes to the worker that holds nothing of it: 136 tokens, past the threshold, so the
  // prefill worker computes them all (it never saw the first turn).
  EXPECT_FALSE(second.local_prefill());
  EXPECT_EQ(second.cached_prompt_tokens(), 0);
}

}  // namespace
}  // namespace mlaserve::testing
