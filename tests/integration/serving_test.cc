// End-to-end serving on loopback: a router, prefill and decode worker processes on the test
// fixture checkpoints (tests/fixtures/models/*), driven through the public API.
#include <signal.h>

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mlaserve/v1/worker.grpc.pb.h"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kRequestTimeout = absl::Seconds(60);
constexpr absl::Duration kFreeTimeout = absl::Seconds(15);

std::vector<std::string> FixtureModels() {
  std::vector<std::string> dirs;
  const std::filesystem::path root = "tests/fixtures/models";
  if (!std::filesystem::exists(root)) return dirs;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (std::filesystem::exists(e.path() / "config.json") &&
        std::filesystem::exists(e.path() / "model.safetensors")) {
      dirs.push_back(e.path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::vector<int32_t> Prompt(int n, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(2 + (i * 37 + salt * 11) % 250);
  return ids;
}

v1::GenerateRequest IdsRequest(const std::vector<int32_t>& prompt, int max_new_tokens) {
  v1::GenerateRequest r;
  for (int32_t id : prompt) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  return r;
}

class ServingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ServingTest, DisaggregatedTokensEqualSingleProcessGreedyAndSeeded) {
  ClusterOptions o;
  o.model_dir = GetParam();
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<int32_t> prompt = Prompt(40);
  for (const auto& [temperature, seed] :
       std::vector<std::pair<float, std::optional<uint64_t>>>{{0.0f, std::nullopt}, {0.8f, 1234}}) {
    v1::GenerateRequest req = IdsRequest(prompt, 24);
    req.mutable_sampling()->set_temperature(temperature);
    if (seed) req.mutable_sampling()->set_seed(*seed);
    GenerateResult r = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\nrouter log:\n"
                               << (*cluster)->router().LogTail();
    ASSERT_TRUE(r.complete.has_value());
    EXPECT_FALSE(r.complete->local_prefill());
    auto ref = ReferenceTokens(GetParam(), prompt, 24, temperature, seed);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(r.ids, *ref) << "temperature " << temperature;
  }
  // The prefill worker's prefix cache (docs/serving.md): a prompt that starts with an earlier
  // one's two whole pages takes them from the cache, reports them, and its tokens are still
  // those of the single process, which computes it whole.
  const std::vector<int32_t> first = Prompt(150, 1);
  std::vector<int32_t> second(first.begin(), first.begin() + 128);
  for (int32_t id : Prompt(30, 2)) second.push_back(id);
  GenerateResult r1 = RunGenerate((*cluster)->generation(), IdsRequest(first, 4), kRequestTimeout);
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  EXPECT_EQ(r1.complete->cached_prompt_tokens(), 0);
  v1::GenerateRequest greedy = IdsRequest(second, 24);
  greedy.mutable_sampling()->set_temperature(0.0f);
  GenerateResult r2 = RunGenerate((*cluster)->generation(), greedy, kRequestTimeout);
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();
  EXPECT_EQ(r2.complete->cached_prompt_tokens(), 128);
  auto ref = ReferenceTokens(GetParam(), second, 24, 0.0f, std::nullopt);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r2.ids, *ref) << "after a cached prefix";
  // The same prompt under another cache_salt shares no cached page with those (docs/security.md):
  // computed whole, the same tokens.
  greedy.set_cache_salt("tenant-b");
  GenerateResult r3 = RunGenerate((*cluster)->generation(), greedy, kRequestTimeout);
  ASSERT_TRUE(r3.status.ok()) << r3.status.error_message();
  EXPECT_EQ(r3.complete->cached_prompt_tokens(), 0);
  EXPECT_EQ(r3.ids, *ref) << "under another cache_salt";
  EXPECT_TRUE((*cluster)->WaitAllPagesFree(kFreeTimeout).ok());
}

// Multi-GPU workers (docs/parallel.md) on the CPU backend, ranks on threads: a prefill worker
// with 2 tensor-parallel ranks (data-parallel for an odd head count; experts split) feeds a decode worker with 4 (each expert
// split; 1 rank for a model of fewer than 4 heads); the tokens equal the single-process
// engine's.
TEST_P(ServingTest, PrefillAndDecodeInDifferentParallelLayouts) {
  std::ifstream config(GetParam() + "/config.json");
  const int heads = nlohmann::json::parse(config).at("num_attention_heads").get<int>();
  ClusterOptions o;
  o.model_dir = GetParam();
  // An odd head count (deepseek_v3_yarn_knobs: 3) cannot be split: its 2 prefill ranks run
  // data-parallel attention instead.
  o.extra_prefill_flags = {"--tp-size", "2", "--attention-parallel", heads % 2 == 0 ? "tensor" : "data",
                           "--moe-parallel", "expert"};
  o.extra_decode_flags = {"--tp-size", heads % 4 == 0 ? "4" : "1", "--moe-parallel", "tensor"};
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<int32_t> prompt = Prompt(40, 5);
  v1::GenerateRequest req = IdsRequest(prompt, 16);
  req.mutable_sampling()->set_temperature(0);
  GenerateResult r = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\nrouter log:\n"
                             << (*cluster)->router().LogTail();
  ASSERT_TRUE(r.complete.has_value());
  EXPECT_FALSE(r.complete->local_prefill());
  auto ref = ReferenceTokens(GetParam(), prompt, 16, 0.0f, std::nullopt);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r.ids, *ref);
  EXPECT_TRUE((*cluster)->WaitAllPagesFree(kFreeTimeout).ok());
}

