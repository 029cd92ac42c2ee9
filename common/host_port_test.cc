#include "common/host_port.h"

#include <initializer_list>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

using ::testing::HasSubstr;

TEST(HostPortTest, ParsesAndRefuses) {
  auto hp = ParseHostPort("127.0.0.1:8100");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 8100);
  hp = ParseHostPort(":0");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "0.0.0.0");
  hp = ParseHostPort("[::1]:5");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(FormatHostPort("::1", 5), "[::1]:5");
  EXPECT_EQ(ParseHostPort("localhost").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("h:70000").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("h:x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DialAddressTest, TakesHostPortAndBracketedIpv6) {
  struct Case {
    const char* address;
    const char* host;
    int port;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"127.0.0.1:8200", "127.0.0.1", 8200},
           {"localhost:1", "localhost", 1},
           {"decode-0.mlaserve-decode.ns.svc.cluster.local:8200",
            "decode-0.mlaserve-decode.ns.svc.cluster.local", 8200},
           {"decode-0.ns.svc.cluster.local.:8200", "decode-0.ns.svc.cluster.local.", 8200},
           {"compose_decode_1:65535", "compose_decode_1", 65535},
           {"Decode0:80", "Decode0", 80},
           {"0.0.0.0:8100", "0.0.0.0", 8100},
           {"[::1]:8200", "::1", 8200},
           {"[fd00::5]:8200", "fd00::5", 8200},
           {"[::ffff:10.0.0.1]:8200", "::ffff:10.0.0.1", 8200},
           {"[::]:8100", "::", 8100},
       }) {
    absl::StatusOr<HostPort> hp = ParseDialAddress(c.address);
    ASSERT_TRUE(hp.ok()) << c.address << ": " << hp.status();
    EXPECT_EQ(hp->host, c.host);
    EXPECT_EQ(hp->port, c.port);
    // What a server formats as its bound address is a dial address.
    EXPECT_EQ(FormatHostPort(hp->host, hp->port), c.address);
  }
}

// Everything else is INVALID_ARGUMENT naming the address, what is wrong with it and the grammar.
TEST(DialAddressTest, RefusesAnythingElseNamingTheValueAndTheGrammar) {
  struct Case {
    std::string address;
    const char* why;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"", "is empty"},
           // gRPC target URIs (found by an outside fuzzer: AddWorker took dns:///a:1).
           {"dns:///a:1", "is a gRPC target URI (scheme 'dns')"},
           {"dns:a:1", "is a gRPC target URI (scheme 'dns')"},
           {"DNS:///a:1", "is a gRPC target URI (scheme 'DNS')"},
           {"ipv4:10.0.0.1:80", "is a gRPC target URI (scheme 'ipv4')"},
           {"ipv6:[::1]:80", "is a gRPC target URI (scheme 'ipv6')"},
           {"unix:/run/worker.sock", "is a gRPC target URI (scheme 'unix')"},
           {"unix:8200", "is a gRPC target URI (scheme 'unix')"},
           {"unix-abstract:w", "is a gRPC target URI (scheme 'unix-abstract')"},
           {"xds:///decode", "is a gRPC target URI (scheme 'xds')"},
           {"http://h:80", "is a gRPC target URI (scheme 'http')"},
           // Hosts (a b:1 found by the same fuzzer).
           {"a b:1", "has a space in its host"},
           {" h:1", "has a space in its host"},
           {"h\t:1", "has a control or non-ASCII byte in its host"},
           {"h\n:1", "has a control or non-ASCII byte in its host"},
           {"h\xc3\xa9:1", "has a control or non-ASCII byte in its host"},
           {"h/x:1", "has '/' in its host"},
           {"user@h:1", "has '@' in its host"},
           {"h%eth0:1", "has '%' in its host"},
           {":8200", "has no host"},
           {"nohostport", "has no port"},
           {"a..b:1", "has host 'a..b' with an empty label"},
           {".h:1", "with an empty label"},
           {".:1", "with an empty label"},
           {"-h:1", "with label '-h'"},
           {"h-.x:1", "with label 'h-'"},
           {std::string(64, 'a') + ":1", "(1-63 characters"},
           {std::string(200, 'a') + "." + std::string(60, 'b') + ":1",
            "has a host of 261 characters"},
           {"999.1.1.1:1", "which is not an IPv4 address"},
           {"10.1:1", "which is not an IPv4 address"},
           {"1234:1", "which is not an IPv4 address"},
           // IPv6.
           {"::1:8200", "an IPv6 address goes in brackets"},
           {"fd00::5:8200", "an IPv6 address goes in brackets"},
           {"[::1]", "has no ':PORT' right after its ']'"},
           {"[::1]x:1", "has no ':PORT' right after its ']'"},
           {"[::1:8200", "opens '[' without a ']'"},
           {"[h]:1", "'h' in brackets, which is not an IPv6 address"},
           {"[fe80::1%eth0]:1", "which is not an IPv6 address"},
           {"[]:1", "which is not an IPv6 address"},
           {"[10.0.0.1]:1", "which is not an IPv6 address"},
           // Ports.
           {"h:", "has port ''"},
           {"h:0", "has port '0'"},
           {"h:-5", "has port '-5'"},
           {"h:+80", "has port '+80'"},
           {"h: 80", "has port ' 80'"},
           {"h:80 ", "has port '80 '"},
           {"h:65536", "has port '65536'"},
           {"h:000080", "has port '000080'"},
           {"h:http", "has port 'http'"},
           {"[::1]:0", "has port '0'"},
           {"[::1]:", "has port ''"},
       }) {
    absl::StatusOr<HostPort> hp = ParseDialAddress(c.address);
    ASSERT_FALSE(hp.ok()) << c.address;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << c.address;
    const std::string message(hp.status().message());
    EXPECT_THAT(message, HasSubstr(c.why)) << c.address;
    if (!c.address.empty() && absl::ascii_isprint(static_cast<unsigned char>(c.address[0]))) {
      EXPECT_THAT(message, HasSubstr(std::string("address '") + c.address.substr(0, 1)));
    }
    if (absl::StrContains(message, "has port")) {
      EXPECT_THAT(message, HasSubstr("[1, 65535]")) << c.address;
    } else {
      EXPECT_THAT(message, HasSubstr("expected HOST:PORT")) << c.address;
    }
  }
  // The address is echoed escaped: a control byte does not break the message or a log line.
  EXPECT_THAT(std::string(ParseDialAddress("h\n:1").status().message()), HasSubstr("'h\\n:1'"));
  EXPECT_THAT(std::string(ParseDialAddress("a b:1").status().message()), HasSubstr("'a b:1'"));
}

}  // namespace
}  // namespace mlaserve::common
