// Data-parallel attention served end to end (docs/parallel.md): a router, a prefill and a
// decode worker process on loopback, on the CPU backend with ranks on threads, prefill and
// decode in different layouts (tensor -> data, data -> tensor, data -> data on 4 ranks). The
// greedy tokens of concurrent requests equal the single-process engine's (mlaserve-run), requests spread over the decode ranks, a cancel gives every rank's pages
// back, and what cannot fit one rank is refused with the right status.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mlaserve/v1/worker.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kRequestTimeout = absl::Seconds(60);
constexpr absl::Duration kFreeTimeout = absl::Seconds(15);

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(2 + (i * 31 + salt * 13) % 250);
  return ids;
}

v1::GenerateRequest IdsRequest(const std::vector<int32_t>& prompt, int max_new_tokens) {
  v1::GenerateRequest r;
  for (int32_t id : prompt) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

std::string Fixture(const std::string& name) { return "tests/fixtures/models/" + name; }

std::vector<std::string> Layout(int ranks, const std::string& attention, const std::string& moe) {
  return {"--tp-size", std::to_string(ranks), "--attention-parallel", attention,
          "--moe-parallel", moe};
}

// A worker's descriptor (GetInfo): its GPUs, layout, profile and load.
template <typename Service>
v1::WorkerDescriptor Info(const std::string& address) {
  auto stub = Service::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::WorkerDescriptor info;
  EXPECT_TRUE(stub->GetInfo(&c, v1::GetWorkerInfoRequest(), &info).ok());
  return info;
}

// The decode worker's own view of its load (GetInfo), every rank's included.
v1::WorkerLoad DecodeLoad(Cluster& cluster) {
  auto stub = v1::DecodeWorker::NewStub(
      grpc::CreateChannel(cluster.decode().address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::WorkerDescriptor info;
  EXPECT_TRUE(stub->GetInfo(&c, v1::GetWorkerInfoRequest(), &info).ok());
  return info.load();
}

// (fixture, prefill layout, decode layout)
using ServedCase = std::tuple<std::string, std::vector<std::string>, std::vector<std::string>>;

class DataParallelServingTest : public ::testing::TestWithParam<ServedCase> {};

TEST_P(DataParallelServingTest, ConcurrentRequestsGiveTheSingleProcessTokens) {
  const auto& [fixture, prefill_layout, decode_layout] = GetParam();
  if (!std::filesystem::exists(Fixture(fixture) + "/config.json")) GTEST_SKIP() << "no fixture";
  ClusterOptions o;
  o.model_dir = Fixture(fixture);
  o.extra_prefill_flags = prefill_layout;
  o.extra_decode_flags = decode_layout;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Five requests at once (prompts of 1..180 tokens, different lengths out), so the decode
  // ranks run different batches and some idle while others finish. Greedy: a seeded draw
  // may land within rounding of a token boundary, and the layouts' sums differ in order (with
  // tensor ranks as well: seed 77 on deepseek_v2 flips a token at step 10 under tp=2 tensor).
  constexpr int kRequests = 5;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateResult> results(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) prompts.push_back(Prompt(1 + (i * 47) % 181, i));
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest req = IdsRequest(prompts[i], 6 + 3 * i);
      req.mutable_sampling()->set_temperature(0.0f);
      results[i] = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message()
                                        << "\ndecode log:\n" << (*cluster)->decode().LogTail();
    auto ref = ReferenceTokens(o.model_dir, prompts[i], 6 + 3 * i, 0.0f, std::nullopt);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(results[i].ids, *ref) << "request " << i;
  }
  absl::Status free = (*cluster)->WaitAllPagesFree(kFreeTimeout);
  EXPECT_TRUE(free.ok()) << free;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DataParallelServingTest,
    ::testing::Values(
        // tensor prefill -> data decode, and back, on V2, V3 and V3.2
        ServedCase{"deepseek_v2", Layout(2, "tensor", "expert"), Layout(2, "data", "expert")},
        ServedCase{"deepseek_v2", Layout(2, "data", "tensor"), Layout(2, "tensor", "tensor")},
        ServedCase{"deepseek_v3", Layout(2, "tensor", "expert"), Layout(2, "data", "tensor")},
        ServedCase{"deepseek_v3", Layout(2, "data", "expert"), Layout(2, "tensor", "expert")},
        ServedCase{"deepseek_v32", Layout(2, "tensor", "tensor"), Layout(2, "data", "expert")},
        ServedCase{"deepseek_v32", Layout(2, "data", "expert"), Layout(2, "tensor", "tensor")},
        // 4 ranks: data prefill -> data decode (each rank's KV to another worker's rank)
        ServedCase{"deepseek_v3", Layout(4, "data", "tensor"), Layout(4, "data", "expert")}),
    [](const auto& info) {
      const std::vector<std::string>& prefill = std::get<1>(info.param);
      const std::vector<std::string>& decode = std::get<2>(info.param);
      return std::get<0>(info.param) + "_prefill_tp" + prefill[1] + "_" + prefill[3] +
             "_decode_tp" + decode[1] + "_" + decode[3];
    });

class DataParallelClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Fixture("deepseek_v3") + "/config.json")) {
      GTEST_SKIP() << "no deepseek_v3 fixture";
    }
  }
};

