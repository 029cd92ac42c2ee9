// TestPki: a throwaway public-key infrastructure for TLS tests, made in process with OpenSSL
// (no openssl binary, no key files checked into the repository, nothing that expires between
// runs).
//
// Written into `dir`:
//   ca.pem                 the cluster CA (self-signed)
//   node.pem, node.key     a certificate signed by the CA, for both server and client use,
//                          naming mlaserve.cluster, localhost and 127.0.0.1 (the names
//                          docs/security.md's --tls-server-name example uses, plus loopback)
//   rogue-ca.pem           another CA, which signed nothing here: a client that trusts it
//                          must refuse the node's certificate
// Keys are EC P-256; certificates are valid from an hour ago for two days.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace mlaserve::common::testing {

struct TestPki {
  std::string ca;         // path of ca.pem
  std::string node_cert;  // path of node.pem
  std::string node_key;   // path of node.key
  std::string rogue_ca;   // path of rogue-ca.pem
  // The DNS name every node certificate carries (for --tls-server-name).
  static constexpr char kServerName[] = "mlaserve.cluster";
};

// INTERNAL with OpenSSL's reason when a key or certificate cannot be made or written.
absl::StatusOr<TestPki> WriteTestPki(const std::string& dir);

}  // namespace mlaserve::common::testing
