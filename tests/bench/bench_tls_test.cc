// mlaserve-bench's transport security in process: RunBenchmark over TLS (and mutual TLS) with
// an API key against the fake Generation server, the https client of the OpenAI backend
// against an HTTPS listener, and the refusals: a CA that did not sign the server's
// certificate, a name the certificate does not have, a missing key, and files that cannot be
// read, each exiting 2 with a message that names what to fix. The same against a real TLS
// router: tests/bench/cluster_bench_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/serving/bench_app.h"
#include "bench/serving/server_target.h"
#include "common/http_accept_loop.h"
#include "common/testing/test_pki.h"
#include "common/transport_security.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_run.h"
#include "tests/bench/fake_generation_server.h"

namespace mlaserve::bench {
namespace {

using testing::Captured;
using testing::RunCaptured;

using testing::FakeBehaviour;
using testing::FakeGenerationServer;
using ::testing::HasSubstr;
using TestPki = common::testing::TestPki;

constexpr char kApiKey[] = "bench-api-key-0123456789";

class BenchTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "/bench-tls-XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    auto pki = common::testing::WriteTestPki(dir_);
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
    key_file_ = dir_ + "/api.key";
    std::ofstream(key_file_) << "# the router's --api-key-file\n" << kApiKey << "\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A fake Generation server on TLS with the node certificate, wanting kApiKey.
  std::unique_ptr<FakeGenerationServer> StartServer(
      common::ClientCertPolicy policy = common::ClientCertPolicy::kNone) {
    auto credentials = common::MakeServerCredentials(
        {.cert_file = pki_.node_cert, .key_file = pki_.node_key, .ca_file = pki_.ca}, policy);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    return std::make_unique<FakeGenerationServer>(
        FakeBehaviour{.credentials = *credentials, .api_key = kApiKey});
  }

  // A small run over TLS: the cluster CA, the certificate's name, the API key.
  BenchOptions TlsRun(const std::string& server) const {
    BenchOptions o;
    o.server = server;
    o.num_prompts = 6;
    o.random_input_len = 16;
    o.random_output_len = 5;
    o.max_concurrency = 2;
    o.warmup_requests = 1;
    o.connect_timeout_s = 5;
    o.request_timeout_s = 30;
    o.progress = ProgressMode::kOff;
    o.tls.ca_file = pki_.ca;
    o.tls.server_name = TestPki::kServerName;
    o.api_key_file = key_file_;
    o.output_json = dir_ + "/summary.json";
    return o;
  }

  nlohmann::json Summary() const {
    std::ifstream in(dir_ + "/summary.json");
    return nlohmann::json::parse(in);
  }

