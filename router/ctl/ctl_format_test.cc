#include "router/ctl/ctl_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router::ctl {
namespace {

using ::testing::HasSubstr;

TEST(CtlFormat, ExitCodesScriptsCanTrust) {
  EXPECT_EQ(ExitCodeFor(grpc::Status::OK), 0);
  EXPECT_EQ(ExitCodeFor(grpc::Status(grpc::StatusCode::NOT_FOUND, "")), 2);
  EXPECT_EQ(ExitCodeFor(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "")), 2);
  EXPECT_EQ(ExitCodeFor(grpc::Status(grpc::StatusCode::UNAVAILABLE, "")), 3);
  EXPECT_EQ(ExitCodeFor(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")), 3);
  EXPECT_EQ(DescribeStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "no worker 'x'")),
            "NOT_FOUND: no worker 'x'");
}

TEST(CtlFormat, TableAlignsColumns) {
  EXPECT_EQ(RenderTable({"ID", "STATE"}, {{"decode-1", "healthy"}, {"p", "unhealthy"}}),
            "ID        STATE\n"
            "decode-1  healthy\n"
            "p         unhealthy\n");
}

TEST(CtlFormat, WorkersTableAndJson) {
  v1::ListWorkersResponse r;
  v1::WorkerStatus* w = r.add_workers();
  w->set_id("decode-1");
  w->set_role(v1::WORKER_ROLE_DECODE);
  w->set_address("127.0.0.1:8200");
  w->set_state(v1::WORKER_STATE_HEALTHY);
  w->set_source(v1::WORKER_SOURCE_STATIC);
  w->mutable_info()->mutable_load()->set_kv_pages_free(90);
  w->mutable_info()->mutable_load()->set_kv_pages_total(100);
  w->set_last_seen_unix_ms(10'000);
  const std::string table = WorkersTable(r, absl::FromUnixMillis(12'500));
  EXPECT_THAT(table, HasSubstr("decode-1  decode  127.0.0.1:8200  healthy  static  90/100"));
  EXPECT_THAT(table, HasSubstr("2.5s ago"));
  const std::string json = ToJson(r, false);
  EXPECT_THAT(json, HasSubstr("\"id\":\"decode-1\""));
  EXPECT_THAT(json, HasSubstr("\"state\":\"WORKER_STATE_HEALTHY\""));
  EXPECT_THAT(json, HasSubstr("\"kv_pages_free\":90"));
}

TEST(CtlFormat, WorkerDetailShowsTheLayoutAndEachRanksLoad) {
  v1::WorkerStatus w;
  w.set_id("decode-1");
  w.set_role(v1::WORKER_ROLE_DECODE);
  w.mutable_info()->set_gpus(2);
  w.mutable_info()->set_parallel_layout("tp=2 attention=data moe=expert");
  w.mutable_info()->set_prefix_cache(true);
  v1::WorkerLoad* load = w.mutable_info()->mutable_load();
  load->set_kv_pages_free(9);
  load->set_kv_pages_total(16);
  load->set_running_requests(2);
  load->set_pending_requests(1);
  for (const auto& [free, running, pending] : {std::tuple{3, 1, 1}, std::tuple{6, 1, 0}}) {
    v1::RankLoad* r = load->add_ranks();
    r->set_kv_pages_total(8);
    r->set_kv_pages_free(free);
    r->set_running_requests(running);
    r->set_pending_requests(pending);
  }
  const std::string detail = WorkerDetail(w, absl::FromUnixMillis(0));
  EXPECT_THAT(detail, HasSubstr("2 (tp=2 attention=data moe=expert)"));
  EXPECT_THAT(detail, ::testing::ContainsRegex("prefix cache +on\nremote prefill reuse +no"));
  w.mutable_info()->set_remote_prefill_reuse(true);
  EXPECT_THAT(WorkerDetail(w, absl::FromUnixMillis(0)),
              ::testing::ContainsRegex("remote prefill reuse +yes"));
  w.set_role(v1::WORKER_ROLE_PREFILL);  // not a prefill worker's business
  EXPECT_THAT(WorkerDetail(w, absl::FromUnixMillis(0)),
              ::testing::Not(HasSubstr("remote prefill reuse")));
  EXPECT_THAT(detail, HasSubstr("9/16 [3/8 6/8]"));
  EXPECT_THAT(detail, HasSubstr("2 / 1 [rank 0: 1 / 1, rank 1: 1 / 0]"));
}

TEST(CtlFormat, LoadsAndProfiles) {
  v1::GetLoadsResponse loads;
  auto* e = loads.add_workers();
  e->set_id("prefill-1");
  e->set_role(v1::WORKER_ROLE_PREFILL);
  e->set_state(v1::WORKER_STATE_DRAINING);
  e->mutable_load()->set_pending_prefill_tokens(4096);
  EXPECT_THAT(LoadsTable(loads), HasSubstr("prefill-1  prefill  draining"));
  EXPECT_THAT(LoadsTable(loads), HasSubstr("4096"));
  v1::GetProfilesResponse profiles;
  auto* p = profiles.add_workers();
  p->set_id("decode-1");
  p->set_role(v1::WORKER_ROLE_DECODE);
  p->mutable_profile()->set_gpu_name("NVIDIA H100 80GB HBM3");
  p->mutable_profile()->set_source("profiles/h100.json");
  p->mutable_profile()->set_local_prefill_threshold(512);
  EXPECT_THAT(ProfilesTable(profiles),
              HasSubstr("decode-1  decode  NVIDIA H100 80GB HBM3  profiles/h100.json  512"));
}

}  // namespace
}  // namespace mlaserve::router::ctl
