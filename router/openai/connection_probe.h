// ConnectionProbe: whether the client of an HTTP request has gone, for a handler that waits
// (a non-streamed completion) before it writes anything. A streamed response learns it from
// its writes instead (httplib's DataSink::is_writable).
//
// cpp-httplib 0.11 (Debian 12's) gives handlers no access to their connection (later
// versions have Request::is_connection_closed), so the probe finds the socket once: through
// the TLS session when there is one, otherwise as the socket of this process whose local
// and peer addresses are the request's. That descriptor is stable while the handler runs
// (the connection is closed only after the handler returns).
#pragma once

#include <httplib.h>

namespace mlaserve::router::openai {

class ConnectionProbe {
 public:
  explicit ConnectionProbe(const httplib::Request& request) : request_(request) {}
  // True once the peer closed or reset the connection. False while it is open, and when the
  // socket cannot be found (then nothing can be told).
  bool ClientGone();

 private:
  int FindSocket() const;
  const httplib::Request& request_;
  bool searched_ = false;
  int fd_ = -1;
};

}  // namespace mlaserve::router::openai
