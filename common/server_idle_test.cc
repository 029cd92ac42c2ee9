// ServerOptions::max_connection_idle: a connection that opens no call is closed once the bound
// has passed (an outside client could otherwise hold thousands of them for ever), while a
// connection with a call open stays, however long the call runs. Every wait has a deadline;
// the idle bound is 200 ms and the upper bounds are generous for a loaded 2-core machine.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>

#include "absl/cleanup/cleanup.h"
#include "common/server.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

constexpr auto kIdle = absl::Milliseconds(200);
// Far above kIdle plus scheduling delays on a loaded CI machine.
constexpr auto kCloseWithin = std::chrono::seconds(30);

std::unique_ptr<ServerRunner> StartServer(absl::Duration idle) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.max_connection_idle = idle;
  auto runner = std::make_unique<ServerRunner>(options);
  const absl::Status started = runner->Start();
  EXPECT_TRUE(started.ok()) << started;
  return started.ok() ? std::move(runner) : nullptr;
}

// What a raw HTTP/2 client saw of the server until the socket ended or the deadline passed.
struct RawConnection {
  bool closed = false;         // read returned EOF (or the peer reset the connection)
  bool saw_goaway = false;     // a GOAWAY frame (type 7) came before the end
  std::chrono::milliseconds open_for{0};
};

// Connects to 127.0.0.1:port, sends the HTTP/2 client preface and an empty SETTINGS frame (the
// least a client must send to be a connection rather than a handshake), then only reads,
// parsing frame headers, until EOF or `within`.
RawConnection HoldRawHttp2Connection(int port, std::chrono::milliseconds within) {
  RawConnection seen;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0) << "socket: errno " << errno;
  if (fd < 0) return seen;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "connect: errno " << errno;
    ::close(fd);
    return seen;
  }
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                              std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);
  EXPECT_EQ(::send(fd, preface.data(), preface.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(preface.size()));
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + within;
  std::vector<uint8_t> pending;  // bytes of frames not yet parsed
  while (!seen.closed) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;  // the deadline (or a poll error)
    uint8_t buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // EOF, or a reset: either way the server dropped the connection
      seen.closed = true;
      break;
    }
    pending.insert(pending.end(), buf, buf + n);
    // Frame header: 24-bit length, 8-bit type, 8-bit flags, 32-bit stream id.
    while (pending.size() >= 9) {
      const size_t length = (size_t{pending[0]} << 16) | (size_t{pending[1]} << 8) | pending[2];
      if (pending.size() < 9 + length) break;
      if (pending[3] == 7) seen.saw_goaway = true;
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(9 + length));
    }
  }
  seen.open_for = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  ::close(fd);
  return seen;
}

TEST(ServerIdleConnectionTest, AConnectionThatOpensNoCallIsClosedAfterTheIdleBound) {
  std::unique_ptr<ServerRunner> runner = StartServer(kIdle);
  ASSERT_NE(runner, nullptr);
  const RawConnection seen = HoldRawHttp2Connection(runner->port(), kCloseWithin);
  EXPECT_TRUE(seen.closed) << "the server still held a connection without calls after "
                           << seen.open_for.count() << " ms (idle bound 200 ms)";
  EXPECT_TRUE(seen.saw_goaway) << "the server closed without a GOAWAY";
  // Closed by the idle timer, not at once: at least most of the bound went by.
  EXPECT_GE(seen.open_for.count(), 150);
}

TEST(ServerIdleConnectionTest, TheDefaultIsFiveMinutesAndNonPositiveIsRefused) {
  EXPECT_EQ(ServerOptions{}.max_connection_idle, absl::Minutes(5));
  for (absl::Duration bad : {absl::ZeroDuration(), absl::Milliseconds(-1)}) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.max_connection_idle = bad;
    ServerRunner runner(options);
    const absl::Status s = runner.Start();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("max_connection_idle"), std::string::npos) << s;
  }
}