TEST_P(ServingTest, LocalPrefillGivesTheSameTokens) {
  ClusterOptions o;
  o.model_dir = GetParam();
  o.local_prefill_threshold = 120;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<int32_t> prompt = Prompt(100, 3);
  v1::GenerateRequest req = IdsRequest(prompt, 16);
  req.mutable_sampling()->set_temperature(0);
  GenerateResult r = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_TRUE(r.complete->local_prefill());
  EXPECT_EQ(r.complete->cached_prompt_tokens(), 0);
  auto ref = ReferenceTokens(GetParam(), prompt, 16, 0.0f, std::nullopt);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r.ids, *ref);
  // The next turn (the prompt, the answer, more: 136 tokens, over the threshold of 120): the
  // decode worker's prefix cache holds the first whole page of what the first request computed
  // (115 positions), so the router expects it to compute only the rest and lets it prefill the
  // turn itself; the tokens are still mlaserve-run's over the whole prompt.
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), r.ids.begin(), r.ids.end());
  for (int32_t id : Prompt(20, 5)) next.push_back(id);
  v1::GenerateRequest req2 = IdsRequest(next, 8);
  req2.mutable_sampling()->set_temperature(0);
  GenerateResult r2 = RunGenerate((*cluster)->generation(), req2, kRequestTimeout);
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();
  EXPECT_TRUE(r2.complete->local_prefill());
  EXPECT_EQ(r2.complete->cached_prompt_tokens(), 64);
  auto ref2 = ReferenceTokens(GetParam(), next, 8, 0.0f, std::nullopt);
  ASSERT_TRUE(ref2.ok()) << ref2.status();
  EXPECT_EQ(r2.ids, *ref2);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ServingTest, ::testing::ValuesIn(FixtureModels()),
                         [](const auto& info) {
                           return std::filesystem::path(info.param).filename().string();
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ServingTest);

// The failure and load tests need one model only.
class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto models = FixtureModels();
    if (models.empty()) GTEST_SKIP() << "no fixture model under tests/fixtures/models";
    model_ = models.front();
  }
  std::string model_;
};

TEST_F(ClusterTest, ManyConcurrentMixedLengthStreamsAllFinishAndFreeEveryPage) {
  ClusterOptions o;
  o.model_dir = model_;
  o.local_prefill_threshold = 16;  // the short ones prefill locally
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr int kRequests = 32;
  std::vector<GenerateResult> results(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest req = IdsRequest(Prompt(4 + (i * 13) % 120, i), 4 + i % 12);
      req.mutable_sampling()->set_temperature(i % 2 == 0 ? 0.0f : 0.9f);
      req.mutable_sampling()->set_ignore_eos(true);
      results[i] = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
    });
  }
  for (auto& t : threads) t.join();
  int local = 0;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    EXPECT_EQ(static_cast<int>(results[i].ids.size()), 4 + i % 12) << i;
    EXPECT_EQ(results[i].complete->finish_reason(), v1::FINISH_REASON_LENGTH);
    local += results[i].complete->local_prefill();
  }
  EXPECT_GT(local, 0);
  EXPECT_LT(local, kRequests);
  absl::Status free = (*cluster)->WaitAllPagesFree(kFreeTimeout);
  EXPECT_TRUE(free.ok()) << free;
}

