// The metrics endpoint over HTTPS (--metrics-tls*): real clients scrape it on loopback
// (cpp-httplib's, and curl where installed) and get the registry's text only when they trust
// the CA; the flags resolve to the right certificate or fail naming the flag and file.
#include "common/metrics_tls.h"

#include <httplib.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/testing/test_pki.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kCounterLine[] = "mlaserve_kv_transfer_bytes_total 4096\n";

std::string TempDir() {
  std::string templ = ::testing::TempDir() + "/metrics-tls-XXXXXX";
  const char* dir = mkdtemp(templ.data());
  return dir != nullptr ? std::string(dir) : ::testing::TempDir();
}

// Stdout of `command` and its exit status.
std::pair<std::string, int> RunShell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"", -1};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  return {out, pclose(pipe)};
}

class MetricsTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    auto pki = testing::WriteTestPki(dir_);
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
    registry_.GetCounter("mlaserve_kv_transfer_bytes_total", "Bytes.")->Increment(4096);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<MetricsHttpServer> StartHttps() {
    auto server = MetricsHttpServer::Start(
        &registry_, "127.0.0.1", 0, {.cert_file = pki_.node_cert, .key_file = pki_.node_key});
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  std::string dir_;
  testing::TestPki pki_;
  MetricsRegistry registry_;
};

TEST_F(MetricsTlsTest, ClientTrustingTheCaScrapesTheRegistryOverHttps) {
  std::unique_ptr<MetricsHttpServer> server = StartHttps();
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->https());
  EXPECT_EQ(server->url(), absl::StrCat("https://127.0.0.1:", server->port(), "/metrics"));
  httplib::SSLClient client("127.0.0.1", server->port());
  client.set_ca_cert_path(pki_.ca.c_str());
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr(kCounterLine));
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("text/plain"));
}

TEST_F(MetricsTlsTest, ClientsWithoutTheCaOrWithoutTlsGetNoMetrics) {
  std::unique_ptr<MetricsHttpServer> server = StartHttps();
  ASSERT_NE(server, nullptr);
  httplib::SSLClient rogue("127.0.0.1", server->port());
  rogue.set_ca_cert_path(pki_.rogue_ca.c_str());
  rogue.enable_server_certificate_verification(true);
  rogue.set_connection_timeout(5);
  rogue.set_read_timeout(5);
  httplib::Result refused = rogue.Get("/metrics");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), httplib::Error::SSLServerVerification);

  httplib::Client plaintext("127.0.0.1", server->port());
  plaintext.set_connection_timeout(5);
  plaintext.set_read_timeout(5);
  httplib::Result res = plaintext.Get("/metrics");
  EXPECT_TRUE(!res || res->body.find(kCounterLine) == std::string::npos);
}

// curl is what an operator (and the chart's docs) would scrape with; Prometheus checks the
// same things (CA, the name in --tls-server-name).
TEST_F(MetricsTlsTest, CurlScrapesOverHttpsByAddressAndByClusterName) {
  if (RunShell("command -v curl >/dev/null 2>&1").second != 0) {
    GTEST_SKIP() << "curl is not installed (tools/install_deps.sh installs it)";
  }
  std::unique_ptr<MetricsHttpServer> server = StartHttps();
  ASSERT_NE(server, nullptr);
  const std::string port = absl::StrCat(server->port());
  auto [by_address, rc] = RunShell(absl::StrCat("curl -sS --fail --max-time 10 --cacert ", pki_.ca,
                                                " https://127.0.0.1:", port, "/metrics"));
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(by_address, HasSubstr(kCounterLine));
  auto [by_name, rc_name] =
      RunShell(absl::StrCat("curl -sS --fail --max-time 10 --cacert ", pki_.ca, " --resolve ",
                            testing::TestPki::kServerName, ":", port, ":127.0.0.1 https://",
                            testing::TestPki::kServerName, ":", port, "/metrics"));
  EXPECT_EQ(rc_name, 0);
  EXPECT_THAT(by_name, HasSubstr(kCounterLine));
  auto [untrusted, rc_rogue] =
      RunShell(absl::StrCat("curl -sS --fail --max-time 10 --cacert ", pki_.rogue_ca,
                            " https://127.0.0.1:", port, "/metrics 2>/dev/null"));
  EXPECT_NE(rc_rogue, 0);
  EXPECT_THAT(untrusted, Not(HasSubstr(kCounterLine)));
}

TEST_F(MetricsTlsTest, PlaintextStaysTheDefault) {
  auto server = MetricsHttpServer::Start(&registry_, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE((*server)->https());
  EXPECT_EQ((*server)->url(), absl::StrCat("http://127.0.0.1:", (*server)->port(), "/metrics"));
}

TEST_F(MetricsTlsTest, UnreadableOrMismatchedFilesAreRefusedNamingThem) {
  auto missing = MetricsHttpServer::Start(
      &registry_, "127.0.0.1", 0, {.cert_file = dir_ + "/nope.pem", .key_file = pki_.node_key});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ + "/nope.pem: cannot be read"));
  // The CA's certificate with the node's key: each file reads, the pair does not load.
  auto mismatched = MetricsHttpServer::Start(&registry_, "127.0.0.1", 0,
                                             {.cert_file = pki_.ca, .key_file = pki_.node_key});
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr(pki_.ca));
}

TEST_F(MetricsTlsTest, FlagsResolveToTheProcessCertificateOrTheirOwn) {
  const TlsOptions cluster{
      .cert_file = pki_.node_cert, .key_file = pki_.node_key, .ca_file = pki_.ca};
  const TlsOptions insecure{.insecure = true};

  auto plaintext = ResolveMetricsTls({}, cluster);
  ASSERT_TRUE(plaintext.ok());
  EXPECT_FALSE(plaintext->enabled());

  auto reuse = ResolveMetricsTls({.use_cluster_cert = true}, cluster);
  ASSERT_TRUE(reuse.ok()) << reuse.status();
  EXPECT_EQ(reuse->cert_file, pki_.node_cert);
  EXPECT_EQ(reuse->key_file, pki_.node_key);

  auto own = ResolveMetricsTls({.cert_file = pki_.node_cert, .key_file = pki_.node_key}, insecure);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->cert_file, pki_.node_cert);

  auto nothing_to_reuse = ResolveMetricsTls({.use_cluster_cert = true}, insecure);
  EXPECT_EQ(nothing_to_reuse.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nothing_to_reuse.status().message(), HasSubstr("--metrics-tls-cert"));

  auto both = ResolveMetricsTls(
      {.use_cluster_cert = true, .cert_file = pki_.node_cert, .key_file = pki_.node_key}, cluster);
  EXPECT_THAT(both.status().message(), HasSubstr("choose one"));

  auto lone_cert = ResolveMetricsTls({.cert_file = pki_.node_cert}, insecure);
  EXPECT_THAT(lone_cert.status().message(), HasSubstr("go together"));

  auto unreadable =
      ResolveMetricsTls({.cert_file = pki_.node_cert, .key_file = dir_ + "/missing.key"}, insecure);
  EXPECT_EQ(unreadable.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unreadable.status().message(),
              HasSubstr("--metrics-tls-key " + dir_ + "/missing.key: cannot be read"));
}

}  // namespace
}  // namespace mlaserve::common
