// The bounded cpp-httplib servers against clients that misbehave, over raw loopback sockets:
// slow requests are cut at the read timeout (and a waiting client is then served), oversized
// request lines, headers and chunked bodies get their status without being read in full,
// pipelined requests are answered in order, and HTTPS is held to the same bounds.
#include "common/bounded_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/http_accept_loop.h"
#include "common/testing/test_pki.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A connected loopback socket whose reads give up after 10 s (a bound for a failing test,
// never a wait the test relies on).
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends what it can of `bytes` (the server may stop reading) and returns all it answers until
// it closes the connection.
std::string Exchange(int fd, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

class BoundedHttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpRequestBounds bounds, int threads = 4) {
    server_ = NewBoundedHttpServer(bounds);
    server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_->Post("/echo", [this](const httplib::Request& req, httplib::Response& res) {
      handled_.fetch_add(1);
      res.set_content(absl::StrCat("got ", req.body.size()), "text/plain");
    });
    server_->Get("/hello", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hello", "text/plain");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    loop_ = StartAcceptLoop(*server_);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->stop();
    if (loop_.joinable()) loop_.join();
  }

  std::unique_ptr<httplib::Server> server_;
  std::thread loop_;
  int port_ = 0;
  std::atomic<int> handled_{0};
};

TEST_F(BoundedHttpServerTest, ARequestThatStallsGets408AndFreesItsThread) {
  Start(HttpRequestBounds{.read_timeout = absl::Milliseconds(300)}, /*threads=*/1);
  // The one thread is held by a request whose headers never end...
  const int slow = Connect(port_);
  ASSERT_GE(slow, 0);
  ASSERT_GT(send(slow, "GET /hello HTTP/1.1\r\nHost: x\r\n", 29, 0), 0);
  // ... and a client behind it is served once the slow one is cut.
  const int waiting = Connect(port_);
  ASSERT_GE(waiting, 0);
  std::string answer;
  std::thread waiter([&] { answer = Exchange(waiting, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); });
  EXPECT_THAT(Exchange(slow, ""), StartsWith("HTTP/1.1 408 Request Timeout"));
  waiter.join();
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(answer, HasSubstr("hello"));
}

