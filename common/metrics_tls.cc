#include "common/metrics_tls.h"

#include <CLI/CLI.hpp>

namespace mlaserve::common {

void AddMetricsTlsFlags(CLI::App& app, MetricsTlsFlags* f) {
  app.add_flag("--metrics-tls", f->use_cluster_cert,
               "serve /metrics over HTTPS with this process's --tls-cert/--tls-key (default: "
               "plaintext HTTP)");
  app.add_option("--metrics-tls-cert", f->cert_file,
                 "serve /metrics over HTTPS with this PEM certificate chain instead");
  app.add_option("--metrics-tls-key", f->key_file, "PEM private key of --metrics-tls-cert");
}

absl::StatusOr<MetricsTlsOptions> ResolveMetricsTls(const MetricsTlsFlags& f,
                                                    const TlsOptions& process_tls) {
  const bool own_files = !f.cert_file.empty() || !f.key_file.empty();
  if (f.use_cluster_cert && own_files) {
    return absl::InvalidArgumentError(
        "--metrics-tls (the process's certificate) and --metrics-tls-cert/--metrics-tls-key "
        "were both given; choose one");
  }
  MetricsTlsOptions out;
  if (f.use_cluster_cert) {
    if (process_tls.insecure || process_tls.cert_file.empty()) {
      return absl::InvalidArgumentError(
          "--metrics-tls serves the process's --tls-cert/--tls-key, and this process has none "
          "(--insecure); give --metrics-tls-cert and --metrics-tls-key instead");
    }
    out.cert_file = process_tls.cert_file;
    out.key_file = process_tls.key_file;
    return out;  // the process checks these files with its other TLS flags
  }
  if (!own_files) return out;  // plaintext
  if (f.cert_file.empty() || f.key_file.empty()) {
    return absl::InvalidArgumentError("--metrics-tls-cert and --metrics-tls-key go together");
  }
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--metrics-tls-cert", f.cert_file},
        {"--metrics-tls-key", f.key_file}}) {
    if (auto pem = ReadPemFile(path, flag); !pem.ok()) return pem.status();
  }
  out.cert_file = f.cert_file;
  out.key_file = f.key_file;
  return out;
}

}  // namespace mlaserve::common
