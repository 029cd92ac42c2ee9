#include "common/bounded_http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace mlaserve::common {
namespace {

// Why a request's reading was cut short (a bound), if it was.
enum class Cut { kNone, kTimeout, kRequestLine, kHeaders, kBody };

int CutStatus(Cut cut) {
  switch (cut) {
    case Cut::kTimeout: return 408;
    case Cut::kRequestLine: return 414;
    case Cut::kHeaders: return 431;
    case Cut::kBody: return 413;
    case Cut::kNone: break;
  }
  return 0;
}

const char* CutReason(Cut cut) {
  switch (cut) {
    case Cut::kTimeout: return "Request Timeout";
    case Cut::kRequestLine: return "URI Too Long";
    case Cut::kHeaders: return "Request Header Fields Too Large";
    case Cut::kBody: return "Payload Too Large";
    case Cut::kNone: break;
  }
  return "";
}

// The numeric host and port of a socket address (as cpp-httplib formats them).
void HostPort(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  char host[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), service,
                  sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(service);
  }
}

// Waits up to `timeout` for `events` on `fd`; false on timeout or error.
bool WaitFd(int fd, short events, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

// One connection's stream, kept across its requests (so bytes a client pipelines behind a request
// stay buffered for the next), holding each request's reading to HttpRequestBounds. The socket is
// non-blocking: every wait is a poll() bounded by the request's deadline, or by cpp-httplib's
// per-read and write timeouts. Used by one thread (the one serving the connection).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, SSL* ssl, const HttpRequestBounds& bounds, absl::Duration read_timeout,
                   absl::Duration write_timeout)
      : fd_(fd), ssl_(ssl), bounds_(bounds), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  // Waits up to `idle` for the next request's first byte (or the end of the connection, which
  // the request's reading then finds); false when none came, or once the server stops (its
  // `listener` closed).
  bool WaitForRequest(absl::Duration idle, const std::atomic<socket_t>& listener) {
    const absl::Time deadline = absl::Now() + idle;
    while (listener != INVALID_SOCKET) {
      if (Buffered()) return true;
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      // Slices, so that a stopping server does not wait out the idle time.
      if (WaitFd(fd_, POLLIN, std::min(left, absl::Milliseconds(100)))) return true;
    }
    return false;
  }

  void StartRequest() {
    deadline_ = absl::Now() + bounds_.read_timeout;
    in_headers_ = true;
    saw_newline_ = false;
    last4_ = 0;
    count_ = 0;
    cut_ = Cut::kNone;
    wrote_ = false;
    response_head_.clear();
  }

  Cut cut() const { return cut_; }
  bool wrote() const { return wrote_; }

  // Before a connection that will not go on is closed: ends this side (FIN, or TLS's
  // close_notify: a client reading to the end then knows the answer is whole and closes), then
  // reads and drops what the client still sends, for at most `max_time` and `max_bytes`. A
  // client answered before its body was read (413 from its Content-Length, a request cut at a
  // bound) is often still sending it and reads the answer only once it has; closing with its
  // bytes unread would reset the connection and lose the answer (lingering close).
  void Linger(absl::Duration max_time, size_t max_bytes) {
    if (ssl_ != nullptr) {
      SSL_shutdown(ssl_);
    } else {
      shutdown(fd_, SHUT_WR);
    }
    deadline_ = absl::Now() + max_time;
    for (size_t dropped = end_ - begin_; dropped < max_bytes && Fill();) dropped += end_;
  }

  // Whether the response's head says "Connection: close" (a handler that left the body unread
  // says so; cpp-httplib itself closes only when the request asked).
  bool ResponseCloses() const {
    return absl::StrContains(response_head_, "\r\nConnection: close\r\n");
  }

  // Answers a request cut short before cpp-httplib wrote anything (it writes nothing when the
  // request line cannot be read).
  void WriteRefusal() {
    const int status = CutStatus(cut_);
    const std::string body = absl::StrCat(CutReason(cut_), "\n");
    const std::string response =
        absl::StrFormat("HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                        "Content-Length: %d\r\n\r\n%s",
                        status, CutReason(cut_), body.size(), body);
    for (size_t sent = 0; sent < response.size();) {
      const ssize_t n = write(response.data() + sent, response.size() - sent);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  bool is_readable() const override { return Buffered() || WaitFd(fd_, POLLIN, ReadWait()); }

  bool is_writable() const override {
    if (!WaitFd(fd_, POLLOUT, write_timeout_)) return false;
    // Alive unless the peer has closed (cpp-httplib's is_socket_alive).
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return true;
    char byte;
    return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (cut_ != Cut::kNone) return -1;
    if (begin_ == end_ && !Fill()) return -1;
    const size_t n = std::min(size, end_ - begin_);
    if (!Count(buffer_ + begin_, n)) return -1;
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    wrote_ = true;
    if (response_head_.size() < kMaxResponseHead && !absl::StrContains(response_head_, "\r\n\r\n")) {
      response_head_.append(ptr, std::min(size, kMaxResponseHead - response_head_.size()));
    }
    for (;;) {
      if (ssl_ != nullptr) {
        // OpenSSL wants a retried SSL_write to have the same arguments: wait here until it goes.
        const int n = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (n > 0) return n;
        const int error = SSL_get_error(ssl_, n);
        const short events = error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        if ((error != SSL_ERROR_WANT_WRITE && error != SSL_ERROR_WANT_READ) ||
            !WaitFd(fd_, events, write_timeout_)) {
          return -1;
        }
        continue;
      }
      const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !WaitFd(fd_, POLLOUT, write_timeout_)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      HostPort(addr, len, ip, port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      HostPort(addr, len, ip, port);
    }
  }
  // cpp-httplib reads socket() only to refuse (500) a descriptor past FD_SETSIZE, which its
  // select() cannot watch; this stream polls, so it names none.
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  bool Buffered() const { return begin_ < end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0); }

  // How long one wait for more of the request may take: cpp-httplib's read timeout, and no
  // later than the request's deadline.
  absl::Duration ReadWait() const {
    return std::max(absl::ZeroDuration(), std::min(read_timeout_, deadline_ - absl::Now()));
  }

  // Reads what the socket has into the (empty) buffer; false at the end of the connection, on
  // an error, or when the wait ran out (the request is then cut as timed out).
  bool Fill() {
    begin_ = end_ = 0;
    for (;;) {
      short wait_for = POLLIN;
      if (ssl_ != nullptr) {
        const int n = SSL_read(ssl_, buffer_, sizeof(buffer_));
        if (n > 0) {
          end_ = static_cast<size_t>(n);
          return true;
        }
        const int error = SSL_get_error(ssl_, n);
        if (error == SSL_ERROR_WANT_WRITE) {
          wait_for = POLLOUT;
        } else if (error != SSL_ERROR_WANT_READ) {
          return false;
        }
      } else {
        const ssize_t n = recv(fd_, buffer_, sizeof(buffer_), 0);
        if (n > 0) {
          end_ = static_cast<size_t>(n);
          return true;
        }
        if (n == 0) return false;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      }
      if (!WaitFd(fd_, wait_for, ReadWait())) {
        cut_ = Cut::kTimeout;
        return false;
      }
    }
  }

  // Counts `n` bytes of the request against its bounds; false (and the request cut) past one.
  bool Count(const char* bytes, size_t n) {
    if (absl::Now() > deadline_) {
      cut_ = Cut::kTimeout;
      return false;
    }
    size_t i = 0;
    // The request line and headers end at the first empty line (cpp-httplib reads them a byte
    // at a time, so the body's bytes come after).
    for (; in_headers_ && i < n; ++i) {
      if (++count_ > bounds_.max_header_bytes) {
        cut_ = saw_newline_ ? Cut::kHeaders : Cut::kRequestLine;
        return false;
      }
      saw_newline_ |= bytes[i] == '\n';
      last4_ = (last4_ << 8) | static_cast<unsigned char>(bytes[i]);
      if (last4_ == 0x0d0a0d0a) {
        in_headers_ = false;
        count_ = 0;
      }
    }
    count_ += n - i;
    if (!in_headers_ && count_ > bounds_.max_body_bytes) {
      cut_ = Cut::kBody;
      return false;
    }
    return true;
  }

  const int fd_;
  SSL* const ssl_;
  const HttpRequestBounds bounds_;
  const absl::Duration read_timeout_;
  const absl::Duration write_timeout_;
  char buffer_[16384];
  size_t begin_ = 0;
  size_t end_ = 0;
  // The request being read (StartRequest).
  absl::Time deadline_ = absl::InfiniteFuture();
  bool in_headers_ = true;
  bool saw_newline_ = false;
  uint32_t last4_ = 0;
  size_t count_ = 0;  // bytes of the request line and headers, then of the body
  Cut cut_ = Cut::kNone;
  bool wrote_ = false;
  static constexpr size_t kMaxResponseHead = 4096;
  std::string response_head_;  // the start of the response written (for ResponseCloses)
};

// The stream of the connection this thread serves, for CorrectBoundStatus.
thread_local const ConnectionStream* current_stream = nullptr;

// How long, and how much past the body bound, a closing connection reads what its client still
// sends (ConnectionStream::Linger).
constexpr absl::Duration kLingerTime = absl::Seconds(2);
constexpr size_t kLingerExtraBytes = size_t{4} << 20;

// Serves `fd`'s requests (cpp-httplib's keep-alive loop, with one stream for the connection).
// `process` is the server's process_request.
template <typename Process>
bool ServeConnection(int fd, SSL* ssl, const HttpRequestBounds& bounds, absl::Duration read_timeout,
                     absl::Duration write_timeout, absl::Duration keep_alive_timeout,
                     size_t keep_alive_max_count, const std::atomic<socket_t>& listener, Process process) {
  ConnectionStream stream(fd, ssl, bounds, read_timeout, write_timeout);
  current_stream = &stream;
  bool ok = false;
  for (size_t left = keep_alive_max_count; left > 0 && stream.WaitForRequest(keep_alive_timeout, listener);
       --left) {
    stream.StartRequest();
    bool connection_closed = false;
    ok = process(stream, /*close_connection=*/left == 1, connection_closed);
    if (stream.cut() != Cut::kNone) {
      // The rest of the request is unread: nothing after it on this connection can be framed.
      if (!stream.wrote()) stream.WriteRefusal();
      ok = false;
    }
    if (!ok || connection_closed || stream.ResponseCloses()) {
      // The answer is written; let a client still sending its request finish (bounded), so
      // that it reads the answer rather than a reset.
      if (stream.wrote()) stream.Linger(kLingerTime, bounds.max_body_bytes + kLingerExtraBytes);
      break;
    }
  }
  current_stream = nullptr;
  return ok;
}

absl::Duration Seconds(time_t sec, time_t usec) { return absl::Seconds(sec) + absl::Microseconds(usec); }

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void CloseSocket(int fd) {
  shutdown(fd, SHUT_RDWR);
  close(fd);
}

class BoundedServer final : public httplib::Server {
 public:
  explicit BoundedServer(const HttpRequestBounds& bounds) : bounds_(bounds) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    SetNonBlocking(sock);
    const bool ok = ServeConnection(
        sock, nullptr, bounds_, Seconds(read_timeout_sec_, read_timeout_usec_),
        Seconds(write_timeout_sec_, write_timeout_usec_), absl::Seconds(keep_alive_timeout_sec_),
        keep_alive_max_count_, svr_sock_,
        [this](httplib::Stream& strm, bool close_connection, bool& connection_closed) {
          return process_request(strm, close_connection, connection_closed, nullptr);
        });
    CloseSocket(sock);
    return ok;
  }

  const HttpRequestBounds bounds_;
};

