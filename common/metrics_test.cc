#include "common/metrics.h"

#include <httplib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, CounterGaugeRenderWithHelpTypeAndLabels) {
  MetricsRegistry r;
  Counter* c = r.GetCounter("mlaserve_requests_total", "Requests accepted.",
                            {{"role", "decode"}});
  c->Increment();
  c->Increment(2);
  EXPECT_EQ(r.GetCounter("mlaserve_requests_total", "Requests accepted.", {{"role", "decode"}}),
            c);
  Gauge* g = r.GetGauge("mlaserve_kv_pages_free", "Free KV pages.");
  g->Set(7);
  g->Add(-2);
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("# HELP mlaserve_requests_total Requests accepted.\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE mlaserve_requests_total counter\n"));
  EXPECT_THAT(text, HasSubstr("mlaserve_requests_total{role=\"decode\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE mlaserve_kv_pages_free gauge\nmlaserve_kv_pages_free 5\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry r;
  Histogram* h = r.GetHistogram("mlaserve_ttft_seconds", "TTFT.", {0.1, 1.0}, {{"a", "x\"y"}});
  h->Observe(0.05);
  h->Observe(0.5);
  h->Observe(0.5);
  h->Observe(7);
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("mlaserve_ttft_seconds_bucket{a=\"x\\\"y\",le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mlaserve_ttft_seconds_bucket{a=\"x\\\"y\",le=\"1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("mlaserve_ttft_seconds_bucket{a=\"x\\\"y\",le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("mlaserve_ttft_seconds_sum{a=\"x\\\"y\"} 8.05"));
  EXPECT_THAT(text, HasSubstr("mlaserve_ttft_seconds_count{a=\"x\\\"y\"} 4\n"));
}

TEST(MetricsTest, CollectHookRunsBeforeRender) {
  MetricsRegistry r;
  Gauge* g = r.GetGauge("mlaserve_kv_pages_used", "Used pages.");
  int calls = 0;
  r.AddCollectHook([&] { g->Set(++calls * 10); });
  EXPECT_THAT(r.RenderText(), HasSubstr("mlaserve_kv_pages_used 10\n"));
  EXPECT_THAT(r.RenderText(), HasSubstr("mlaserve_kv_pages_used 20\n"));
}

TEST(MetricsTest, HttpEndpointServesTheRegistry) {
  MetricsRegistry r;
  r.GetCounter("mlaserve_kv_transfer_bytes_total", "Bytes.")->Increment(4096);
  auto server = MetricsHttpServer::Start(&r, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("mlaserve_kv_transfer_bytes_total 4096\n"));
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("text/plain"));
}

}  // namespace
}  // namespace mlaserve::common
