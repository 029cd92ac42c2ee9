// Addresses: the two grammars mlaserve reads, each checked in one place.
//
// A listen address (--listen, --admin-listen) is what a server binds: ParseHostPort.
//
// A dial address is what the router is told a worker is at: --prefill / --decode,
// Admin.AddWorker (also through mlaservectl workers add), and a worker's --advertise, which
// RegisterWorker carries. ParseDialAddress is the check of all of them, so that the registry
// holds only addresses the router can dial and names workers by:
//
//   HOST:PORT     HOST a DNS name (labels of 1-63 letters, digits, '-' and '_' joined by '.',
//                 no '-' at either end of a label, at most 253 characters; one trailing '.'
//                 allowed) or an IPv4 address in dotted-quad form (127.0.0.1)
//   [IPV6]:PORT   an IPv6 address in brackets ([::1]:8200, [fd00::5]:8200), without a zone
//   PORT          decimal, in [1, 65535]
//
// Nothing else: not a gRPC target URI (dns:///h:1, ipv4:10.0.0.1:80, unix:/run/w.sock: gRPC
// would dial those, but the router polls, routes to and names a worker by one HOST:PORT, and a
// worker only ever listens on one), not an IPv6 address without brackets, no spaces.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mlaserve::common {

struct HostPort {
  std::string host;
  int port = 0;
};

// Parses a listen address: "HOST:PORT", "[v6]:PORT" or ":PORT" (host "0.0.0.0"). PORT must be
// in [0, 65535] (0: the kernel picks one).
absl::StatusOr<HostPort> ParseHostPort(const std::string& address);
std::string FormatHostPort(const std::string& host, int port);

// Parses a dial address (the grammar above; the host without brackets). INVALID_ARGUMENT
// naming the address, what in it is wrong, and the grammar.
absl::StatusOr<HostPort> ParseDialAddress(absl::string_view address);

}  // namespace mlaserve::common