// Waits on `cq` for `tag`, at most `within`; true when it came back with ok.
bool Await(grpc::CompletionQueue& cq, void* tag, std::chrono::seconds within) {
  void* got = nullptr;
  bool ok = false;
  const auto deadline = std::chrono::system_clock::now() + within;
  const grpc::CompletionQueue::NextStatus status = cq.AsyncNext(&got, &ok, deadline);
  EXPECT_EQ(status, grpc::CompletionQueue::GOT_EVENT) << "no completion within the deadline";
  EXPECT_EQ(got, tag);
  return status == grpc::CompletionQueue::GOT_EVENT && got == tag && ok;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// A call open on a connection keeps it past many idle bounds (a long Generate or KV transfer
// stream is never cut); once the call ends, the same connection is closed within the bound.
// The long call is grpc.health.v1.Health/Watch, a server stream that stays open and sends each
// change of the serving status.
TEST(ServerIdleConnectionTest, AConnectionWithAnOpenCallIsKeptAndClosedOnceTheCallEnds) {
  std::unique_ptr<ServerRunner> runner = StartServer(kIdle);
  ASSERT_NE(runner, nullptr);
  auto channel = grpc::CreateChannel(runner->bound_address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&ctx, "/grpc.health.v1.Health/Watch", &cq);
  // However the test ends, the call is cancelled and the queue drained (bounded) before the
  // call, the context and the queue go.
  absl::Cleanup drain = [&] {
    ctx.TryCancel();
    cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(30);
    while (cq.AsyncNext(&tag, &ok, deadline) == grpc::CompletionQueue::GOT_EVENT) {
    }
  };
  int start_tag = 0, write_tag = 0, done_tag = 0, read_tag = 0, finish_tag = 0;
  call->StartCall(&start_tag);
  ASSERT_TRUE(Await(cq, &start_tag, std::chrono::seconds(30)));
  grpc::Slice empty("");  // HealthCheckRequest{service: ""}: the server as a whole
  call->Write(grpc::ByteBuffer(&empty, 1), &write_tag);
  ASSERT_TRUE(Await(cq, &write_tag, std::chrono::seconds(30)));
  call->WritesDone(&done_tag);
  ASSERT_TRUE(Await(cq, &done_tag, std::chrono::seconds(30)));
  grpc::ByteBuffer response;
  call->Read(&response, &read_tag);
  ASSERT_TRUE(Await(cq, &read_tag, std::chrono::seconds(30)));
  EXPECT_EQ(Bytes(response), std::string("\x08\x01", 2));  // SERVING
  ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);

  // Ten idle bounds with the call open: the connection must not change state. (A deadline
  // that is meant to pass: this is the wait for a close that must not come.)
  call->Read(&response, &read_tag);
  EXPECT_FALSE(channel->WaitForStateChange(
      GRPC_CHANNEL_READY, std::chrono::system_clock::now() + std::chrono::milliseconds(2000)))
      << "a connection with an open call was closed (state " << channel->GetState(false) << ")";
  // The stream still works end to end: the next status change arrives on it.
  runner->server()->GetHealthCheckService()->SetServingStatus(false);
  ASSERT_TRUE(Await(cq, &read_tag, std::chrono::seconds(30)));
  EXPECT_EQ(Bytes(response), std::string("\x08\x02", 2));  // NOT_SERVING

  // The call ends; the connection, now without calls, is closed within the bound.
  ctx.TryCancel();
  grpc::Status status;
  call->Finish(&status, &finish_tag);
  void* got = nullptr;
  bool ok = false;
  ASSERT_EQ(cq.AsyncNext(&got, &ok, std::chrono::system_clock::now() + std::chrono::seconds(30)),
            grpc::CompletionQueue::GOT_EVENT);
  EXPECT_EQ(got, &finish_tag);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  const auto ended = std::chrono::steady_clock::now();
  ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  EXPECT_TRUE(
      channel->WaitForStateChange(GRPC_CHANNEL_READY, std::chrono::system_clock::now() + kCloseWithin))
      << "the connection stayed open without calls";
  EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY);
  EXPECT_LT(std::chrono::steady_clock::now() - ended, kCloseWithin);
}

}  // namespace
}  // namespace mlaserve::common