class BoundedTlsServer final : public httplib::SSLServer {
 public:
  BoundedTlsServer(const HttpRequestBounds& bounds, const std::string& cert, const std::string& key)
      : httplib::SSLServer(cert.c_str(), key.c_str()), bounds_(bounds) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    SetNonBlocking(sock);
    SSL* ssl = SSL_new(ssl_context());
    bool ok = false;
    if (ssl != nullptr && SSL_set_fd(ssl, sock) == 1 && Handshake(ssl, sock)) {
      ok = ServeConnection(
          sock, ssl, bounds_, Seconds(read_timeout_sec_, read_timeout_usec_),
          Seconds(write_timeout_sec_, write_timeout_usec_), absl::Seconds(keep_alive_timeout_sec_),
          keep_alive_max_count_, svr_sock_,
          [this, ssl](httplib::Stream& strm, bool close_connection, bool& connection_closed) {
            return process_request(strm, close_connection, connection_closed,
                                   [ssl](httplib::Request& req) { req.ssl = ssl; });
          });
      if (ok) SSL_shutdown(ssl);
    }
    if (ssl != nullptr) SSL_free(ssl);
    CloseSocket(sock);
    return ok;
  }

  // The TLS handshake, held to the request read timeout (a client that stalls it would hold a
  // thread as a slow request would).
  bool Handshake(SSL* ssl, int fd) const {
    const absl::Time deadline = absl::Now() + bounds_.read_timeout;
    for (;;) {
      const int r = SSL_accept(ssl);
      if (r == 1) return true;
      const int error = SSL_get_error(ssl, r);
      if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) return false;
      if (!WaitFd(fd, error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline - absl::Now())) return false;
    }
  }

  const HttpRequestBounds bounds_;
};

}  // namespace

