// LoadRunner against the fake Generation server: what the client measured must agree with
// what the server did.
#include "bench/serving/load_runner.h"

#include <cmath>

#include <gtest/gtest.h>

#include "bench/serving/dataset.h"
#include "bench/serving/stats.h"
#include "tests/bench/fake_generation_server.h"

namespace mlaserve::bench {
namespace {

using testing::FakeBehaviour;
using testing::FakeGenerationServer;
using testing::IndexOfRequestId;

std::vector<RequestSpec> Dataset(int n, int input_len, int output_len, double ratio = 1.0,
                                 uint64_t seed = 1) {
  VocabInfo vocab{.vocab_size = 1000, .max_context_length = 4096, .excluded_ids = {0, 1}};
  auto specs = MakeRandomDataset({.num_prompts = n, .input_len = input_len,
                                  .output_len = output_len, .range_ratio = ratio, .seed = seed},
                                 vocab);
  EXPECT_TRUE(specs.ok()) << specs.status();
  return *specs;
}

struct Client {
  explicit Client(const std::string& address)
      : channel(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        stub(v1::Generation::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Generation::Stub> stub;
};

LoadOptions Options(int max_concurrency = 0) {
  LoadOptions o;
  o.max_concurrency = max_concurrency;
  o.call.timeout = absl::Seconds(60);
  o.request_id_prefix = "bench-test";
  return o;
}

TEST(LoadRunnerTest, CountsAndLatenciesAgreeWithTheServer) {
  FakeGenerationServer server(FakeBehaviour{.tokens_per_chunk = 1});
  Client client(server.address());
  const std::vector<RequestSpec> specs = Dataset(12, 32, 8, 0.25, 7);
  LoadRunner runner(client.stub.get(), Options(4));
  LoadResult result = runner.Run(specs, std::vector<double>(specs.size(), 0.0));

  ASSERT_EQ(result.records.size(), specs.size());
  EXPECT_FALSE(result.time_bound_hit);
  EXPECT_EQ(result.not_started, 0);
  EXPECT_EQ(result.abandoned, 0);
  const std::vector<testing::SeenRequest> seen = server.seen();
  ASSERT_EQ(seen.size(), specs.size());
  for (const testing::SeenRequest& s : seen) {
    const int i = IndexOfRequestId(s.request_id);
    ASSERT_GE(i, 0);
    ASSERT_LT(i, static_cast<int>(specs.size()));
    EXPECT_EQ(s.prompt_tokens, specs[i].input_len) << s.request_id;
    EXPECT_EQ(s.max_new_tokens, specs[i].output_len) << s.request_id;
    EXPECT_TRUE(s.ignore_eos);
  }
  int64_t streamed = 0;
  for (const RequestRecord& r : result.records) {
    const RequestSpec& spec = specs[r.index];
    EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.error;
    EXPECT_EQ(r.request_id, "bench-test-" + std::to_string(r.index));
    EXPECT_EQ(r.input_len, spec.input_len);
    EXPECT_EQ(r.output_len, spec.output_len);
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_LE(r.ttft_s, r.e2e_s);
    EXPECT_EQ(static_cast<int>(r.itl_s.size()), r.output_len - 1);
    for (double g : r.itl_s) EXPECT_GT(g, 0);
    streamed += r.output_len;
  }
  EXPECT_EQ(streamed, server.tokens_streamed());

  BenchSummary s = Summarize(result, static_cast<int>(specs.size()));
  EXPECT_EQ(s.completed, 12);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.total_output_tokens, server.tokens_streamed());
  EXPECT_GT(s.output_throughput, 0);
  EXPECT_LE(s.ttft.median, s.e2e.median);
}

TEST(LoadRunnerTest, MultiTokenChunksStillGiveTokensMinusOneItlEntries) {
  FakeGenerationServer server(FakeBehaviour{.tokens_per_chunk = 3});
  Client client(server.address());
  const std::vector<RequestSpec> specs = Dataset(4, 8, 10);
  LoadRunner runner(client.stub.get(), Options());
  LoadResult result = runner.Run(specs, std::vector<double>(specs.size(), 0.0));
  ASSERT_EQ(result.records.size(), 4u);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.error;
    EXPECT_EQ(r.output_len, 10);
    EXPECT_EQ(r.itl_s.size(), 9u);
  }
}

TEST(LoadRunnerTest, FailuresAreClassifiedByStatusCode) {
  FakeBehaviour behaviour;
  behaviour.fail_if = [](const v1::GenerateRequest& request) {
    const int i = IndexOfRequestId(request.request_id());
    if (i % 5 == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no decode worker");
    if (i % 5 == 3) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prompt id 5000 outside vocab");
    }
    return grpc::Status::OK;
  };
  FakeGenerationServer server(behaviour);
  Client client(server.address());
  const std::vector<RequestSpec> specs = Dataset(15, 4, 3);
  LoadRunner runner(client.stub.get(), Options(3));
  LoadResult result = runner.Run(specs, std::vector<double>(specs.size(), 0.0));
  BenchSummary s = Summarize(result, 15);
  EXPECT_EQ(s.completed, 9);
  EXPECT_EQ(s.failed, 6);
  ASSERT_EQ(s.failures.size(), 2u);
  EXPECT_EQ(s.failures["UNAVAILABLE"].count, 3);
  EXPECT_EQ(s.failures["UNAVAILABLE"].status_code, 14);
  EXPECT_EQ(s.failures["UNAVAILABLE"].first_error, "no decode worker");
  EXPECT_EQ(s.failures["INVALID_ARGUMENT"].count, 3);
  EXPECT_EQ(s.failures["INVALID_ARGUMENT"].status_code, 3);
  for (const RequestRecord& r : result.records) {
    if (r.index % 5 == 1) EXPECT_EQ(r.status_code, 14);
    if (r.index % 5 == 3) EXPECT_EQ(r.status_code, 3);
  }
}

TEST(LoadRunnerTest, MidStreamErrorAndMiscountingServerAreFailures) {
  {
    FakeGenerationServer server(FakeBehaviour{.fail_after_tokens = 2});
    Client client(server.address());
    const std::vector<RequestSpec> specs = Dataset(2, 4, 5);
    LoadRunner runner(client.stub.get(), Options());
    BenchSummary s = Summarize(runner.Run(specs, {0.0, 0.0}), 2);
    EXPECT_EQ(s.failed, 2);
    EXPECT_EQ(s.failures["UNAVAILABLE"].count, 2);
  }
  {
    FakeGenerationServer server(FakeBehaviour{.completion_tokens_error = 1});
    Client client(server.address());
    const std::vector<RequestSpec> specs = Dataset(2, 4, 5);
    LoadRunner runner(client.stub.get(), Options());
    BenchSummary s = Summarize(runner.Run(specs, {0.0, 0.0}), 2);
    EXPECT_EQ(s.completed, 0);
    EXPECT_EQ(s.failures["TOKEN_COUNT_MISMATCH"].count, 2);
  }
}

TEST(LoadRunnerTest, MaxConcurrencyIsRespected) {
  FakeGenerationServer server(FakeBehaviour{.token_delay = absl::Milliseconds(2)});
  Client client(server.address());
  const std::vector<RequestSpec> specs = Dataset(16, 4, 6);
  LoadRunner runner(client.stub.get(), Options(3));
  LoadResult result = runner.Run(specs, std::vector<double>(specs.size(), 0.0));
  EXPECT_EQ(result.records.size(), 16u);
  EXPECT_LE(server.peak_concurrency(), 3);
  EXPECT_LE(result.peak_in_flight, 3);
  // 16 requests of ~12 ms released at once against 3 slots: the slots do fill up.
  EXPECT_GE(result.peak_in_flight, 2);
}

TEST(LoadRunnerTest, ArrivalScheduleIsFollowed) {
  FakeGenerationServer server(FakeBehaviour{});
  Client client(server.address());
  const std::vector<RequestSpec> specs = Dataset(8, 4, 2);
  const std::vector<double> arrivals = PoissonArrivalOffsets(8, 40.0, 9);
  ASSERT_GT(arrivals.back(), 0.0);
  LoadRunner runner(client.stub.get(), Options());
  LoadResult result = runner.Run(specs, arrivals);
  ASSERT_EQ(result.records.size(), 8u);
  for (const RequestRecord& r : result.records) {
    // Never early; late only by scheduling noise (generous bound for a loaded CI machine).
    EXPECT_GE(r.start_offset_s, arrivals[r.index] - 1e-6) << r.index;
    EXPECT_LT(r.start_offset_s, arrivals[r.index] + 0.5) << r.index;
  }
  EXPECT_GE(result.duration_s, arrivals.back());
}

TEST(LoadRunnerTest, TimeBoundCancelsRequestsInFlightAndCountsTheRest) {
  // Each request would stream 2000 tokens 10 ms apart (20 s); the bound is 0.4 s.
  FakeGenerationServer server(FakeBehaviour{.token_delay = absl::Milliseconds(10)});
  Client client(server.address());
  const std::vector<RequestSpec> specs = Dataset(10, 4, 2000);
  LoadOptions options = Options(2);
  options.max_duration = absl::Milliseconds(400);
  LoadRunner runner(client.stub.get(), options);
  LoadResult result = runner.Run(specs, std::vector<double>(specs.size(), 0.0));
  EXPECT_TRUE(result.time_bound_hit);
  EXPECT_GE(result.duration_s, 0.4);
  EXPECT_LT(result.duration_s, 5.0);
  EXPECT_EQ(result.abandoned, 0);
  ASSERT_EQ(result.records.size(), 2u);
  EXPECT_EQ(result.not_started, 8);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.outcome, Outcome::kCancelledAtBound);
    EXPECT_EQ(r.status_code, static_cast<int>(grpc::StatusCode::CANCELLED));
    EXPECT_GT(r.output_len, 0);  // it was streaming when cut
  }
  BenchSummary s = Summarize(result, 10);
  EXPECT_EQ(s.cancelled_at_bound, 2);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.not_started, 8);
}

TEST(LoadRunnerTest, UnreachableServerFailsEveryRequestAsUnavailable) {
  // Port 1 (tcpmux) is privileged and unused on CI machines: connections are refused.
  Client client("127.0.0.1:1");
  const std::vector<RequestSpec> specs = Dataset(3, 4, 2);
  LoadOptions options = Options();
  options.call.timeout = absl::Seconds(5);
  LoadRunner runner(client.stub.get(), options);
  BenchSummary s = Summarize(runner.Run(specs, {0.0, 0.0, 0.0}), 3);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.failures["UNAVAILABLE"].count, 3);
}

}  // namespace
}  // namespace mlaserve::bench
