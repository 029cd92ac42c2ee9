#include "common/host_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mlaserve::common {
namespace {

constexpr size_t kMaxHostLength = 253;  // RFC 1035's bound on a name's text form
constexpr size_t kMaxLabelLength = 63;
constexpr size_t kMaxPortDigits = 5;
constexpr int kMaxPort = 65535;
constexpr absl::string_view kDialGrammar =
    "expected HOST:PORT (HOST a DNS name or an IPv4 address) or [IPV6]:PORT, PORT in [1, 65535]";

// gRPC's own target schemes: "dns:80" or "unix:8200" would be read by gRPC as a URI, not as a
// host of that name, so they are refused as URIs too.
constexpr absl::string_view kGrpcSchemes[] = {"dns",  "ipv4", "ipv6",       "unix",
                                             "unix-abstract", "vsock", "xds", "google-c2p"};

absl::Status BadDial(absl::string_view address, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("address '", absl::CHexEscape(address), "' ", why, "; ", kDialGrammar));
}

// The scheme of a gRPC target URI ("dns" of "dns:///h:1"), when `address` is one.
std::optional<absl::string_view> TargetScheme(absl::string_view address) {
  if (const size_t sep = address.find("://"); sep != absl::string_view::npos) {
    return address.substr(0, sep);
  }
  for (absl::string_view scheme : kGrpcSchemes) {
    if (address.size() > scheme.size() && address[scheme.size()] == ':' &&
        absl::StartsWithIgnoreCase(address, scheme)) {
      return address.substr(0, scheme.size());
    }
  }
  return std::nullopt;
}

bool IsHostNameChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.'; }

absl::Status CheckHostName(absl::string_view address, absl::string_view host) {
  if (host.empty()) return BadDial(address, "has no host");
  if (const auto bad = std::find_if_not(host.begin(), host.end(), IsHostNameChar);
      bad != host.end()) {
    std::string what = "a control or non-ASCII byte";
    if (*bad == ' ') {
      what = "a space";
    } else if (absl::ascii_isprint(*bad)) {
      what = absl::StrCat("'", std::string(1, *bad), "'");
    }
    return BadDial(address, absl::StrCat("has ", what, " in its host"));
  }
  if (host.size() > kMaxHostLength) {
    return BadDial(address, absl::StrCat("has a host of ", host.size(), " characters (at most ",
                                         kMaxHostLength, ")"));
  }
  absl::string_view name = host;
  if (name.back() == '.') name.remove_suffix(1);  // a fully qualified name
  bool numeric = true;
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty()) {
      return BadDial(address, absl::StrCat("has host '", absl::CHexEscape(host),
                                           "' with an empty label"));
    }
    if (label.size() > kMaxLabelLength || label.front() == '-' || label.back() == '-') {
      return BadDial(address, absl::StrCat("has host '", absl::CHexEscape(host), "' with label '",
                                           label, "' (1-", kMaxLabelLength,
                                           " characters, no '-' at either end)"));
    }
    numeric = numeric && std::all_of(label.begin(), label.end(), absl::ascii_isdigit);
  }
  // Digits and dots only: an IPv4 address, or nothing (getaddrinfo would read "1234" or
  // "10.1" as an address of its own making).
  in_addr v4{};
  if (numeric && inet_pton(AF_INET, std::string(name).c_str(), &v4) != 1) {
    return BadDial(address, absl::StrCat("has host '", host, "', which is not an IPv4 address"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" has no port; expected HOST:PORT"));
  }
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (hp.host.empty()) hp.host = "0.0.0.0";
  if (!absl::SimpleAtoi(address.substr(colon + 1), &hp.port) || hp.port < 0 ||
      hp.port > kMaxPort) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has port \"",
                                                   address.substr(colon + 1),
                                                   "\"; expected a number in [0, 65535]"));
  }
  return hp;
}

std::string FormatHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseDialAddress(absl::string_view address) {
  if (address.empty()) return BadDial(address, "is empty");
  if (std::optional<absl::string_view> scheme = TargetScheme(address)) {
    return BadDial(address, absl::StrCat("is a gRPC target URI (scheme '",
                                         absl::CHexEscape(*scheme), "'), not an address"));
  }
  absl::string_view host, port;
  HostPort hp;
  if (address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return BadDial(address, "opens '[' without a ']'");
    host = address.substr(1, close - 1);
    if (close + 1 == address.size() || address[close + 1] != ':') {
      return BadDial(address, "has no ':PORT' right after its ']'");
    }
    port = address.substr(close + 2);
    in6_addr v6{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1) {
      return BadDial(address, absl::StrCat("has '", absl::CHexEscape(host),
                                           "' in brackets, which is not an IPv6 address"));
    }
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return BadDial(address, "has no port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return BadDial(address,
                     "has more than one ':' (an IPv6 address goes in brackets: [::1]:8200)");
    }
    if (absl::Status s = CheckHostName(address, host); !s.ok()) return s;
  }
  // A port the router could never dial ("-5", "0", "99999", "+80", "http") would sit in the
  // registry as a worker that is never reached.
  if (port.empty() || port.size() > kMaxPortDigits ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &hp.port) || hp.port < 1 || hp.port > kMaxPort) {
    return absl::InvalidArgumentError(absl::StrCat("address '", absl::CHexEscape(address),
                                                   "' has port '", absl::CHexEscape(port),
                                                   "'; it must be a decimal number in [1, 65535]"));
  }
  hp.host = std::string(host);
  return hp;
}

}  // namespace mlaserve::common