TEST_F(ClusterTest, LongGenerationsBeyondThePoolArePreemptedAndStillGiveTheReferenceTokens) {
  // 12 pages (768 positions) on the decode worker; four requests of 100 prompt + 400 new
  // tokens would need 32 pages at their longest. Each holds 2 pages at first and grows, so
  // the latest ones are preempted, recomputed later, and must still stream mlaserve-run's
  // tokens.
  ClusterOptions o;
  o.model_dir = model_;
  o.num_kv_pages = 12;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr int kRequests = 4;
  constexpr int kNew = 400;
  std::vector<GenerateResult> results(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest req = IdsRequest(Prompt(100, 40 + i), kNew);
      req.mutable_sampling()->set_temperature(0.0f);
      req.mutable_sampling()->set_ignore_eos(true);
      results[i] = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    auto ref = ReferenceTokens(model_, Prompt(100, 40 + i), kNew, 0.0f, std::nullopt);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(results[i].ids, *ref) << i;
  }
  EXPECT_THAT((*cluster)->decode().LogTail(100000), HasSubstr("preempted"))
      << (*cluster)->decode().LogTail(3000);
  absl::Status free = (*cluster)->WaitAllPagesFree(kFreeTimeout);
  EXPECT_TRUE(free.ok()) << free;
}

TEST_F(ClusterTest, ClientCancelMidStreamFreesThePages) {
  ClusterOptions o;
  o.model_dir = model_;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::GenerateRequest req = IdsRequest(Prompt(50), 400);
  req.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kRequestTimeout));
  auto reader = (*cluster)->generation().Generate(&context, req);
  v1::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));  // streaming has started
  context.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  absl::Status free = (*cluster)->WaitAllPagesFree(kFreeTimeout);
  EXPECT_TRUE(free.ok()) << free;
}

TEST_F(ClusterTest, DecodeWorkerKilledMidStreamGivesUnavailablePromptly) {
  ClusterOptions o;
  o.model_dir = model_;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::GenerateRequest req = IdsRequest(Prompt(50), 400);
  req.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kRequestTimeout));
  auto reader = (*cluster)->generation().Generate(&context, req);
  v1::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  (*cluster)->decode().Kill();
  const absl::Time killed = absl::Now();
  while (reader->Read(&m)) {
  }
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("decode-1"));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(3));
  // New requests are refused at once, naming the worker's state.
  GenerateResult r = RunGenerate((*cluster)->generation(), IdsRequest(Prompt(5), 4), kRequestTimeout);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("no healthy decode worker"));
}