  std::string dir_;
  TestPki pki_;
  std::string key_file_;
};

TEST_F(BenchTlsTest, GrpcOverTlsWithAnApiKeyCompletesEveryRequest) {
  std::unique_ptr<FakeGenerationServer> server = StartServer();
  const Captured c = RunCaptured(TlsRun(server->address()));
  ASSERT_EQ(c.exit_code, kExitOk) << c.err;
  const nlohmann::json s = Summary();
  EXPECT_EQ(s["completed"], 6);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_EQ(s["total_output_tokens"], 6 * 5);
  EXPECT_EQ(server->tokens_streamed(), 7 * 5);  // and the warmup's
  EXPECT_EQ(server->seen().size(), 7u);         // each call passed the key check
}

TEST_F(BenchTlsTest, MutualTlsSendsTheClientCertificate) {
  std::unique_ptr<FakeGenerationServer> server =
      StartServer(common::ClientCertPolicy::kRequireAndVerify);
  BenchOptions without = TlsRun(server->address());
  without.connect_timeout_s = 1;
  const Captured refused = RunCaptured(without);
  EXPECT_EQ(refused.exit_code, kExitCannotRun);
  EXPECT_THAT(refused.err, HasSubstr("GetModelInfo on " + server->address()));
  EXPECT_TRUE(server->seen().empty());

  BenchOptions with = TlsRun(server->address());
  with.tls.cert_file = pki_.node_cert;
  with.tls.key_file = pki_.node_key;
  const Captured c = RunCaptured(with);
  ASSERT_EQ(c.exit_code, kExitOk) << c.err;
  EXPECT_EQ(Summary()["completed"], 6);
}

TEST_F(BenchTlsTest, ACaThatDidNotSignTheServerFailsNamingIt) {
  std::unique_ptr<FakeGenerationServer> server = StartServer();
  BenchOptions o = TlsRun(server->address());
  o.tls.ca_file = pki_.rogue_ca;
  o.connect_timeout_s = 1;
  const Captured c = RunCaptured(o);
  EXPECT_EQ(c.exit_code, kExitCannotRun);
  EXPECT_THAT(c.err, HasSubstr("GetModelInfo on " + server->address()));
  EXPECT_THAT(c.err, HasSubstr("--tls-ca " + pki_.rogue_ca));
  // Not a bare DEADLINE_EXCEEDED: the channel's reason (OpenSSL's, through gRPC).
  EXPECT_THAT(c.err, HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(c.err, HasSubstr("certificate verify failed"));
  EXPECT_TRUE(server->seen().empty());
}

TEST_F(BenchTlsTest, WithoutTheApiKeyTheServerRefusesAndTheRunCannotStart) {
  std::unique_ptr<FakeGenerationServer> server = StartServer();
  BenchOptions o = TlsRun(server->address());
  o.api_key_file.clear();
  const Captured c = RunCaptured(o);
  EXPECT_EQ(c.exit_code, kExitCannotRun);
  EXPECT_THAT(c.err, HasSubstr("UNAUTHENTICATED"));
}

TEST_F(BenchTlsTest, FilesThatCannotBeReadAreNamedBeforeAnythingIsSent) {
  std::unique_ptr<FakeGenerationServer> server = StartServer();
  const std::string missing = dir_ + "/missing.pem";
  struct Case {
    std::function<void(BenchOptions&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[&](BenchOptions& o) { o.tls.ca_file = missing; },
       "--tls-ca " + missing + ": cannot be read"},
      {[&](BenchOptions& o) { o.tls.ca_file = key_file_; },
       "--tls-ca " + key_file_ + ": not a PEM file"},
      {[&](BenchOptions& o) { o.tls.cert_file = pki_.node_cert; },
       "--tls-cert and --tls-key go together"},
      {[&](BenchOptions& o) {
         o.tls.cert_file = pki_.node_cert;
         o.tls.key_file = missing;
       },
       "--tls-key " + missing + ": cannot be read"},
      {[&](BenchOptions& o) { o.api_key_file = missing; },
       "--api-key-file " + missing + ": cannot be read"},
      {[&](BenchOptions& o) { o.tls.ca_file.clear(); },
       "TLS needs --tls-ca"},  // a server name alone
      {[&](BenchOptions& o) { o.tls.insecure = true; }, "choose one"},
      {[&](BenchOptions& o) {
         o.backend = Backend::kOpenAi;
         o.tls.ca_file = missing;
       },
       "--tls-ca " + missing + ": cannot be read"},
  };
  for (const Case& k : cases) {
    BenchOptions o = TlsRun(server->address());
    k.edit(o);
    const Captured c = RunCaptured(o);
    EXPECT_EQ(c.exit_code, kExitCannotRun) << k.message;
    EXPECT_THAT(c.err, HasSubstr(k.message));
  }
  EXPECT_TRUE(server->seen().empty());
}

TEST_F(BenchTlsTest, WithoutTlsFlagsTheBenchStaysPlaintext) {
  FakeGenerationServer plaintext(FakeBehaviour{});
  BenchOptions o = TlsRun(plaintext.address());
  o.tls = {};
  o.api_key_file.clear();
  EXPECT_TRUE(ClientTls(o).insecure);
  EXPECT_EQ(RunCaptured(o).exit_code, kExitOk);
  o.tls.insecure = true;  // said explicitly, as to mlaservectl
  EXPECT_EQ(RunCaptured(o).exit_code, kExitOk);
}

// An HTTPS listener with the node certificate that answers GET /v1/models when the API key
// comes with it.
class HttpsModels {
 public:
  explicit HttpsModels(const TestPki& pki) : server_(pki.node_cert.c_str(), pki.node_key.c_str()) {
    server_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      {
        absl::MutexLock lock(&mu_);
        authorization_ = req.get_header_value("Authorization");
      }
      res.set_content(R"({"object":"list","data":[{"id":"demo"}]})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = StartAcceptLoop(server_);  // so the destructor's stop() ends it
  }
  ~HttpsModels() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

 private:
  httplib::SSLServer server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::string authorization_;
};

TEST_F(BenchTlsTest, HttpsClientChecksTheCaAndTheNameAndSendsTheKey) {
  HttpsModels server(pki_);
  ASSERT_GT(server.port(), 0);
  BenchOptions o = TlsRun(absl::StrCat("127.0.0.1:", server.port()));
  o.backend = Backend::kOpenAi;
  auto get = [&](const BenchOptions& options) {
    absl::StatusOr<OpenAiTarget> target = MakeOpenAiTarget(options, kApiKey);
    EXPECT_TRUE(target.ok()) << target.status();
    std::unique_ptr<httplib::Client> client = NewHttpClient(*target);
    client->set_connection_timeout(5);
    client->set_read_timeout(5);
    httplib::Result r = client->Get("/v1/models");
    return std::make_pair(r ? r->status : 0,
                          r ? std::string() : DescribeHttpError(*client, r.error(), *target));
  };

  auto [status, error] = get(o);
  EXPECT_EQ(status, 200) << error;
  EXPECT_EQ(server.authorization(), absl::StrCat("Bearer ", kApiKey));

  BenchOptions rogue = o;
  rogue.tls.ca_file = pki_.rogue_ca;
  auto [rogue_status, rogue_error] = get(rogue);
  EXPECT_EQ(rogue_status, 0);
  EXPECT_THAT(rogue_error, HasSubstr("unable to get local issuer certificate"));
  EXPECT_THAT(rogue_error, HasSubstr("--tls-ca " + pki_.rogue_ca));

  BenchOptions wrong_name = o;
  wrong_name.tls.server_name = "elsewhere.example";
  auto [name_status, name_error] = get(wrong_name);
  EXPECT_EQ(name_status, 0);
  EXPECT_THAT(name_error, HasSubstr("does not name 'elsewhere.example'"));

  BenchOptions by_address = o;  // the certificate names 127.0.0.1 too
  by_address.tls.server_name.clear();
  EXPECT_EQ(get(by_address).first, 200);
}

}  // namespace
}  // namespace mlaserve::bench