TEST_F(BoundedHttpServerTest, ABodyDrippedPastTheReadTimeoutGets408) {
  Start(HttpRequestBounds{.read_timeout = absl::Milliseconds(300)});
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  EXPECT_THAT(Exchange(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"),
              StartsWith("HTTP/1.1 408"));
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(BoundedHttpServerTest, OversizedRequestLinesAndHeadersAreRefused) {
  Start(HttpRequestBounds{.max_header_bytes = 4096});
  EXPECT_THAT(Exchange(Connect(port_), "GET /" + std::string(1 << 20, 'a') + " HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 414"));
  std::string many = "GET /hello HTTP/1.1\r\n";
  for (int i = 0; i < 10000; ++i) absl::StrAppend(&many, "X-", i, ": v\r\n");
  EXPECT_THAT(Exchange(Connect(port_), many + "\r\n"), StartsWith("HTTP/1.1 431"));
  // Below the bound all is well.
  EXPECT_THAT(Exchange(Connect(port_), "GET /hello HTTP/1.1\r\nX: " + std::string(3000, 'v') +
                                           "\r\nConnection: close\r\n\r\n"),
              StartsWith("HTTP/1.1 200"));
}

TEST_F(BoundedHttpServerTest, ChunkedBodiesAreHeldToTheBodyBound) {
  Start(HttpRequestBounds{.max_body_bytes = 64 << 10});
  const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  const std::string chunk = "1000\r\n" + std::string(0x1000, 'x') + "\r\n";
  std::string small = head;
  for (int i = 0; i < 4; ++i) small += chunk;
  EXPECT_THAT(Exchange(Connect(port_), small + "0\r\n\r\n"), HasSubstr("got 16384"));
  // 16 MiB offered: refused once the bound is passed, without the rest being read.
  std::string large = head;
  for (int i = 0; i < 4096; ++i) large += chunk;
  EXPECT_THAT(Exchange(Connect(port_), large + "0\r\n\r\n"), StartsWith("HTTP/1.1 413"));
  EXPECT_EQ(handled_.load(), 1);
  // A client that asks first is told at once.
  EXPECT_THAT(Exchange(Connect(port_), "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                       "Content-Length: 1000000\r\n\r\n"),
              StartsWith("HTTP/1.1 413"));
}

TEST_F(BoundedHttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  Start(HttpRequestBounds{});
  std::string requests;
  for (int i = 1; i <= 3; ++i) {
    const std::string body(static_cast<size_t>(i), 'x');
    absl::StrAppend(&requests, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: ", i,
                    i == 3 ? "\r\nConnection: close" : "", "\r\n\r\n", body);
  }
  const std::string out = Exchange(Connect(port_), requests);
  const size_t first = out.find("got 1");
  const size_t second = out.find("got 2");
  const size_t third = out.find("got 3");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  ASSERT_NE(third, std::string::npos) << out;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
}

TEST(RequestFramingTest, BodiesNeedOneSoundLength) {
  httplib::Request req;
  req.method = "POST";
  ASSERT_TRUE(CheckRequestFraming(req).has_value());
  EXPECT_EQ(CheckRequestFraming(req)->status, 411);
  req.set_header("Content-Length", "12");
  EXPECT_FALSE(CheckRequestFraming(req).has_value());
  req.set_header("Content-Length", "5");
  EXPECT_EQ(CheckRequestFraming(req)->status, 400) << "two lengths";
  for (const char* bad : {"-1", "12abc", "", "+3", "99999999999999999999999"}) {
    httplib::Request one;
    one.method = "POST";
    one.set_header("Content-Length", bad);
    ASSERT_TRUE(CheckRequestFraming(one).has_value()) << bad;
    EXPECT_EQ(CheckRequestFraming(one)->status, 400) << bad;
  }
  httplib::Request chunked;
  chunked.method = "POST";
  chunked.set_header("Transfer-Encoding", "chunked");
  EXPECT_FALSE(CheckRequestFraming(chunked).has_value());
  chunked.set_header("Content-Length", "3");
  EXPECT_EQ(CheckRequestFraming(chunked)->status, 400) << "both";
  httplib::Request gzip;
  gzip.method = "POST";
  gzip.set_header("Transfer-Encoding", "gzip, chunked");
  EXPECT_EQ(CheckRequestFraming(gzip)->status, 400);
  httplib::Request compressed;
  compressed.method = "POST";
  compressed.set_header("Content-Length", "12");
  compressed.set_header("Content-Encoding", "gzip");
  EXPECT_EQ(CheckRequestFraming(compressed)->status, 415);
  httplib::Request get;
  get.method = "GET";
  EXPECT_FALSE(CheckRequestFraming(get).has_value());
}

// HTTPS: a client that stalls the handshake or the request is cut as a plaintext one is, and a
// real client is served.
TEST(BoundedHttpsServerTest, StalledHandshakesAndRequestsAreCut) {
  std::string dir = ::testing::TempDir() + "/bounded-https-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  absl::StatusOr<testing::TestPki> pki = testing::WriteTestPki(dir);
  ASSERT_TRUE(pki.ok()) << pki.status();
  std::unique_ptr<httplib::Server> server = NewBoundedHttpServer(
      HttpRequestBounds{.read_timeout = absl::Milliseconds(300)}, pki->node_cert, pki->node_key);
  ASSERT_TRUE(server->is_valid());
  server->new_task_queue = [] { return new httplib::ThreadPool(1); };
  server->Get("/hello", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hello", "text/plain");
  });
  const int port = server->bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread loop = StartAcceptLoop(*server);
  // A client that opens a connection and never says hello holds the one thread until cut.
  const int silent = Connect(port);
  ASSERT_GE(silent, 0);
  httplib::SSLClient client("127.0.0.1", port);
  client.enable_server_certificate_verification(false);
  client.set_read_timeout(10, 0);
  httplib::Result r = client.Get("/hello");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  EXPECT_EQ(Exchange(silent, ""), "") << "a handshake never finished is closed";
  server->stop();
  loop.join();
}

}  // namespace
}  // namespace mlaserve::common
