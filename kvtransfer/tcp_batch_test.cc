// KV protocol 2 over the tcp transport on loopback: runs of pages per message (SendPages,
// KvLayerPages), cut at the size cap; a corrupted run, a bad range, a peer that dies in the
// middle of a big message and a receiver that goes away, each ending in bounded time with
// every page free; and protocol mismatches refused naming both protocols.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/proto_convert.h"
#include "kvtransfer/tcp_transport.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::mlaserve::v1;
using testing::DoneProbe;
using testing::Verdict;

class TcpBatchTest : public ::testing::Test {
 protected:
  void SetUp() override { UsePools(testing::SmallPoolOptions(32)); }
  void UsePools(const model::KvPoolOptions& o) {
    options_ = o;
    src_ = testing::MakePool(o);
    dst_ = testing::MakePool(o);
    ASSERT_NE(src_, nullptr);
    ASSERT_NE(dst_, nullptr);
    layout_ = testing::SmallLayout(o);
    if (o.cache_format == model::KvCacheFormat::kFp8Ds) layout_.dtype = kernels::DType::kFP8E4M3;
  }
  void StartReceiver(absl::Duration no_progress = absl::Seconds(30)) {
    receiver_ = std::make_unique<KvReceiver>(dst_.get(), layout_, KvReceiverOptions{no_progress});
    service_ = std::make_unique<KvServiceImpl>(receiver_.get());
    common::ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.shutdown_grace = absl::Milliseconds(100);  // a receiver going away cuts its streams
    server_ = std::make_unique<common::ServerRunner>(so);
    server_->AddService(service_.get());
    ASSERT_TRUE(server_->Start().ok());
  }
  void StopReceiver() {
    if (server_ == nullptr) return;
    server_->RequestShutdown();
    server_->WaitForShutdown();
    server_.reset();
  }
  void TearDown() override { StopReceiver(); }

  KvSessionRef Ref(const std::string& id, int pages) {
    return KvSessionRef{id, server_->bound_address(), "tcp", pages, layout_.CompatHash()};
  }
  std::string Bytes(size_t pages) {
    return testing::RandomBytes(pages * dst_->layer_page_bytes(), rng_);
  }
  static std::span<const uint8_t> Span(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }
  // A raw PushPages stream, to put on the wire what a correct sender never would.
  struct RawStream {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::KvService::Stub> stub;
    grpc::ClientContext ctx;
    v1::KvPushResult result;
    std::unique_ptr<grpc::ClientWriter<v1::KvPushMessage>> writer;
  };
  std::unique_ptr<RawStream> OpenRaw(const std::string& id, const KvLayout& layout) {
    auto raw = std::make_unique<RawStream>();
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    raw->channel = grpc::CreateCustomChannel(server_->bound_address(),
                                             grpc::InsecureChannelCredentials(), args);
    raw->stub = v1::KvService::NewStub(raw->channel);
    raw->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    raw->writer = raw->stub->PushPages(&raw->ctx, &raw->result);
    v1::KvPushMessage open;
    open.mutable_open()->set_session_id(id);
    *open.mutable_open()->mutable_layout() = ToProto(layout);
    EXPECT_TRUE(raw->writer->Write(open));
    return raw;
  }
  static v1::KvPushMessage Run(int layer, int first, int n, const std::string& payload) {
    v1::KvPushMessage m;
    auto* run = m.mutable_pages();
    run->set_layer(layer);
    run->set_first_page_index(first);
    run->set_num_pages(n);
    run->set_payload(payload);
    run->set_crc32(Crc32(payload));
    return m;
  }

  model::KvPoolOptions options_;
  std::unique_ptr<model::KvPool> src_, dst_;
  KvLayout layout_;
  std::unique_ptr<KvReceiver> receiver_;
  std::unique_ptr<KvServiceImpl> service_;
  std::unique_ptr<common::ServerRunner> server_;
  std::mt19937 rng_{std::random_device{}()};
};

