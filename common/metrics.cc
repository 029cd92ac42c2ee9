#include "common/metrics.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <thread>

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "common/bounded_http_server.h"
#include "common/http_accept_loop.h"
#include "common/server.h"
#include "common/transport_security.h"
#include "spdlog/spdlog.h"

namespace mlaserve::common {
namespace {

constexpr std::string_view kPrefix = "mlaserve_";

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  // The shortest of %.15g / %.17g that reads back exactly ("0.1", not "0.10000000000000001").
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string EscapeLabelValue(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string EscapeHelp(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// "{a=\"x\",b=\"y\"}" or "" for no labels; `extra` is appended (histogram "le").
std::string RenderLabels(const MetricLabels& labels, std::string_view extra = {}) {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, labels[i].first, "=\"", EscapeLabelValue(labels[i].second), "\"");
  }
  if (!extra.empty()) {
    if (!labels.empty()) out += ",";
    out += extra;
  }
  out += "}";
  return out;
}

// Re-inserts "le" into an already rendered label set.
std::string WithLe(const std::string& rendered, const std::string& le) {
  const std::string le_pair = absl::StrCat("le=\"", le, "\"");
  if (rendered.empty()) return absl::StrCat("{", le_pair, "}");
  return absl::StrCat(rendered.substr(0, rendered.size() - 1), ",", le_pair, "}");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<double> LatencyBucketsSeconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1.0,   2.5,    5.0,   10.0, 30.0,  60.0, 120.0, 300.0};
}

std::vector<double> SizeBucketsBytes() {
  std::vector<double> b;
  for (double v = 1024; v <= 4.0 * 1024 * 1024 * 1024; v *= 4) b.push_back(v);
  return b;
}

MetricsRegistry::Family& MetricsRegistry::FamilyFor(std::string_view name, std::string_view help,
                                                    Type type) {
  if (name.substr(0, kPrefix.size()) != kPrefix) {
    spdlog::critical("metric name \"{}\" lacks the \"mlaserve_\" prefix", name);
    std::abort();
  }
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{type, std::string(help), {}, {}, {}}).first;
  } else if (it->second.type != type) {
    spdlog::critical("metric \"{}\" registered twice with different types", name);
    std::abort();
  }
  return it->second;
}

Counter* MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                     MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kCounter).counters[RenderLabels(labels)];
  if (slot == nullptr) slot = std::make_unique<Counter>();
  return slot.get();
}

Gauge* MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                 MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kGauge).gauges[RenderLabels(labels)];
  if (slot == nullptr) slot = std::make_unique<Gauge>();
  return slot.get();
}

Histogram* MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         std::vector<double> bounds, MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kHistogram).histograms[RenderLabels(labels)];
  if (slot == nullptr) slot = std::make_unique<Histogram>(std::move(bounds));
  return slot.get();
}

void MetricsRegistry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hooks_.push_back(std::move(hook));
}

std::string MetricsRegistry::RenderText() const {
  std::vector<std::function<void()>> hooks;
  {
    absl::MutexLock lock(&mu_);
    hooks = hooks_;
  }
  for (const auto& h : hooks) h();  // outside the lock: hooks update gauges

  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(f.help), "\n# TYPE ", name, " ", type,
                    "\n");
    for (const auto& [labels, c] : f.counters) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(c->value()), "\n");
    }
    for (const auto& [labels, g] : f.gauges) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(g->value()), "\n");
    }
    for (const auto& [labels, h] : f.histograms) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= h->bounds().size(); ++i) {
        cumulative += h->bucket_count(i);
        const std::string le = i < h->bounds().size() ? FormatValue(h->bounds()[i]) : "+Inf";
        absl::StrAppend(&out, name, "_bucket", WithLe(labels, le), " ", cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_sum", labels, " ", FormatValue(h->sum()), "\n");
      absl::StrAppend(&out, name, "_count", labels, " ", h->count(), "\n");
    }
  }
  return out;
}

struct MetricsHttpServer::Impl {
  std::unique_ptr<httplib::Server> server;  // an httplib::SSLServer for HTTPS
  std::thread thread;
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl, int port, bool https,
                                     std::string url)
    : impl_(std::move(impl)), port_(port), https_(https), url_(std::move(url)) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsRegistry* registry, const std::string& host, int port,
    const MetricsTlsOptions& tls) {
  auto impl = std::make_unique<Impl>();
  if (tls.enabled()) {
    // httplib reports only "invalid" for a bad pair: read both first, so the message names
    // the file that is wrong.
    for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{
                                         "certificate", tls.cert_file},
                                     {"key", tls.key_file}}) {
      if (auto pem = ReadPemFile(path, absl::StrCat("metrics TLS ", flag)); !pem.ok()) {
        return pem.status();
      }
    }
  }
  // A scrape is a GET: its request is small and quick, and a client that is neither holds one of
  // the few threads only briefly (bounded_http_server.h).
  impl->server = NewBoundedHttpServer(
      HttpRequestBounds{.read_timeout = absl::Seconds(10), .max_header_bytes = 16 << 10, .max_body_bytes = 64 << 10},
      tls.enabled() ? tls.cert_file : "", tls.enabled() ? tls.key_file : "");
  if (!impl->server->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics TLS: certificate ", tls.cert_file,
                                                   " and key ", tls.key_file, " do not load as a pair"));
  }
  impl->server->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->RenderText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  int bound = port;
  if (port == 0) {
    bound = impl->server->bind_to_any_port(host);
  } else if (!impl->server->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint cannot listen on ", host, ":", port));
  }
  impl->thread = StartAcceptLoop(*impl->server);
  std::string url = absl::StrCat(tls.enabled() ? "https://" : "http://",
                                 FormatHostPort(host, bound), "/metrics");
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(std::move(impl), bound, tls.enabled(), std::move(url)));
}

MetricsHttpServer::~MetricsHttpServer() {
  impl_->server->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace mlaserve::common