std::unique_ptr<httplib::Server> NewBoundedHttpServer(const HttpRequestBounds& bounds,
                                                      const std::string& tls_cert_file,
                                                      const std::string& tls_key_file) {
  std::unique_ptr<httplib::Server> server;
  if (tls_cert_file.empty()) {
    server = std::make_unique<BoundedServer>(bounds);
  } else {
    server = std::make_unique<BoundedTlsServer>(bounds, tls_cert_file, tls_key_file);
  }
  server->set_payload_max_length(bounds.max_body_bytes);
  server->set_error_handler([](const httplib::Request&, httplib::Response& res) { CorrectBoundStatus(res); });
  // "Expect: 100-continue" for a body over the bound gets 413 rather than an invitation to send it.
  server->set_expect_100_continue_handler([max = bounds.max_body_bytes](const httplib::Request& req,
                                                                        httplib::Response& res) {
    uint64_t length = 0;
    if (absl::SimpleAtoi(req.get_header_value("Content-Length"), &length) && length > max) {
      res.status = 413;
      res.set_header("Connection", "close");
      return 413;
    }
    return 100;
  });
  return server;
}

void CorrectBoundStatus(httplib::Response& res) {
  if (current_stream == nullptr || current_stream->cut() == Cut::kNone) return;
  res.status = CutStatus(current_stream->cut());
}