// Two chunks per layer (pages [0, 3) then [2, 5): page 2 re-sent), the cap at two pages per
// message: every page lands once per layer, the re-sent one with its last copy.
TEST_F(TcpBatchTest, RunsOfPagesArriveByteIdenticalAcrossTheSizeCap) {
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8 cache with indexer keys" : "f32 cache");
    model::KvPoolOptions o = testing::SmallPoolOptions(32);
    if (fp8) {
      o.cache_format = model::KvCacheFormat::kFp8Ds;
      o.latent_dim = 576;
      o.index_dim = 32;
    }
    UsePools(o);
    StartReceiver();
    constexpr int kPages = 5;
    DoneProbe probe;
    ASSERT_TRUE(receiver_->CreateSession("b1", *dst_->Allocate(kPages), kPages,
                                         absl::Now() + absl::Seconds(30), probe.fn())
                    .ok());
    TcpKvTransport transport;
    KvSenderOptions so;
    so.max_message_bytes = 2 * dst_->layer_page_bytes() + 1;  // two pages a message
    auto sender = transport.Open(Ref("b1", kPages), layout_, so);
    ASSERT_TRUE(sender.ok()) << sender.status();
    std::vector<std::string> want(options_.num_layers);
    const size_t pb = dst_->layer_page_bytes();
    for (int l = 0; l < options_.num_layers; ++l) {
      const std::string first = Bytes(3), second = Bytes(3);
      ASSERT_TRUE((*sender)->SendPages(l, 0, 3, Span(first)).ok());
      ASSERT_TRUE((*sender)->SendPages(l, 2, 3, Span(second)).ok());
      want[l] = first.substr(0, 2 * pb) + second;
    }
    EXPECT_EQ((*sender)->bytes_sent(), int64_t{options_.num_layers} * 6 * int64_t(pb));
    Verdict verdict;
    (*sender)->Complete(KvCompletion{7, options_.num_layers, kPages, (*sender)->bytes_sent()},
                        verdict.fn());
    ASSERT_TRUE(verdict.Wait());
    ASSERT_TRUE(verdict.status.ok()) << verdict.status;
    ASSERT_TRUE(probe.Wait());
    ASSERT_TRUE(probe.result->ok()) << probe.result->status();
    const std::vector<int32_t>& pages = (*probe.result)->pages;
    for (int l = 0; l < options_.num_layers; ++l) {
      std::string got(kPages * pb, '\0');
      ASSERT_TRUE(dst_->ReadPages(l, pages, got.data()).ok());
      EXPECT_EQ(got, want[l]) << "layer " << l;
    }
    dst_->Free(pages);
    EXPECT_EQ(dst_->free_pages(), 32);
    StopReceiver();
  }
}

