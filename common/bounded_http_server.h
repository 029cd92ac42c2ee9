#pragma once
// cpp-httplib servers whose connections are held to bounds that cpp-httplib 0.11 lacks.
//
// cpp-httplib serves each connection on a thread of its pool and, left to itself, reads a
// request with no overall deadline (its read timeout is per recv, so a byte every few seconds
// holds a thread forever: slowloris), reads chunked bodies, bodies without Content-Length,
// request lines, header lines and header counts without any size bound, and drops the requests
// a client pipelines behind the first. The servers made here read through a stream of their own
// that, for each request (from its first byte):
//   - ends the reading at `read_timeout`: 408 Request Timeout, connection closed;
//   - stops after `max_header_bytes` of request line and headers: 431 (414 while still in the
//     request line), connection closed;
//   - stops after `max_body_bytes` of body as sent (a chunked body's framing counts): 413,
//     connection closed, the rest unread (and "Expect: 100-continue" with a longer
//     Content-Length gets 413 at once);
// and keeps one stream per connection, so pipelined requests are answered in order.
// Connections idle between requests are closed after cpp-httplib's keep-alive timeout, and
// writes give up after its write timeout, as before.
//
// cpp-httplib writes its own status (400) when a read fails; an error handler calls
// CorrectBoundStatus(res) first so that the status and its body name the bound (the servers'
// default error handler does only that).

#include <httplib.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace mlaserve::common {

struct HttpRequestBounds {
  // Reading one request, from its first byte to the end of its body.
  absl::Duration read_timeout = absl::Seconds(30);
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 4 << 20;
};

// A plaintext server, or an HTTPS one when `tls_cert_file` is set (check is_valid()).
std::unique_ptr<httplib::Server> NewBoundedHttpServer(const HttpRequestBounds& bounds,
                                                      const std::string& tls_cert_file = "",
                                                      const std::string& tls_key_file = "");

// When the request being answered on this thread was cut short by one of the bounds above, sets
// res.status to that bound's status (408, 413, 414, 431); otherwise leaves it.
void CorrectBoundStatus(httplib::Response& res);

// The request's framing, checked before its body is read: a body-carrying method (POST, PUT,
// PATCH) without Content-Length or chunked Transfer-Encoding gets 411; several
// Content-Length values, one that is not a decimal number, Content-Length with
// Transfer-Encoding, or a Transfer-Encoding other than chunked gets 400 (the disagreements
// request smuggling through a proxy relies on); a compressed body (Content-Encoding other than
// identity) gets 415, since cpp-httplib inflates it without bound (a 300 KB gzip body becomes a
// 300 MB request). nullopt when the framing is sound; else the status and what was wrong.
struct FramingError {
  int status;
  std::string message;
};
std::optional<FramingError> CheckRequestFraming(const httplib::Request& req);

}  // namespace mlaserve::common