// Reservations spread over the decode ranks (each rank holds some), and the aborted ones
// give their rank's pages back; streams cancelled mid-decode free every rank's pages too.
TEST_F(DataParallelClusterTest, RequestsSpreadOverRanksAndAbortsAndCancelsFreeEveryRank) {
  ClusterOptions o;
  o.model_dir = Fixture("deepseek_v3");
  o.extra_prefill_flags = Layout(2, "tensor", "expert");
  o.extra_decode_flags = Layout(2, "data", "expert");
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Each worker reports its GPUs and layout, and its GPU profile is the one of the attention
  // shape one rank runs: 2 of the fixture's 4 heads under tensor attention, 4 under data.
  const v1::WorkerDescriptor prefill_info =
      Info<v1::PrefillWorker>((*cluster)->prefill().address());
  const v1::WorkerDescriptor decode_info = Info<v1::DecodeWorker>((*cluster)->decode().address());
  EXPECT_EQ(prefill_info.gpus(), 2);
  EXPECT_EQ(prefill_info.parallel_layout(), "tp=2 attention=tensor moe=expert");
  EXPECT_EQ(decode_info.gpus(), 2);
  EXPECT_EQ(decode_info.parallel_layout(), "tp=2 attention=data moe=expert");
  EXPECT_EQ(nlohmann::json::parse(prefill_info.profile().profile_json())["shape"]["heads"], 2);
  EXPECT_EQ(nlohmann::json::parse(decode_info.profile().profile_json())["shape"]["heads"], 4);
  EXPECT_EQ(prefill_info.model().kv_compat_hash(), decode_info.model().kv_compat_hash())
      << "the layouts do not change the KV layout";
  auto decode = v1::DecodeWorker::NewStub(
      grpc::CreateChannel((*cluster)->decode().address(), grpc::InsecureChannelCredentials()));
  // Held reservations (no stream yet): they stay until aborted.
  constexpr int kHeld = 4;
  for (int i = 0; i < kHeld; ++i) {
    v1::ReserveRequest req;
    req.set_request_id("held-" + std::to_string(i));
    for (int32_t id : Prompt(100, i)) req.add_prompt_token_ids(id);
    req.mutable_sampling()->set_max_new_tokens(10);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_seed(1);
    req.set_local_prefill(true);
    req.set_kv_lease_ms(60'000);
    v1::ReserveResponse resp;
    grpc::ClientContext c;
    c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    ASSERT_TRUE(decode->Reserve(&c, req, &resp).ok()) << i;
    EXPECT_EQ(resp.session().rank(), i % 2) << "the least loaded rank, in turn";
  }
  const v1::WorkerLoad held = DecodeLoad(**cluster);
  ASSERT_EQ(held.ranks_size(), 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(held.ranks(r).pending_requests(), 2) << r;
    EXPECT_EQ(held.ranks(r).kv_pages_total() - held.ranks(r).kv_pages_free(), 2 * 2) << r;
  }
  for (int i = 0; i < kHeld; ++i) {
    v1::WorkerAbortRequest req;
    req.set_request_id("held-" + std::to_string(i));
    v1::WorkerAbortResponse resp;
    grpc::ClientContext c;
    ASSERT_TRUE(decode->Abort(&c, req, &resp).ok()) << i;
  }
  absl::Status free = (*cluster)->WaitAllPagesFree(kFreeTimeout);
  EXPECT_TRUE(free.ok()) << free;

  // Streams through the router, cancelled once they stream.
  constexpr int kStreams = 4;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(absl::ToChronoTime(absl::Now() + kRequestTimeout));
    readers.push_back(
        (*cluster)->generation().Generate(contexts.back().get(), IdsRequest(Prompt(60, i), 400)));
    v1::GenerateResponse m;
    ASSERT_TRUE(readers.back()->Read(&m)) << i;
  }
  for (auto& c : contexts) c->TryCancel();
  for (auto& reader : readers) {
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    const grpc::StatusCode code = reader->Finish().error_code();
    EXPECT_TRUE(code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::OK) << code;
  }
  free = (*cluster)->WaitAllPagesFree(kFreeTimeout);
  EXPECT_TRUE(free.ok()) << free;
  const v1::WorkerLoad after = DecodeLoad(**cluster);
  ASSERT_EQ(after.ranks_size(), 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(after.ranks(r).kv_pages_free(), after.ranks(r).kv_pages_total()) << r;
  }
}

// A request whose pages fit the decode worker's pools together but not one rank's is refused
// (RESOURCE_EXHAUSTED naming the rank's pool), and a layout the model does not divide stops the
// worker at start, naming the dimension.
TEST_F(DataParallelClusterTest, WhatCannotFitOneRankIsRefused) {
  ClusterOptions o;
  o.model_dir = Fixture("deepseek_v3");
  o.num_kv_pages = 4;  // per rank: 8 in all
  o.extra_prefill_flags = Layout(2, "data", "expert");
  o.extra_decode_flags = Layout(2, "data", "expert");
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  GenerateResult r = RunGenerate((*cluster)->generation(), IdsRequest(Prompt(200, 1), 100),
                                 kRequestTimeout);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << r.status.error_message();
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("the largest pool is 4 pages on decode-1 (one data-parallel rank's)"));
  GenerateResult fits = RunGenerate((*cluster)->generation(), IdsRequest(Prompt(100, 2), 20),
                                    kRequestTimeout);
  EXPECT_TRUE(fits.status.ok()) << fits.status.error_message();

  ClusterOptions bad = o;
  bad.extra_decode_flags = Layout(3, "data", "expert");
  absl::Status refused = Cluster::Start(bad).status();
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("intermediate_size is 160, which --tp-size 3 does not divide"));
}

}  // namespace
}  // namespace mlaserve::testing
