// How mlaserve-bench reaches the server, over either backend, with the router's transport
// security (docs/security.md): TLS checked against --tls-ca (the name in --tls-server-name
// instead of the host dialed, when given), a client certificate for mutual TLS
// (--tls-cert/--tls-key), and the first key of --api-key-file sent as
// "authorization: Bearer KEY" on every call.
//
// Plaintext unless a TLS flag is given: the bench predates them and its plaintext command
// lines (docs/BENCHMARKS.md, tools/device/) stay valid; --insecure may be said explicitly.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/serving/bench_options.h"
#include "common/transport_security.h"

namespace httplib {
class Client;
enum class Error;
}  // namespace httplib

namespace mlaserve::bench {

// The key to send (empty without --api-key-file). INVALID_ARGUMENT naming the flag and path
// when the file cannot be read or holds no usable key.
absl::StatusOr<std::string> ReadApiKey(const BenchOptions& options);

// A channel to options.server with its TLS and key. INVALID_ARGUMENT naming the flag and path
// of a file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> DialGenerationServer(const BenchOptions& options,
                                                                    const std::string& api_key);

// Where the OpenAI HTTP API is, and how to reach it.
struct OpenAiTarget {
  std::string host;
  int port = 0;
  std::string model;  // the served model name (GET /v1/models)
  // https (false: plaintext http) with tls's ca_file, cert_file/key_file and server_name.
  bool https = false;
  common::TlsOptions tls;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty

  // "http(s)://HOST:PORT", for messages.
  std::string url() const;
};

// options.server (HOST:PORT, [V6]:PORT) with the transport of `options`. INVALID_ARGUMENT
// naming --server when it is not HOST:PORT.
absl::StatusOr<OpenAiTarget> MakeOpenAiTarget(const BenchOptions& options,
                                              const std::string& api_key);

// A client for `target` (its CA, client certificate, server name and key set). Blocking, one
// per thread.
std::unique_ptr<httplib::Client> NewHttpClient(const OpenAiTarget& target);

// Why a request of `client` failed: httplib's error, and for a certificate that did not
// verify, OpenSSL's reason and the name that was checked.
std::string DescribeHttpError(const httplib::Client& client, httplib::Error error,
                              const OpenAiTarget& target);

}  // namespace mlaserve::bench
