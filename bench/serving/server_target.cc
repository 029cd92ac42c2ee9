#include "bench/serving/server_target.h"

#include <httplib.h>
#include <openssl/x509.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/call_auth.h"

namespace mlaserve::bench {

absl::StatusOr<std::string> ReadApiKey(const BenchOptions& o) {
  if (o.api_key_file.empty()) return std::string();
  absl::StatusOr<common::TokenSet> keys =
      common::TokenSet::FromFile(o.api_key_file, "--api-key-file");
  if (!keys.ok()) return keys.status();
  return keys->first();
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> DialGenerationServer(const BenchOptions& o,
                                                                    const std::string& api_key) {
  absl::StatusOr<std::shared_ptr<const common::ClusterDialer>> dialer =
      common::ClusterDialer::Create(ClientTls(o), api_key);
  if (!dialer.ok()) return dialer.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return (*dialer)->Dial(o.server, args);
}

std::string OpenAiTarget::url() const {
  const std::string host_part =
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  return absl::StrCat(https ? "https://" : "http://", host_part, ":", port);
}

absl::StatusOr<OpenAiTarget> MakeOpenAiTarget(const BenchOptions& o, const std::string& api_key) {
  OpenAiTarget target;
  const size_t colon = o.server.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(o.server.substr(colon + 1), &target.port) ||
      target.port <= 0 || target.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--server ", o.server, ": expected HOST:PORT"));
  }
  target.host = o.server.substr(0, colon);
  if (target.host.size() > 1 && target.host.front() == '[' && target.host.back() == ']') {
    target.host = target.host.substr(1, target.host.size() - 2);
  }
  if (target.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--server ", o.server, ": expected HOST:PORT"));
  }
  target.tls = ClientTls(o);
  target.https = !target.tls.insecure;
  target.api_key = api_key;
  return target;
}

std::unique_ptr<httplib::Client> NewHttpClient(const OpenAiTarget& t) {
  std::unique_ptr<httplib::Client> client;
  if (!t.https) {
    client = std::make_unique<httplib::Client>(t.host, t.port);
  } else {
    // The certificate is checked against the name the client connects to: with a server name
    // override, connect "to" that name and map it to the real host.
    const std::string name = t.tls.server_name.empty() ? t.host : t.tls.server_name;
    const std::string name_part =
        name.find(':') != std::string::npos ? absl::StrCat("[", name, "]") : name;
    client = std::make_unique<httplib::Client>(absl::StrCat("https://", name_part, ":", t.port),
                                               t.tls.cert_file, t.tls.key_file);
    if (name != t.host) client->set_hostname_addr_map({{name, t.host}});
    client->set_ca_cert_path(t.tls.ca_file);
    client->enable_server_certificate_verification(true);
  }
  if (!t.api_key.empty()) client->set_bearer_token_auth(t.api_key);
  return client;
}

std::string DescribeHttpError(const httplib::Client& client, httplib::Error error,
                              const OpenAiTarget& t) {
  std::string what = httplib::to_string(error);
  if (!t.https) return what;
  const std::string name = t.tls.server_name.empty() ? t.host : t.tls.server_name;
  if (error == httplib::Error::SSLServerVerification) {
    const long verify = client.get_openssl_verify_result();
    if (verify != X509_V_OK) {
      absl::StrAppend(&what, ": ", X509_verify_cert_error_string(verify), " (--tls-ca ",
                      t.tls.ca_file, ")");
    } else {
      // The chain verified, so the name did not match.
      absl::StrAppend(&what, ": the certificate does not name '", name,
                      "' (set --tls-server-name to a name it has)");
    }
  } else if (error == httplib::Error::SSLConnection || error == httplib::Error::SSLLoadingCerts) {
    absl::StrAppend(&what, " (TLS to ", name, " with --tls-ca ", t.tls.ca_file, ")");
  }
  return what;
}

}  // namespace mlaserve::bench
