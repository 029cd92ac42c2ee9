// Prometheus metrics: a registry of counters, gauges and histograms rendered in the text
// exposition format (version 0.0.4), and a small HTTP endpoint serving it at /metrics.
//
// Naming follows vLLM / SGLang and Prometheus practice: every name starts with "mlaserve_",
// values are in base units (seconds, bytes), counters end in "_total". A name registered
// twice with the same labels returns the same metric; registering it again with another type
// is a programming error and aborts.
//
// Thread-safety: metric updates are lock-free atomics, callable from any thread; registration
// and rendering take the registry's lock. Metric pointers stay valid for the registry's life.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace mlaserve::common {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Increment(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: strictly increasing upper bounds; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size() is the +Inf bucket).
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// Bucket bounds in seconds for request latencies (1 ms .. 5 min).
std::vector<double> LatencyBucketsSeconds();
// Bucket bounds in bytes (1 KiB .. 4 GiB, powers of 4).
std::vector<double> SizeBucketsBytes();

class MetricsRegistry {
 public:
  Counter* GetCounter(std::string_view name, std::string_view help, MetricLabels labels = {});
  Gauge* GetGauge(std::string_view name, std::string_view help, MetricLabels labels = {});
  Histogram* GetHistogram(std::string_view name, std::string_view help,
                          std::vector<double> bounds, MetricLabels labels = {});

  // Runs before every render; use it to refresh gauges that mirror other state (free pages).
  void AddCollectHook(std::function<void()> hook);

  std::string RenderText() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    // Keyed by the rendered label set ("{a=\"x\"}" or "").
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family& FamilyFor(std::string_view name, std::string_view help, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
};

// How /metrics is served: plaintext HTTP unless a certificate is given, then HTTPS with it
// (main() builds this from --metrics-tls*, common/metrics_tls.h). Client certificates are not
// asked for: a scraper needs only the CA.
struct MetricsTlsOptions {
  std::string cert_file;  // PEM certificate chain; empty = plaintext HTTP
  std::string key_file;   // PEM private key of cert_file
  bool enabled() const { return !cert_file.empty(); }
};

// Serves GET /metrics (the registry's text) on HOST:PORT in a background thread.
class MetricsHttpServer {
 public:
  // port 0 picks an ephemeral port. UNAVAILABLE when it cannot bind; INVALID_ARGUMENT naming
  // the file when the certificate or key cannot be read or do not match.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsRegistry* registry, const std::string& host, int port,
      const MetricsTlsOptions& tls = {});
  ~MetricsHttpServer();  // stops serving and joins the thread
  int port() const { return port_; }
  bool https() const { return https_; }
  // "http://HOST:PORT/metrics" or "https://...", for the log.
  std::string url() const { return url_; }

 private:
  struct Impl;
  MetricsHttpServer(std::unique_ptr<Impl> impl, int port, bool https, std::string url);
  std::unique_ptr<Impl> impl_;
  int port_;
  bool https_;
  std::string url_;
};

}  // namespace mlaserve::common