TEST_F(ClusterTest, PrefillWorkerKilledDuringARequestFreesTheDecodePages) {
  ClusterOptions o;
  o.model_dir = model_;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // A long prompt keeps the prefill worker busy; it dies while the request is in flight
  // (before, during or after its KV transfer: each must end with the pages back).
  v1::GenerateRequest req = IdsRequest(Prompt(480), 8);
  std::thread killer([&] {
    // Kill once the router has the request on its workers.
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      grpc::ClientContext c;
      v1::GetLoadsResponse loads;
      if ((*cluster)->admin().GetLoads(&c, v1::GetLoadsRequest(), &loads).ok()) {
        bool busy = false;
        for (const auto& w : loads.workers()) busy = busy || w.router_inflight() > 0;
        if (busy) break;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    (*cluster)->prefill().Kill();
  });
  GenerateResult r = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
  killer.join();
  if (!r.status.ok()) {
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  }
  absl::Status free = (*cluster)->WaitAllPagesFree(kFreeTimeout);
  EXPECT_TRUE(free.ok()) << free << "\ndecode log:\n" << (*cluster)->decode().LogTail();
}

// A reservation nobody uses (no Stream, no transfer) is reclaimed when its lease ends.
TEST_F(ClusterTest, UnusedReservationIsFreedWhenItsLeaseExpires) {
  ClusterOptions o;
  o.model_dir = model_;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto decode = v1::DecodeWorker::NewStub(
      grpc::CreateChannel((*cluster)->decode().address(), grpc::InsecureChannelCredentials()));
  v1::ReserveRequest req;
  req.set_request_id("lease-test");
  for (int32_t id : Prompt(100)) req.add_prompt_token_ids(id);
  req.mutable_sampling()->set_max_new_tokens(100);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_seed(1);
  req.set_local_prefill(true);
  req.set_kv_lease_ms(300);
  v1::ReserveResponse resp;
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Status s = decode->Reserve(&c, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(resp.reserved_pages(), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  v1::WorkerDescriptor info;
  bool freed = false;
  while (!freed && absl::Now() < deadline) {
    grpc::ClientContext g;
    ASSERT_TRUE(decode->GetInfo(&g, v1::GetWorkerInfoRequest(), &info).ok());
    freed = info.load().kv_pages_free() == info.load().kv_pages_total();
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(freed) << info.load().kv_pages_free() << "/" << info.load().kv_pages_total();
}

TEST_F(ClusterTest, SelfRegisteredWorkersServeAndExpireWhenSilent) {
  ClusterOptions o;
  o.model_dir = model_;
  o.self_register = true;
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  GenerateResult r = RunGenerate((*cluster)->generation(), IdsRequest(Prompt(20), 6), kRequestTimeout);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  (*cluster)->decode().Kill();
  // Heartbeat timeout is 2 s: the router marks the decode worker unhealthy after that.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool unhealthy = false;
  while (!unhealthy && absl::Now() < deadline) {
    grpc::ClientContext c;
    v1::ListWorkersRequest req;
    req.set_role(v1::WORKER_ROLE_DECODE);
    v1::ListWorkersResponse resp;
    if ((*cluster)->admin().ListWorkers(&c, req, &resp).ok() && resp.workers_size() == 1) {
      unhealthy = resp.workers(0).state() == v1::WORKER_STATE_UNHEALTHY;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(unhealthy);
}

TEST_F(ClusterTest, WorkerWithAnotherModelIsRefused) {
  const auto models = FixtureModels();
  if (models.size() < 2) GTEST_SKIP() << "needs two fixture models";
  ClusterOptions o;
  o.model_dir = models[0];
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto other = (*cluster)->StartDecode(models[1], "other-decode", /*register_with_router=*/false);
  ASSERT_TRUE(other.ok()) << other.status();
  grpc::ClientContext c;
  v1::AddWorkerRequest add;
  add.set_role(v1::WORKER_ROLE_DECODE);
  add.set_address((*other)->address());
  v1::WorkerStatus added;
  ASSERT_TRUE((*cluster)->admin().AddWorker(&c, add, &added).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  v1::WorkerStatus st;
  while (absl::Now() < deadline) {
    grpc::ClientContext g;
    v1::GetWorkerRequest req;
    req.set_id(added.id());
    if ((*cluster)->admin().GetWorker(&g, req, &st).ok() &&
        st.state() == v1::WORKER_STATE_INCOMPATIBLE) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(st.state(), v1::WORKER_STATE_INCOMPATIBLE);
  EXPECT_THAT(st.last_error(), HasSubstr("worker serves a different model"));
}

// The bundled demo model (models/demo) through the whole path with text in and text out:
// every prompt in its demo_prompts.json must give exactly the recorded greedy answer.
TEST(DemoModelTest, AnswersTheDemoPromptsCorrectly) {
  const std::filesystem::path dir = "models/demo";
  if (!std::filesystem::exists(dir / "demo_prompts.json")) GTEST_SKIP() << "no models/demo";
  std::ifstream in(dir / "demo_prompts.json");
  const nlohmann::json prompts = nlohmann::json::parse(in);
  ClusterOptions o;
  o.model_dir = dir.string();
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  int checked = 0;
  for (const auto& p : prompts["prompts"]) {
    v1::GenerateRequest req;
    req.set_text(p["prompt"].get<std::string>());
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(64);
    GenerateResult r = RunGenerate((*cluster)->generation(), req, kRequestTimeout);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.ids, p["answer_ids"].get<std::vector<int32_t>>()) << p["prompt"];
    EXPECT_EQ(r.text, p["answer"].get<std::string>()) << p["prompt"];
    EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_STOP);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace mlaserve::testing