TEST_F(TcpBatchTest, CorruptedRunIsRefusedWithDataLossAndFreesThePages) {
  StartReceiver();
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("b2", *dst_->Allocate(6), 6,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  auto raw = OpenRaw("b2", layout_);
  ASSERT_TRUE(raw->writer->Write(Run(1, 0, 3, Bytes(3))));  // a good run first
  v1::KvPushMessage bad = Run(1, 3, 3, Bytes(3));
  (*bad.mutable_pages()->mutable_payload())[2 * dst_->layer_page_bytes() + 5] ^= 0x10;
  (void)raw->writer->Write(bad);
  raw->writer->WritesDone();
  const grpc::Status s = raw->writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(s.error_message(), HasSubstr("layer 1 pages [3, 6) checksum"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(dst_->free_pages(), 32);
}

TEST_F(TcpBatchTest, RunsOutsideTheSessionOrOfTheWrongSizeAreRefused) {
  StartReceiver();
  struct Case {
    int first, n;
    size_t payload_pages;
    const char* error;
  };
  for (const Case& c : {Case{3, 2, 2, "pages [3, 5) not within [0, 4)"},
                        Case{-1, 1, 1, "pages [-1, 0) not within [0, 4)"},
                        Case{0, 0, 0, "pages [0, 0) not within [0, 4)"},
                        Case{0, 2, 3, "payload of"}}) {
    SCOPED_TRACE(c.error);
    // A fresh id per case: a finished stream's late cancellation names its own session only.
    const std::string id = absl::StrCat("b3-", c.first, "-", c.n, "-", c.payload_pages);
    DoneProbe probe;
    ASSERT_TRUE(receiver_->CreateSession(id, *dst_->Allocate(4), 4,
                                         absl::Now() + absl::Seconds(30), probe.fn())
                    .ok());
    auto raw = OpenRaw(id, layout_);
    (void)raw->writer->Write(Run(0, c.first, c.n, Bytes(c.payload_pages)));
    raw->writer->WritesDone();
    const grpc::Status s = raw->writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr(c.error));
    ASSERT_TRUE(probe.Wait());
    EXPECT_EQ(dst_->free_pages(), 32);
  }
}

// A TCP relay between a sender and the receiver that can cut the connection after a number of
// bytes went through, as the sender's host dying would.
class CuttingRelay {
 public:
  // Listens on 127.0.0.1:0 and relays one connection to `target` ("127.0.0.1:port").
  explicit CuttingRelay(const std::string& target) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(listener_, 1) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    address_ = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
    target_port_ = std::stoi(target.substr(target.rfind(':') + 1));
    thread_ = std::thread([this] { Relay(); });
  }
  ~CuttingRelay() {
    Cut();
    if (listener_ >= 0) shutdown(listener_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) close(listener_);
  }
  const std::string& address() const { return address_; }
  // Cuts the connection once `bytes` more bytes went from the sender to the receiver.
  void CutAfter(int64_t bytes) { cut_at_ = forwarded_.load() + bytes; }
  bool cut() const { return cut_.load(); }

 private:
  void Cut() {
    if (cut_.exchange(true)) return;
    // A reset, not an orderly close: the receiver sees the connection die mid-message.
    for (int fd : {client_.load(), server_.load()}) {
      if (fd < 0) continue;
      linger l{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      shutdown(fd, SHUT_RDWR);
    }
  }
  void Relay() {
    const int c = accept(listener_, nullptr, nullptr);
    if (c < 0) return;
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_port_);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(c);
      close(s);
      return;
    }
    client_ = c;
    server_ = s;
    std::vector<char> buf(1 << 16);
    while (!cut_) {
      pollfd fds[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      if (poll(fds, 2, 100) < 0) break;
      for (int i = 0; i < 2 && !cut_; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = read(fds[i].fd, buf.data(), buf.size());
        if (n <= 0 || write(fds[1 - i].fd, buf.data(), n) != n) {
          Cut();
          break;
        }
        if (i == 0 && (forwarded_ += n) >= cut_at_.load()) Cut();
      }
    }
    Cut();
    close(c);
    close(s);
  }

  int listener_ = -1;
  int target_port_ = 0;
  std::string address_;
  std::atomic<int> client_{-1}, server_{-1};
  std::atomic<int64_t> forwarded_{0};
  std::atomic<int64_t> cut_at_{std::numeric_limits<int64_t>::max()};
  std::atomic<bool> cut_{false};
  std::thread thread_;
};

// The sender's host dies in the middle of a big message (the connection is reset after part of
// it went through): the receiver fails the session and frees its pages at once, without
// waiting for a deadline, and the sender learns it within its own.
TEST_F(TcpBatchTest, PeerDyingMidMessageFreesThePages) {
  model::KvPoolOptions o = testing::SmallPoolOptions(80);
  o.latent_dim = 576;  // 147 KiB layer pages: a 64-page run is a 9 MiB message
  UsePools(o);
  StartReceiver(absl::Seconds(30));
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("b4", *dst_->Allocate(64), 64,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  CuttingRelay relay(server_->bound_address());
  ASSERT_FALSE(relay.address().empty());
  TcpKvTransport transport(common::ClusterDialer::Insecure(), 1);
  KvSessionRef ref = Ref("b4", 64);
  ref.endpoint = relay.address();
  KvSenderOptions so;
  so.no_progress_timeout = absl::Seconds(3);
  so.max_message_bytes = 64 << 20;  // the whole run in one message
  auto sender = transport.Open(ref, layout_, so);
  ASSERT_TRUE(sender.ok());
  relay.CutAfter(3 << 20);  // a third of the message
  ASSERT_TRUE((*sender)->SendPages(0, 0, 64, Span(Bytes(64))).ok());  // queued
  ASSERT_TRUE(probe.Wait());
  EXPECT_TRUE(relay.cut());
  EXPECT_EQ(probe.result->status().code(), absl::StatusCode::kCancelled)
      << probe.result->status();
  EXPECT_EQ(dst_->free_pages(), 80);
  EXPECT_EQ(receiver_->active_sessions(), 0);
  Verdict verdict;
  (*sender)->Complete(KvCompletion{1, options_.num_layers, 64, (*sender)->bytes_sent()},
                      verdict.fn());
  ASSERT_TRUE(verdict.Wait());
  EXPECT_EQ(verdict.status.code(), absl::StatusCode::kUnavailable) << verdict.status;
}

// The receiver goes away in the middle of a transfer whose sender is blocked on flow control:
// SendPages returns an error within the no-progress deadline, and so does Complete.
TEST_F(TcpBatchTest, ReceiverGoneMidTransferEndsTheSenderWithinItsDeadline) {
  StartReceiver(absl::Seconds(30));
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("b5", *dst_->Allocate(16), 16,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  TcpKvTransport transport;
  KvSenderOptions so;
  so.no_progress_timeout = absl::Seconds(2);
  so.max_inflight_bytes = 4 * dst_->layer_page_bytes();
  auto sender = transport.Open(Ref("b5", 16), layout_, so);
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE((*sender)->SendPages(0, 0, 16, Span(Bytes(16))).ok());
  StopReceiver();  // the decode worker's process ends: server, then receiver
  service_.reset();
  receiver_.reset();
  ASSERT_TRUE(probe.Wait());  // its sessions failed as it went
  EXPECT_EQ(dst_->free_pages(), 32);
  const absl::Time start = absl::Now();
  absl::Status s;
  for (int l = 1; l < options_.num_layers && s.ok(); ++l) {
    s = (*sender)->SendPages(l, 0, 16, Span(Bytes(16)));
  }
  Verdict verdict;
  (*sender)->Complete(KvCompletion{1, options_.num_layers, 16, (*sender)->bytes_sent()},
                      verdict.fn());
  ASSERT_TRUE(verdict.Wait());
  EXPECT_FALSE(verdict.status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
}

TEST_F(TcpBatchTest, ProtocolMismatchIsRefusedNamingBothProtocols) {
  StartReceiver();
  // Reservation side: the receiver's hash is a protocol-1 layout's.
  KvLayout old_layout = layout_;
  old_layout.kv_protocol = 1;
  KvSessionRef ref = Ref("b6", 1);
  ref.compat_hash = old_layout.CompatHash();
  EXPECT_NE(ref.compat_hash, layout_.CompatHash());
  TcpKvTransport transport;
  auto refused = transport.Open(ref, layout_, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("the receiver speaks KV transfer protocol 1 but this sender speaks 2"));

  // Open side: a protocol-1 sender's layout (no kv_protocol field, the old hash) is refused.
  DoneProbe probe;
  ASSERT_TRUE(receiver_->CreateSession("b6", *dst_->Allocate(1), 1,
                                       absl::Now() + absl::Seconds(30), probe.fn())
                  .ok());
  auto raw = std::make_unique<RawStream>();
  raw->channel = grpc::CreateChannel(server_->bound_address(), grpc::InsecureChannelCredentials());
  raw->stub = v1::KvService::NewStub(raw->channel);
  raw->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  raw->writer = raw->stub->PushPages(&raw->ctx, &raw->result);
  v1::KvPushMessage open;
  open.mutable_open()->set_session_id("b6");
  *open.mutable_open()->mutable_layout() = ToProto(old_layout);
  open.mutable_open()->mutable_layout()->clear_kv_protocol();  // as a build before the field
  ASSERT_TRUE(raw->writer->Write(open));
  raw->writer->WritesDone();
  const grpc::Status s = raw->writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("kv_protocol is 1 on the peer but 2 here"));
  ASSERT_TRUE(probe.Wait());
  EXPECT_EQ(dst_->free_pages(), 32);
}

}  // namespace
}  // namespace mlaserve::kvtransfer
