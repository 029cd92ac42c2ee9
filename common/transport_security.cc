#include "common/transport_security.h"

#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <grpcpp/support/client_interceptor.h>

#include "absl/strings/str_cat.h"

namespace mlaserve::common {
namespace {

// Adds the bearer token to the initial metadata of every call (an interceptor rather than
// call credentials: gRPC sends call credentials only over TLS, and tests with --insecure
// check tokens too).
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(std::string token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;  // lives as long as the channel, which owns this factory
};

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot be read"));
  std::ostringstream s;
  s << in.rdbuf();
  std::string pem = s.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM file"));
  }
  return pem;
}

void AddTlsFlags(CLI::App& app, TlsOptions* o) {
  app.add_flag("--insecure", o->insecure,
               "plaintext gRPC without TLS (loopback demos and tests; never across a network)");
  app.add_option("--tls-cert", o->cert_file, "PEM certificate chain of this process");
  app.add_option("--tls-key", o->key_file, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", o->ca_file,
                 "PEM CA bundle that peers' certificates must chain to (the cluster CA)");
  app.add_option("--tls-server-name", o->server_name,
                 "name that peers' server certificates are checked against (default: the host "
                 "dialed)");
}

absl::Status ValidateTlsOptions(const TlsOptions& o, TlsPeer peer) {
  const bool any_file = !o.cert_file.empty() || !o.key_file.empty() || !o.ca_file.empty();
  if (o.insecure) {
    if (any_file) {
      return absl::InvalidArgumentError(
          "--insecure and --tls-cert/--tls-key/--tls-ca were both given; choose one");
    }
    return absl::OkStatus();
  }
  if (peer == TlsPeer::kServer && (o.cert_file.empty() || o.key_file.empty() || o.ca_file.empty())) {
    return absl::InvalidArgumentError(
        "TLS needs --tls-cert, --tls-key and --tls-ca (or --insecure for plaintext, said "
        "explicitly)");
  }
  if (peer == TlsPeer::kClient && o.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs --tls-ca (the CA of the server's certificate), or --insecure for plaintext");
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--tls-cert", o.cert_file},
                                   {"--tls-key", o.key_file},
                                   {"--tls-ca", o.ca_file}}) {
    if (path.empty()) continue;
    if (absl::StatusOr<std::string> pem = ReadPemFile(path, flag); !pem.ok()) return pem.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& o, ClientCertPolicy policy) {
  if (o.insecure) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      policy == ClientCertPolicy::kNone
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : (policy == ClientCertPolicy::kRequestAndVerify
                 ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                 : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY));
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  auto key = ReadPemFile(o.key_file, "--tls-key");
  if (!key.ok()) return key.status();
  auto cert = ReadPemFile(o.cert_file, "--tls-cert");
  if (!cert.ok()) return cert.status();
  pair.private_key = *std::move(key);
  pair.cert_chain = *std::move(cert);
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (policy != ClientCertPolicy::kNone) {
    auto ca = ReadPemFile(o.ca_file, "--tls-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<const ClusterDialer>> ClusterDialer::Create(const TlsOptions& o,
                                                                          std::string token) {
  std::shared_ptr<ClusterDialer> d(new ClusterDialer);
  d->bearer_token_ = std::move(token);
  d->insecure_ = o.insecure;
  if (o.insecure) {
    d->credentials_ = grpc::InsecureChannelCredentials();
    return d;
  }
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadPemFile(o.ca_file, "--tls-ca");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!o.cert_file.empty()) {
    auto cert = ReadPemFile(o.cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile(o.key_file, "--tls-key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  d->credentials_ = grpc::SslCredentials(ssl);
  d->server_name_ = o.server_name;
  return d;
}

std::shared_ptr<const ClusterDialer> ClusterDialer::Insecure() {
  std::shared_ptr<ClusterDialer> d(new ClusterDialer);
  d->credentials_ = grpc::InsecureChannelCredentials();
  return d;
}

std::shared_ptr<grpc::Channel> ClusterDialer::Dial(const std::string& address,
                                                   grpc::ChannelArguments args) const {
  if (!server_name_.empty()) args.SetSslTargetNameOverride(server_name_);
  if (bearer_token_.empty()) return grpc::CreateCustomChannel(address, credentials_, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerTokenInterceptorFactory>(bearer_token_));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials_, args,
                                                                 std::move(interceptors));
}

}  // namespace mlaserve::common