std::optional<FramingError> CheckRequestFraming(const httplib::Request& req) {
  // cpp-httplib would inflate a compressed body with no bound on what it inflates to.
  if (req.has_header("Content-Encoding") &&
      !absl::EqualsIgnoreCase(req.get_header_value("Content-Encoding"), "identity")) {
    return FramingError{415, absl::StrCat("Content-Encoding \"", req.get_header_value("Content-Encoding").substr(0, 32),
                                          "\" is not supported; send the body uncompressed")};
  }
  const size_t lengths = req.get_header_value_count("Content-Length");
  const bool has_encoding = req.has_header("Transfer-Encoding");
  if (has_encoding) {
    if (req.get_header_value_count("Transfer-Encoding") > 1 ||
        !absl::EqualsIgnoreCase(req.get_header_value("Transfer-Encoding"), "chunked")) {
      return FramingError{400, absl::StrCat("Transfer-Encoding \"", req.get_header_value("Transfer-Encoding"),
                                            "\" is not supported; send chunked or a Content-Length")};
    }
    if (lengths > 0) return FramingError{400, "Content-Length and Transfer-Encoding must not both be sent"};
    return std::nullopt;
  }
  if (lengths > 1) return FramingError{400, "Content-Length is sent more than once"};
  if (lengths == 1) {
    uint64_t length;
    const std::string value = req.get_header_value("Content-Length");
    if (value.empty() || !std::all_of(value.begin(), value.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(value, &length)) {
      return FramingError{400, absl::StrCat("Content-Length \"", value.substr(0, 32), "\" is not a number")};
    }
    return std::nullopt;
  }
  if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    return FramingError{411, absl::StrCat(req.method, " needs a Content-Length (or chunked Transfer-Encoding)")};
  }
  return std::nullopt;
}

}  // namespace mlaserve::common
