// The metrics endpoint's transport flags, shared by the router and the workers
// (docs/security.md, "Metrics"):
//   (none)                               plaintext HTTP, the default (and the chart's unless
//                                        metrics.tls is on)
//   --metrics-tls                        HTTPS with the process's cluster certificate
//                                        (--tls-cert / --tls-key)
//   --metrics-tls-cert F --metrics-tls-key K   HTTPS with a certificate of its own (also with
//                                        --insecure, whose gRPC ports have none)
// Flags are registered in main() and resolved once, next to the process's TLS flags.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/transport_security.h"

namespace CLI {
class App;
}

namespace mlaserve::common {

struct MetricsTlsFlags {
  bool use_cluster_cert = false;  // --metrics-tls
  std::string cert_file;          // --metrics-tls-cert
  std::string key_file;           // --metrics-tls-key
};

// Registers --metrics-tls, --metrics-tls-cert and --metrics-tls-key.
void AddMetricsTlsFlags(CLI::App& app, MetricsTlsFlags* flags);

// What MetricsHttpServer::Start is given. INVALID_ARGUMENT naming the flag when --metrics-tls
// has no certificate to reuse (--insecure), when a file is missing or unreadable, when the
// certificate comes without its key, or when --metrics-tls and its own files are both given.
absl::StatusOr<MetricsTlsOptions> ResolveMetricsTls(const MetricsTlsFlags& flags,
                                                    const TlsOptions& process_tls);

}  // namespace mlaserve::common
